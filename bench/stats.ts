/** Small statistics helpers shared by the benchmarks. */
import { cpus, loadavg } from "node:os";

/** The q-quantile (0..1) of `samples` (nearest rank). */
export function quantile(samples: readonly number[], q: number): number {
  if (samples.length === 0) return Number.NaN;
  const sorted = [...samples].sort((a, b) => a - b);
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1));
  return sorted[rank]!;
}

/** Median of `samples`. */
export function median(samples: readonly number[]): number {
  return quantile(samples, 0.5);
}

/** Runs `fn` `warmup` times untimed, then `reps` times, returning each duration in ms. */
export async function timeIt(fn: () => Promise<unknown>, reps: number, warmup = 0): Promise<number[]> {
  for (let i = 0; i < warmup; i++) await fn();
  const out: number[] = [];
  for (let i = 0; i < reps; i++) {
    const t0 = performance.now();
    await fn();
    out.push(performance.now() - t0);
  }
  return out;
}

/** Rounds to `digits` decimals, for readable JSON. */
export function round(value: number, digits = 3): number {
  const f = 10 ** digits;
  return Math.round(value * f) / f;
}

/**
 * Times `a` and `b` alternately (`a`, `b`, `a`, `b`, ...) so that both see the same machine state; returns
 * the durations of each in ms. A fairer comparison than two separate runs on a noisy 2-core machine.
 */
export async function timeInterleaved(
  a: () => Promise<unknown>,
  b: () => Promise<unknown>,
  reps: number,
  warmup = 0,
): Promise<[number[], number[]]> {
  for (let i = 0; i < warmup; i++) {
    await a();
    await b();
  }
  const ta: number[] = [];
  const tb: number[] = [];
  for (let i = 0; i < reps; i++) {
    let t0 = performance.now();
    await a();
    ta.push(performance.now() - t0);
    t0 = performance.now();
    await b();
    tb.push(performance.now() - t0);
  }
  return [ta, tb];
}

/**
 * Times every function of `fns` once per round, `reps` rounds (after `warmup` untimed ones), the order of the calls
 * in a round going through every permutation of `fns` in turn; returns the durations of each in ms, in the order of
 * `fns`. Each call's time depends on which process ran just before it (caches, sleeping CPUs: on the shared 2-core
 * VM a fixed order moved a median by half), so every function takes every place and follows every other equally
 * often. With `block` > 1 each turn is `block` consecutive calls of one function (each timed; `reps` and `warmup`
 * count calls, multiples of `block`): for a function whose calls slow whatever runs next (see bench/bridge.ts).
 *
 * ```ts
 * const [raw, rpc] = await timeBalanced([rawEcho, () => worker.ping()], 3000, 300);
 * ```
 */
export async function timeBalanced(
  fns: readonly (() => Promise<unknown>)[],
  reps: number,
  warmup = 0,
  block = 1,
): Promise<number[][]> {
  if (!(Number.isInteger(block) && block >= 1 && reps % block === 0 && warmup % block === 0)) {
    throw new RangeError(`timeBalanced: block must be a positive integer dividing reps (${reps}) and warmup (${warmup}), got ${block}`);
  }
  const orders = permutations(fns.map((_, i) => i));
  const times = fns.map((): number[] => []);
  for (let round = 0; round < warmup + reps; round += block) {
    for (const j of orders[(round / block) % orders.length]!) {
      for (let k = 0; k < block; k++) {
        const t0 = performance.now();
        await fns[j]!();
        if (round + k >= warmup) times[j]!.push(performance.now() - t0);
      }
    }
  }
  return times;
}

function permutations(items: readonly number[]): number[][] {
  if (items.length <= 1) return [[...items]];
  return items.flatMap((first, i) => permutations([...items.slice(0, i), ...items.slice(i + 1)]).map((rest) => [first, ...rest]));
}

/** The machine a benchmark ran on, for its JSON: platform, cores, Node, the workers' torch, the load before and after. */
export function machineFacts(torch: string, loadBefore: number): Record<string, string | number | Record<string, number>> {
  return {
    platform: process.platform,
    arch: process.arch,
    cpus: cpus().length,
    node: process.version,
    torch,
    loadAverage: { before: loadBefore, after: round(loadavg()[0] ?? 0, 2) },
  };
}

/** JSON with two-space indentation, but arrays of numbers, nulls or one-word strings on one line. */
export function compactJSON(value: unknown): string {
  return JSON.stringify(value, null, 2).replace(/\[\s*([^[\]{}]*?)\s*\]/g, (whole: string, items: string) => {
    const parts = items.split(/,\s*/);
    return parts.every((p) => /^(-?[\d.eE+-]+|null|"[\w.-]*")$/.test(p)) ? `[${parts.join(", ")}]` : whole;
  });
}
