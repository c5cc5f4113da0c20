// GeneratorPool with fake generators (TypeScript policies that answer after a delay or when released, standing in for
// generator workers): chunks of whole groups pulled by free generators (a slow fake samples fewer chunks within one
// call; a fake busy with another call joins when free), a seed per chunk whatever fake samples it, rows back in their
// order and stamped with their fake, the one-generator path unchanged, failures, a generator whose worker died dropped
// and its chunk retried on another, aborts, counters and bad options.
import { describe, expect, it } from "vitest";
import { stepSeed } from "../../sdk/collectors/generator-pool.js";
import { GENERATOR_KEY, GeneratorPool, InvalidArgumentError, RequestAbortedError, Tensor, TensorDict, WorkerDiedError, type ForwardOptions, type Policy } from "../../sdk/index.js";

/** `n` rows whose `"id"` is the row number (from `first`). */
function batch(n: number, first = 0): TensorDict {
  const ids = BigInt64Array.from({ length: n }, (_, i) => BigInt(first + i));
  return new TensorDict({ id: new Tensor("int64", [n], ids) }, { batchSize: [n] });
}

const ids = (td: TensorDict): number[] => td.getTensor("id").toNumbers();
const stamps = (td: TensorDict): number[] => td.getTensor([...GENERATOR_KEY]).toNumbers();

/** What a fake generator saw: the ids of each call and the seed it got. */
interface Seen {
  readonly ids: number[];
  readonly seed: number | undefined;
}

/**
 * A fake generator: answers `"answer"` = 10 × id and `"seed"` = the call's seed (−1 for none) for each row, after
 * `delayMs` or, when `gated`, once `release()` is called (held calls and later ones); with `fail`, its first call
 * throws that error. Records every call.
 */
function fakeGenerator(options: { delayMs?: number; gated?: boolean; fail?: Error } = {}): {
  policy: Policy;
  seen: Seen[];
  release: () => void;
} {
  const seen: Seen[] = [];
  let open: () => void = () => undefined;
  const gate =
    options.gated === true
      ? new Promise<void>((resolve) => {
          open = resolve;
        })
      : Promise.resolve();
  const policy = async (td: TensorDict, requestOptions: ForwardOptions): Promise<TensorDict> => {
    seen.push({ ids: ids(td), seed: requestOptions.seed });
    const first = seen.length === 1;
    await gate;
    if (options.delayMs !== undefined) await new Promise((resolve) => setTimeout(resolve, options.delayMs));
    if (options.fail !== undefined && first) throw options.fail;
    const answers = BigInt64Array.from(ids(td), (id) => BigInt(10 * id));
    const seeds = new BigInt64Array(td.numel()).fill(BigInt(requestOptions.seed ?? -1));
    return td.exclude().set("answer", new Tensor("int64", td.batchSize, answers)).set("seed", new Tensor("int64", td.batchSize, seeds));
  };
  return {
    policy,
    seen,
    release: () => {
      open();
    },
  };
}

async function until(condition: () => boolean): Promise<void> {
  while (!condition()) await new Promise((resolve) => setTimeout(resolve, 1));
}

/** Each row's generator as the fakes saw it (the fake whose calls held its id). */
function sampledBy(fakes: readonly { seen: Seen[] }[], rowIds: readonly number[]): number[] {
  return rowIds.map((id) => fakes.findIndex((f) => f.seen.some((s) => s.ids.includes(id))));
}

