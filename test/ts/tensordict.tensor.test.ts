// Tensor, the 16-bit float conversions and RaggedTensor (sdk/tensordict).
import { describe, expect, it } from "vitest";
import {
  asNestedTensor,
  asPaddedTensor,
  bfloat16BitsToNumber,
  DTypeMismatchError,
  float16BitsToNumber,
  IndexOutOfRangeError,
  InvalidArgumentError,
  numberToBfloat16Bits,
  numberToFloat16Bits,
  RaggedTensor,
  ShapeMismatchError,
  Tensor,
} from "../../sdk/tensordict/index.js";
import { expectError, ragged } from "./tensordict.helpers.js";

describe("Tensor", () => {
  it("builds from nested arrays, infers the shape and reads back", () => {
    const t = Tensor.from([[1, 2, 3], [4, 5, 6]], { dtype: "float32" });
    expect(t.dtype).toBe("float32");
    expect(t.shape).toEqual([2, 3]);
    expect(t.data).toBeInstanceOf(Float32Array);
    expect(t.numel()).toBe(6);
    expect(t.ndim).toBe(2);
    expect(t.toArray()).toEqual([[1, 2, 3], [4, 5, 6]]);
    expect(t.at(1, -1)).toBe(6);
    expect(t.toString()).toBe("Tensor(shape=[2, 3], dtype=float32)");
  });

  it("uses a TypedArray of the dtype's storage class without copying, converts others", () => {
    const data = new Float32Array([1, 2, 3, 4]);
    const shared = Tensor.from(data, { dtype: "float32", shape: [2, -1] });
    expect(shared.data).toBe(data);
    expect(shared.shape).toEqual([2, 2]);
    const converted = Tensor.from(data, { dtype: "int32" });
    expect(converted.data).toBeInstanceOf(Int32Array);
    expect(converted.toArray()).toEqual([1, 2, 3, 4]);
    const truncated = Tensor.from([1.9, -1.9], { dtype: "int16" });
    expect(truncated.toArray()).toEqual([1, -1]);
  });

  it("keeps its shape frozen: a mutable shape argument is copied, a frozen one kept", () => {
    const shape = [2, 3];
    const t = new Tensor("float32", shape, new Float32Array(6));
    shape[0] = 5;
    expect(t.shape).toEqual([2, 3]);
    expect(Object.isFrozen(t.shape)).toBe(true);
    expect(new Tensor("float32", t.shape, new Float32Array(6)).shape).toBe(t.shape);
    expect(() => new Tensor("float32", Object.freeze([2, -1]), new Float32Array(6))).toThrow(InvalidArgumentError);
  });

  it("holds int64 as bigints", () => {
    const t = Tensor.from([1, 2n, 2n ** 60n], { dtype: "int64" });
    expect(t.data).toBeInstanceOf(BigInt64Array);
    expect(t.toArray()).toEqual([1n, 2n, 2n ** 60n]);
    expect(t.item.bind(t)).toThrow(InvalidArgumentError);
    expect(Tensor.from(7, { dtype: "int64" }).item()).toBe(7n);
  });

  it("holds bool as 0/1 bytes and reads booleans", () => {
    const t = Tensor.from([true, false, 3, 0], { dtype: "bool" });
    expect(t.data).toEqual(new Uint8Array([1, 0, 1, 0]));
    expect(t.toArray()).toEqual([true, false, true, false]);
    const bytes = new Uint8Array([0, 1]);
    expect(Tensor.from(bytes, { dtype: "bool" }).data).toBe(bytes);
    expect(Tensor.from(new Uint8Array([0, 2]), { dtype: "bool" }).data).toEqual(new Uint8Array([0, 1]));
  });

  it("stores bfloat16 and float16 as bits and decodes them", () => {
    const b = Tensor.from([1, -2.5, 3.140625], { dtype: "bfloat16" });
    expect(b.data).toBeInstanceOf(Uint16Array);
    expect(Array.from(b.data)).toEqual([0x3f80, 0xc020, 0x4049]);
    expect(b.toArray()).toEqual([1, -2.5, 3.140625]);
    expect(Array.from(b.toFloat32Array())).toEqual([1, -2.5, 3.140625]);
    const h = Tensor.from(new Float32Array([1, 0.5, -2, 65504]), { dtype: "float16" });
    expect(Array.from(h.data)).toEqual([0x3c00, 0x3800, 0xc000, 0x7bff]);
    expect(Array.from(h.toFloat32Array())).toEqual([1, 0.5, -2, 65504]);
    expect(h.to("float32").toArray()).toEqual([1, 0.5, -2, 65504]);
    expect(Tensor.from([1.5, 2.25], { dtype: "float32" }).to("bfloat16").toArray()).toEqual([1.5, 2.25]);
  });

  it("makes 0-d tensors, zeros, ones and full", () => {
    const s = Tensor.from(2.5, { dtype: "float64" });
    expect(s.shape).toEqual([]);
    expect(s.item()).toBe(2.5);
    expect(s.toArray()).toEqual([2.5]);
    expect(Tensor.zeros("int64", [2, 0]).toArray()).toEqual([[], []]);
    expect(Tensor.ones("bool", [2]).toArray()).toEqual([true, true]);
    expect(Tensor.full("bfloat16", [1, 2], 0.5).toArray()).toEqual([[0.5, 0.5]]);
  });

  it("reshapes as a view and clones as a copy", () => {
    const t = Tensor.from([1, 2, 3, 4, 5, 6], { dtype: "int32" });
    const r = t.reshape([3, -1]);
    expect(r.shape).toEqual([3, 2]);
    expect(r.data).toBe(t.data);
    const c = t.clone();
    c.data[0] = 100;
    expect(t.data[0]).toBe(1);
    expect(t.toNumbers()).toEqual([1, 2, 3, 4, 5, 6]);
  });

  it("converts dtypes as torch does", () => {
    const t = Tensor.from([-1.5, 0, 2.7], { dtype: "float32" });
    expect(t.to("int64").toArray()).toEqual([-1n, 0n, 2n]);
    expect(t.to("bool").toArray()).toEqual([true, false, true]);
    expect(t.to("float32")).toBe(t);
    expect(Tensor.from([1n, 2n], { dtype: "int64" }).to("float64").toArray()).toEqual([1, 2]);
  });

  it("rejects data that does not fill the shape, naming both", () => {
    const err = expectError(() => new Tensor("float32", [2, 3], new Float32Array(5)), ShapeMismatchError, "SHAPE_MISMATCH");
    expect(err.message).toContain("5 elements");
    expect(err.message).toContain("[2, 3]");
    expectError(() => Tensor.from([1, 2, 3], { dtype: "float32", shape: [2, 2] }), ShapeMismatchError, "SHAPE_MISMATCH");
    expectError(() => Tensor.from([1, 2, 3], { dtype: "float32", shape: [-1, 2] }), ShapeMismatchError, "SHAPE_MISMATCH");
    expectError(() => Tensor.from([1, 2, 3, 4], { dtype: "float32" }).reshape([3, -1]), ShapeMismatchError, "SHAPE_MISMATCH");
  });

  it("rejects ragged nested arrays, the wrong TypedArray class, bad shapes and bad dtypes", () => {
    const ragged2 = expectError(() => Tensor.from([[1, 2], [3]], { dtype: "float32" }), ShapeMismatchError, "SHAPE_MISMATCH");
    expect(ragged2.message).toContain("not rectangular");
    expectError(() => Tensor.from([[1], 2], { dtype: "float32" }), ShapeMismatchError, "SHAPE_MISMATCH");
    expectError(() => Tensor.from([1, [2]], { dtype: "float32" }), ShapeMismatchError, "SHAPE_MISMATCH");
    expectError(() => new Tensor("float32", [2], new Float64Array(2) as unknown as Float32Array), InvalidArgumentError, "INVALID_ARGUMENT");
    expectError(() => new Tensor("float32", [-1], new Float32Array(0)), InvalidArgumentError, "INVALID_ARGUMENT");
    expectError(() => Tensor.zeros("complex64" as "float32", [1]), InvalidArgumentError, "INVALID_ARGUMENT");
    expectError(() => Tensor.from([NaN], { dtype: "int64" }), InvalidArgumentError, "INVALID_ARGUMENT");
    expectError(() => Tensor.from([1, 2], { dtype: "int8" }).at(0, 1), InvalidArgumentError, "INVALID_ARGUMENT");
    expectError(() => Tensor.from([1, 2], { dtype: "int8" }).at(-3), IndexOutOfRangeError, "INDEX_OUT_OF_RANGE");
    expectError(() => Tensor.from([1, 2], { dtype: "int8" }).at(2), IndexOutOfRangeError, "INDEX_OUT_OF_RANGE");
  });
});

