// TensorDict batch operations: index, reshape/flatten/unsqueeze/squeeze, split/unbind, stack, cat, apply, clone.
import { describe, expect, it } from "vitest";
import {
  BatchSizeMismatchError,
  DTypeMismatchError,
  IndexOutOfRangeError,
  InvalidArgumentError,
  KeyNotFoundError,
  LeafKindMismatchError,
  RaggedTensor,
  ShapeMismatchError,
  Tensor,
  TensorDict,
} from "../../sdk/tensordict/index.js";
import { expectError, ragged, sample, snapshot } from "./tensordict.helpers.js";

/** A TensorDict of batch size [2, 3] whose leaves make row identity obvious. */
function grid(): TensorDict {
  return new TensorDict(
    {
      x: Tensor.from([[0, 1, 2], [3, 4, 5]], { dtype: "int32" }),
      y: Tensor.from(Array.from({ length: 12 }, (_, i) => i), { dtype: "bfloat16", shape: [2, 3, 2] }),
      s: ["r0", "r1", "r2", "r3", "r4", "r5"],
      r: ragged([[0], [], [2, 2], [3, 3, 3], [], [5]]),
      n: { b: Tensor.from([true, false, true, false, true, false], { dtype: "bool", shape: [2, 3] }) },
    },
    { batchSize: [2, 3] },
  );
}

