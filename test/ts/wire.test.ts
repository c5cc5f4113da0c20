// The Arrow IPC codec of TensorDict payloads (bridge/wire): golden vectors, zero-copy decoding, random round trips,
// streams from another writer, and rejection of malformed input with WireFormatError.
import { readFileSync } from "node:fs";
import { join } from "node:path";

import {
  Field,
  Float32,
  Int32,
  RecordBatch,
  Schema,
  Struct,
  Table,
  Bool,
  makeData,
  tableFromIPC,
  tableToIPC,
} from "apache-arrow";
import { describe, expect, it } from "vitest";

import { WireFormatError } from "../../bridge/errors.js";
import {
  DTYPES,
  decodeBatch,
  encodeBatch,
  tensorFromBytes,
  tensorToBytes,
  typedArrayConstructor,
  type AnyTypedArray,
  type DType,
  type WireBatch,
  type WireChatMessage,
  type WireColumn,
  type WireColumns,
} from "../../bridge/wire/index.js";
import { GOLDEN_DIR, columnsJson, goldenCases, type CaseJson } from "../golden/generate.js";

const casesJson = JSON.parse(readFileSync(join(GOLDEN_DIR, "cases.json"), "utf8")) as { cases: CaseJson[] };

function golden(name: string): Uint8Array {
  const buf = readFileSync(join(GOLDEN_DIR, `${name}.arrows`));
  // A fresh, exactly-sized Uint8Array at offset 0 (as a received ZeroMQ frame is).
  const bytes = new Uint8Array(buf.byteLength);
  bytes.set(buf);
  return bytes;
}

function expectWireError(fn: () => unknown, pattern?: RegExp): WireFormatError {
  let caught: unknown;
  try {
    fn();
  } catch (err) {
    caught = err;
  }
  expect(caught, "expected a WireFormatError").toBeInstanceOf(WireFormatError);
  const err = caught as WireFormatError;
  expect(err.code).toBe("WIRE_FORMAT");
  if (pattern !== undefined) expect(err.message).toMatch(pattern);
  return err;
}

/** Every TypedArray of a decoded batch. */
function arraysOf(columns: WireColumns): AnyTypedArray[] {
  return columns.flatMap(([, c]): AnyTypedArray[] => {
    switch (c.kind) {
      case "dense":
        return [c.data];
      case "ragged":
        return [c.values, c.offsets];
      case "strings":
      case "history":
        return [];
      case "struct":
        return arraysOf(c.columns);
    }
  });
}

// ---------------------------------------------------------------------------------------------------------------

describe("golden files", () => {
  it("cover every case the generator defines", () => {
    expect(casesJson.cases.map((c) => c.name)).toEqual(goldenCases().map((c) => c.name));
  });

  for (const c of casesJson.cases) {
    describe(c.name, () => {
      const bytes = golden(c.name);

      it("decodes to the content in cases.json", () => {
        const batch = decodeBatch(bytes);
        expect(batch.batchSize).toEqual(c.batchSize);
        expect(columnsJson(batch)).toEqual(c.columns);
      });

      it("re-encodes byte-for-byte", () => {
        expect(Buffer.from(encodeBatch(decodeBatch(bytes))).equals(Buffer.from(bytes))).toBe(true);
      });

      it("is what the encoder writes for the generator's batch", () => {
        const spec = goldenCases().find((g) => g.name === c.name)!;
        expect(Buffer.from(encodeBatch(spec.batch)).equals(Buffer.from(bytes))).toBe(true);
      });

      it("reads with apache-arrow's tableFromIPC, extension metadata included", () => {
        const table = tableFromIPC(bytes);
        expect(table.numRows).toBe(c.batchSize.reduce((a, b) => a * b, 1));
        expect(table.schema.metadata.get("posttrain.version")).toBe("1");
        expect(table.schema.metadata.get("posttrain.batch_size")).toBe(JSON.stringify(c.batchSize));
        for (const field of table.schema.fields) {
          if (field.metadata.has("posttrain.kind")) {
            expect(field.metadata.get("posttrain.kind")).toBe("history");
            expect(String(field.type)).toBe(
              "List<Struct<{role:Utf8, content:Utf8, name:Utf8, tool_calls:Utf8, tool_responses:List<Utf8>, is_complete:Uint8}>>",
            );
          }
          if (String(field.type).startsWith("FixedSizeList")) {
            expect(field.metadata.get("ARROW:extension:name")).toBe("arrow.fixed_shape_tensor");
            expect(field.metadata.get("ARROW:extension:metadata")).toMatch(/^\{"shape":\[[0-9,]+\]\}$/);
          }
        }
      });
    });
  }

  it("every body buffer starts 8-byte aligned and the stream ends with the end-of-stream marker", () => {
    for (const c of casesJson.cases) {
      const bytes = golden(c.name);
      expect(bytes.byteLength % 8).toBe(0);
      expect(Array.from(bytes.subarray(bytes.byteLength - 8))).toEqual([255, 255, 255, 255, 0, 0, 0, 0]);
      for (const array of arraysOf(decodeBatch(bytes).columns)) {
        if (array.byteLength > 0) expect(array.byteOffset % 8).toBe(0);
      }
    }
  });
});

