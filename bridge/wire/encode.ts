/**
 * The canonical encoder of a {@link WireBatch} into one Arrow IPC stream (docs/protocol.md, "TensorDict payloads").
 *
 * The flatbuffer metadata is built by hand with the `flatbuffers` Builder, with exactly the same sequence of
 * builder calls as `python_worker/posttrain_worker/codec/flatbuf.py`, so both sides produce identical bytes.
 * Keep the two in step: the golden files in `test/golden/` pin the result.
 *
 * Output layout: schema message, one record batch message, its body, end-of-stream marker. The total size is
 * computed first, one `Uint8Array` is allocated, and each tensor's bytes are copied into it once.
 */
import { Builder } from "flatbuffers";

import { WireFormatError } from "../errors.js";
import { bytesOf, isDType, itemSize, typedArrayConstructor, type DType } from "./dtypes.js";
import type { WireBatch, WireColumn, WireColumns, WireDense, WireHistory, WireRagged, WireStrings } from "./types.js";

/** Value of the schema metadata key `posttrain.version` written by this encoder. */
export const WIRE_FORMAT_VERSION = "1";

/** Metadata keys of the posttrain Arrow layout (docs/protocol.md). */
export const META_KEYS = {
  version: "posttrain.version",
  batchSize: "posttrain.batch_size",
  dtype: "posttrain.dtype",
  shape: "posttrain.shape",
  kind: "posttrain.kind",
  extensionName: "ARROW:extension:name",
  extensionMetadata: "ARROW:extension:metadata",
} as const;

/** The canonical Arrow extension name of dense leaves with a non-empty row shape. */
export const FIXED_SHAPE_TENSOR = "arrow.fixed_shape_tensor";

/** Value of `posttrain.kind` on a conversation (history) column. */
export const HISTORY_KIND = "history";

/**
 * The children of a history column's message struct, in wire order:
 * `List<Struct<role: Utf8, content: Utf8, name: Utf8, tool_calls: Utf8, tool_responses: List<Utf8>, is_complete: UInt8>>`.
 */
export const HISTORY_FIELDS = ["role", "content", "name", "tool_calls", "tool_responses", "is_complete"] as const;

/** Largest value of an int32 list offset: the cap on a ragged leaf's total length along its ragged dimension. */
export const MAX_INT32 = 2 ** 31 - 1;

// Arrow flatbuffer enum values (format/Schema.fbs, format/Message.fbs).
const METADATA_V5 = 4;
const HEADER_SCHEMA = 1;
const HEADER_RECORD_BATCH = 3;
const TYPE_INT = 2;
const TYPE_FLOATING_POINT = 3;
const TYPE_UTF8 = 5;
const TYPE_LIST = 12;
const TYPE_STRUCT = 13;
const TYPE_FIXED_SIZE_LIST = 16;
const PRECISION_HALF = 0;
const PRECISION_SINGLE = 1;
const PRECISION_DOUBLE = 2;

const CONTINUATION = 0xffffffff;

/** Arrow storage type of one field. */
type ArrowType =
  | { readonly id: "int"; readonly bitWidth: number; readonly signed: boolean }
  | { readonly id: "float"; readonly precision: number }
  | { readonly id: "utf8" }
  | { readonly id: "list" }
  | { readonly id: "struct" }
  | { readonly id: "fixedSizeList"; readonly listSize: number };

/** One Arrow field to write into the schema message. All fields are non-nullable. */
interface FieldPlan {
  readonly name: string;
  readonly type: ArrowType;
  readonly children: readonly FieldPlan[];
  readonly metadata: ReadonlyArray<readonly [string, string]>;
}

const STORAGE: { readonly [D in DType]: ArrowType } = {
  float32: { id: "float", precision: PRECISION_SINGLE },
  float64: { id: "float", precision: PRECISION_DOUBLE },
  float16: { id: "float", precision: PRECISION_HALF },
  bfloat16: { id: "int", bitWidth: 16, signed: false },
  int64: { id: "int", bitWidth: 64, signed: true },
  int32: { id: "int", bitWidth: 32, signed: true },
  int16: { id: "int", bitWidth: 16, signed: true },
  int8: { id: "int", bitWidth: 8, signed: true },
  uint8: { id: "int", bitWidth: 8, signed: false },
  bool: { id: "int", bitWidth: 8, signed: false },
};

