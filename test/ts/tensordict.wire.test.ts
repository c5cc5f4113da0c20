// TensorDict ↔ wire model (zero-copy) and ↔ Arrow IPC through the bridge codec.
import { describe, expect, it } from "vitest";
import {
  BatchSizeMismatchError,
  InvalidArgumentError,
  RaggedTensor,
  ShapeMismatchError,
  Tensor,
  TensorDict,
  asNestedTensor,
  type WireBatch,
} from "../../sdk/tensordict/index.js";
import { expectError, ragged, sample, snapshot } from "./tensordict.helpers.js";

/** Every dtype and leaf kind, over a batch of `batchSize`. */
function everything(batchSize: readonly number[]): TensorDict {
  const n = batchSize.reduce((a, b) => a * b, 1);
  const seq = (k: number): number[] => Array.from({ length: k }, (_, i) => i);
  const rowsOf = (lengths: number[]): number[][] => lengths.map((len, r) => seq(len).map((j) => r * 10 + j));
  return new TensorDict(
    {
      f32: Tensor.from(seq(n * 3).map((v) => v / 4), { dtype: "float32", shape: [...batchSize, 3] }),
      f64: Tensor.from(seq(n).map((v) => v / 3), { dtype: "float64", shape: batchSize }),
      f16: Tensor.from(seq(n * 2).map((v) => v - 0.5), { dtype: "float16", shape: [...batchSize, 2] }),
      bf16: Tensor.from(seq(n * 2 * 2).map((v) => v * 1.5), { dtype: "bfloat16", shape: [...batchSize, 2, 2] }),
      i64: Tensor.from(seq(n).map((v) => BigInt(v) * 2n ** 40n - 7n), { dtype: "int64", shape: batchSize }),
      i32: Tensor.from(seq(n).map((v) => -v), { dtype: "int32", shape: batchSize }),
      i16: Tensor.from(seq(n), { dtype: "int16", shape: batchSize }),
      i8: Tensor.from(seq(n).map((v) => -v), { dtype: "int8", shape: batchSize }),
      u8: Tensor.from(seq(n), { dtype: "uint8", shape: batchSize }),
      flag: Tensor.from(seq(n).map((v) => v % 2 === 0), { dtype: "bool", shape: batchSize }),
      tokens: ragged(rowsOf(seq(n).map((r) => r % 3))),
      logits: asNestedTensor(seq(n).map((r) => Tensor.from(seq((r % 2) * 2 * 4), { dtype: "bfloat16", shape: [-1, 4] })), { dtype: "bfloat16", tailShape: [4] }),
      prompt: seq(n).map((r) => (r % 2 === 0 ? `prompt ${r} ✓ é 漢字` : "")),
      next: {
        reward: Tensor.from(seq(n).map((v) => v * 0.25), { dtype: "float32", shape: batchSize }),
        done: Tensor.from(seq(n).map((v) => v === n - 1), { dtype: "bool", shape: batchSize }),
        deeper: { ids: ragged(rowsOf(seq(n).map(() => 1))) },
      },
    },
    { batchSize },
  );
}

describe("toWire / fromWire", () => {
  it("shares every array with the wire model, both ways", () => {
    const td = sample(3);
    const wire = td.toWire();
    expect(wire.batchSize).toEqual([3]);
    expect(wire.columns.map(([k]) => k)).toEqual(["obs", "tokens", "text", "next"]);
    const [, obs] = wire.columns[0]!;
    expect(obs.kind === "dense" && obs.data === td.getTensor("obs").data).toBe(true);
    expect(obs.kind === "dense" && obs.rowShape).toEqual([2]);
    const [, tokens] = wire.columns[1]!;
    expect(tokens.kind === "ragged" && tokens.offsets === td.getRagged("tokens").offsets).toBe(true);
    const back = TensorDict.fromWire(wire);
    expect(back.getTensor("obs").data).toBe(td.getTensor("obs").data);
    expect(back.getRagged("tokens").values).toBe(td.getRagged("tokens").values);
    expect(snapshot(back)).toEqual(snapshot(td));
  });

  it("validates a wire batch", () => {
    const bad: WireBatch = { batchSize: [2], columns: [["x", { kind: "dense", dtype: "float32", rowShape: [3], data: new Float32Array(5) }]] };
    expectError(() => TensorDict.fromWire(bad), ShapeMismatchError, "SHAPE_MISMATCH");
    const rows: WireBatch = { batchSize: [2], columns: [["s", { kind: "strings", values: ["a"] }]] };
    expectError(() => TensorDict.fromWire(rows), BatchSizeMismatchError, "BATCH_SIZE_MISMATCH");
    const dup: WireBatch = { batchSize: [], columns: [["s", { kind: "strings", values: ["a"] }], ["s", { kind: "strings", values: ["b"] }]] };
    expectError(() => TensorDict.fromWire(dup), InvalidArgumentError, "INVALID_ARGUMENT");
  });
});

describe("Arrow round trip", () => {
  for (const batchSize of [[5], [2, 3], [], [0], [3, 0, 2]]) {
    it(`preserves every dtype and leaf kind with batch size [${batchSize.join(", ")}]`, () => {
      const td = everything(batchSize);
      const bytes = td.toArrow();
      expect(bytes).toBeInstanceOf(Uint8Array);
      const back = TensorDict.fromArrow(bytes);
      expect(snapshot(back)).toEqual(snapshot(td));
      for (const [key, value] of td.entries({ nested: true, leavesOnly: true })) {
        const other = back.get(key);
        if (value instanceof Tensor) expect(other instanceof Tensor ? other.data : null).toEqual(value.data);
      }
      expect(back.toArrow()).toEqual(bytes);
    });
  }

  it("encodes views (ragged offsets not starting at 0, sliced dense data) and zero-length rows", () => {
    const td = everything([6]);
    const view = td.index({ start: 2, stop: 5 });
    expect(view.getRagged("tokens").offsets[0]).toBeGreaterThan(0);
    const back = TensorDict.fromArrow(view.toArrow());
    expect(snapshot(back)).toEqual(snapshot(view));
    expect(back.getRagged("tokens").lengths()).toEqual(new Int32Array([2, 0, 1]));
    expect(view.toArrow()).toEqual(view.clone().toArrow());
  });

  it("keeps bfloat16 bits and int64 values exactly", () => {
    const bits = new Uint16Array([0x0001, 0x7f7f, 0xff80, 0x7fc0]);
    const td = new TensorDict(
      { b: new Tensor("bfloat16", [4], bits), i: Tensor.from([-(2n ** 63n), 2n ** 63n - 1n, 0n, -1n], { dtype: "int64" }) },
      { batchSize: [4] },
    );
    const back = TensorDict.fromArrow(td.toArrow());
    expect(Array.from(back.getTensor("b", "bfloat16").data)).toEqual(Array.from(bits));
    expect(back.getTensor("i", "int64").toArray()).toEqual([-(2n ** 63n), 2n ** 63n - 1n, 0n, -1n]);
  });

  it("round-trips a TensorDict built from ragged rows of an empty batch", () => {
    const td = new TensorDict({ r: RaggedTensor.fromRows([], { dtype: "float16", tailShape: [2] }), s: [] }, { batchSize: [0] });
    const back = TensorDict.fromArrow(td.toArrow());
    expect(back.getRagged("r").tailShape).toEqual([2]);
    expect(back.getRagged("r").dtype).toBe("float16");
    expect(back.numel()).toBe(0);
  });
});