describe("index", () => {
  it("takes an integer (negative allowed), dropping the first batch dim, as a zero-copy view", () => {
    const td = sample(4);
    const row = td.index(-1);
    expect(row.batchSize).toEqual([]);
    expect(row.getTensor("obs").shape).toEqual([2]);
    expect(row.getTensor("obs").toArray()).toEqual([6, 7]);
    expect(row.getTensor("obs").data.buffer).toBe(td.getTensor("obs").data.buffer);
    expect(row.getRagged("tokens").toArray()).toEqual([[]]);
    expect(td.index(2).getRagged("tokens").toArray()).toEqual([[20n, 21n]]);
    expect(row.getRagged("tokens").values).toBe(td.getRagged("tokens").values);
    expect(row.getStrings("text")).toEqual(["s0-3"]);
    expect(row.getTensor(["next", "reward"]).item()).toBe(1.5);
    const g = grid().index(1);
    expect(g.batchSize).toEqual([3]);
    expect(g.getStrings("s")).toEqual(["r3", "r4", "r5"]);
    expect(g.getRagged("r").toArray()).toEqual([[3n, 3n, 3n], [], [5n]]);
    expect(g.getTensor(["n", "b"]).toArray()).toEqual([false, true, false]);
  });

  it("takes ranges: step 1 is a view, other steps copy; bounds clamp as in Python", () => {
    const td = sample(5);
    const mid = td.index({ start: 1, stop: -1 });
    expect(mid.batchSize).toEqual([3]);
    expect(mid.getTensor("obs").toArray()).toEqual([[2, 3], [4, 5], [6, 7]]);
    expect(mid.getTensor("obs").data.buffer).toBe(td.getTensor("obs").data.buffer);
    expect(mid.getRagged("tokens").toArray()).toEqual([[10n], [20n, 21n], []]);
    expect(mid.getRagged("tokens").offsets.buffer).toBe(td.getRagged("tokens").offsets.buffer);
    const stepped = td.index({ step: 2 });
    expect(stepped.getStrings("text")).toEqual(["s0-0", "s0-2", "s0-4"]);
    expect(stepped.getRagged("tokens").toArray()).toEqual([[], [20n, 21n], [40n]]);
    expect(td.index({ start: -100, stop: 100 }).batchSize).toEqual([5]);
    expect(td.index({ start: 4, stop: 2 }).batchSize).toEqual([0]);
    expectError(() => td.index({ step: 0 }), InvalidArgumentError, "INVALID_ARGUMENT");
    expectError(() => td.index({ step: -1 }), InvalidArgumentError, "INVALID_ARGUMENT");
  });

  it("takes boolean masks (boolean[], Uint8Array, Tensor<bool> over several dims)", () => {
    const td = sample(4);
    const picked = td.index([true, false, false, true]);
    expect(picked.getStrings("text")).toEqual(["s0-0", "s0-3"]);
    expect(picked.getTensor(["next", "reward"]).toArray()).toEqual([0, 1.5]);
    expect(td.index(new Uint8Array([0, 1, 1, 0])).getRagged("tokens").toArray()).toEqual([[10n], [20n, 21n]]);
    const g = grid();
    const mask = Tensor.from([[true, false, true], [false, true, false]], { dtype: "bool" });
    const m = g.index(mask);
    expect(m.batchSize).toEqual([3]);
    expect(m.getStrings("s")).toEqual(["r0", "r2", "r4"]);
    expect(m.getTensor("y").toArray()).toEqual([[0, 1], [4, 5], [8, 9]]);
    const err = expectError(() => td.index([true, false]), ShapeMismatchError, "SHAPE_MISMATCH");
    expect(err.message).toContain("2");
    expect(err.message).toContain("4");
    expectError(() => g.index(Tensor.from([true, false], { dtype: "bool" }), 1), ShapeMismatchError, "SHAPE_MISMATCH");
  });

  it("takes index arrays (repeats and negatives allowed) and index tensors", () => {
    const td = sample(3);
    const picked = td.index([2, 0, -1, 2]);
    expect(picked.batchSize).toEqual([4]);
    expect(picked.getStrings("text")).toEqual(["s0-2", "s0-0", "s0-2", "s0-2"]);
    expect(picked.getRagged("tokens").toArray()).toEqual([[20, 21], [], [20, 21], [20, 21]].map((r) => r.map(BigInt)));
    expect(td.index(new Int32Array([1])).getTensor("obs").toArray()).toEqual([[2, 3]]);
    expect(td.index([]).batchSize).toEqual([0]);
    const two = td.index(Tensor.from([[0, 1], [2, 2]], { dtype: "int64" }));
    expect(two.batchSize).toEqual([2, 2]);
    expect(two.getStrings("text")).toEqual(["s0-0", "s0-1", "s0-2", "s0-2"]);
    const err = expectError(() => td.index([0, 3]), IndexOutOfRangeError, "INDEX_OUT_OF_RANGE");
    expect(err.message).toContain("3");
    expect(err.size).toBe(3);
    expectError(() => td.index(3), IndexOutOfRangeError, "INDEX_OUT_OF_RANGE");
    expectError(() => td.index(-4), IndexOutOfRangeError, "INDEX_OUT_OF_RANGE");
    expectError(() => td.index(0.5), InvalidArgumentError, "INVALID_ARGUMENT");
    expectError(() => td.index(Tensor.from([0], { dtype: "float32" }) as unknown as Tensor<"int32">), InvalidArgumentError, "INVALID_ARGUMENT");
    expectError(() => new TensorDict().index(0), InvalidArgumentError, "INVALID_ARGUMENT");
  });

  it("indexes other batch dims with dim", () => {
    const g = grid();
    const col = g.index(1, 1);
    expect(col.batchSize).toEqual([2]);
    expect(col.getTensor("x").toArray()).toEqual([1, 4]);
    expect(col.getStrings("s")).toEqual(["r1", "r4"]);
    expect(col.getRagged("r").toArray()).toEqual([[], []]);
    const sub = g.index({ start: 1 }, -1);
    expect(sub.batchSize).toEqual([2, 2]);
    expect(sub.getTensor("y").toArray()).toEqual([[[2, 3], [4, 5]], [[8, 9], [10, 11]]]);
    expect(sub.getRagged("r").toArray()).toEqual([[], [2n, 2n], [], [5n]]);
    expectError(() => g.index(0, 2), IndexOutOfRangeError, "INDEX_OUT_OF_RANGE");
  });
});