/** How one body buffer gets its bytes. */
type BodyWrite =
  | { readonly kind: "bytes"; readonly at: number; readonly src: Uint8Array }
  | { readonly kind: "rebase"; readonly at: number; readonly offsets: Int32Array }
  | { readonly kind: "strings"; readonly at: number; readonly dataAt: number; readonly values: readonly string[] };

/** Field nodes, buffer regions and the copies that fill the record batch body. */
class BodyLayout {
  /** FieldNode lengths, in schema pre-order (null counts are all 0). */
  readonly nodes: number[] = [];
  /** Buffer regions as [offset, length] pairs relative to the body start. */
  readonly buffers: number[] = [];
  readonly writes: BodyWrite[] = [];
  /** Current body size, always a multiple of 8. */
  length = 0;

  node(length: number): void {
    this.nodes.push(length);
  }

  /** Reserves a buffer of `byteLength` bytes (padded to 8) and returns its body offset. */
  buffer(byteLength: number): number {
    const at = this.length;
    this.buffers.push(at, byteLength);
    this.length += pad8(byteLength);
    return at;
  }

  /** A validity buffer: always empty (no nulls). */
  validity(): void {
    this.buffer(0);
  }
}

function pad8(n: number): number {
  return Math.ceil(n / 8) * 8;
}

function fail(path: readonly string[], message: string): never {
  const where = path.length === 0 ? "batch" : `column "${path.join("/")}"`;
  throw new WireFormatError(`cannot encode ${where}: ${message}`);
}

function isNonNegativeInt(value: unknown): value is number {
  return typeof value === "number" && Number.isSafeInteger(value) && value >= 0;
}

function shapeProduct(shape: unknown, path: readonly string[], what: string): number {
  if (!Array.isArray(shape)) fail(path, `${what} must be an array of non-negative integers, found ${describe(shape)}`);
  let n = 1;
  for (const d of shape as unknown[]) {
    if (!isNonNegativeInt(d)) {
      fail(path, `${what} must be an array of non-negative integers, found ${JSON.stringify(shape)}`);
    }
    n *= d;
  }
  if (!Number.isSafeInteger(n)) fail(path, `${what} ${JSON.stringify(shape)} has too many elements`);
  return n;
}

function describe(value: unknown): string {
  if (value === null) return "null";
  if (ArrayBuffer.isView(value)) return `${value.constructor.name}(${value.byteLength} bytes)`;
  if (Array.isArray(value)) return `array(${value.length})`;
  return typeof value;
}

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

/** UTF-8 byte length of a well-formed string. */
function utf8Length(s: string): number {
  let n = s.length;
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x80) continue;
    if (c < 0x800) n += 1;
    else if (c >= 0xd800 && c <= 0xdbff) {
      n += 2; // surrogate pair: 2 code units, 4 bytes
      i++;
    } else n += 2;
  }
  return n;
}

function checkName(name: unknown, path: readonly string[], seen: Set<string>): string {
  if (typeof name !== "string") fail(path, `a key must be a string, found ${describe(name)}`);
  if (LONE_SURROGATE.test(name)) fail([...path, name], "the key is not well-formed UTF-16 (lone surrogate)");
  if (seen.has(name)) fail([...path, name], "duplicate key");
  seen.add(name);
  return name;
}

function checkDType(dtype: unknown, path: readonly string[]): DType {
  if (!isDType(dtype)) fail(path, `unknown dtype ${JSON.stringify(dtype) ?? String(dtype)}`);
  return dtype;
}

function checkArray(array: unknown, dtype: DType, path: readonly string[], what: string): Uint8Array {
  const ctor = typedArrayConstructor(dtype);
  if (!(array instanceof ctor)) {
    fail(path, `${what} of dtype ${dtype} must be a ${ctor.name}, found ${describe(array)}`);
  }
  return bytesOf(array);
}

function planColumns(columns: WireColumns, rows: number, path: readonly string[], body: BodyLayout): FieldPlan[] {
  if (!Array.isArray(columns)) fail(path, `columns must be an array of [name, column] pairs, found ${describe(columns)}`);
  const seen = new Set<string>();
  const fields: FieldPlan[] = [];
  for (const entry of columns) {
    if (!Array.isArray(entry) || entry.length !== 2) fail(path, "each column entry must be a [name, column] pair");
    const name = checkName(entry[0], path, seen);
    fields.push(planColumn(name, entry[1] as WireColumn, rows, [...path, name], body));
  }
  return fields;
}

