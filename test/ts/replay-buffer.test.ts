// ReplayBuffer: storages, writers, samplers (seeded), transforms, sampled keys and typed errors. Save/load is in
// replay-buffer.save.test.ts, MCAdvantage in mc-advantage*.test.ts.
import { describe, expect, it } from "vitest";
import {
  HistoryBatch,
  InvalidArgumentError,
  KeyNotFoundError,
  LazyStackStorage,
  ListStorage,
  PrioritizedSampler,
  RandomSampler,
  RaggedTensor,
  ReplayBuffer,
  ReplayBufferEmptyError,
  RoundRobinWriter,
  SamplerWithoutReplacement,
  ShapeMismatchError,
  Tensor,
  TensorDict,
  TensorDictMaxValueWriter,
  type ReplayBufferTransform,
} from "../../sdk/index.js";
import { expectError } from "./tensordict.helpers.js";

/** `n` rows whose "x" is `start + i` (float32 [n]) with a 2-vector "obs" and a string id. */
function rows(n: number, start = 0): TensorDict {
  const x = Float32Array.from({ length: n }, (_, i) => start + i);
  return new TensorDict(
    {
      x: new Tensor("float32", [n], x),
      obs: Tensor.from(Float32Array.from({ length: 2 * n }, (_, i) => start + Math.floor(i / 2)), { dtype: "float32", shape: [n, 2] }),
      id: Array.from(x, (v) => `row-${v}`),
    },
    { batchSize: [n] },
  );
}

const xs = (td: TensorDict): number[] => td.getTensor("x").toNumbers();
const indices = (td: TensorDict): number[] => td.getTensor("index", "int64").toNumbers();