describe("reshape, flatten, unsqueeze, squeeze", () => {
  it("reshape changes the batch size over the same rows, sharing data", () => {
    const g = grid();
    const flat = g.reshape([-1]);
    expect(flat.batchSize).toEqual([6]);
    expect(flat.getTensor("y").shape).toEqual([6, 2]);
    expect(flat.getTensor("y").data).toBe(g.getTensor("y").data);
    expect(flat.getTensor(["n", "b"]).shape).toEqual([6]);
    expect(flat.getStrings("s")).toBe(g.getStrings("s"));
    expect(flat.reshape([3, 2]).getTensor("x").toArray()).toEqual([[0, 1], [2, 3], [4, 5]]);
    const err = expectError(() => g.reshape([4]), ShapeMismatchError, "SHAPE_MISMATCH");
    expect(err.message).toContain("[2, 3]");
    expect(err.message).toContain("[4]");
    expectError(() => g.reshape([-1, -1]), InvalidArgumentError, "INVALID_ARGUMENT");
  });

  it("flatten merges a range of batch dims", () => {
    const td = new TensorDict({ x: Tensor.zeros("float32", [2, 3, 4, 5]) }, { batchSize: [2, 3, 4] });
    expect(td.flatten().batchSize).toEqual([24]);
    expect(td.flatten(1).batchSize).toEqual([2, 12]);
    expect(td.flatten(0, 1).getTensor("x").shape).toEqual([6, 4, 5]);
    expect(new TensorDict().flatten().batchSize).toEqual([1]);
    expectError(() => td.flatten(2, 1), InvalidArgumentError, "INVALID_ARGUMENT");
  });

  it("unsqueeze and squeeze add and remove size-1 batch dims", () => {
    const td = sample(3);
    const u = td.unsqueeze(0);
    expect(u.batchSize).toEqual([1, 3]);
    expect(u.getTensor("obs").shape).toEqual([1, 3, 2]);
    expect(td.unsqueeze(-1).batchSize).toEqual([3, 1]);
    expect(u.squeeze().batchSize).toEqual([3]);
    expect(u.squeeze(0).batchSize).toEqual([3]);
    expect(u.squeeze(1)).toBe(u);
    expectError(() => td.unsqueeze(3), IndexOutOfRangeError, "INDEX_OUT_OF_RANGE");
  });
});

describe("split and unbind", () => {
  it("splits by size (last chunk smaller) and by sizes, on any dim", () => {
    const td = sample(5);
    const parts = td.split(2);
    expect(parts.map((p) => p.batchSize[0])).toEqual([2, 2, 1]);
    expect(parts[2]!.getStrings("text")).toEqual(["s0-4"]);
    expect(parts[1]!.getTensor("obs").data.buffer).toBe(td.getTensor("obs").data.buffer);
    const uneven = td.split([1, 0, 4]);
    expect(uneven.map((p) => p.numel())).toEqual([1, 0, 4]);
    expect(uneven[2]!.getRagged("tokens").toArray()).toEqual([[10], [20, 21], [], [40]].map((r) => r.map(BigInt)));
    const cols = grid().split(2, 1);
    expect(cols.map((c) => c.batchSize)).toEqual([[2, 2], [2, 1]]);
    expect(cols[1]!.getStrings("s")).toEqual(["r2", "r5"]);
    const err = expectError(() => td.split([1, 2]), ShapeMismatchError, "SHAPE_MISMATCH");
    expect(err.message).toContain("3");
    expect(err.message).toContain("5");
    expectError(() => td.split(0), InvalidArgumentError, "INVALID_ARGUMENT");
  });

  it("unbinds a batch dim", () => {
    const rows = grid().unbind(1);
    expect(rows).toHaveLength(3);
    expect(rows[2]!.getStrings("s")).toEqual(["r2", "r5"]);
    expect(rows[0]!.batchSize).toEqual([2]);
  });

  it("unbind gives, on every dim, the rows index(i, dim) gives; rows of dim 0 view the source", () => {
    const td = grid();
    for (const dim of [0, 1, -1]) {
      const rows = td.unbind(dim);
      expect(rows.map(snapshot)).toEqual(rows.map((_, i) => snapshot(td.index(i, dim))));
    }
    const deep = TensorDict.stack([grid(), grid().apply((v) => v.clone())], 1); // batch size [2, 2, 3]
    expect(deep.unbind(1).map(snapshot)).toEqual([0, 1].map((i) => snapshot(deep.index(i, 1))));
    expect(new TensorDict({ x: Tensor.zeros("float32", [2, 0]) }, { batchSize: [2, 0] }).unbind(0).map((r) => r.batchSize)).toEqual([[0], [0]]);
    const first = td.unbind(0)[1]!;
    first.getTensor("x").data[0] = 40;
    expect(td.getTensor("x").data[3]).toBe(40);
  });
});