function planColumn(name: string, column: WireColumn, rows: number, path: readonly string[], body: BodyLayout): FieldPlan {
  if (typeof column !== "object" || column === null) fail(path, `expected a column object, found ${describe(column)}`);
  switch (column.kind) {
    case "dense":
      return planDense(name, column, rows, path, body);
    case "ragged":
      return planRagged(name, column, rows, path, body);
    case "strings":
      return planStrings(name, column, rows, path, body);
    case "history":
      return planHistory(name, column, rows, path, body);
    case "struct": {
      body.node(rows);
      body.validity();
      const children = planColumns(column.columns, rows, path, body);
      return { name, type: { id: "struct" }, children, metadata: [] };
    }
    default: {
      const kind: unknown = (column as { kind: unknown }).kind;
      return fail(path, `unknown column kind ${JSON.stringify(kind) ?? String(kind)}`);
    }
  }
}

function planDense(name: string, column: WireDense, rows: number, path: readonly string[], body: BodyLayout): FieldPlan {
  const dtype = checkDType(column.dtype, path);
  const perRow = shapeProduct(column.rowShape, path, "rowShape");
  const bytes = checkArray(column.data, dtype, path, "data");
  const expected = rows * perRow;
  const found = bytes.byteLength / itemSize(dtype);
  if (found !== expected) {
    fail(
      path,
      `data must hold rows × prod(rowShape) = ${rows} × ${perRow} = ${expected} elements ` +
        `(rowShape ${JSON.stringify(column.rowShape)}), found ${found}`,
    );
  }
  const dtypeMeta: [string, string] = [META_KEYS.dtype, dtype];
  const storage = STORAGE[dtype];
  if (column.rowShape.length === 0) {
    body.node(rows);
    body.validity();
    body.writes.push({ kind: "bytes", at: body.buffer(bytes.byteLength), src: bytes });
    return { name, type: storage, children: [], metadata: [dtypeMeta] };
  }
  if (perRow > MAX_INT32) fail(path, `a row holds ${perRow} elements; at most ${MAX_INT32} fit a fixed-size list`);
  body.node(rows);
  body.validity();
  body.node(expected);
  body.validity();
  body.writes.push({ kind: "bytes", at: body.buffer(bytes.byteLength), src: bytes });
  return {
    name,
    type: { id: "fixedSizeList", listSize: perRow },
    children: [{ name: "item", type: storage, children: [], metadata: [] }],
    metadata: [
      [META_KEYS.extensionName, FIXED_SHAPE_TENSOR],
      [META_KEYS.extensionMetadata, `{"shape":${JSON.stringify(column.rowShape)}}`],
      dtypeMeta,
    ],
  };
}

function planRagged(name: string, column: WireRagged, rows: number, path: readonly string[], body: BodyLayout): FieldPlan {
  const dtype = checkDType(column.dtype, path);
  const perItem = shapeProduct(column.tailShape, path, "tailShape");
  const values = checkArray(column.values, dtype, path, "values");
  const offsets = column.offsets;
  if (!(offsets instanceof Int32Array)) fail(path, `offsets must be an Int32Array, found ${describe(offsets)}`);
  if (offsets.length !== rows + 1) {
    fail(path, `offsets must have rows + 1 = ${rows + 1} entries, found ${offsets.length}`);
  }
  const first = offsets[0]!;
  if (first < 0) fail(path, `offsets must be non-negative, found offsets[0] = ${first}`);
  for (let i = 0; i < rows; i++) {
    if (offsets[i + 1]! < offsets[i]!) {
      fail(path, `offsets must be non-decreasing, found offsets[${i}] = ${offsets[i]!} > offsets[${i + 1}] = ${offsets[i + 1]!}`);
    }
  }
  const last = offsets[rows]!;
  const size = itemSize(dtype);
  const available = values.byteLength / size;
  if (last * perItem > available) {
    fail(
      path,
      `values must hold at least offsets[${rows}] × prod(tailShape) = ${last} × ${perItem} = ${last * perItem} ` +
        `elements (tailShape ${JSON.stringify(column.tailShape)}), found ${available}`,
    );
  }
  if (perItem > MAX_INT32) fail(path, `an item holds ${perItem} elements; at most ${MAX_INT32} fit a fixed-size list`);
  const total = last - first;
  const slice = values.subarray(first * perItem * size, last * perItem * size);
  body.node(rows);
  body.validity();
  const offsetsAt = body.buffer((rows + 1) * 4);
  body.writes.push(
    first === 0 ? { kind: "bytes", at: offsetsAt, src: bytesOf(offsets) } : { kind: "rebase", at: offsetsAt, offsets },
  );
  const storage = STORAGE[dtype];
  const dtypeMeta: [string, string] = [META_KEYS.dtype, dtype];
  const shapeMeta: [string, string] = [META_KEYS.shape, JSON.stringify([-1, ...column.tailShape])];
  body.node(total);
  body.validity();
  if (column.tailShape.length === 0) {
    body.writes.push({ kind: "bytes", at: body.buffer(slice.byteLength), src: slice });
    return {
      name,
      type: { id: "list" },
      children: [{ name: "item", type: storage, children: [], metadata: [] }],
      metadata: [dtypeMeta, shapeMeta],
    };
  }
  body.node(total * perItem);
  body.validity();
  body.writes.push({ kind: "bytes", at: body.buffer(slice.byteLength), src: slice });
  const item: FieldPlan = { name: "item", type: storage, children: [], metadata: [] };
  return {
    name,
    type: { id: "list" },
    children: [{ name: "item", type: { id: "fixedSizeList", listSize: perItem }, children: [item], metadata: [] }],
    metadata: [dtypeMeta, shapeMeta],
  };
}