// ---------------------------------------------------------------------------------------------------------------

describe("zero-copy decoding", () => {
  it("returns views into the input when it is aligned", () => {
    for (const name of ["dense_scalar", "dense_shaped", "ragged", "nested", "batch_2d"]) {
      const bytes = golden(name);
      const arrays = arraysOf(decodeBatch(bytes).columns).filter((a) => a.byteLength > 0);
      expect(arrays.length).toBeGreaterThan(0);
      for (const a of arrays) {
        expect(a.buffer).toBe(bytes.buffer);
        expect(a.byteOffset).toBeGreaterThanOrEqual(bytes.byteOffset);
        expect(a.byteOffset + a.byteLength).toBeLessThanOrEqual(bytes.byteOffset + bytes.byteLength);
      }
    }
  });

  it("views a large batch without copying, also inside a bigger buffer at an 8-aligned offset", () => {
    const rows = 1 << 16;
    const data = Float32Array.from({ length: rows * 4 }, (_, i) => i);
    const encoded = encodeBatch({ batchSize: [rows], columns: [["x", { kind: "dense", dtype: "float32", rowShape: [4], data }]] });
    const host = new Uint8Array(encoded.byteLength + 64);
    host.set(encoded, 16);
    const bytes = host.subarray(16, 16 + encoded.byteLength);
    const x = decodeBatch(bytes).columns[0]![1];
    expect(x.kind).toBe("dense");
    if (x.kind !== "dense") return;
    expect(x.data.buffer).toBe(host.buffer);
    expect(x.data).toEqual(data);
    // A write through the view is visible in the input: proof that nothing was copied.
    (x.data as Float32Array)[0] = 123;
    expect(new Float32Array(host.buffer, x.data.byteOffset, 1)[0]).toBe(123);
  });

  it("copies an unaligned input once and still decodes it", () => {
    const encoded = golden("dense_scalar");
    const host = new Uint8Array(encoded.byteLength + 3);
    host.set(encoded, 3);
    const bytes = host.subarray(3);
    const batch = decodeBatch(bytes);
    expect(columnsJson(batch)).toEqual(casesJson.cases.find((c) => c.name === "dense_scalar")!.columns);
    for (const a of arraysOf(batch.columns)) expect(a.buffer).not.toBe(host.buffer);
  });
});

// ---------------------------------------------------------------------------------------------------------------

/** A small deterministic PRNG (mulberry32). */
function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function randomArray(rand: () => number, dtype: DType, n: number): AnyTypedArray {
  const ctor = typedArrayConstructor(dtype);
  const out = new ctor(n);
  const bytes = new Uint8Array(out.buffer);
  if (dtype === "bool") {
    for (let i = 0; i < n; i++) bytes[i] = rand() < 0.5 ? 1 : 0;
  } else if (dtype === "float32" || dtype === "float64") {
    for (let i = 0; i < n; i++) (out as Float32Array | Float64Array)[i] = (rand() - 0.5) * 1e6;
  } else {
    for (let i = 0; i < bytes.length; i++) bytes[i] = Math.floor(rand() * 256);
  }
  return out;
}

function randomShape(rand: () => number, maxDims: number): number[] {
  const dims = Math.floor(rand() * (maxDims + 1));
  return Array.from({ length: dims }, () => 1 + Math.floor(rand() * 3));
}

const WORDS = ["", "a", "héllo", "日本", "😀", "tool_call", "\u0000", "\uFEFFx", "long ".repeat(20)];

function randomMessage(rand: () => number): WireChatMessage {
  const word = () => WORDS[Math.floor(rand() * WORDS.length)]!;
  const m: { -readonly [K in keyof WireChatMessage]: WireChatMessage[K] } = {
    role: ["system", "user", "assistant", "tool"][Math.floor(rand() * 4)]!,
    content: word(),
  };
  // Optional values: absent, or given (explicit empty defaults included, which decode as absent).
  if (rand() < 0.3) m.name = word();
  if (rand() < 0.3) m.toolCalls = rand() < 0.2 ? "" : JSON.stringify([{ id: word(), arguments: { text: word(), n: 1 } }]);
  if (rand() < 0.3) m.toolResponses = Array.from({ length: Math.floor(rand() * 3) }, word);
  if (rand() < 0.3) m.isComplete = rand() < 0.5;
  return m;
}