describe("stack and cat", () => {
  it("stacks along dim 0 and along an inner dim", () => {
    const a = sample(2, 0);
    const b = sample(2, 1);
    const s0 = TensorDict.stack([a, b]);
    expect(s0.batchSize).toEqual([2, 2]);
    expect(s0.getStrings("text")).toEqual(["s0-0", "s0-1", "s1-0", "s1-1"]);
    expect(s0.getTensor("obs").shape).toEqual([2, 2, 2]);
    expect(s0.getRagged("tokens").toArray()).toEqual([[], [10n], [], [110n]]);
    const s1 = TensorDict.stack([a, b], -1);
    expect(s1.batchSize).toEqual([2, 2]);
    expect(s1.getStrings("text")).toEqual(["s0-0", "s1-0", "s0-1", "s1-1"]);
    expect(s1.getTensor(["next", "reward"]).toArray()).toEqual([[0, 1], [0.5, 1.5]]);
    expect(s1.index(1).getTensor("obs").toArray()).toEqual([[2, 3], [3, 4]]);
    expect(s0.getTensor("obs").data.buffer).not.toBe(a.getTensor("obs").data.buffer);
    const scalars = TensorDict.stack([new TensorDict({ v: Tensor.from(1, { dtype: "int64" }) }), new TensorDict({ v: Tensor.from(2, { dtype: "int64" }) })]);
    expect(scalars.batchSize).toEqual([2]);
    expect(scalars.getTensor("v").toArray()).toEqual([1n, 2n]);
  });

  it("concatenates along dim 0 and along an inner dim, with empty parts", () => {
    const c = TensorDict.cat([sample(2, 0), sample(0, 5), sample(3, 1)]);
    expect(c.batchSize).toEqual([5]);
    expect(c.getStrings("text")).toEqual(["s0-0", "s0-1", "s1-0", "s1-1", "s1-2"]);
    expect(c.getRagged("tokens").toArray()).toEqual([[], [10], [], [110], [120, 121]].map((r) => r.map(BigInt)));
    const g = grid();
    const wide = TensorDict.cat([g, g.index({ start: 2 }, 1)], 1);
    expect(wide.batchSize).toEqual([2, 4]);
    expect(wide.getTensor("x").toArray()).toEqual([[0, 1, 2, 2], [3, 4, 5, 5]]);
    expect(wide.getStrings("s")).toEqual(["r0", "r1", "r2", "r2", "r3", "r4", "r5", "r5"]);
    expect(wide.getRagged("r").toArray()).toEqual([[0], [], [2, 2], [2, 2], [3, 3, 3], [], [5], [5]].map((r) => r.map(BigInt)));
    expect(wide.getTensor(["n", "b"]).toArray()).toEqual([[true, false, true, true], [false, true, false, false]]);
  });

  it("cat then split round-trips; stack then unbind round-trips", () => {
    const parts = [sample(2, 0), sample(3, 1)];
    const back = TensorDict.cat(parts).split([2, 3]);
    expect(back.map(snapshot)).toEqual(parts.map(snapshot));
    const rows = [sample(2, 0), sample(2, 1), sample(2, 2)];
    expect(TensorDict.stack(rows, 1).unbind(1).map(snapshot)).toEqual(rows.map(snapshot));
  });

  it("rejects incompatible inputs naming both sides", () => {
    const a = sample(2);
    expectError(() => TensorDict.stack([]), InvalidArgumentError, "INVALID_ARGUMENT");
    expectError(() => TensorDict.cat([]), InvalidArgumentError, "INVALID_ARGUMENT");
    const e1 = expectError(() => TensorDict.stack([a, sample(3)]), BatchSizeMismatchError, "BATCH_SIZE_MISMATCH");
    expect(e1.message).toContain("[2]");
    expect(e1.message).toContain("[3]");
    const e2 = expectError(() => TensorDict.cat([grid(), grid().index(0)], 0), BatchSizeMismatchError, "BATCH_SIZE_MISMATCH");
    expect(e2.message).toContain("[2, 3]");
    expect(e2.message).toContain("[3]");
    expectError(() => TensorDict.cat([grid(), grid().index({ stop: 1 })], 1), BatchSizeMismatchError, "BATCH_SIZE_MISMATCH");
    expectError(() => TensorDict.cat([new TensorDict()]), InvalidArgumentError, "INVALID_ARGUMENT");
    const missing = expectError(() => TensorDict.stack([a, sample(2).exclude(["next", "reward"])]), KeyNotFoundError, "KEY_NOT_FOUND");
    expect(missing.message).toContain('["next","reward"]');
    expect(missing.message).toContain("tds[1]");
    const extra = sample(2).set("more", ["a", "b"]);
    expectError(() => TensorDict.cat([a, extra]), KeyNotFoundError, "KEY_NOT_FOUND");
    const dt = sample(2).set("obs", Tensor.zeros("float64", [2, 2]));
    const e3 = expectError(() => TensorDict.cat([a, dt]), DTypeMismatchError, "DTYPE_MISMATCH");
    expect(e3.message).toContain("float32");
    expect(e3.message).toContain("float64");
    expect(e3.message).toContain('"obs"');
    const sh = sample(2).set("obs", Tensor.zeros("float32", [2, 3]));
    const e4 = expectError(() => TensorDict.stack([a, sh]), ShapeMismatchError, "SHAPE_MISMATCH");
    expect(e4.message).toContain("[2]");
    expect(e4.message).toContain("[3]");
    const kind = sample(2).set("tokens", Tensor.zeros("int64", [2]));
    expectError(() => TensorDict.cat([a, kind]), LeafKindMismatchError, "LEAF_KIND_MISMATCH");
    const rt = sample(2).set("tokens", RaggedTensor.fromRows([Tensor.zeros("int64", [1]), Tensor.zeros("int64", [2])]));
    expect(TensorDict.cat([a, rt]).getRagged("tokens").toArray()).toEqual([[], [10n], [0n], [0n, 0n]]);
    const rtype = sample(2).set("tokens", RaggedTensor.fromRows([Tensor.zeros("int32", [1]), Tensor.zeros("int32", [1])]));
    expectError(() => TensorDict.cat([a, rtype]), DTypeMismatchError, "DTYPE_MISMATCH");
    const tail = sample(2).set("tokens", RaggedTensor.fromRows([Tensor.zeros("int64", [1, 2]), Tensor.zeros("int64", [0, 2])]));
    expectError(() => TensorDict.cat([a, tail]), ShapeMismatchError, "SHAPE_MISMATCH");
    expectError(() => TensorDict.stack([a, a], 2), IndexOutOfRangeError, "INDEX_OUT_OF_RANGE");
    const nested = sample(2).set(["next", "reward"], Tensor.zeros("float64", [2, 4]));
    const e5 = expectError(() => TensorDict.stack([a, nested]), ShapeMismatchError, "SHAPE_MISMATCH");
    expect(e5.message).toContain('key ["next","reward"] has shape [] after the batch dimensions in tds[0] but [4] in tds[1]');
  });
});