function planStrings(name: string, column: WireStrings, rows: number, path: readonly string[], body: BodyLayout): FieldPlan {
  const values: unknown = column.values;
  if (!Array.isArray(values)) fail(path, `values must be an array of strings, found ${describe(values)}`);
  if (values.length !== rows) fail(path, `values must hold one string per row (${rows}), found ${values.length}`);
  let bytes = 0;
  for (let i = 0; i < rows; i++) {
    const s: unknown = values[i];
    if (typeof s !== "string") fail(path, `values[${i}] must be a string, found ${describe(s)}`);
    if (LONE_SURROGATE.test(s)) fail(path, `values[${i}] is not well-formed UTF-16 (lone surrogate)`);
    bytes += utf8Length(s);
  }
  planUtf8(values as string[], bytes, path, "the strings", body);
  return { name, type: { id: "utf8" }, children: [], metadata: [] };
}

/** Node, validity, offsets and data of one Utf8 array of well-formed strings taking `bytes` bytes of UTF-8. */
function planUtf8(values: readonly string[], bytes: number, path: readonly string[], what: string, body: BodyLayout): void {
  if (bytes > MAX_INT32) fail(path, `${what} take ${bytes} bytes of UTF-8; int32 offsets allow at most ${MAX_INT32}`);
  body.node(values.length);
  body.validity();
  const at = body.buffer((values.length + 1) * 4);
  const dataAt = body.buffer(bytes);
  body.writes.push({ kind: "strings", at, dataAt, values });
}

/** A string property of a chat message: its value, or `""` for an absent optional one. */
function messageText(value: unknown, optional: boolean, path: readonly string[], at: string, key: string): string {
  if (value === undefined && optional) return "";
  if (typeof value !== "string") {
    fail(path, `${at}: ${key} must be a string${optional ? " or absent" : ""}, found ${describe(value)}`);
  }
  if (LONE_SURROGATE.test(value)) fail(path, `${at}: ${key} is not well-formed UTF-16 (lone surrogate)`);
  return value;
}

/** True when `text` is JSON text whose value is an array (the `tool_calls` of a history message). */
export function isJSONArrayText(text: string): boolean {
  try {
    return Array.isArray(JSON.parse(text));
  } catch {
    return false;
  }
}

function abbreviate(s: string): string {
  return s.length > 40 ? `${s.slice(0, 40)}…` : s;
}