function randomColumns(rand: () => number, rows: number, depth: number): WireColumns {
  const count = 1 + Math.floor(rand() * 5);
  const columns: [string, WireColumn][] = [];
  for (let k = 0; k < count; k++) {
    const name = `c${k}${rand() < 0.2 ? "é" : ""}`;
    const kind = rand();
    const dtype = DTYPES[Math.floor(rand() * DTYPES.length)]!;
    if (kind < 0.35) {
      const rowShape = randomShape(rand, 3);
      columns.push([name, { kind: "dense", dtype, rowShape, data: randomArray(rand, dtype, rows * rowShape.reduce((a, b) => a * b, 1)) }]);
    } else if (kind < 0.65) {
      const tailShape = randomShape(rand, 2);
      const per = tailShape.reduce((a, b) => a * b, 1);
      const start = Math.floor(rand() * 3);
      const offsets = new Int32Array(rows + 1);
      offsets[0] = start;
      for (let i = 0; i < rows; i++) offsets[i + 1] = offsets[i]! + Math.floor(rand() * 4);
      const extra = Math.floor(rand() * 2);
      const values = randomArray(rand, dtype, (offsets[rows]! + extra) * per);
      columns.push([name, { kind: "ragged", dtype, tailShape, values, offsets }]);
    } else if (kind < 0.75) {
      columns.push([name, { kind: "strings", values: Array.from({ length: rows }, () => WORDS[Math.floor(rand() * WORDS.length)]!) }]);
    } else if (kind < 0.85 || depth >= 2) {
      const history = Array.from({ length: rows }, () => Array.from({ length: Math.floor(rand() * 4) }, () => randomMessage(rand)));
      columns.push([name, { kind: "history", rows: history }]);
    } else {
      columns.push([name, { kind: "struct", columns: randomColumns(rand, rows, depth + 1) }]);
    }
  }
  return columns;
}

describe("random round trips", () => {
  it("decode(encode(b)) has b's content and re-encodes to the same bytes", () => {
    for (let seed = 1; seed <= 200; seed++) {
      const rand = rng(seed);
      const batchSize = randomShape(rand, 2).map((d) => (rand() < 0.1 ? 0 : d));
      const rows = batchSize.reduce((a, b) => a * b, 1);
      const batch: WireBatch = { batchSize, columns: randomColumns(rand, rows, 0) };
      const bytes = encodeBatch(batch);
      const decoded = decodeBatch(bytes);
      expect(decoded.batchSize, `seed ${seed}`).toEqual(batchSize);
      expect(columnsJson(decoded), `seed ${seed}`).toEqual(columnsJson(batch));
      expect(Buffer.from(encodeBatch(decoded)).equals(Buffer.from(bytes)), `seed ${seed}`).toBe(true);
    }
  });
});

// ---------------------------------------------------------------------------------------------------------------

function posttrainSchema(fields: Field[], batchSize: string): Schema {
  return new Schema(fields, new Map([["posttrain.version", "1"], ["posttrain.batch_size", batchSize]]));
}

function recordBatch(schema: Schema, rows: number, children: ReturnType<typeof makeData>[]): RecordBatch {
  const type = new Struct(schema.fields);
  return new RecordBatch(schema, makeData({ type, length: rows, nullCount: 0, children }));
}

function float32Data(values: number[]): ReturnType<typeof makeData> {
  return makeData({ type: new Float32(), length: values.length, nullCount: 0, data: Float32Array.from(values) });
}

