/**
 * Writes the golden wire-format vectors: `test/golden/<case>.arrows` (one canonical Arrow IPC stream each, from
 * `encodeBatch`) and `test/golden/cases.json` (each case's expected content as JSON).
 *
 * Run with `npx tsx test/golden/generate.ts` (or `npm run golden`). Both test suites decode every file, compare
 * with cases.json and re-encode byte-for-byte (test/ts/wire.test.ts, test/python/test_codec.py); regenerate only
 * when the format changes on purpose (and bump `posttrain.version` if old readers would misread it).
 *
 * JSON value conventions: values are flat and row-major; int64 as decimal strings; float16 and bfloat16 as
 * their 16-bit patterns (integers); bool as 0/1; float32/float64 as numbers (all exactly representable).
 * Ragged columns are described as they are on the wire: offsets rebased to start at 0, only the values used.
 * History messages are described as decoded: absent optional values (`""`, `[]`, complete) omitted, `toolCalls`
 * as its JSON text, which the cases write in the compact form that Python's `json.dumps(..., ensure_ascii=False,
 * separators=(",", ":"))` also writes (so that the Python suite re-encodes it byte for byte).
 */
import { mkdirSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

import {
  DTYPES,
  encodeBatch,
  typedArrayConstructor,
  type AnyTypedArray,
  type DType,
  type WireBatch,
  type WireChatMessage,
  type WireColumn,
  type WireColumns,
} from "../../bridge/wire/index.js";

/** One golden case: a name (also the file name) and the batch it encodes. */
export interface GoldenCase {
  readonly name: string;
  readonly description: string;
  readonly batch: WireBatch;
}

/** JSON description of one column (see the module comment for value conventions). */
export type ColumnJson =
  | { name: string; kind: "dense"; dtype: DType; rowShape: number[]; values: (number | string)[] }
  | { name: string; kind: "ragged"; dtype: DType; tailShape: number[]; offsets: number[]; values: (number | string)[] }
  | { name: string; kind: "strings"; values: string[] }
  | { name: string; kind: "history"; rows: MessageJson[][] }
  | { name: string; kind: "struct"; columns: ColumnJson[] };

/** JSON description of one chat message: absent optional values omitted, as `decodeBatch` gives it. */
export interface MessageJson {
  role: string;
  content: string;
  name?: string;
  toolCalls?: string;
  toolResponses?: string[];
  isComplete?: false;
}

/** JSON description of one case, as stored in cases.json. */
export interface CaseJson {
  name: string;
  description: string;
  file: string;
  batchSize: number[];
  columns: ColumnJson[];
}

/** A TypedArray of `dtype` from plain values (bigint-able strings for int64). */
function arr(dtype: DType, values: readonly (number | string | bigint)[]): AnyTypedArray {
  const ctor = typedArrayConstructor(dtype);
  const out = new ctor(values.length);
  values.forEach((v, i) => {
    if (out instanceof BigInt64Array) out[i] = BigInt(v);
    else out[i] = Number(v);
  });
  return out;
}

function dense(dtype: DType, rowShape: number[], values: readonly (number | string | bigint)[]): WireColumn {
  return { kind: "dense", dtype, rowShape, data: arr(dtype, values) };
}

function ragged(
  dtype: DType,
  tailShape: number[],
  offsets: number[],
  values: readonly (number | string | bigint)[],
): WireColumn {
  return { kind: "ragged", dtype, tailShape, offsets: Int32Array.from(offsets), values: arr(dtype, values) };
}

function strings(values: string[]): WireColumn {
  return { kind: "strings", values };
}

function history(rows: WireChatMessage[][]): WireColumn {
  return { kind: "history", rows };
}

function struct(columns: WireColumns): WireColumn {
  return { kind: "struct", columns };
}

/** `n` sample values of a dtype, covering its extremes. */
function sample(dtype: DType, n: number): (number | string)[] {
  const pools: Record<DType, (number | string)[]> = {
    float32: [1.5, -2.25, 0, -0.5, 3.4028234663852886e38, 1.401298464324817e-45, 1e-3, 65504, -7, 0.1],
    float64: [1.5, -2.25, 0, -0.5, 1.7976931348623157e308, 5e-324, 0.1, Math.PI, -1e-300, 42],
    float16: [0x3c00, 0xc000, 0x0000, 0x8000, 0x7bff, 0x0001, 0x7c00, 0xfc00, 0x7e00, 0x3555],
    bfloat16: [0x3f80, 0xc000, 0x0000, 0x8000, 0x7f7f, 0x0001, 0x7f80, 0xff80, 0x7fc0, 0x3eaa],
    int64: ["-9223372036854775808", "9223372036854775807", "0", "-1", "42", "9007199254740993", "-7", "1", "2", "3"],
    int32: [-2147483648, 2147483647, 0, -1, 42, 7, -7, 1, 2, 3],
    int16: [-32768, 32767, 0, -1, 42, 7, -7, 1, 2, 3],
    int8: [-128, 127, 0, -1, 42, 7, -7, 1, 2, 3],
    uint8: [0, 255, 1, 128, 42, 7, 200, 3, 2, 9],
    bool: [1, 0, 0, 1, 1, 1, 0, 1, 0, 0],
  };
  const pool = pools[dtype];
  return Array.from({ length: n }, (_, i) => pool[i % pool.length]!);
}

/** The golden cases. Keep them small: they are committed. */
export function goldenCases(): GoldenCase[] {
  return [
    {
      name: "dense_scalar",
      description: "every dtype, one value per row (row shape [])",
      batch: { batchSize: [3], columns: DTYPES.map((d) => [d, dense(d, [], sample(d, 3))] as const) },
    },
    {
      name: "dense_shaped",
      description: "every dtype with row shapes [2,3] and [3]",
      batch: {
        batchSize: [2],
        columns: DTYPES.flatMap((d) => [
          [`${d}_2x3`, dense(d, [2, 3], sample(d, 12))] as const,
          [`${d}_3`, dense(d, [3], sample(d, 6))] as const,
        ]),
      },
    },
    {
      name: "ragged",
      description: "ragged leaves: a zero-length row, tail shapes [2] and [2,2], offsets not starting at 0",
      batch: {
        batchSize: [4],
        columns: [
          ["tokens", ragged("int64", [], [0, 3, 3, 5, 6], sample("int64", 6))],
          ["logprobs", ragged("float32", [], [0, 3, 3, 5, 6], sample("float32", 6))],
          ["mask", ragged("bool", [], [0, 0, 0, 2, 2], sample("bool", 2))],
          ["pairs", ragged("float32", [2], [0, 1, 3, 3, 4], sample("float32", 8))],
          ["grid", ragged("bfloat16", [2, 2], [0, 2, 2, 3, 3], sample("bfloat16", 12))],
          // A slice of a larger ragged tensor: offsets start at 2 and the values extend past the last offset;
          // the encoder rebases the offsets and writes only values[2..6).
          ["sliced", ragged("int32", [], [2, 4, 4, 5, 6], [9, 9, 10, 11, 12, 13, 99])],
        ],
      },
    },
    {
      name: "strings",
      description: "UTF-8 strings: ASCII, empty, non-ASCII (2-, 3- and 4-byte sequences), NUL, a leading BOM",
      batch: {
        batchSize: [6],
        columns: [["text", strings(["hello", "", "héllo wörld", "日本語のテキスト", "emoji 😀🎉 tail", "\u0000nul\uFEFF"])], ["bom", strings(["\uFEFFbom", "a", "b", "c", "d", ""])]],
      },
    },
    {
      name: "nested",
      description: "nested keys two levels deep: next/reward, next/done, next/obs/x, next/obs/text, next/obs/tokens",
      batch: {
        batchSize: [2],
        columns: [
          ["obs", dense("float32", [2], [1, 2, 3, 4])],
          [
            "next",
            struct([
              ["reward", dense("float32", [], [0.5, -1])],
              ["done", dense("bool", [], [0, 1])],
              [
                "obs",
                struct([
                  ["x", dense("float64", [3], [1, 2, 3, 4, 5, 6])],
                  ["text", strings(["a", "bc"])],
                  ["tokens", ragged("int32", [], [0, 2, 5], [1, 2, 3, 4, 5])],
                ]),
              ],
            ]),
          ],
          ["after", dense("int8", [], [-1, 1])],
        ],
      },
    },
    {
      name: "history",
      description:
        "conversation leaves: an empty row, system/user/assistant, name, tool calls and responses, " +
        "an incomplete last message, non-ASCII text, absent values given explicitly, a nested history",
      batch: {
        batchSize: [4],
        columns: [
          [
            "history",
            history([
              [],
              [
                // Explicit defaults travel as absent values and decode as absent.
                { role: "system", content: "You are a helpful assistant.", name: "", toolResponses: [], isComplete: true },
                { role: "user", content: "What is 2 + 2?" },
                { role: "assistant", content: "2 + 2 = 4." },
              ],
              [
                { role: "user", content: "Wie ist das Wetter in Zürich? 天気は？" },
                {
                  role: "assistant",
                  content: "",
                  toolCalls: JSON.stringify([
                    {
                      id: "call_0",
                      type: "function",
                      function: { name: "get_weather", arguments: JSON.stringify({ city: "Zürich", unit: "°C\n" }) },
                    },
                  ]),
                },
                { role: "tool", content: "", name: "get_weather", toolResponses: ['{"temp_c":21}', "☀️ sonnig 😀"] },
                { role: "assistant", content: "Es ist sonnig, 21 °C — 晴れ", isComplete: false },
              ],
              [{ role: "user", content: "", name: "émile", toolCalls: "[]", toolResponses: [""] }],
            ]),
          ],
          ["text", strings(["a", "", "b", "c"])],
          [
            "next",
            struct([["history", history([[{ role: "assistant", content: "ok" }], [], [], [{ role: "user", content: "…", isComplete: false }]])]]),
          ],
        ],
      },
    },
    {
      name: "empty",
      description: "batch size [0] with every column kind",
      batch: {
        batchSize: [0],
        columns: [
          ["scalar", dense("float32", [], [])],
          ["shaped", dense("int64", [2, 3], [])],
          ["ragged", ragged("float32", [], [0], [])],
          ["ragged_tail", ragged("float16", [2], [0], [])],
          ["text", strings([])],
          ["nested", struct([["a", dense("int32", [], [])], ["b", strings([])]])],
          ["history", history([])],
        ],
      },
    },
    {
      name: "single_row",
      description: "batch size [] (one row, no batch dimension)",
      batch: {
        batchSize: [],
        columns: [
          ["scalar", dense("float64", [], [2.5])],
          ["vector", dense("int32", [3], [1, 2, 3])],
          ["ragged", ragged("int64", [], [0, 3], ["1", "2", "3"])],
          ["text", strings(["only"])],
        ],
      },
    },
    {
      name: "batch_2d",
      description: "batch size [2,3]: six rows in row-major order",
      batch: {
        batchSize: [2, 3],
        columns: [
          ["scalar", dense("float32", [], [0, 1, 2, 3, 4, 5])],
          ["pair", dense("int16", [2], [0, 1, 10, 11, 20, 21, 30, 31, 40, 41, 50, 51])],
          ["ragged", ragged("uint8", [], [0, 1, 1, 3, 4, 4, 6], [1, 2, 3, 4, 5, 6])],
          ["text", strings(["r0", "r1", "r2", "r3", "r4", "r5"])],
          ["nested", struct([["r", dense("bfloat16", [], sample("bfloat16", 6))]])],
        ],
      },
    },
    {
      name: "no_columns",
      description: "batch size [3] and no columns",
      batch: { batchSize: [3], columns: [] },
    },
  ];
}

function valuesJson(data: AnyTypedArray): (number | string)[] {
  if (data instanceof BigInt64Array) return Array.from(data, (v) => v.toString());
  return Array.from(data as ArrayLike<number>);
}

function product(shape: readonly number[]): number {
  return shape.reduce((a, b) => a * b, 1);
}

/** The JSON description of a column as it is on the wire (ragged offsets rebased, only used values). */
export function columnJson(name: string, column: WireColumn): ColumnJson {
  switch (column.kind) {
    case "dense":
      return { name, kind: "dense", dtype: column.dtype, rowShape: [...column.rowShape], values: valuesJson(column.data) };
    case "ragged": {
      const first = column.offsets[0]!;
      const last = column.offsets[column.offsets.length - 1]!;
      const per = product(column.tailShape);
      return {
        name,
        kind: "ragged",
        dtype: column.dtype,
        tailShape: [...column.tailShape],
        offsets: Array.from(column.offsets, (o) => o - first),
        values: valuesJson(column.values.subarray(first * per, last * per)),
      };
    }
    case "strings":
      return { name, kind: "strings", values: [...column.values] };
    case "history":
      return { name, kind: "history", rows: column.rows.map((row) => row.map(messageJson)) };
    case "struct":
      return { name, kind: "struct", columns: column.columns.map(([n, c]) => columnJson(n, c)) };
  }
}

/** A message as decoded: the wire's empty values (`""`, `[]`, complete) mean absent. */
function messageJson(m: WireChatMessage): MessageJson {
  const out: MessageJson = { role: m.role, content: m.content };
  if (m.name !== undefined && m.name !== "") out.name = m.name;
  if (m.toolCalls !== undefined && m.toolCalls !== "") out.toolCalls = m.toolCalls;
  if (m.toolResponses !== undefined && m.toolResponses.length > 0) out.toolResponses = [...m.toolResponses];
  if (m.isComplete === false) out.isComplete = false;
  return out;
}

/** The JSON description of a batch's columns. */
export function columnsJson(batch: WireBatch): ColumnJson[] {
  return batch.columns.map(([n, c]) => columnJson(n, c));
}

/** Where the golden files live. */
export const GOLDEN_DIR = dirname(fileURLToPath(import.meta.url));

function main(): void {
  mkdirSync(GOLDEN_DIR, { recursive: true });
  const cases: CaseJson[] = [];
  for (const c of goldenCases()) {
    const file = `${c.name}.arrows`;
    writeFileSync(join(GOLDEN_DIR, file), encodeBatch(c.batch));
    cases.push({ name: c.name, description: c.description, file, batchSize: [...c.batch.batchSize], columns: columnsJson(c.batch) });
  }
  writeFileSync(join(GOLDEN_DIR, "cases.json"), `${JSON.stringify({ formatVersion: "1", cases }, null, 1)}\n`);
  console.log(`wrote ${cases.length} golden cases to ${GOLDEN_DIR}`);
}

const entry = process.argv[1];
if (entry !== undefined && import.meta.url === pathToFileURL(entry).href) main();