function planHistory(name: string, column: WireHistory, rows: number, path: readonly string[], body: BodyLayout): FieldPlan {
  const list: unknown = column.rows;
  if (!Array.isArray(list)) fail(path, `rows must be an array of message arrays, found ${describe(list)}`);
  if (list.length !== rows) fail(path, `rows must hold one message array per row (${rows}), found ${list.length}`);
  // Column-wise views of the messages (string references, no copies): role, content, name, tool_calls.
  const texts: readonly string[][] = [[], [], [], []];
  const textBytes = [0, 0, 0, 0];
  const rowOffsets = new Int32Array(rows + 1);
  const responses: string[] = [];
  const responseCounts: number[] = [];
  let responseBytes = 0;
  const complete: number[] = [];
  let messages = 0;
  for (let i = 0; i < rows; i++) {
    const row: unknown = list[i];
    if (!Array.isArray(row)) fail(path, `row ${i} must be an array of messages, found ${describe(row)}`);
    if (messages + row.length > MAX_INT32) {
      fail(path, `the rows hold more than ${MAX_INT32} messages; int32 offsets allow at most ${MAX_INT32}`);
    }
    for (let j = 0; j < row.length; j++) {
      const at = `row ${i}, message ${j}`;
      const m: unknown = row[j];
      if (typeof m !== "object" || m === null || Array.isArray(m)) fail(path, `${at} must be a message object, found ${describe(m)}`);
      const msg = m as { readonly [key: string]: unknown };
      const fields = [
        messageText(msg.role, false, path, at, "role"),
        messageText(msg.content, false, path, at, "content"),
        messageText(msg.name, true, path, at, "name"),
        messageText(msg.toolCalls, true, path, at, "toolCalls"),
      ] as const;
      if (fields[3] !== "" && !isJSONArrayText(fields[3])) {
        fail(path, `${at}: toolCalls must be the JSON text of an array, found ${JSON.stringify(abbreviate(fields[3]))}`);
      }
      for (let k = 0; k < 4; k++) {
        texts[k]!.push(fields[k]!);
        textBytes[k]! += utf8Length(fields[k]!);
      }
      const rs: unknown = msg.toolResponses;
      if (rs !== undefined && !Array.isArray(rs)) {
        fail(path, `${at}: toolResponses must be an array of strings or absent, found ${describe(rs)}`);
      }
      const rsList = (rs ?? []) as unknown[];
      if (responses.length + rsList.length > MAX_INT32) {
        fail(path, `the messages hold more than ${MAX_INT32} tool responses; int32 offsets allow at most ${MAX_INT32}`);
      }
      for (let k = 0; k < rsList.length; k++) {
        const s = messageText(rsList[k], false, path, at, `toolResponses[${k}]`);
        responses.push(s);
        responseBytes += utf8Length(s);
      }
      responseCounts.push(rsList.length);
      const isComplete: unknown = msg.isComplete;
      if (isComplete !== undefined && typeof isComplete !== "boolean") {
        fail(path, `${at}: isComplete must be a boolean or absent, found ${describe(isComplete)}`);
      }
      complete.push(isComplete === false ? 0 : 1);
    }
    messages += row.length;
    rowOffsets[i + 1] = messages;
  }
  const responseOffsets = new Int32Array(messages + 1);
  for (let k = 0; k < messages; k++) responseOffsets[k + 1] = responseOffsets[k]! + responseCounts[k]!;

  // Schema pre-order: the list, its message struct, the struct's six children (tool_responses with its item).
  body.node(rows);
  body.validity();
  body.writes.push({ kind: "bytes", at: body.buffer((rows + 1) * 4), src: bytesOf(rowOffsets) });
  body.node(messages);
  body.validity();
  texts.forEach((values, k) => {
    planUtf8(values, textBytes[k]!, path, `the ${HISTORY_FIELDS[k]!} values`, body);
  });
  body.node(messages);
  body.validity();
  body.writes.push({ kind: "bytes", at: body.buffer((messages + 1) * 4), src: bytesOf(responseOffsets) });
  planUtf8(responses, responseBytes, path, "the tool responses", body);
  body.node(messages);
  body.validity();
  body.writes.push({ kind: "bytes", at: body.buffer(messages), src: Uint8Array.from(complete) });

  const utf8 = (n: string): FieldPlan => ({ name: n, type: { id: "utf8" }, children: [], metadata: [] });
  const message: FieldPlan = {
    name: "item",
    type: { id: "struct" },
    children: [
      utf8("role"),
      utf8("content"),
      utf8("name"),
      utf8("tool_calls"),
      { name: "tool_responses", type: { id: "list" }, children: [utf8("item")], metadata: [] },
      { name: "is_complete", type: STORAGE.bool, children: [], metadata: [[META_KEYS.dtype, "bool"]] },
    ],
    metadata: [],
  };
  return { name, type: { id: "list" }, children: [message], metadata: [[META_KEYS.kind, HISTORY_KIND]] };
}

// ---------------------------------------------------------------------------------------------------------------
// Flatbuffer metadata. The builder call sequence below is mirrored exactly by codec/flatbuf.py.

function buildOffsetVector(b: Builder, offsets: readonly number[]): number {
  b.startVector(4, offsets.length, 4);
  for (let i = offsets.length - 1; i >= 0; i--) b.addOffset(offsets[i]!);
  return b.endVector();
}

