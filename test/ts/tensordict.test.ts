// TensorDict: construction, keys, get/set/del, typed getters and their errors (sdk/tensordict).
import { describe, expect, it } from "vitest";
import {
  BatchSizeMismatchError,
  DTypeMismatchError,
  InvalidArgumentError,
  KeyNotFoundError,
  LeafKindMismatchError,
  RaggedTensor,
  Tensor,
  TensorDict,
  kindOf,
  type TensorDictSource,
} from "../../sdk/tensordict/index.js";
import { dotted, expectError, ragged, sample } from "./tensordict.helpers.js";

describe("TensorDict construction", () => {
  it("takes a nested plain object and a batch size", () => {
    const reward = Tensor.from([1, 2, 3, 4], { dtype: "float32" });
    const td = new TensorDict({ obs: Tensor.zeros("float32", [4, 3]), next: { reward, done: Tensor.zeros("bool", [4]) } }, { batchSize: [4] });
    expect(td.batchSize).toEqual([4]);
    expect(td.batchDims).toBe(1);
    expect(td.numel()).toBe(4);
    expect(td.rows).toBe(4);
    expect(td.get(["next", "reward"])).toBe(reward);
    expect(td.getTensorDict("next").batchSize).toEqual([4]);
    expect(dotted(td.keys())).toEqual(["obs", "next"]);
    expect(td.toString()).toContain("reward: Tensor(shape=[4], dtype=float32)");
  });

  it("defaults to batch size [] (one row)", () => {
    const td = new TensorDict({ x: Tensor.from(3, { dtype: "int64" }), s: ["only"], r: ragged([[1, 2]]) });
    expect(td.batchSize).toEqual([]);
    expect(td.numel()).toBe(1);
    expect(new TensorDict().keys()).toEqual([]);
  });

  it("supports multi-dimensional batch sizes: strings and ragged rows are row-major over them", () => {
    const td = new TensorDict(
      { x: Tensor.zeros("float32", [2, 3, 5]), s: ["a", "b", "c", "d", "e", "f"], r: ragged([[1], [], [2], [3], [], [4]]) },
      { batchSize: [2, 3] },
    );
    expect(td.numel()).toBe(6);
    expectError(() => td.set("bad", ["a", "b"]), BatchSizeMismatchError, "BATCH_SIZE_MISMATCH");
  });

  it("supports an empty batch [0]", () => {
    const td = new TensorDict(
      { x: Tensor.zeros("float32", [0, 3]), s: [], r: new RaggedTensor("int64", new BigInt64Array(0), new Int32Array(1)) },
      { batchSize: [0] },
    );
    expect(td.numel()).toBe(0);
    expect(td.getRagged("r").rows).toBe(0);
    expect(td.index({ start: 0 }).numel()).toBe(0);
  });

  it("keeps nested TensorDicts by reference and copies/freezes string arrays", () => {
    const child = new TensorDict({ a: Tensor.zeros("int8", [2]) }, { batchSize: [2] });
    const names = ["x", "y"];
    const td = new TensorDict({ child, names }, { batchSize: [2] });
    expect(td.get("child")).toBe(child);
    names[0] = "changed";
    expect(td.getStrings("names")).toEqual(["x", "y"]);
    expect(Object.isFrozen(td.getStrings("names"))).toBe(true);
  });

  it("rejects values that do not fit the batch size, naming the key and both sizes", () => {
    const e1 = expectError(() => new TensorDict({ obs: Tensor.zeros("float32", [3, 2]) }, { batchSize: [4] }), BatchSizeMismatchError, "BATCH_SIZE_MISMATCH");
    expect(e1.message).toContain('"obs"');
    expect(e1.message).toContain("[3, 2]");
    expect(e1.message).toContain("[4]");
    expect(e1.expected).toEqual([4]);
    expect(e1.actual).toEqual([3]);
    const e2 = expectError(() => new TensorDict({ next: { r: ragged([[1]]) } }, { batchSize: [2] }), BatchSizeMismatchError, "BATCH_SIZE_MISMATCH");
    expect(e2.message).toContain('["next","r"]');
    expect(e2.message).toContain("1 rows");
    const e3 = expectError(() => new TensorDict({ s: ["a"] }, { batchSize: [2] }), BatchSizeMismatchError, "BATCH_SIZE_MISMATCH");
    expect(e3.message).toContain('"s"');
    const child = new TensorDict({}, { batchSize: [3] });
    const e4 = expectError(() => new TensorDict({ c: child }, { batchSize: [2] }), BatchSizeMismatchError, "BATCH_SIZE_MISMATCH");
    expect(e4.message).toContain("[3]");
    expect(e4.message).toContain("[2]");
    expectError(() => new TensorDict({ x: Tensor.zeros("float32", [2]) }, { batchSize: [2, 1] }), BatchSizeMismatchError, "BATCH_SIZE_MISMATCH");
  });

  it("rejects values of unknown kinds and bad batch sizes", () => {
    const bad = { x: new Float32Array(2) } as unknown as TensorDictSource;
    const err = expectError(() => new TensorDict(bad, { batchSize: [2] }), InvalidArgumentError, "INVALID_ARGUMENT");
    expect(err.message).toContain("Float32Array");
    expectError(() => new TensorDict({ s: [1, 2] as unknown as string[] }, { batchSize: [2] }), InvalidArgumentError, "INVALID_ARGUMENT");
    expectError(() => new TensorDict({}, { batchSize: [-1] }), InvalidArgumentError, "INVALID_ARGUMENT");
    expectError(() => new TensorDict({}, { batchSize: [1.5] }), InvalidArgumentError, "INVALID_ARGUMENT");
  });
});