describe("GeneratorPool", () => {
  it("cuts a call into chunks of whole groups, seeds chunk j with stepSeed(seed, j), and restores the order", async () => {
    const fakes = [fakeGenerator(), fakeGenerator(), fakeGenerator()];
    const pool = new GeneratorPool(
      fakes.map((f) => f.policy),
      { groupSize: 2 },
    );
    // 5 groups over 3 generators: chunks of ceil(5 / 6) = 1 group; the last group is cut short, still whole
    const out = await pool.forward(batch(9), { seed: 7 });
    expect(ids(out)).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8]);
    expect(out.getTensor("answer").toNumbers()).toEqual([0, 10, 20, 30, 40, 50, 60, 70, 80]);
    const chunks = fakes.flatMap((f) => f.seen).sort((a, b) => a.ids[0]! - b.ids[0]!);
    expect(chunks).toEqual([0, 1, 2, 3, 4].map((j) => ({ ids: [2 * j, 2 * j + 1].filter((id) => id < 9), seed: stepSeed(7, j) })));
    expect(out.getTensor("seed").toNumbers()).toEqual([0, 0, 1, 1, 2, 2, 3, 3, 4].map((j) => stepSeed(7, j)));
    // every row is stamped with the fake that sampled it; idle fakes take the first chunks, lowest index first
    expect(stamps(out)).toEqual(sampledBy(fakes, ids(out)));
    expect(stamps(out).slice(0, 6)).toEqual([0, 0, 1, 1, 2, 2]);
    expect(pool.stats.reduce((n, s) => n + s.rows, 0)).toBe(9);
    expect(pool.stats.reduce((n, s) => n + s.calls, 0)).toBe(5);
    expect(pool.stats.map((s) => s.outstandingRows)).toEqual([0, 0, 0]);

    // chunkGroups sets the chunk size; without a seed the options pass through
    const big = new GeneratorPool(
      fakes.map((f) => f.policy),
      { groupSize: 2, chunkGroups: 3 },
    );
    const before = fakes.map((f) => f.seen.length);
    const unseeded = await big.forward(batch(8, 100));
    const calls = fakes.flatMap((f, i) => f.seen.slice(before[i]));
    expect(calls.map((c) => c.ids).sort((a, b) => a[0]! - b[0]!)).toEqual([
      [100, 101, 102, 103, 104, 105],
      [106, 107],
    ]);
    expect(calls.every((c) => c.seed === undefined)).toBe(true);
    expect(ids(unseeded)).toEqual([100, 101, 102, 103, 104, 105, 106, 107]);
    expect(stamps(unseeded)).toEqual([0, 0, 0, 0, 0, 0, 1, 1]);
  });

  it("within one call, a slow generator samples fewer chunks: the free one keeps pulling", async () => {
    const slow = fakeGenerator({ gated: true });
    const fast = fakeGenerator();
    const pool = new GeneratorPool([slow.policy, fast.policy], { groupSize: 2 });
    // 8 groups over 2 generators: chunks of ceil(8 / 4) = 2 groups (4 rows)
    const call = pool.forward(batch(16), { seed: 3 });
    await until(() => fast.seen.length === 3 && pool.stats[1]!.outstandingRows === 0);
    expect(slow.seen).toEqual([{ ids: [0, 1, 2, 3], seed: stepSeed(3, 0) }]);
    expect(fast.seen).toEqual([1, 2, 3].map((j) => ({ ids: [4 * j, 4 * j + 1, 4 * j + 2, 4 * j + 3], seed: stepSeed(3, j) })));
    expect(pool.stats.map((s) => s.outstandingRows)).toEqual([4, 0]);
    slow.release();
    const out = await call;
    expect(ids(out)).toEqual(Array.from({ length: 16 }, (_, i) => i));
    expect(stamps(out)).toEqual([...new Array<number>(4).fill(0), ...new Array<number>(12).fill(1)]);
    expect(pool.stats.map((s) => [s.rows, s.calls])).toEqual([
      [4, 1],
      [12, 3],
    ]);
  });

  it("a chunk's rows and seed do not depend on which generator samples it", async () => {
    const run = async (slowIndex: number): Promise<TensorDict> => {
      const fakes = [0, 1].map((i) => fakeGenerator(i === slowIndex ? { delayMs: 20 } : {}));
      return new GeneratorPool(
        fakes.map((f) => f.policy),
        { groupSize: 2, chunkGroups: 1 },
      ).forward(batch(8), { seed: 11 });
    };
    const [a, b] = await Promise.all([run(0), run(1)]);
    expect(stamps(a)).toEqual([0, 0, 1, 1, 1, 1, 1, 1]);
    expect(stamps(b)).toEqual([0, 0, 1, 1, 0, 0, 0, 0]);
    for (const key of ["id", "answer", "seed"]) expect(a.getTensor(key).toNumbers()).toEqual(b.getTensor(key).toNumbers());
  });

  it("a generator busy with another call's chunk does not hold up a call, and joins it when free", async () => {
    const held = fakeGenerator({ gated: true });
    const other = fakeGenerator({ delayMs: 20 });
    const pool = new GeneratorPool([held.policy, other.policy], { chunkGroups: 1 });
    const first = pool.forward(batch(1));
    expect(held.seen).toEqual([{ ids: [0], seed: undefined }]);
    // the held generator is busy: the other one takes the second call's first chunk
    const second = pool.forward(batch(4, 100));
    expect(other.seen.map((s) => s.ids)).toEqual([[100]]);
    held.release();
    const [a, b] = await Promise.all([first, second]);
    expect([ids(a), stamps(a)]).toEqual([[0], [0]]);
    // once free, the held generator pulls the rest before the other finishes its 20 ms
    expect([ids(b), stamps(b)]).toEqual([
      [100, 101, 102, 103],
      [1, 0, 0, 0],
    ]);

    // a call does not wait for a generator that stays busy with another call
    const stuck = fakeGenerator({ gated: true });
    const free = fakeGenerator();
    const two = new GeneratorPool([stuck.policy, free.policy]);
    const blocked = two.forward(batch(2));
    const third = await two.forward(batch(3, 200));
    expect([ids(third), stamps(third)]).toEqual([
      [200, 201, 202],
      [1, 1, 1],
    ]);
    stuck.release();
    expect(stamps(await blocked)).toEqual([0, 1]);
  });

  it("shares by work over time: with callers overlapping, a slow generator ends up with fewer rows", async () => {
    const pool = new GeneratorPool([fakeGenerator({ delayMs: 40 }).policy, fakeGenerator({ delayMs: 2 }).policy], { groupSize: 2 });
    // three callers at once, each calling again as soon as its call returns
    await Promise.all(
      [0, 1, 2].map(async (caller) => {
        for (let i = 0; i < 5; i++) {
          const out = await pool.forward(batch(2, 100 * caller + 2 * i));
          expect(ids(out)).toEqual([100 * caller + 2 * i, 100 * caller + 2 * i + 1]);
        }
      }),
    );
    const [slow, fast] = pool.stats;
    expect(slow!.rows + fast!.rows).toBe(30);
    expect(fast!.rows).toBeGreaterThan(slow!.rows);
    expect(slow!.busyMs).toBeGreaterThan(0);
  });

  it("passes the call and its seed through unchanged with one generator, and keeps a batch's shape", async () => {
    const only = fakeGenerator();
    const pool = new GeneratorPool([only.policy], { groupSize: 2 });
    const out = await pool.forward(batch(4).reshape([2, 2]), { seed: 5 });
    expect(only.seen).toEqual([{ ids: [0, 1, 2, 3], seed: 5 }]);
    expect(out.batchSize).toEqual([2, 2]);
    expect(stamps(out)).toEqual([0, 0, 0, 0]);
    expect(out.getTensor("seed").toNumbers()).toEqual([5, 5, 5, 5]);

    const two = new GeneratorPool([fakeGenerator().policy, fakeGenerator().policy], { groupSize: 2 });
    const shaped = await two.forward(batch(4).reshape([2, 2]));
    expect(shaped.batchSize).toEqual([2, 2]);
    expect(ids(shaped.reshape([4]))).toEqual([0, 1, 2, 3]);
    expect(stamps(shaped.reshape([4]))).toEqual([0, 0, 1, 1]);
  });

  it("on a generator's error hands out no more chunks, awaits those in flight, rethrows the first; the pool stays usable", async () => {
    const boom = new Error("generator died");
    const pool = new GeneratorPool([fakeGenerator({ delayMs: 5 }).policy, fakeGenerator({ fail: boom }).policy], { chunkGroups: 1 });
    const failed = pool.forward(batch(6));
    await expect(failed).rejects.toBe(boom);
    // the chunk in flight on generator 0 had settled; chunks 2..5 were never sent
    expect(pool.stats.map((s) => [s.calls, s.rows, s.outstandingRows])).toEqual([
      [1, 1, 0],
      [1, 1, 0],
    ]);
    const again = await pool.forward(batch(4));
    expect([ids(again), stamps(again)]).toEqual([
      [0, 1, 2, 3],
      [0, 1, 1, 1],
    ]);

    const wrong = new GeneratorPool([fakeGenerator().policy, (td: TensorDict) => td.index({ start: 0, stop: 1 })], { groupSize: 2 });
    await expect(wrong.forward(batch(4))).rejects.toThrow(/generator 1 answered batch size \[1\] for 2 rows/);
  });

  it("drops a generator whose worker died: its chunk goes, with its seed, to a live one; the last one standing rejects", async () => {
    const died = new WorkerDiedError("worker 1", null, "SIGKILL", "");
    const fakes = [fakeGenerator({ delayMs: 5 }), fakeGenerator({ fail: died }), fakeGenerator({ delayMs: 5 })];
    const lost: [number, unknown][] = [];
    const pool = new GeneratorPool(
      fakes.map((f) => f.policy),
      { chunkGroups: 1, onGeneratorLost: (i, error) => lost.push([i, error]) },
    );
    const out = await pool.forward(batch(6), { seed: 9 });
    expect(ids(out)).toEqual([0, 1, 2, 3, 4, 5]);
    expect(out.getTensor("seed").toNumbers()).toEqual([0, 1, 2, 3, 4, 5].map((j) => stepSeed(9, j)));
    // generator 1 got chunk 1 first and died: chunk 1 was sampled again elsewhere, and nothing more went to it
    expect(stamps(out)[1]).not.toBe(1);
    expect(stamps(out).filter((s) => s === 1)).toEqual([]);
    expect(fakes[1]!.seen.map((s) => s.ids)).toEqual([[1]]);
    expect(lost).toEqual([[1, died]]);
    expect(pool.lost).toEqual([1]);
    const later = await pool.forward(batch(4));
    expect(new Set(stamps(later))).toEqual(new Set([0, 2]));

    // another kind of error is not retried; nor is the loss of the last live generator
    const other = new GeneratorPool([fakeGenerator({ fail: new Error("bad input") }).policy, fakeGenerator({ delayMs: 5 }).policy], { chunkGroups: 1 });
    await expect(other.forward(batch(4))).rejects.toThrow("bad input");
    const alone = new GeneratorPool([fakeGenerator({ fail: died }).policy, fakeGenerator({ fail: died, delayMs: 1 }).policy], { chunkGroups: 1 });
    await expect(alone.forward(batch(4))).rejects.toBe(died);
    expect(alone.lost).toHaveLength(1);
  });

  it("an aborted call sends none of its chunks left", async () => {
    const fakes = [fakeGenerator({ gated: true }), fakeGenerator({ gated: true })];
    const pool = new GeneratorPool(fakes.map((f) => f.policy));
    const busy = pool.forward(batch(2));
    const controller = new AbortController();
    const queued = pool.forward(batch(2, 100), { signal: controller.signal });
    controller.abort();
    await expect(queued).rejects.toBeInstanceOf(RequestAbortedError);
    await expect(pool.forward(batch(2), { signal: controller.signal })).rejects.toBeInstanceOf(RequestAbortedError);
    for (const f of fakes) f.release();
    expect(stamps(await busy)).toEqual([0, 1]);
    expect(fakes.map((f) => f.seen.map((s) => s.ids))).toEqual([[[0]], [[1]]]);
  });

  it("rejects bad options", () => {
    expect(() => new GeneratorPool([])).toThrow(InvalidArgumentError);
    expect(() => new GeneratorPool([{} as Policy])).toThrow(/generators\[0\]: expected a function or an object with forward/);
    expect(() => new GeneratorPool([fakeGenerator().policy], { groupSize: 0 })).toThrow(/GeneratorPool options\.groupSize/);
    expect(() => new GeneratorPool([fakeGenerator().policy], { chunkGroups: 0 })).toThrow(/GeneratorPool options\.chunkGroups/);
    expect(() => new GeneratorPool([fakeGenerator().policy], { chunkGroups: 1.5 })).toThrow(/GeneratorPool options\.chunkGroups/);
  });
});