function buildKeyValues(b: Builder, pairs: ReadonlyArray<readonly [string, string]>): number {
  const tables: number[] = [];
  for (const [key, value] of pairs) {
    const k = b.createString(key);
    const v = b.createString(value);
    b.startObject(2);
    b.addFieldOffset(0, k, 0);
    b.addFieldOffset(1, v, 0);
    tables.push(b.endObject());
  }
  return buildOffsetVector(b, tables);
}

/** Writes the type table of a field; returns [union type, offset]. */
function buildType(b: Builder, type: ArrowType): [number, number] {
  switch (type.id) {
    case "int":
      b.startObject(2);
      b.addFieldInt32(0, type.bitWidth, 0);
      b.addFieldInt8(1, type.signed ? 1 : 0, 0);
      return [TYPE_INT, b.endObject()];
    case "float":
      b.startObject(1);
      b.addFieldInt16(0, type.precision, 0);
      return [TYPE_FLOATING_POINT, b.endObject()];
    case "fixedSizeList":
      b.startObject(1);
      b.addFieldInt32(0, type.listSize, 0);
      return [TYPE_FIXED_SIZE_LIST, b.endObject()];
    case "utf8":
      b.startObject(0);
      return [TYPE_UTF8, b.endObject()];
    case "list":
      b.startObject(0);
      return [TYPE_LIST, b.endObject()];
    case "struct":
      b.startObject(0);
      return [TYPE_STRUCT, b.endObject()];
  }
}

function buildField(b: Builder, field: FieldPlan): number {
  const children = field.children.map((child) => buildField(b, child));
  const name = b.createString(field.name);
  const [typeType, type] = buildType(b, field.type);
  const childrenVector = buildOffsetVector(b, children);
  const metadata = field.metadata.length > 0 ? buildKeyValues(b, field.metadata) : 0;
  b.startObject(7);
  b.addFieldOffset(0, name, 0);
  b.addFieldInt8(2, typeType, 0);
  b.addFieldOffset(3, type, 0);
  b.addFieldOffset(5, childrenVector, 0);
  b.addFieldOffset(6, metadata, 0);
  return b.endObject();
}

function finishMessage(b: Builder, headerType: number, header: number, bodyLength: number): Uint8Array {
  b.startObject(5);
  b.addFieldInt64(3, BigInt(bodyLength), 0n);
  b.addFieldOffset(2, header, 0);
  b.addFieldInt16(0, METADATA_V5, 0);
  b.addFieldInt8(1, headerType, 0);
  b.finish(b.endObject());
  return b.asUint8Array();
}

/** Schema messages by layout (fields and batch size): the same layout is sent call after call. Never mutated. */
const schemaMessages = new Map<string, Uint8Array>();
const SCHEMA_MESSAGES_MAX = 256;

/** The schema message of a layout, built once ({@link schemaMessages}); only copied into streams. */
function schemaMessage(fields: readonly FieldPlan[], batchSize: readonly number[]): Uint8Array {
  const key = JSON.stringify([fields, batchSize]);
  const known = schemaMessages.get(key);
  if (known !== undefined) return known;
  const built = buildSchemaMessage(fields, batchSize);
  if (schemaMessages.size >= SCHEMA_MESSAGES_MAX) schemaMessages.delete(schemaMessages.keys().next().value as string);
  schemaMessages.set(key, built);
  return built;
}

function buildSchemaMessage(fields: readonly FieldPlan[], batchSize: readonly number[]): Uint8Array {
  const b = new Builder(1024);
  const fieldTables = fields.map((field) => buildField(b, field));
  const fieldsVector = buildOffsetVector(b, fieldTables);
  const metadata = buildKeyValues(b, [
    [META_KEYS.version, WIRE_FORMAT_VERSION],
    [META_KEYS.batchSize, JSON.stringify(batchSize)],
  ]);
  b.startObject(4);
  b.addFieldOffset(1, fieldsVector, 0);
  b.addFieldOffset(2, metadata, 0);
  return finishMessage(b, HEADER_SCHEMA, b.endObject(), 0);
}

