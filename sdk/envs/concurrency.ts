/** Bounded concurrency: run async work over a list with at most `limit` calls in flight. */
import { throwIfAborted } from "./env-base.js";

/**
 * `fn` over every item with at most `limit` calls in flight, results in item order. Stops starting new calls after
 * the first failure (or abort) and rejects with it; calls already in flight are left to settle.
 */
export async function mapBounded<T, R>(
  items: readonly T[],
  limit: number,
  fn: (item: T, index: number) => Promise<R> | R,
  signal?: AbortSignal,
): Promise<R[]> {
  const results = new Array<R>(items.length);
  let next = 0;
  let failed = false;
  const worker = async (): Promise<void> => {
    while (!failed && next < items.length) {
      throwIfAborted(signal, "mapBounded");
      const i = next++;
      try {
        results[i] = await fn(items[i]!, i);
      } catch (err) {
        failed = true;
        throw err;
      }
    }
  };
  const lanes = Array.from({ length: Math.max(1, Math.min(limit, items.length)) }, () => worker());
  await Promise.all(lanes);
  return results;
}