describe("apply and clone", () => {
  it("applies a function to dense and ragged leaves, keeping strings, dropping undefined", () => {
    const td = sample(3);
    const seen: unknown[] = [];
    const out = td.apply((leaf, key) => {
      seen.push(key);
      if (key === "tokens") return undefined;
      return leaf instanceof Tensor ? leaf.to("float64") : leaf;
    });
    expect(seen).toEqual(["obs", "tokens", ["next", "reward"]]);
    expect(out.keys({ nested: true })).toEqual(["obs", "text", "next", ["next", "reward"]]);
    expect(out.getTensor("obs").dtype).toBe("float64");
    expect(out.getStrings("text")).toBe(td.getStrings("text"));
    expect(td.getTensor("obs").dtype).toBe("float32");
    const padded = td.apply((leaf) => (leaf instanceof RaggedTensor ? leaf.asPaddedTensor().values : leaf));
    expect(padded.getTensor("tokens").shape).toEqual([3, 2]);
    const err = expectError(() => td.apply(() => Tensor.zeros("int8", [1])), BatchSizeMismatchError, "BATCH_SIZE_MISMATCH");
    expect(err.message).toContain('"obs"');
  });

  it("clone copies every buffer", () => {
    const td = sample(3);
    const view = td.index({ start: 1 });
    const c = view.clone();
    expect(snapshot(c)).toEqual(snapshot(view));
    c.getTensor("obs").data[0] = 99;
    expect(td.getTensor("obs").data[2]).toBe(2);
    expect(c.getRagged("tokens").offsets[0]).toBe(0);
    expect(c.getRagged("tokens").values).not.toBe(td.getRagged("tokens").values);
    expect(c.getTensorDict("next")).not.toBe(view.getTensorDict("next"));
  });

  it("views share data with their source (writes show through)", () => {
    const td = sample(3);
    td.index(1).getTensor("obs").data[0] = -1;
    expect(td.getTensor("obs").toArray()).toEqual([[0, 1], [-1, 3], [4, 5]]);
  });
});
