// Split payloads (docs/protocol.md, "Split payloads"): encodeBatchParts cuts the canonical stream so that large
// tensors are sent from the caller's memory, decodeBatch reads a stream in parts in place, and any cut that keeps
// each message and each buffer within one part is read the same; other cuts are refused with WireFormatError.
import { readFileSync } from "node:fs";
import { join } from "node:path";

import { Message } from "apache-arrow";
import { describe, expect, it } from "vitest";

import { WireFormatError } from "../../bridge/errors.js";
import {
  SPLIT_MIN_BYTES,
  decodeBatch,
  encodeBatch,
  encodeBatchParts,
  type WireBatch,
  type WireDense,
} from "../../bridge/wire/index.js";
import { GOLDEN_DIR, goldenCases } from "../golden/generate.js";

function concat(parts: readonly Uint8Array[]): Uint8Array {
  return new Uint8Array(Buffer.concat(parts));
}

/** Byte equality (toEqual walks large arrays element by element: seconds for a few hundred KiB). */
function expectSameBytes(a: ArrayBufferView, b: ArrayBufferView, what?: string): void {
  const bytes = (v: ArrayBufferView): Buffer => Buffer.from(v.buffer, v.byteOffset, v.byteLength);
  expect(bytes(a).equals(bytes(b)), what).toBe(true);
}

/** A copy of each part in fresh memory at offset 0, as received ZeroMQ frames are. */
function received(parts: readonly Uint8Array[]): Uint8Array[] {
  return parts.map((p) => {
    const copy = new Uint8Array(p.byteLength);
    copy.set(p);
    return copy;
  });
}

/** Every offset at which a writer may cut `stream`: the start and the padded end of each record batch buffer. */
function legalCuts(stream: Uint8Array): number[] {
  const view = new DataView(stream.buffer, stream.byteOffset, stream.byteLength);
  const cuts = new Set<number>();
  let pos = 0;
  for (;;) {
    const length = view.getInt32(pos + 4, true);
    if (length === 0) break;
    const message = Message.decode(stream.subarray(pos + 8, pos + 8 + length));
    const bodyStart = pos + 8 + length;
    if (message.isRecordBatch()) {
      for (const { offset, length: n } of message.header().buffers) {
        cuts.add(bodyStart + offset);
        cuts.add(bodyStart + offset + Math.ceil(n / 8) * 8);
      }
    }
    cuts.add(bodyStart + message.bodyLength);
    pos = bodyStart + message.bodyLength;
  }
  return [...cuts].filter((c) => c > 0 && c < stream.byteLength).sort((a, b) => a - b);
}

function cutAt(stream: Uint8Array, cuts: readonly number[]): Uint8Array[] {
  const bounds = [0, ...cuts, stream.byteLength];
  return received(bounds.slice(1).map((end, i) => stream.subarray(bounds[i], end)));
}

function wireError(fn: () => unknown): WireFormatError {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(WireFormatError);
    return err as WireFormatError;
  }
  throw new Error("expected a WireFormatError");
}

/** A batch with a large float32 column inside a bigger buffer (byteOffset 8), a small one, strings and ragged. */
function mixedBatch(rows: number): { batch: WireBatch; big: Float32Array } {
  const backing = new Float32Array(rows * 256 + 2);
  const big = backing.subarray(2);
  for (let i = 0; i < big.length; i++) big[i] = i * 0.25;
  const offsets = Int32Array.from({ length: rows + 1 }, (_, i) => i * 3);
  return {
    big,
    batch: {
      batchSize: [rows],
      columns: [
        ["big", { kind: "dense", dtype: "float32", rowShape: [256], data: big }],
        ["small", { kind: "dense", dtype: "int32", rowShape: [], data: Int32Array.from({ length: rows }, (_, i) => i) }],
        ["text", { kind: "strings", values: Array.from({ length: rows }, (_, i) => `row ${i} ✓`) }],
        ["ragged", { kind: "ragged", dtype: "float64", tailShape: [], values: new Float64Array(rows * 3).fill(1.5), offsets }],
      ],
    },
  };
}

describe("encodeBatchParts", () => {
  it("is the encodeBatch stream cut at multiples of 8, each large buffer a view of the caller's array", () => {
    const { batch, big } = mixedBatch(512); // 512 KiB of float32: one part of its own
    const parts = encodeBatchParts(batch);
    expectSameBytes(concat(parts), encodeBatch(batch));
    expect(parts.length).toBe(3);
    const own = parts[1]!;
    expect(own.buffer).toBe(big.buffer);
    expect(own.byteOffset).toBe(big.byteOffset);
    expect(own.byteLength).toBe(big.byteLength);
    let at = 0;
    for (const part of parts) {
      expect(at % 8).toBe(0);
      at += part.byteLength;
    }
  });

  it("gives one part when no buffer reaches SPLIT_MIN_BYTES, and for every golden case", () => {
    const small: WireBatch = {
      batchSize: [2],
      columns: [["x", { kind: "dense", dtype: "float32", rowShape: [SPLIT_MIN_BYTES / 8 - 1], data: new Float32Array(SPLIT_MIN_BYTES / 4 - 2) }]],
    };
    expect(encodeBatchParts(small)).toHaveLength(1);
    for (const c of goldenCases()) {
      const parts = encodeBatchParts(c.batch);
      expect(parts, c.name).toHaveLength(1);
      expect(Buffer.from(parts[0]!).equals(readFileSync(join(GOLDEN_DIR, `${c.name}.arrows`))), c.name).toBe(true);
    }
  });

  it("leaves a large buffer whose length is not a multiple of 8 in a written part (its padding must follow it)", () => {
    const data = new Uint8Array(SPLIT_MIN_BYTES + 3).fill(9);
    const batch: WireBatch = { batchSize: [1], columns: [["b", { kind: "dense", dtype: "uint8", rowShape: [data.length], data }]] };
    const parts = encodeBatchParts(batch);
    expect(parts).toHaveLength(1);
    expect(parts[0]!.buffer).not.toBe(data.buffer);
  });
});