describe("ReplayBuffer: writing", () => {
  it("extends with rows along the first batch dimension and returns their positions", () => {
    const rb = new ReplayBuffer({ storage: new ListStorage({ maxSize: 100 }) });
    expect(Array.from(rb.extend(rows(3)))).toEqual([0, 1, 2]);
    expect(Array.from(rb.extend(rows(2, 10)))).toEqual([3, 4]);
    expect(rb.length).toBe(5);
    expect(rb.writeCount).toBe(5);
    expect(rb.storage.row(4).getTensor("x").item()).toBe(11);
    expect(rb.storage.row(4).getStrings("id")).toEqual(["row-11"]);
    expect(rb.storage.row(4).batchSize).toEqual([]);
  });

  it("add() writes one element as one row", () => {
    const rb = new ReplayBuffer();
    const one = rows(3, 7).index(1);
    expect(Array.from(rb.add(one))).toEqual([0]);
    expect(rb.storage.row(0).getTensor("x").item()).toBe(8);
  });

  it("RoundRobinWriter overwrites the oldest rows once maxSize is reached", () => {
    const rb = new ReplayBuffer({ storage: new ListStorage({ maxSize: 4 }), writer: new RoundRobinWriter() });
    rb.extend(rows(3));
    expect(Array.from(rb.extend(rows(3, 100)))).toEqual([3, 0, 1]);
    expect(rb.length).toBe(4);
    expect(rb.writeCount).toBe(6);
    expect([0, 1, 2, 3].map((p) => rb.storage.row(p).getTensor("x").item())).toEqual([101, 102, 2, 100]);
  });

  it("TensorDictMaxValueWriter keeps the highest-ranked rows and marks the others -1", () => {
    const rank = (values: number[]): TensorDict =>
      new TensorDict({ next: { reward: Tensor.from(values.map((v) => [v, 0]), { dtype: "float32" }) }, x: Tensor.from(values, { dtype: "float32" }) }, { batchSize: [values.length] });
    const rb = new ReplayBuffer({ storage: new ListStorage({ maxSize: 3 }), writer: new TensorDictMaxValueWriter() });
    expect(Array.from(rb.extend(rank([5, 1, 3])))).toEqual([0, 1, 2]);
    const positions = rb.extend(rank([0, 9, 2, 4]));
    expect(positions[0]).toBe(-1); // 0 does not beat the worst kept (1)
    expect(positions[2]).toBe(-1); // 2 does not beat the worst kept then (3)
    expect(rb.length).toBe(3);
    const kept = [0, 1, 2].map((p) => rb.storage.row(p).getTensor("x", "float32").item()).sort((a, b) => a - b);
    expect(kept).toEqual([4, 5, 9]);
    expect(rb.writeCount).toBe(5);
  });

  it("TensorDictMaxValueWriter names a missing rank key", () => {
    const rb = new ReplayBuffer({ writer: new TensorDictMaxValueWriter({ rankKey: "score", reduction: "max" }) });
    const err = expectError(() => rb.extend(rows(2)), KeyNotFoundError, "KEY_NOT_FOUND");
    expect(err.message).toContain('"score"');
  });

  it("ListStorage needs rows of one shape; LazyStackStorage stacks rows of different lengths as ragged", () => {
    const tokens = (lengths: number[]): TensorDict[] =>
      lengths.map((n, r) => new TensorDict({ tokens: Tensor.from(Array.from({ length: n }, (_, i) => BigInt(r * 10 + i)), { dtype: "int64" }) }));
    const list = new ReplayBuffer({ storage: new ListStorage(), seed: 1 });
    for (const row of tokens([2, 3])) list.add(row);
    expectError(() => list.sample(4), ShapeMismatchError, "SHAPE_MISMATCH");
    const lazy = new ReplayBuffer({ storage: new LazyStackStorage(), sampler: new SamplerWithoutReplacement({ shuffle: false }), seed: 1 });
    for (const row of tokens([2, 3, 1])) lazy.add(row);
    const batch = lazy.sample(3);
    const ragged = batch.getRagged("tokens", "int64");
    expect(ragged).toBeInstanceOf(RaggedTensor);
    expect(ragged.toArray()).toEqual([[0n, 1n], [10n, 11n, 12n], [20n]]);
  });

  it("keeps History and string leaves through the storage", () => {
    const rb = new ReplayBuffer({ storage: new LazyStackStorage(), sampler: new SamplerWithoutReplacement({ shuffle: false }) });
    rb.extend(
      new TensorDict(
        { history: { prompt: HistoryBatch.from([[{ role: "user", content: "a" }], [{ role: "user", content: "b" }, { role: "assistant", content: "c" }]]) }, query: ["qa", "qb"] },
        { batchSize: [2] },
      ),
    );
    const batch = rb.sample(2);
    expect(batch.getHistory(["history", "prompt"]).toJSON()).toEqual([
      [{ role: "user", content: "a" }],
      [{ role: "user", content: "b" }, { role: "assistant", content: "c" }],
    ]);
    expect(batch.getStrings("query")).toEqual(["qa", "qb"]);
  });
});