describe("streams from another writer (apache-arrow's RecordBatchStreamWriter)", () => {
  const dtypeMeta = new Map([["posttrain.dtype", "float32"]]);

  it("concatenates several record batches", () => {
    const x = new Field("x", new Float32(), false, dtypeMeta);
    const t = new Field("t", new Int32(), false, new Map([["posttrain.dtype", "int32"]]));
    const schema = posttrainSchema([x, t], "[5]");
    const int32 = (v: number[]) => makeData({ type: new Int32(), length: v.length, nullCount: 0, data: Int32Array.from(v) });
    const bytes = tableToIPC(
      new Table([recordBatch(schema, 2, [float32Data([1, 2]), int32([1, 2])]), recordBatch(schema, 3, [float32Data([3, 4, 5]), int32([3, 4, 5])])]),
      "stream",
    );
    const batch = decodeBatch(bytes);
    expect(batch.batchSize).toEqual([5]);
    expect(columnsJson(batch)).toEqual([
      { name: "x", kind: "dense", dtype: "float32", rowShape: [], values: [1, 2, 3, 4, 5] },
      { name: "t", kind: "dense", dtype: "int32", rowShape: [], values: [1, 2, 3, 4, 5] },
    ]);
  });

  it("concatenates several record batches of every column kind", () => {
    // Splice the record batch messages of two canonical streams behind one schema.
    const parts = [goldenCases().find((c) => c.name === "batch_2d")!.batch, goldenCases().find((c) => c.name === "batch_2d")!.batch];
    const whole = encodeBatch({ batchSize: [2, 6], columns: concatForTest(parts.map((p) => p.columns)) });
    const schemaEnd = (b: Uint8Array) => 8 + new DataView(b.buffer, b.byteOffset).getInt32(4, true);
    const pieces = parts.map((p) => encodeBatch(p));
    const spliced = Buffer.concat([
      whole.subarray(0, schemaEnd(whole)),
      ...pieces.map((p) => p.subarray(schemaEnd(p), p.byteLength - 8)),
      whole.subarray(whole.byteLength - 8),
    ]);
    const decoded = decodeBatch(new Uint8Array(spliced));
    expect(decoded.batchSize).toEqual([2, 6]);
    expect(columnsJson(decoded)).toEqual(columnsJson(decodeBatch(whole)));
  });

  it("concatenates several record batches of history columns", () => {
    const part = goldenCases().find((c) => c.name === "history")!.batch;
    const whole = encodeBatch({ batchSize: [8], columns: concatForTest([part.columns, part.columns]) });
    const schemaEnd = (b: Uint8Array) => 8 + new DataView(b.buffer, b.byteOffset).getInt32(4, true);
    const piece = encodeBatch(part);
    const spliced = Buffer.concat([
      whole.subarray(0, schemaEnd(whole)),
      piece.subarray(schemaEnd(piece), piece.byteLength - 8),
      piece.subarray(schemaEnd(piece), piece.byteLength - 8),
      whole.subarray(whole.byteLength - 8),
    ]);
    const decoded = decodeBatch(new Uint8Array(spliced));
    expect(columnsJson(decoded)).toEqual(columnsJson(decodeBatch(whole)));
    expect(Buffer.from(encodeBatch(decoded)).equals(Buffer.from(whole))).toBe(true);
  });

  it("accepts a stream without record batches only for an empty batch", () => {
    const schemaOnly = (bytes: Uint8Array): Uint8Array => {
      const schemaEnd = 8 + new DataView(bytes.buffer, bytes.byteOffset).getInt32(4, true);
      const out = new Uint8Array(schemaEnd + 8);
      out.set(bytes.subarray(0, schemaEnd));
      out.set(bytes.subarray(bytes.byteLength - 8), schemaEnd);
      return out;
    };
    const empty = decodeBatch(schemaOnly(golden("empty")));
    expect(empty.batchSize).toEqual([0]);
    expect(columnsJson(empty)).toEqual(casesJson.cases.find((c) => c.name === "empty")!.columns);
    expectWireError(() => decodeBatch(schemaOnly(golden("batch_2d"))), /means 6 rows, but the record batches hold 0/);
  });

  it("rejects nulls", () => {
    const x = new Field("x", new Float32(), true, dtypeMeta);
    const data = makeData({ type: new Float32(), length: 2, nullCount: 1, nullBitmap: Uint8Array.of(0b01), data: Float32Array.of(1, 2) });
    const bytes = tableToIPC(new Table([recordBatch(posttrainSchema([x], "[2]"), 2, [data])]), "stream");
    expectWireError(() => decodeBatch(bytes), /column "x".*nulls/);
  });

  it("rejects an unsupported Arrow type", () => {
    const f = new Field("flag", new Bool(), false);
    const data = makeData({ type: new Bool(), length: 2, nullCount: 0, data: Uint8Array.of(0b01) });
    const bytes = tableToIPC(new Table([recordBatch(posttrainSchema([f], "[2]"), 2, [data])]), "stream");
    expectWireError(() => decodeBatch(bytes), /column "flag": unsupported Arrow type Bool/);
  });

  it("rejects a stream without posttrain metadata, and the Arrow file format", () => {
    const x = new Field("x", new Float32(), false, dtypeMeta);
    const table = new Table([new RecordBatch(new Schema([x]), makeData({ type: new Struct([x]), length: 2, nullCount: 0, children: [float32Data([1, 2])] }))]);
    expectWireError(() => decodeBatch(tableToIPC(table, "stream")), /no "posttrain.version"/);
    expectWireError(() => decodeBatch(tableToIPC(table, "file")), /not an Arrow IPC stream/);
  });
});