describe("decodeBatch of parts", () => {
  it("decodes the parts like the whole stream, its large column a view of the received part", () => {
    const { batch, big } = mixedBatch(300);
    const parts = received(encodeBatchParts(batch));
    const decoded = decodeBatch(parts);
    expectSameBytes(encodeBatch(decoded), encodeBatch(batch));
    const column = decoded.columns[0]![1] as WireDense;
    expectSameBytes(column.data, big);
    expect(column.data.buffer).toBe(parts[1]!.buffer);
  });

  it("reads every golden stream cut at every legal point, and at each legal point alone", () => {
    for (const c of goldenCases()) {
      const stream = encodeBatch(c.batch);
      const expected = encodeBatch(decodeBatch(stream));
      const cuts = legalCuts(stream);
      expectSameBytes(encodeBatch(decodeBatch(cutAt(stream, cuts))), expected, c.name);
      for (const cut of cuts) expectSameBytes(encodeBatch(decodeBatch(cutAt(stream, [cut]))), expected, `${c.name} @${cut}`);
    }
  });

  it("copies a part that does not start 8-byte aligned, and still decodes it", () => {
    const { batch } = mixedBatch(300);
    const parts = received(encodeBatchParts(batch));
    const shifted = new Uint8Array(parts[1]!.byteLength + 4).subarray(4);
    shifted.set(parts[1]!);
    const decoded = decodeBatch([parts[0]!, shifted, parts[2]!]);
    expectSameBytes(encodeBatch(decoded), encodeBatch(batch));
  });

  it("refuses a buffer, a message header or metadata that spans two parts, empty parts and no parts", () => {
    const { batch } = mixedBatch(300);
    const stream = encodeBatch(batch);
    const bigPart = encodeBatchParts(batch)[0]!.byteLength;
    expect(wireError(() => decodeBatch(cutAt(stream, [bigPart + 1024]))).message).toMatch(
      /invalid split payload: buffer \d+ of record batch 1 .* spans parts 0 and 1/,
    );
    expect(wireError(() => decodeBatch(cutAt(stream, [4]))).message).toMatch(/the header of message 0 .* spans parts 0 and 1/);
    expect(wireError(() => decodeBatch(cutAt(stream, [16]))).message).toMatch(/the metadata of message 0 .* spans parts 0 and 1/);
    expect(wireError(() => decodeBatch([stream.subarray(0, 8), new Uint8Array(0), stream.subarray(8)])).message).toMatch(
      /part 1 is empty/,
    );
    expect(wireError(() => decodeBatch([])).message).toMatch(/no parts/);
  });

  it("reads a layout's metadata once by its bytes, yet refuses a tampered copy of it every time", () => {
    const { batch } = mixedBatch(300);
    const expected = encodeBatch(batch);
    const parts = received(encodeBatchParts(batch));
    expectSameBytes(encodeBatch(decodeBatch(parts)), expected);
    const head = parts[0]!;
    const saved = head.slice();
    head.set([0xff, 0xff, 0xff, 0x7f], 8); // the schema flatbuffer's root offset, now far past its end
    for (let i = 0; i < 2; i++) {
      expect(wireError(() => decodeBatch(parts)).message).toMatch(/cannot read message 0 at byte 0/);
    }
    head.set(saved);
    expectSameBytes(encodeBatch(decodeBatch(parts)), expected);
    // The same layout with another batch size is another schema message, built and read anew.
    const fewer = mixedBatch(299).batch;
    expect(decodeBatch(received(encodeBatchParts(fewer))).batchSize).toEqual([299]);
  });

  it("refuses a truncated split stream with the same error as a truncated whole stream", () => {
    const { batch } = mixedBatch(300);
    const parts = received(encodeBatchParts(batch));
    const short = [...parts.slice(0, -1), parts.at(-1)!.subarray(0, 4)];
    expect(wireError(() => decodeBatch(short)).message).toMatch(/truncated Arrow stream/);
  });

  it("throws only WireFormatError (or decodes) when bytes of a split stream's metadata or small buffers are corrupted", () => {
    const { batch } = mixedBatch(300);
    const stream = encodeBatch(batch);
    const cuts = legalCuts(stream);
    let seed = 7;
    const random = (n: number): number => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31;
      return seed % n;
    };
    for (let i = 0; i < 300; i++) {
      const parts = cutAt(stream, cuts);
      const head = parts[0]!;
      head[random(head.byteLength)] = random(256);
      try {
        decodeBatch(parts);
      } catch (err) {
        expect(err).toBeInstanceOf(WireFormatError);
      }
    }
  });
});