function buildRecordBatchMessage(rows: number, body: BodyLayout): Uint8Array {
  const b = new Builder(256 + 16 * (body.nodes.length + body.buffers.length / 2));
  b.startVector(16, body.nodes.length, 8);
  for (let i = body.nodes.length - 1; i >= 0; i--) {
    b.prep(8, 16);
    b.addInt64(0n); // null_count
    b.addInt64(BigInt(body.nodes[i]!)); // length
  }
  const nodes = b.endVector();
  const bufferCount = body.buffers.length / 2;
  b.startVector(16, bufferCount, 8);
  for (let i = bufferCount - 1; i >= 0; i--) {
    b.prep(8, 16);
    b.addInt64(BigInt(body.buffers[2 * i + 1]!)); // length
    b.addInt64(BigInt(body.buffers[2 * i]!)); // offset
  }
  const buffers = b.endVector();
  b.startObject(5);
  b.addFieldInt64(0, BigInt(rows), 0n);
  b.addFieldOffset(1, nodes, 0);
  b.addFieldOffset(2, buffers, 0);
  return finishMessage(b, HEADER_RECORD_BATCH, b.endObject(), body.length);
}

// ---------------------------------------------------------------------------------------------------------------

/** Size of an encapsulated message: continuation, length, flatbuffer padded so the next part starts 8-aligned. */
function framedLength(metadata: Uint8Array): number {
  return 8 + pad8(metadata.byteLength);
}

function writeFramed(out: Uint8Array, view: DataView, at: number, metadata: Uint8Array): number {
  const padded = pad8(metadata.byteLength);
  view.setUint32(at, CONTINUATION, true);
  view.setInt32(at + 4, padded, true);
  out.set(metadata, at + 8);
  out.fill(0, at + 8 + metadata.byteLength, at + 8 + padded);
  return at + 8 + padded;
}

/** Where a write at a stream offset lands: the part that holds it and the offset within that part. */
type Locate = (streamOffset: number) => readonly [Uint8Array, number];

function writeBody(locate: Locate, bodyStart: number, body: BodyLayout, skip: ReadonlySet<BodyWrite>): void {
  const encoder = new TextEncoder();
  for (const w of body.writes) {
    if (skip.has(w)) continue;
    const [out, at] = locate(bodyStart + w.at);
    switch (w.kind) {
      case "bytes":
        out.set(w.src, at);
        break;
      case "rebase": {
        const target = new Int32Array(out.buffer, out.byteOffset + at, w.offsets.length);
        const first = w.offsets[0]!;
        for (let i = 0; i < w.offsets.length; i++) target[i] = w.offsets[i]! - first;
        break;
      }
      case "strings": {
        const offsets = new Int32Array(out.buffer, out.byteOffset + at, w.values.length + 1);
        const [data, dataAt] = locate(bodyStart + w.dataAt);
        let pos = 0;
        offsets[0] = 0;
        for (let i = 0; i < w.values.length; i++) {
          const s = w.values[i]!;
          if (s.length > 0) pos += encoder.encodeInto(s, data.subarray(dataAt + pos)).written;
          offsets[i + 1] = pos;
        }
        break;
      }
    }
  }
}

/**
 * The smallest body buffer {@link encodeBatchParts} sends as a part of its own (a view of the caller's memory):
 * below this, one copy costs less than the extra frame.
 */
export const SPLIT_MIN_BYTES = 64 * 1024;

/** A planned stream: its metadata messages and body layout, before any byte is written. */
interface StreamPlan {
  readonly schema: Uint8Array;
  readonly recordBatch: Uint8Array;
  readonly body: BodyLayout;
  readonly bodyStart: number;
  readonly total: number;
}

function planStream(batch: WireBatch): StreamPlan {
  if (typeof batch !== "object" || batch === null) fail([], `expected a WireBatch object, found ${describe(batch)}`);
  const rows = shapeProduct(batch.batchSize, [], "batchSize");
  const body = new BodyLayout();
  const fields = planColumns(batch.columns, rows, [], body);
  const schema = schemaMessage(fields, batch.batchSize);
  const recordBatch = buildRecordBatchMessage(rows, body);
  const bodyStart = framedLength(schema) + framedLength(recordBatch);
  return { schema, recordBatch, body, bodyStart, total: bodyStart + body.length + 8 };
}