function concatForTest(parts: WireColumns[]): WireColumns {
  // Column-wise concatenation of same-schema batches (test helper; batch_2d has no ragged offsets ≠ 0).
  const first = parts[0]!;
  return first.map(([name, c], i): readonly [string, WireColumn] => {
    const cols = parts.map((p) => p[i]![1]);
    switch (c.kind) {
      case "dense": {
        const ctor = typedArrayConstructor(c.dtype);
        const datas = cols.map((x) => (x as typeof c).data);
        const out = new ctor(datas.reduce((n, d) => n + d.length, 0));
        let at = 0;
        for (const d of datas) {
          new Uint8Array(out.buffer).set(new Uint8Array(d.buffer, d.byteOffset, d.byteLength), at * d.BYTES_PER_ELEMENT);
          at += d.length;
        }
        return [name, { ...c, data: out }];
      }
      case "ragged": {
        const rs = cols.map((x) => x as typeof c);
        const offsets: number[] = [0];
        const values: number[] = [];
        for (const r of rs) {
          const base = offsets[offsets.length - 1]!;
          for (let k = 1; k < r.offsets.length; k++) offsets.push(base + r.offsets[k]!);
          values.push(...Array.from(r.values as ArrayLike<number>));
        }
        const ctor = typedArrayConstructor(c.dtype);
        const v = new ctor(values.length);
        values.forEach((x, k) => ((v as Uint8Array)[k] = x));
        return [name, { ...c, offsets: Int32Array.from(offsets), values: v }];
      }
      case "strings":
        return [name, { kind: "strings", values: cols.flatMap((x) => (x as typeof c).values) }];
      case "history":
        return [name, { kind: "history", rows: cols.flatMap((x) => (x as typeof c).rows) }];
      case "struct":
        return [name, { kind: "struct", columns: concatForTest(cols.map((x) => (x as typeof c).columns)) }];
    }
  });
}

// ---------------------------------------------------------------------------------------------------------------

/** Replaces the first occurrence of `from` (ASCII) with `to` (same length) in a copy of `bytes`. */
function patch(bytes: Uint8Array, from: string, to: string): Uint8Array {
  expect(to.length).toBe(from.length);
  const hay = Buffer.from(bytes);
  const at = hay.indexOf(from, 0, "latin1");
  expect(at, `"${from}" not found`).toBeGreaterThanOrEqual(0);
  hay.write(to, at, "latin1");
  return new Uint8Array(hay.buffer, hay.byteOffset, hay.byteLength).slice();
}