describe("16-bit floats", () => {
  it("round bfloat16 to nearest even and keep specials", () => {
    expect(numberToBfloat16Bits(1)).toBe(0x3f80);
    // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even (1).
    expect(numberToBfloat16Bits(1 + 2 ** -8)).toBe(0x3f80);
    expect(numberToBfloat16Bits(1 + 3 * 2 ** -8)).toBe(0x3f82);
    expect(bfloat16BitsToNumber(numberToBfloat16Bits(Infinity))).toBe(Infinity);
    expect(bfloat16BitsToNumber(numberToBfloat16Bits(-Infinity))).toBe(-Infinity);
    expect(Number.isNaN(bfloat16BitsToNumber(numberToBfloat16Bits(NaN)))).toBe(true);
    expect(Object.is(bfloat16BitsToNumber(numberToBfloat16Bits(-0)), -0)).toBe(true);
  });

  it("round float16 to nearest even, with subnormals, overflow and specials", () => {
    expect(numberToFloat16Bits(1)).toBe(0x3c00);
    expect(numberToFloat16Bits(1 + 2 ** -11)).toBe(0x3c00); // tie → even
    expect(numberToFloat16Bits(1 + 3 * 2 ** -11)).toBe(0x3c02);
    expect(numberToFloat16Bits(2 ** -24)).toBe(0x0001); // smallest subnormal
    expect(numberToFloat16Bits(2 ** -25)).toBe(0x0000); // tie → even (0)
    expect(numberToFloat16Bits(1.5 * 2 ** -25)).toBe(0x0001);
    expect(numberToFloat16Bits(65520)).toBe(0x7c00); // rounds up to Infinity
    expect(numberToFloat16Bits(-1e9)).toBe(0xfc00);
    expect(float16BitsToNumber(0x7c00)).toBe(Infinity);
    expect(Number.isNaN(float16BitsToNumber(numberToFloat16Bits(NaN)))).toBe(true);
    expect(float16BitsToNumber(0x0001)).toBe(2 ** -24);
    expect(float16BitsToNumber(0x3555)).toBeCloseTo(1 / 3, 3);
    for (let bits = 0; bits < 0x7c00; bits += 37) expect(numberToFloat16Bits(float16BitsToNumber(bits))).toBe(bits);
  });
});

