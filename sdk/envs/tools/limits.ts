/** Small async helpers of the tool transforms: bounded concurrency, and a deadline on a tool call. */
import { RequestAbortedError } from "../../../bridge/errors.js";

/** `fn` over `items` with at most `limit` calls in flight; results in input order. */
export async function mapLimited<T, R>(items: readonly T[], limit: number, fn: (item: T, index: number) => Promise<R>): Promise<R[]> {
  const results = new Array<R>(items.length);
  let next = 0;
  const lane = async (): Promise<void> => {
    while (next < items.length) {
      const i = next++;
      results[i] = await fn(items[i]!, i);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, lane));
  return results;
}

/** How a call under {@link withDeadline} ended. */
export type DeadlineOutcome<T> = { readonly kind: "value"; readonly value: T } | { readonly kind: "error"; readonly error: unknown } | { readonly kind: "timeout" };

/**
 * Runs `fn` with an AbortSignal that fires after `timeoutMs` (or when `outer` aborts) and stops waiting at that
 * point even if `fn` ignores the signal: a tool that hangs cannot hang the env. Resolves with the value, the
 * error `fn` threw, or `timeout`; rejects with `RequestAbortedError` only when `outer` aborts (the env call was
 * cancelled, which is not the tool's failure).
 */
export function withDeadline<T>(what: string, timeoutMs: number, outer: AbortSignal | undefined, fn: (signal: AbortSignal) => Promise<T>): Promise<DeadlineOutcome<T>> {
  if (outer?.aborted === true) return Promise.reject(new RequestAbortedError(what, outer.reason));
  const controller = new AbortController();
  return new Promise<DeadlineOutcome<T>>((resolve, reject) => {
    let settled = false;
    const finish = (outcome: DeadlineOutcome<T> | RequestAbortedError): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      outer?.removeEventListener("abort", onAbort);
      if (outcome instanceof RequestAbortedError) reject(outcome);
      else resolve(outcome);
    };
    const onAbort = (): void => {
      controller.abort(outer?.reason);
      finish(new RequestAbortedError(what, outer?.reason));
    };
    const timer = setTimeout(() => {
      controller.abort(new Error(`${what}: timed out after ${timeoutMs} ms`));
      finish({ kind: "timeout" });
    }, timeoutMs);
    outer?.addEventListener("abort", onAbort, { once: true });
    let pending: Promise<T>;
    try {
      pending = fn(controller.signal);
    } catch (error) {
      finish({ kind: "error", error });
      return;
    }
    pending.then(
      (value) => {
        finish({ kind: "value", value });
      },
      (error: unknown) => {
        finish({ kind: "error", error });
      },
    );
  });
}

/** `Name: message` for an Error, else the value as a string. */
export function describeError(error: unknown): string {
  if (error instanceof Error) return error.name === "Error" ? error.message : `${error.name}: ${error.message}`;
  return String(error);
}