describe("malformed input to decodeBatch", () => {
  it("throws WireFormatError for every truncation of a stream", () => {
    for (const name of ["nested", "strings", "empty", "history"]) {
      const bytes = golden(name);
      for (let n = 0; n < bytes.byteLength; n++) {
        expectWireError(() => decodeBatch(bytes.slice(0, n)), /truncated|invalid|not an Arrow/);
      }
    }
  });

  it("names the truncation", () => {
    const bytes = golden("nested");
    expectWireError(() => decodeBatch(bytes.slice(0, 0)), /empty payload/);
    expectWireError(() => decodeBatch(bytes.slice(0, 100)), /truncated Arrow stream: message 0 .* declares \d+ bytes of metadata/);
    expectWireError(() => decodeBatch(bytes.slice(0, bytes.byteLength - 16)), /truncated Arrow stream: message 1 .* body of \d+ bytes/);
    expectWireError(() => decodeBatch(bytes.slice(0, bytes.byteLength - 8)), /truncated Arrow stream: expected a message header/);
  });

  it("throws WireFormatError for random bytes", () => {
    const rand = rng(7);
    for (let k = 0; k < 200; k++) {
      const n = Math.floor(rand() * 600);
      const bytes = Uint8Array.from({ length: n }, () => Math.floor(rand() * 256));
      if (k % 2 === 0 && n >= 8) bytes.set([255, 255, 255, 255], 0); // get past the first check sometimes
      expectWireError(() => decodeBatch(bytes));
    }
  });

  it("throws only WireFormatError (or decodes) when bytes of a valid stream are corrupted", () => {
    const rand = rng(11);
    for (const name of ["nested", "ragged", "strings", "dense_shaped", "history"]) {
      const original = golden(name);
      for (let k = 0; k < 300; k++) {
        const bytes = original.slice();
        const flips = 1 + Math.floor(rand() * 3);
        for (let f = 0; f < flips; f++) bytes[Math.floor(rand() * bytes.byteLength)] = Math.floor(rand() * 256);
        try {
          decodeBatch(bytes);
        } catch (err) {
          expect(err, String(err)).toBeInstanceOf(WireFormatError);
        }
      }
    }
  });

  it("rejects trailing bytes and a stream that is not a Uint8Array", () => {
    const bytes = golden("strings");
    const longer = new Uint8Array(bytes.byteLength + 8);
    longer.set(bytes);
    expectWireError(() => decodeBatch(longer), /8 unexpected bytes after the end-of-stream marker/);
    expectWireError(() => decodeBatch("abc" as unknown as Uint8Array), /Uint8Array/);
  });

  it("rejects missing or invalid metadata, naming the column", () => {
    const b2d = golden("batch_2d");
    expectWireError(() => decodeBatch(patch(b2d, "posttrain.version", "posttrain.versioX")), /no "posttrain.version"/);
    expectWireError(() => decodeBatch(patch(b2d, "posttrain.batch_size", "posttrain.batch_sizX")), /no "posttrain.batch_size"/);
    expectWireError(() => decodeBatch(patch(b2d, "[2,3]", "[2,4]")), /batch size \[2,4\] means 8 rows, but the record batches hold 6/);
    expectWireError(() => decodeBatch(patch(b2d, "[2,3]", "[2,x]")), /"posttrain.batch_size" must be a JSON array/);
    const scalar = golden("dense_scalar");
    expectWireError(() => decodeBatch(patch(scalar, "float32", "float33")), /column "float\w*": unknown "posttrain.dtype" "float33"/);
    expectWireError(() => decodeBatch(patch(scalar, "float32", "float64")), /column "float\w*": dtype float64 must be stored as Float64, found Float32/);
    expectWireError(() => decodeBatch(patch(scalar, "posttrain.dtype", "posttrain.dtypX")), /column "\w+": the field has no "posttrain.dtype" metadata/);
    const shaped = golden("dense_shaped");
    expectWireError(() => decodeBatch(patch(shaped, '{"shape":[2,3]}', '{"shape":[3,3]}')), /column "\w+_2x3": the row shape \[3,3\] has 9 elements, but the list size is 6/);
    expectWireError(() => decodeBatch(patch(shaped, "arrow.fixed_shape_tensor", "arrow.fixed_shape_tensoX")), /column "\w+": a FixedSizeList column must carry/);
    const ragged = golden("ragged");
    expectWireError(() => decodeBatch(patch(ragged, "[-1]", "[-2]")), /column "\w+": "posttrain.shape" must be \[-1, ...non-negative integers\], found "\[-2\]"/);
    expectWireError(() => decodeBatch(patch(ragged, "[-1,2]", "[-1,3]")), /column "pairs": "posttrain.shape" \[-1,3\] does not match the item list size 2/);
    const nested = golden("nested");
    expectWireError(() => decodeBatch(patch(nested, "float64", "float65")), /column "next\/obs\/x": unknown "posttrain.dtype"/);
  });

  it("rejects invalid history columns, naming the row, message and field", () => {
    const rows: WireChatMessage[][] = [
      [{ role: "user", content: "QQQ", isComplete: false }],
      [{ role: "assistant", content: "", toolCalls: '["tc"]' }],
    ];
    const bytes = encodeBatch({ batchSize: [2], columns: [["h", { kind: "history", rows }]] });
    expect(decodeBatch(bytes).columns[0]![1]).toEqual({ kind: "history", rows });
    expectWireError(() => decodeBatch(patch(bytes, "history", "historX")), /column "h": unknown "posttrain.kind" "historX"/);
    expectWireError(
      () => decodeBatch(patch(bytes, "posttrain.kind", "posttrain.kinX")),
      /column "h": a List of Struct column must carry "posttrain.kind" = "history"/,
    );
    expectWireError(
      () => decodeBatch(patch(bytes, "tool_calls", "tool_callX")),
      /column "h": a "posttrain.kind" = "history" column must be List<Struct<role: Utf8, content: Utf8, name: Utf8, tool_calls: Utf8, tool_responses: List<Utf8>, is_complete: Uint8>>, found List<Struct<.*tool_callX/,
    );
    expectWireError(() => decodeBatch(patch(bytes, "bool", "boox")), /column "h": the is_complete field must carry "posttrain.dtype" = "bool", found "boox"/);
    expectWireError(() => decodeBatch(patch(bytes, '["tc"]', '["tc"}')), /column "h": row 1, message 0: tool_calls must be the JSON text of an array, found "\[\\"tc\\"}"/);
    expectWireError(() => decodeBatch(patch(bytes, "QQQ", "\xffQQ")), /column "h": row 0, message 0: content is not valid UTF-8/);
    // is_complete is the last body buffer: 2 bytes, padded to 8, just before the end-of-stream marker.
    const flag = bytes.slice();
    flag[flag.byteLength - 16] = 2;
    expectWireError(() => decodeBatch(flag), /column "h": row 0, message 0: is_complete is 2, expected 0 or 1/);
  });

  it("rejects invalid offsets in the body", () => {
    // ragged.arrows: "tokens" offsets [0,3,3,5,6]: make them decrease.
    const bytes = golden("ragged");
    const batch = decodeBatch(bytes);
    const tokens = batch.columns[0]![1];
    if (tokens.kind !== "ragged") throw new Error("unexpected");
    tokens.offsets[2] = 1; // writes through the zero-copy view into `bytes`
    expectWireError(() => decodeBatch(bytes), /column "tokens": offsets must be non-decreasing/);
    tokens.offsets[2] = 3;
    tokens.offsets[4] = 1000;
    expectWireError(() => decodeBatch(bytes), /column "tokens": the last offset is 1000, but the values hold 6/);
  });
});

// ---------------------------------------------------------------------------------------------------------------