describe("TensorDict keys and values", () => {
  it("lists keys top-level, nested (tuples, depth first) and leaves only", () => {
    const td = sample(3);
    td.set(["next", "inner", "x"], Tensor.zeros("int32", [3]));
    expect(td.keys()).toEqual(["obs", "tokens", "text", "next"]);
    expect(td.keys({ nested: true })).toEqual(["obs", "tokens", "text", "next", ["next", "reward"], ["next", "inner"], ["next", "inner", "x"]]);
    expect(td.keys({ nested: true, leavesOnly: true })).toEqual(["obs", "tokens", "text", ["next", "reward"], ["next", "inner", "x"]]);
    expect(td.keys({ leavesOnly: true })).toEqual(["obs", "tokens", "text"]);
    expect(td.values().map(kindOf)).toEqual(["tensor", "ragged", "strings", "tensordict"]);
    expect(td.entries({ nested: true, leavesOnly: true }).map(([, v]) => kindOf(v))).toEqual(["tensor", "ragged", "strings", "tensor", "tensor"]);
  });

  it("gets, sets (creating intermediate TensorDicts), deletes and tests keys", () => {
    const td = new TensorDict({}, { batchSize: [2] });
    const r = Tensor.from([1, 2], { dtype: "float32" });
    expect(td.set(["next", "reward"], r)).toBe(td);
    expect(td.getTensorDict("next").batchSize).toEqual([2]);
    expect(td.has(["next", "reward"])).toBe(true);
    expect(td.has("next")).toBe(true);
    expect(td.has(["next"])).toBe(true);
    expect(td.has(["next", "done"])).toBe(false);
    expect(td.getTensor(["next", "reward"], "float32").toArray()).toEqual([1, 2]);
    td.set("a", Tensor.zeros("int64", [2]));
    td.set("next", { done: Tensor.zeros("bool", [2]) });
    expect(td.keys({ nested: true })).toEqual(["next", ["next", "done"], "a"]);
    expect(td.get("missing", null)).toBeNull();
    td.del(["next", "done"]);
    expect(td.keys({ nested: true })).toEqual(["next", "a"]);
    td.del("next");
    expect(td.keys()).toEqual(["a"]);
  });

  it("replaces a key in place, keeping its position", () => {
    const td = sample(2);
    td.set("obs", Tensor.zeros("float32", [2, 5]));
    expect(td.keys()[0]).toBe("obs");
    expect(td.getTensor("obs").shape).toEqual([2, 5]);
  });

  it("throws KEY_NOT_FOUND naming the key and listing the existing keys", () => {
    const td = sample(2);
    const err = expectError(() => td.get(["next", "done"]), KeyNotFoundError, "KEY_NOT_FOUND");
    expect(err.message).toContain('["next","done"]');
    expect(err.message).toContain('"obs"');
    expect(err.message).toContain('["next","reward"]');
    expect(err.key).toEqual(["next", "done"]);
    expect(err.availableKeys).toContainEqual(["next", "reward"]);
    expectError(() => td.del("nope"), KeyNotFoundError, "KEY_NOT_FOUND");
    expectError(() => td.get(["obs", "x"]), KeyNotFoundError, "KEY_NOT_FOUND");
    expectError(() => td.getTensor("nope"), KeyNotFoundError, "KEY_NOT_FOUND");
    expect(new KeyNotFoundError("a", []).message).toContain("no keys");
  });

  it("typed getters throw LEAF_KIND_MISMATCH or DTYPE_MISMATCH", () => {
    const td = sample(2);
    const e1 = expectError(() => td.getTensor("tokens"), LeafKindMismatchError, "LEAF_KIND_MISMATCH");
    expect(e1.message).toContain('"tokens"');
    expect(e1.message).toContain("ragged");
    expect(e1.message).toContain("tensor");
    expect(e1.expected).toBe("tensor");
    expect(e1.actual).toBe("ragged");
    expectError(() => td.getRagged("obs"), LeafKindMismatchError, "LEAF_KIND_MISMATCH");
    expectError(() => td.getStrings("next"), LeafKindMismatchError, "LEAF_KIND_MISMATCH");
    expectError(() => td.getTensorDict("text"), LeafKindMismatchError, "LEAF_KIND_MISMATCH");
    const e2 = expectError(() => td.getTensor("obs", "int64"), DTypeMismatchError, "DTYPE_MISMATCH");
    expect(e2.message).toContain("float32");
    expect(e2.message).toContain("int64");
    expectError(() => td.getRagged("tokens", "int32"), DTypeMismatchError, "DTYPE_MISMATCH");
    expect(td.getRagged("tokens", "int64").dtype).toBe("int64");
    expect(td.getStrings("text")).toEqual(["s0-0", "s0-1"]);
  });

  it("refuses to set under a leaf, cycles and empty keys", () => {
    const td = sample(2);
    const err = expectError(() => td.set(["obs", "x"], Tensor.zeros("int8", [2])), LeafKindMismatchError, "LEAF_KIND_MISMATCH");
    expect(err.message).toContain('"obs"');
    expectError(() => td.set("self", td), InvalidArgumentError, "INVALID_ARGUMENT");
    const next = td.getTensorDict("next");
    expectError(() => td.set(["next", "loop"], next), InvalidArgumentError, "INVALID_ARGUMENT");
    expectError(() => next.set("up", td), InvalidArgumentError, "INVALID_ARGUMENT");
    expectError(() => td.get([]), InvalidArgumentError, "INVALID_ARGUMENT");
    expectError(() => td.set(["a", 1 as unknown as string], ["x", "y"]), InvalidArgumentError, "INVALID_ARGUMENT");
  });

  it("selects and excludes keys, sharing leaves", () => {
    const td = sample(2);
    const sel = td.select("obs", ["next", "reward"]);
    expect(sel.keys({ nested: true })).toEqual(["obs", "next", ["next", "reward"]]);
    expect(sel.get("obs")).toBe(td.get("obs"));
    expectError(() => td.select("nope"), KeyNotFoundError, "KEY_NOT_FOUND");
    const ex = td.exclude("tokens", ["next", "reward"], "absent");
    expect(ex.keys({ nested: true })).toEqual(["obs", "text", "next"]);
    expect(td.has(["next", "reward"])).toBe(true);
  });
});