describe("ReplayBuffer: samplers", () => {
  it("samples the stored rows with an int64 index, reproducibly for a seed", () => {
    const make = (seed: number): ReplayBuffer => {
      const rb = new ReplayBuffer({ batchSize: 16, seed });
      rb.extend(rows(10));
      return rb;
    };
    const a = make(3).sample();
    expect(a.batchSize).toEqual([16]);
    expect(a.getTensor("index").dtype).toBe("int64");
    expect(xs(a)).toEqual(indices(a)); // row i holds x = i
    expect(a.has("priority_weight")).toBe(false);
    expect(indices(make(3).sample())).toEqual(indices(a));
    expect(indices(make(4).sample())).not.toEqual(indices(a));
  });

  it("SamplerWithoutReplacement covers every row once per pass, the last batch short", () => {
    const rb = new ReplayBuffer({ sampler: new SamplerWithoutReplacement(), batchSize: 3, seed: 0 });
    rb.extend(rows(10));
    for (let pass = 0; pass < 2; pass++) {
      const batches = [...rb];
      expect(batches.map((b) => b.batchSize[0])).toEqual([3, 3, 3, 1]);
      const seen = batches.flatMap(xs);
      expect([...seen].sort((a, b) => a - b)).toEqual([0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
      expect(batches.flatMap(indices)).toEqual(seen);
    }
  });

  it("SamplerWithoutReplacement with dropLast drops the short batch; shuffle false keeps storage order", () => {
    const drop = new ReplayBuffer({ sampler: new SamplerWithoutReplacement({ dropLast: true }), batchSize: 3, seed: 5 });
    drop.extend(rows(10));
    const batches = [...drop];
    expect(batches.map((b) => b.batchSize[0])).toEqual([3, 3, 3]);
    expect(new Set(batches.flatMap(xs)).size).toBe(9);
    const ordered = new ReplayBuffer({ sampler: new SamplerWithoutReplacement({ shuffle: false }), batchSize: 4 });
    ordered.extend(rows(6));
    expect([...ordered].map(xs)).toEqual([[0, 1, 2, 3], [4, 5]]);
    const tooFew = new ReplayBuffer({ sampler: new SamplerWithoutReplacement({ dropLast: true }), batchSize: 8 });
    tooFew.extend(rows(3));
    expect(expectError(() => tooFew.sample(), InvalidArgumentError, "INVALID_ARGUMENT").message).toContain("dropLast");
  });

  it("SamplerWithoutReplacement starts a new pass when the storage grows", () => {
    const rb = new ReplayBuffer({ sampler: new SamplerWithoutReplacement(), seed: 2 });
    rb.extend(rows(4));
    const first = xs(rb.sample(2));
    rb.extend(rows(4, 4));
    const pass = [...xs(rb.sample(4)), ...xs(rb.sample(4))];
    expect(rb.sampler.ranOut).toBe(true);
    expect([...pass].sort((a, b) => a - b)).toEqual([0, 1, 2, 3, 4, 5, 6, 7]);
    expect(first).toHaveLength(2);
  });

  it("PrioritizedSampler samples in proportion to (p + eps)^alpha and writes importance weights", () => {
    const sampler = new PrioritizedSampler({ maxCapacity: 16, alpha: 1, beta: 1 });
    const rb = new ReplayBuffer({ sampler, seed: 11 });
    rb.extend(rows(4));
    rb.updatePriority([0, 1, 2, 3], [1, 1, 1, 97]);
    const batch = rb.sample(4000);
    const index = indices(batch);
    const share = index.filter((i) => i === 3).length / index.length;
    expect(share).toBeGreaterThan(0.95);
    expect(share).toBeLessThan(0.99);
    expect(new Set(index).size).toBe(4); // low-priority rows still come up
    const weights = batch.getTensor("priority_weight", "float32").toNumbers();
    index.forEach((i, k) => { expect(weights[k]).toBeCloseTo(i === 3 ? (1 + 1e-8) / (97 + 1e-8) : 1, 6); });
  });

  it("PrioritizedSampler gives new rows the largest priority seen, and reads priorityKey on extend", () => {
    const sampler = new PrioritizedSampler({ maxCapacity: 8, alpha: 0.5, beta: 0.4, eps: 0.01 });
    const rb = new ReplayBuffer({ sampler, seed: 0 });
    rb.extend(rows(2));
    expect(sampler.weightOf(0)).toBeCloseTo((1 + 0.01) ** 0.5, 12);
    rb.updatePriority(1, 9);
    rb.extend(rows(1, 2));
    expect(sampler.weightOf(2)).toBeCloseTo((9 + 0.01) ** 0.5, 12);
    const keyed = new PrioritizedSampler({ maxCapacity: 8, alpha: 0.5, beta: 0.4, eps: 0.01 });
    const withKey = new ReplayBuffer({ sampler: keyed, priorityKey: ["loss", "td"], seed: 0 });
    withKey.extend(rows(2).set(["loss", "td"], Tensor.from([[0.5, 4], [2, 1]], { dtype: "float32" }))); // reduction "max" per row
    expect(keyed.weightOf(0)).toBeCloseTo((4 + 0.01) ** 0.5, 6);
    expect(keyed.weightOf(1)).toBeCloseTo((2 + 0.01) ** 0.5, 6);
    const batch = withKey.sample(5).set(["loss", "td"], Tensor.full("float32", [5], 0.25));
    withKey.updateTensorDictPriority(batch);
    for (const i of indices(batch)) expect(keyed.weightOf(i)).toBeCloseTo((0.25 + 0.01) ** 0.5, 6);
  });

  it("rejects bad priorities naming the entry, and updatePriority without a PrioritizedSampler", () => {
    const rb = new ReplayBuffer({ sampler: new PrioritizedSampler({ maxCapacity: 4, alpha: 1, beta: 1 }) });
    rb.extend(rows(2));
    expect(expectError(() => { rb.updatePriority([0, 1], [1, -2]); }, InvalidArgumentError, "INVALID_ARGUMENT").message).toContain("priority[1]");
    expect(expectError(() => { rb.updatePriority([0, 7], 1); }, InvalidArgumentError, "INVALID_ARGUMENT").message).toContain("index[1]");
    expect(expectError(() => { rb.updatePriority([0, 1], [1, 2, 3]); }, InvalidArgumentError, "INVALID_ARGUMENT").message).toContain("3 values for 2 indices");
    const plain = new ReplayBuffer();
    plain.extend(rows(2));
    expect(expectError(() => { plain.updatePriority(0, 1); }, InvalidArgumentError, "INVALID_ARGUMENT").message).toContain("RandomSampler");
  });
});

describe("ReplayBuffer: transforms, empty and errors", () => {
  it("applies inv on write (last transform first) and forward on sample (first first)", () => {
    const calls: string[] = [];
    const tag = (name: string): ReplayBufferTransform => ({
      name,
      inv: (td) => {
        calls.push(`inv ${name}`);
        return td.exclude().set(`seen_${name}`, Tensor.ones("bool", td.batchSize));
      },
      forward: (td) => {
        calls.push(`forward ${name}`);
        return td;
      },
    });
    const rb = new ReplayBuffer({ transforms: [tag("a"), tag("b")], seed: 0 });
    const input = rows(2);
    rb.extend(input);
    expect(input.has("seen_a")).toBe(false); // the caller's TensorDict is not modified
    const batch = rb.sample(1);
    expect(calls).toEqual(["inv b", "inv a", "forward a", "forward b"]);
    expect(batch.has("seen_a") && batch.has("seen_b")).toBe(true);
  });

  it("writes nothing when a transform holds the data back", () => {
    const rb = new ReplayBuffer({ transforms: [{ name: "hold", inv: () => null }] });
    expect(rb.extend(rows(3))).toHaveLength(0);
    expect(rb.length).toBe(0);
    expect(rb.writeCount).toBe(0);
  });

  it("empty() removes the rows and resets the counters; sampling an empty buffer is a typed error", () => {
    const rb = new ReplayBuffer({ batchSize: 2 });
    expectError(() => rb.sample(), ReplayBufferEmptyError, "REPLAY_BUFFER_EMPTY");
    rb.extend(rows(3));
    rb.empty();
    expect(rb.length).toBe(0);
    expect(rb.writeCount).toBe(0);
    expectError(() => rb.sample(), ReplayBufferEmptyError, "REPLAY_BUFFER_EMPTY");
    expect(Array.from(rb.extend(rows(1)))).toEqual([0]);
  });

  it("validates options and arguments, naming the field", () => {
    const cases: [() => unknown, string][] = [
      [() => new ReplayBuffer({ batchSize: 0 }), "ReplayBuffer options.batchSize"],
      [() => new ReplayBuffer({ storage: {} as unknown as ListStorage }), "ReplayBuffer options.storage"],
      [() => new ReplayBuffer({ sampler: new RoundRobinWriter() as unknown as RandomSampler }), "ReplayBuffer options.sampler"],
      [() => new ReplayBuffer({ transforms: [{ inv: () => null } as unknown as ReplayBufferTransform] }), "ReplayBuffer options.transforms.0"],
      [() => new ReplayBuffer({ seed: -1 }), "ReplayBuffer options.seed"],
      [() => new ReplayBuffer({ priorityKey: [] }), "ReplayBuffer options.priorityKey"],
      [() => new ListStorage({ maxSize: 0 }), "ListStorage options.maxSize"],
      [() => new LazyStackStorage({ maxSize: 1.5 }), "LazyStackStorage options.maxSize"],
      [() => new PrioritizedSampler({ maxCapacity: 4, alpha: -1, beta: 1 }), "PrioritizedSampler options.alpha"],
      [() => new PrioritizedSampler({ alpha: 1, beta: 1 } as never), "PrioritizedSampler options.maxCapacity"],
      [() => new SamplerWithoutReplacement({ dropLast: "yes" } as never), "SamplerWithoutReplacement options.dropLast"],
      [() => new TensorDictMaxValueWriter({ reduction: "avg" } as never), "TensorDictMaxValueWriter options.reduction"],
      [() => new ReplayBuffer().sample(), "batchSize"],
      [() => new ReplayBuffer().extend(new TensorDict({})), "batch size []"],
      [() => [...new ReplayBuffer()], "iterating needs batchSize"],
    ];
    for (const [fn, field] of cases) expect(expectError(fn, InvalidArgumentError, "INVALID_ARGUMENT").message).toContain(field);
  });
});

describe("ReplayBuffer: take and discardWhere (each row read once, oldest first)", () => {
  it("takes the oldest rows in write order, across a wrapped ring, and later writes follow the rest", () => {
    const rb = new ReplayBuffer({ storage: new ListStorage({ maxSize: 4 }) });
    rb.extend(rows(4)); // 0 1 2 3
    rb.extend(rows(2, 10)); // overwrites 0 and 1: the oldest is now 2
    expect(xs(rb.take(3))).toEqual([2, 3, 10]);
    expect(rb.length).toBe(1);
    expect(rb.writeCount).toBe(6);
    rb.extend(rows(3, 20));
    expect(xs(rb.take(4))).toEqual([11, 20, 21, 22]);
    expect(rb.length).toBe(0);
    expectError(() => rb.take(1), ReplayBufferEmptyError, "REPLAY_BUFFER_EMPTY");
    rb.extend(rows(2));
    expect(expectError(() => rb.take(3), InvalidArgumentError, "INVALID_ARGUMENT").message).toMatch(/batchSize 3 is more than the 2 rows held/);
    expect(expectError(() => rb.take(0), InvalidArgumentError, "INVALID_ARGUMENT").message).toMatch(/positive integer/);
  });

  it("runs the read transforms on what it takes", () => {
    const double: ReplayBufferTransform = { name: "double", forward: (td) => td.set("x", new Tensor("float32", [td.numel()], Float32Array.from(xs(td), (v) => 2 * v))) };
    const rb = new ReplayBuffer({ transforms: [double] });
    rb.extend(rows(3, 1));
    expect(xs(rb.take(2))).toEqual([2, 4]);
  });

  it("discards the rows a predicate picks, keeping the others' order", () => {
    const rb = new ReplayBuffer({ storage: new ListStorage({ maxSize: 5 }) });
    rb.extend(rows(5));
    expect(rb.discardWhere((row) => Number(row.getTensor("x").item()) % 2 === 0)).toBe(3);
    expect(rb.discardWhere(() => false)).toBe(0);
    rb.extend(rows(1, 7));
    expect(xs(rb.take(3))).toEqual([1, 3, 7]);
  });

  it("needs a round-robin writer and a sampler that is not prioritized", () => {
    const prioritized = new ReplayBuffer({ sampler: new PrioritizedSampler({ maxCapacity: 8, alpha: 0.7, beta: 0.5 }) });
    prioritized.extend(rows(2));
    expect(expectError(() => prioritized.take(1), InvalidArgumentError, "INVALID_ARGUMENT").message).toMatch(/needs a RoundRobinWriter and a non-prioritized sampler/);
    const ranked = new ReplayBuffer({ writer: new TensorDictMaxValueWriter({ rankKey: "x" }) });
    ranked.extend(rows(2));
    expect(expectError(() => ranked.discardWhere(() => true), InvalidArgumentError, "INVALID_ARGUMENT").message).toMatch(/TensorDictMaxValueWriter/);
  });
});