describe("RaggedTensor", () => {
  it("exposes rows, lengths and row views, including zero-length rows", () => {
    const r = ragged([[1, 2], [], [3, 4, 5]]);
    expect(r.rows).toBe(3);
    expect(Array.from(r.lengths())).toEqual([2, 0, 3]);
    expect(r.maxLength()).toBe(3);
    expect(r.numel()).toBe(5);
    expect(r.row(1).shape).toEqual([0]);
    expect(r.row(-1).toArray()).toEqual([3n, 4n, 5n]);
    expect(r.row(2).data.buffer).toBe(r.values.buffer);
    expect(r.toArray()).toEqual([[1n, 2n], [], [3n, 4n, 5n]]);
    expect(r.toString()).toBe("RaggedTensor(rows=3, shape=[-1], dtype=int64)");
    expectError(() => r.row(3), IndexOutOfRangeError, "INDEX_OUT_OF_RANGE");
  });

  it("pads and unpads (as_padded_tensor / as_nested_tensor), right and left", () => {
    const r = ragged([[1, 2], [], [3, 4, 5]]);
    const { values, mask } = r.asPaddedTensor({ padValue: -1 });
    expect(values.toArray()).toEqual([[1n, 2n, -1n], [-1n, -1n, -1n], [3n, 4n, 5n]]);
    expect(mask.toArray()).toEqual([[true, true, false], [false, false, false], [true, true, true]]);
    expect(RaggedTensor.fromPadded(values, mask).toArray()).toEqual(r.toArray());
    expect(RaggedTensor.fromPadded(values, [2, 0, 3]).toArray()).toEqual(r.toArray());
    expect(RaggedTensor.fromPadded(values, Tensor.from([2, 0, 3], { dtype: "int64" })).toArray()).toEqual(r.toArray());

    const left = asPaddedTensor(r, { paddingSide: "left", length: 4 });
    expect(left.values.toArray()).toEqual([[0n, 0n, 1n, 2n], [0n, 0n, 0n, 0n], [0n, 3n, 4n, 5n]]);
    expect(RaggedTensor.fromPadded(left.values, left.mask).toArray()).toEqual(r.toArray());
    expectError(() => r.asPaddedTensor({ length: 2 }), InvalidArgumentError, "INVALID_ARGUMENT");
    expectError(() => RaggedTensor.fromPadded(values, [2, 0, 4]), InvalidArgumentError, "INVALID_ARGUMENT");
    expectError(() => RaggedTensor.fromPadded(values, [1, 1]), ShapeMismatchError, "SHAPE_MISMATCH");
  });

  it("handles a tail shape and a multi-dimensional mask", () => {
    const r = asNestedTensor([[[1, 2], [3, 4]], [[5, 6]]], { dtype: "float32" });
    expect(r.tailShape).toEqual([2]);
    expect(Array.from(r.lengths())).toEqual([2, 1]);
    const { values, mask } = r.asPaddedTensor();
    expect(values.shape).toEqual([2, 2, 2]);
    expect(values.toArray()).toEqual([[[1, 2], [3, 4]], [[5, 6], [0, 0]]]);
    expect(RaggedTensor.fromPadded(values, mask).toArray()).toEqual(r.toArray());

    const padded = Tensor.from([[[1, 2], [3, 4]], [[5, 6], [7, 8]]], { dtype: "int32" }); // [2, 2, T=2]
    const mask2 = Tensor.from([[[true, false], [false, false]], [[true, true], [false, true]]], { dtype: "bool" });
    const fromMask = RaggedTensor.fromPadded(padded, mask2);
    expect(fromMask.rows).toBe(4);
    expect(fromMask.toArray()).toEqual([[1], [], [5, 6], [8]]);
  });

  it("builds from rows of tensors, checking dtype and tail shape", () => {
    const a = Tensor.from([1, 2], { dtype: "int32" });
    const b = Tensor.from([], { dtype: "int32" });
    expect(RaggedTensor.fromRows([a, b, a]).toArray()).toEqual([[1, 2], [], [1, 2]]);
    expect(asNestedTensor([], { dtype: "bool" }).rows).toBe(0);
    expect(asNestedTensor([[]], { dtype: "int64", tailShape: [3] }).row(0).shape).toEqual([0, 3]);
    const err = expectError(() => asNestedTensor([a, Tensor.from([1], { dtype: "int64" }) as unknown as Tensor<"int32">]), DTypeMismatchError, "DTYPE_MISMATCH");
    expect(err.message).toContain("int32");
    expect(err.message).toContain("int64");
    const err2 = expectError(() => asNestedTensor([Tensor.zeros("float32", [2, 3]), Tensor.zeros("float32", [1, 2])]), ShapeMismatchError, "SHAPE_MISMATCH");
    expect(err2.message).toContain("[2, 3]");
    expect(err2.message).toContain("[1, 2]");
    expectError(() => RaggedTensor.fromRows([]), InvalidArgumentError, "INVALID_ARGUMENT");
    expectError(() => RaggedTensor.fromRows([Tensor.from(1, { dtype: "float32" })]), InvalidArgumentError, "INVALID_ARGUMENT");
  });

  it("validates offsets and clones compactly", () => {
    expectError(() => new RaggedTensor("int32", new Int32Array(3), new Int32Array([0, 2, 1])), InvalidArgumentError, "INVALID_ARGUMENT");
    expectError(() => new RaggedTensor("int32", new Int32Array(3), new Int32Array([])), InvalidArgumentError, "INVALID_ARGUMENT");
    expectError(() => new RaggedTensor("int32", new Int32Array(3), new Int32Array([0, 4])), ShapeMismatchError, "SHAPE_MISMATCH");
    expectError(() => new RaggedTensor("int32", new Int32Array(4), new Int32Array([0, 2]), [3]), ShapeMismatchError, "SHAPE_MISMATCH");
    const view = new RaggedTensor("int32", new Int32Array([9, 9, 1, 2, 3, 9]), new Int32Array([2, 3, 5]));
    expect(view.toArray()).toEqual([[1], [2, 3]]);
    const c = view.clone();
    expect(Array.from(c.offsets)).toEqual([0, 1, 3]);
    expect(Array.from(c.values)).toEqual([1, 2, 3]);
  });
});