describe("invalid batches given to encodeBatch", () => {
  const f32 = (n: number) => new Float32Array(n);

  it("names the column path and what was expected vs found", () => {
    const nested = (column: WireColumn): WireBatch => ({
      batchSize: [2, 3],
      columns: [["next", { kind: "struct", columns: [["obs", { kind: "struct", columns: [["x", column]] }]] }]],
    });
    expectWireError(
      () => encodeBatch(nested({ kind: "dense", dtype: "float32", rowShape: [4], data: f32(23) })),
      /column "next\/obs\/x": data must hold rows × prod\(rowShape\) = 6 × 4 = 24 elements \(rowShape \[4\]\), found 23/,
    );
    expectWireError(
      () => encodeBatch(nested({ kind: "dense", dtype: "float32", rowShape: [], data: new Float64Array(6) as unknown as Float32Array })),
      /column "next\/obs\/x": data of dtype float32 must be a Float32Array, found Float64Array/,
    );
    expectWireError(
      () => encodeBatch(nested({ kind: "dense", dtype: "complex64" as DType, rowShape: [], data: f32(6) })),
      /column "next\/obs\/x": unknown dtype "complex64"/,
    );
    expectWireError(
      () => encodeBatch(nested({ kind: "dense", dtype: "float32", rowShape: [-1], data: f32(6) })),
      /rowShape must be an array of non-negative integers, found \[-1\]/,
    );
  });

  it("checks ragged offsets and values", () => {
    const one = (column: WireColumn): WireBatch => ({ batchSize: [3], columns: [["r", column]] });
    const ragged = (offsets: number[], values: number, tailShape: number[] = []): WireColumn => ({
      kind: "ragged",
      dtype: "float32",
      tailShape,
      values: f32(values),
      offsets: Int32Array.from(offsets),
    });
    expectWireError(() => encodeBatch(one(ragged([0, 1, 2], 2))), /column "r": offsets must have rows \+ 1 = 4 entries, found 3/);
    expectWireError(() => encodeBatch(one(ragged([0, 2, 1, 3], 3))), /offsets must be non-decreasing, found offsets\[1\] = 2 > offsets\[2\] = 1/);
    expectWireError(() => encodeBatch(one(ragged([-1, 0, 1, 2], 3))), /offsets must be non-negative/);
    expectWireError(() => encodeBatch(one(ragged([0, 1, 2, 3], 5, [2]))), /values must hold at least offsets\[3\] × prod\(tailShape\) = 3 × 2 = 6 elements .*found 5/);
    expectWireError(
      () => encodeBatch(one({ kind: "ragged", dtype: "float32", tailShape: [], values: f32(3), offsets: [0, 1, 2, 3] as unknown as Int32Array })),
      /offsets must be an Int32Array/,
    );
  });

  it("checks batch sizes, strings and keys", () => {
    expectWireError(() => encodeBatch({ batchSize: [-1], columns: [] }), /batchSize must be an array of non-negative integers/);
    expectWireError(() => encodeBatch({ batchSize: [1.5], columns: [] }), /batchSize/);
    expectWireError(() => encodeBatch({ batchSize: [2], columns: [["s", { kind: "strings", values: ["a"] }]] }), /column "s": values must hold one string per row \(2\), found 1/);
    expectWireError(
      () => encodeBatch({ batchSize: [2], columns: [["s", { kind: "strings", values: ["a", 3 as unknown as string] }]] }),
      /column "s": values\[1\] must be a string, found number/,
    );
    expectWireError(() => encodeBatch({ batchSize: [1], columns: [["s", { kind: "strings", values: ["\uD800"] }]] }), /lone surrogate/);
    const col: WireColumn = { kind: "strings", values: ["a"] };
    expectWireError(() => encodeBatch({ batchSize: [1], columns: [["a", col], ["a", col]] }), /column "a": duplicate key/);
    expectWireError(() => encodeBatch({ batchSize: [1], columns: [["a", { kind: "sparse" } as unknown as WireColumn]] }), /column "a": unknown column kind "sparse"/);
  });

  it("checks history rows and messages, naming the row, message and field", () => {
    const one = (rows: unknown, batchSize = [2]): WireBatch => ({
      batchSize,
      columns: [["next", { kind: "struct", columns: [["h", { kind: "history", rows } as WireColumn]] }]],
    });
    const ok = { role: "user", content: "hi" };
    expectWireError(() => encodeBatch(one([[ok]])), /column "next\/h": rows must hold one message array per row \(2\), found 1/);
    expectWireError(() => encodeBatch(one("x")), /column "next\/h": rows must be an array of message arrays, found string/);
    expectWireError(() => encodeBatch(one([[ok], ok])), /column "next\/h": row 1 must be an array of messages, found object/);
    expectWireError(() => encodeBatch(one([[], [ok, null]])), /column "next\/h": row 1, message 1 must be a message object, found null/);
    expectWireError(() => encodeBatch(one([[], [ok, { role: 7, content: "" }]])), /column "next\/h": row 1, message 1: role must be a string, found number/);
    expectWireError(() => encodeBatch(one([[{ role: "user" }], []])), /row 0, message 0: content must be a string, found undefined/);
    expectWireError(() => encodeBatch(one([[{ ...ok, name: null }], []])), /row 0, message 0: name must be a string or absent, found null/);
    expectWireError(() => encodeBatch(one([[{ ...ok, content: "\uDC00" }], []])), /row 0, message 0: content is not well-formed UTF-16/);
    expectWireError(() => encodeBatch(one([[{ ...ok, toolCalls: [] }], []])), /row 0, message 0: toolCalls must be a string or absent, found array\(0\)/);
    expectWireError(() => encodeBatch(one([[{ ...ok, toolCalls: '{"a":1}' }], []])), /row 0, message 0: toolCalls must be the JSON text of an array, found "\{\\"a\\":1\}"/);
    expectWireError(() => encodeBatch(one([[{ ...ok, toolCalls: "[1," }], []])), /toolCalls must be the JSON text of an array/);
    expectWireError(() => encodeBatch(one([[{ ...ok, toolResponses: "r" }], []])), /row 0, message 0: toolResponses must be an array of strings or absent, found string/);
    expectWireError(() => encodeBatch(one([[{ ...ok, toolResponses: ["a", 1] }], []])), /row 0, message 0: toolResponses\[1\] must be a string, found number/);
    expectWireError(() => encodeBatch(one([[{ ...ok, isComplete: 0 }], []])), /row 0, message 0: isComplete must be a boolean or absent, found number/);
  });

  it("normalizes absent history values: empty name, tool calls and responses, and complete travel as absent", () => {
    const given = [
      [
        { role: "user", content: "a", name: "", toolCalls: "", toolResponses: [], isComplete: true },
        { role: "tool", content: "", toolCalls: "[]", toolResponses: [""], isComplete: false },
      ],
    ];
    const bytes = encodeBatch({ batchSize: [1], columns: [["h", { kind: "history", rows: given }]] });
    const minimal = encodeBatch({ batchSize: [1], columns: [["h", { kind: "history", rows: [[{ role: "user", content: "a" }, given[0]![1]!]] }]] });
    expect(Buffer.from(bytes).equals(Buffer.from(minimal))).toBe(true);
    expect(decodeBatch(bytes).columns[0]![1]).toEqual({
      kind: "history",
      rows: [[{ role: "user", content: "a" }, { role: "tool", content: "", toolCalls: "[]", toolResponses: [""], isComplete: false }]],
    });
    // Decoded messages have no own property for absent values (not even `undefined`).
    const history = decodeBatch(bytes).columns[0]![1];
    if (history.kind !== "history") throw new Error("unexpected");
    expect(Object.keys(history.rows[0]![0]!)).toEqual(["role", "content"]);
  });

  it("rebases offsets that do not start at 0", () => {
    const values = Int32Array.from([7, 7, 1, 2, 3, 8]);
    const bytes = encodeBatch({ batchSize: [2], columns: [["r", { kind: "ragged", dtype: "int32", tailShape: [], values, offsets: Int32Array.from([2, 4, 5]) }]] });
    const r = decodeBatch(bytes).columns[0]![1];
    expect(r).toEqual({ kind: "ragged", dtype: "int32", tailShape: [], values: Int32Array.from([1, 2, 3]), offsets: Int32Array.from([0, 2, 3]) });
  });
});

// ---------------------------------------------------------------------------------------------------------------

describe("raw tensor frames", () => {
  it("round-trips without copying and checks the length", () => {
    const data = BigInt64Array.from([1n, -2n, 3n, 4n, 5n, 6n]);
    const bytes = tensorToBytes("int64", data);
    expect(bytes.buffer).toBe(data.buffer);
    const back = tensorFromBytes(bytes, "int64", [2, 3]);
    expect(back).toEqual(data);
    expect(back.buffer).toBe(data.buffer);
    expectWireError(() => tensorFromBytes(bytes, "int64", [2, 2]), /takes 32 bytes, the frame has 48/);
    expectWireError(() => tensorFromBytes(bytes, "nope" as DType, [6]), /unknown dtype/);
    expectWireError(() => tensorToBytes("float32", data as unknown as Float32Array), /needs a Float32Array/);
  });

  it("copies an unaligned frame", () => {
    const host = new Uint8Array(13);
    host.set(new Uint8Array(Float32Array.of(1.5, -2, 3).buffer), 1);
    const back = tensorFromBytes(host.subarray(1), "float32", [3]);
    expect(Array.from(back)).toEqual([1.5, -2, 3]);
  });
});