/** Writes every byte of `plan` that lies outside `skip` (the writes sent as parts of their own). */
function writeStream(plan: StreamPlan, locate: Locate, skip: ReadonlySet<BodyWrite>): void {
  const { schema, recordBatch, body, bodyStart, total } = plan;
  const [head] = locate(0);
  const view = new DataView(head.buffer, head.byteOffset, head.byteLength);
  writeFramed(head, view, writeFramed(head, view, 0, schema), recordBatch);
  writeBody(locate, bodyStart, body, skip);
  for (let i = 0; i < body.buffers.length; i += 2) {
    const length = body.buffers[i + 1]!;
    const padding = pad8(length) - length;
    if (padding === 0) continue;
    const [out, at] = locate(bodyStart + body.buffers[i]! + length);
    out.fill(0, at, at + padding);
  }
  const [tail, at] = locate(total - 8);
  tail.fill(0, at + 4, at + 8); // end of stream: 0xFFFFFFFF 0x00000000
  new DataView(tail.buffer, tail.byteOffset + at, 8).setUint32(0, CONTINUATION, true);
}

/** Uninitialised memory: zero-filling a large output costs as much as the copy. Every byte gets written. */
function allocate(n: number): Uint8Array {
  return new Uint8Array(Buffer.allocUnsafeSlow(n).buffer, 0, n);
}

/**
 * Encodes a batch as one canonical Arrow IPC stream (schema, one record batch, end-of-stream marker).
 *
 * The result is byte-identical to `encode_batch` of the Python worker for the same content. Every body buffer
 * starts at a multiple of 8 bytes from the start of the result. Ragged offsets that do not start at 0 are rebased.
 *
 * @param batch - the batch to encode; validated first.
 * @returns the stream bytes, in a fresh buffer (byteOffset 0).
 * @throws {@link WireFormatError} when the batch is not valid: the message names the column path and what was
 *   expected versus found (element counts, offsets, dtypes, int32 limits).
 */
export function encodeBatch(batch: WireBatch): Uint8Array {
  const plan = planStream(batch);
  const out = allocate(plan.total);
  writeStream(plan, (at) => [out, at], new Set());
  return out;
}

/**
 * Encodes a batch as the same canonical stream as {@link encodeBatch}, cut into parts so that large tensor
 * bytes are not copied: each body buffer of at least {@link SPLIT_MIN_BYTES} whose length is a multiple of 8 is
 * a part of its own, a view of the caller's TypedArray; the bytes between them (metadata, small buffers,
 * padding, the end-of-stream marker) are written into fresh parts. The concatenation of the parts is exactly
 * the `encodeBatch` result, and every cut lies at a multiple of 8 bytes (docs/protocol.md, "Split payloads").
 *
 * The parts alias the batch's memory: the batch must not be modified until the parts have been sent (for a
 * worker call: until the call settles).
 *
 * @example
 * const frames = encodeBatchParts(td.toWire()); // one part when no buffer is large, else 3 or more
 * @throws {@link WireFormatError} as {@link encodeBatch}.
 */
export function encodeBatchParts(batch: WireBatch): Uint8Array[] {
  const plan = planStream(batch);
  const bodyStart = plan.bodyStart;
  const own = new Set<BodyWrite>();
  for (const w of plan.body.writes) {
    if (w.kind === "bytes" && w.src.byteLength >= SPLIT_MIN_BYTES && w.src.byteLength % 8 === 0) own.add(w);
  }
  if (own.size === 0) {
    const out = allocate(plan.total);
    writeStream(plan, (at) => [out, at], own);
    return [out];
  }
  // Stream ranges [start, end) of the parts, in order; the written ones share one allocation.
  const ranges: Array<{ start: number; end: number; src?: Uint8Array }> = [];
  let pos = 0;
  for (const w of plan.body.writes) {
    if (!own.has(w) || w.kind !== "bytes") continue;
    const start = bodyStart + w.at;
    if (start > pos) ranges.push({ start: pos, end: start });
    ranges.push({ start, end: start + w.src.byteLength, src: w.src });
    pos = start + w.src.byteLength;
  }
  ranges.push({ start: pos, end: plan.total });
  const written = ranges.filter((r) => r.src === undefined);
  const memory = allocate(written.reduce((n, r) => n + r.end - r.start, 0));
  let at = 0;
  const parts = ranges.map((r) => {
    if (r.src !== undefined) return r.src;
    const part = memory.subarray(at, at + r.end - r.start);
    at += r.end - r.start;
    return part;
  });
  const locate: Locate = (offset) => {
    for (let i = 0; i < ranges.length; i++) {
      const r = ranges[i]!;
      if (offset < r.end || (offset === r.end && i === ranges.length - 1)) return [parts[i]!, offset - r.start];
    }
    throw new Error(`internal: stream offset ${offset} is outside the stream`);
  };
  writeStream(plan, locate, own);
  return parts;
}
