/**
 * The decoder of posttrain Arrow IPC streams (docs/protocol.md, "TensorDict payloads") into {@link WireBatch}.
 *
 * Arrow parsing is apache-arrow's `RecordBatchReader`; this module checks the stream framing first (so a
 * truncated stream is reported as such instead of being read short) and verifies each message flatbuffer
 * (`verify.ts`: the flatbuffers JS runtime has no verifier), then maps each Arrow column back to a wire column
 * using the `posttrain.*` and `ARROW:extension:*` metadata, checking every length it relies on.
 *
 * With one record batch the returned TypedArrays are views into the input (no copy) as long as the input starts
 * 8-byte aligned; an unaligned input is copied once first. Several record batches are concatenated (copied).
 */
import {
  DataType,
  Message,
  MessageHeader,
  RecordBatch,
  RecordBatchReader,
  Struct,
  makeData,
  type Data,
  type Field,
  type Schema,
} from "apache-arrow";

import { WireFormatError } from "../errors.js";
import { isDType, itemSize, typedArrayConstructor, type AnyTypedArray, type DType } from "./dtypes.js";
import { FIXED_SHAPE_TENSOR, HISTORY_FIELDS, HISTORY_KIND, META_KEYS, WIRE_FORMAT_VERSION, isJSONArrayText } from "./encode.js";
import { verifyMessageFlatbuffer } from "./verify.js";
import type {
  WireBatch,
  WireChatMessage,
  WireColumn,
  WireColumns,
  WireDense,
  WireHistory,
  WireRagged,
  WireStrings,
  WireStruct,
} from "./types.js";

const CONTINUATION = 0xffffffff;

/** The Arrow storage type (as apache-arrow prints it) that carries each dtype. */
const STORAGE_NAME: { readonly [D in DType]: string } = {
  float32: "Float32",
  float64: "Float64",
  float16: "Float16",
  bfloat16: "Uint16",
  int64: "Int64",
  int32: "Int32",
  int16: "Int16",
  int8: "Int8",
  uint8: "Uint8",
  bool: "Uint8",
};

function where(path: readonly string[]): string {
  return `column "${path.join("/")}"`;
}

function bad(path: readonly string[], message: string): never {
  throw new WireFormatError(`invalid tensordict payload: ${where(path)}: ${message}`);
}

function errorMessage(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

// ---------------------------------------------------------------------------------------------------------------
// Framing

/**
 * The payload as one byte stream, whole or in parts (docs/protocol.md, "Split payloads"): `bytes(pos, n)` is
 * the subarray of the one part that holds stream bytes `[pos, pos + n)`; a range that spans two parts is an error.
 */
interface Stream {
  readonly length: number;
  bytes(pos: number, n: number, what: () => string): Uint8Array;
}

function wholeStream(bytes: Uint8Array): Stream {
  return { length: bytes.byteLength, bytes: (pos, n) => bytes.subarray(pos, pos + n) };
}

function partsStream(parts: readonly Uint8Array[]): Stream {
  const starts: number[] = [];
  let length = 0;
  for (const part of parts) {
    starts.push(length);
    length += part.byteLength;
  }
  return {
    length,
    bytes: (pos, n, what) => {
      // The last part that starts at or before pos (parts are few: a linear scan).
      let i = starts.length - 1;
      while (i > 0 && starts[i]! > pos) i--;
      const local = pos - starts[i]!;
      if (local + n > parts[i]!.byteLength) {
        throw new WireFormatError(
          `invalid split payload: ${what()} (stream bytes ${pos}..${pos + n}) spans parts ${i} and ${i + 1}; ` +
            "a message header, its metadata and each body buffer must lie within one part",
        );
      }
      return parts[i]!.subarray(local, local + n);
    },
  };
}

/**
 * A decoded message flatbuffer whose header is read at most once: apache-arrow's `Message.header()` decodes it
 * again on every call, and a schema's decode is the dearest step of reading a small payload. A header that fails
 * to decode throws on every call, where it did before.
 */
class ParsedMessage {
  private decoded: unknown;
  private read = false;

  constructor(readonly message: Message) {}

  header(): unknown {
    if (!this.read) {
      this.decoded = this.message.header();
      this.read = true;
    }
    return this.decoded;
  }
}

/** Messages by their metadata bytes: a layout sends the same schema (and record batch) metadata call after call. */
const parsedMessages = new Map<string, ParsedMessage>();
const PARSED_MESSAGES_MAX = 256;

/** The verified, decoded message of `metadata`, from {@link parsedMessages} when the same bytes came before. */
function parseMessage(metadata: Uint8Array): ParsedMessage {
  const key = Buffer.from(metadata.buffer, metadata.byteOffset, metadata.byteLength).toString("latin1");
  const known = parsedMessages.get(key);
  if (known !== undefined) return known;
  // A copy: the message keeps its bytes, which may be a view of a large frame.
  const own = metadata.slice();
  verifyMessageFlatbuffer(own);
  const parsed = new ParsedMessage(Message.decode(own));
  if (parsedMessages.size >= PARSED_MESSAGES_MAX) parsedMessages.delete(parsedMessages.keys().next().value as string);
  parsedMessages.set(key, parsed);
  return parsed;
}

/** One record batch message of a stream and where its body starts. */
interface BatchMessage {
  readonly message: ParsedMessage;
  readonly bodyStart: number;
}

/**
 * Walks the encapsulated messages: continuation markers, metadata lengths, body lengths and buffer regions must
 * all lie inside the stream, the first message must be a schema, the others uncompressed record batches, and
 * the stream must end with the end-of-stream marker exactly at its end. Returns the schema message and the
 * record batch messages.
 */
function checkFraming(stream: Stream): { schema: ParsedMessage; batches: BatchMessage[] } {
  const n = stream.length;
  let pos = 0;
  let schema: ParsedMessage | undefined;
  const batches: BatchMessage[] = [];
  for (let index = 0; ; index++) {
    if (n - pos < 8) {
      throw new WireFormatError(
        `truncated Arrow stream: expected a message header (8 bytes) at byte ${pos}, but ${n - pos} bytes remain` +
          (n === 0 ? " (empty payload)" : ""),
      );
    }
    const header = stream.bytes(pos, 8, () => `the header of message ${index}`);
    const view = new DataView(header.buffer, header.byteOffset, 8);
    const marker = view.getUint32(0, true);
    if (marker !== CONTINUATION) {
      throw new WireFormatError(
        `not an Arrow IPC stream: expected the continuation marker 0xFFFFFFFF at byte ${pos}, ` +
          `found 0x${marker.toString(16).padStart(8, "0").toUpperCase()}`,
      );
    }
    const metadataLength = view.getInt32(4, true);
    if (metadataLength === 0) {
      if (index === 0) throw new WireFormatError("invalid Arrow stream: end-of-stream marker before the schema");
      if (pos + 8 !== n) {
        throw new WireFormatError(`invalid Arrow stream: ${n - pos - 8} unexpected bytes after the end-of-stream marker`);
      }
      return { schema: schema!, batches };
    }
    if (metadataLength < 0 || metadataLength % 8 !== 0) {
      throw new WireFormatError(
        `invalid Arrow stream: message ${index} at byte ${pos} declares metadata length ${metadataLength} ` +
          "(expected a positive multiple of 8)",
      );
    }
    const metadataEnd = pos + 8 + metadataLength;
    if (metadataEnd > n) {
      throw new WireFormatError(
        `truncated Arrow stream: message ${index} at byte ${pos} declares ${metadataLength} bytes of metadata, ` +
          `but ${n - pos - 8} bytes remain`,
      );
    }
    const metadata = stream.bytes(pos + 8, metadataLength, () => `the metadata of message ${index}`);
    let message: ParsedMessage;
    try {
      message = parseMessage(metadata);
    } catch (err) {
      throw new WireFormatError(`invalid Arrow stream: cannot read message ${index} at byte ${pos}: ${errorMessage(err)}`, {
        cause: err,
      });
    }
    const bodyLength = message.message.bodyLength;
    if (!Number.isSafeInteger(bodyLength) || bodyLength < 0) {
      throw new WireFormatError(`invalid Arrow stream: message ${index} declares body length ${bodyLength}`);
    }
    if (metadataEnd + bodyLength > n) {
      throw new WireFormatError(
        `truncated Arrow stream: message ${index} at byte ${pos} declares a body of ${bodyLength} bytes, ` +
          `but ${n - metadataEnd} bytes remain`,
      );
    }
    checkMessage(message, index, bodyLength);
    if (index === 0) schema = message;
    else batches.push({ message, bodyStart: metadataEnd });
    pos = metadataEnd + bodyLength;
  }
}

function checkMessage(message: ParsedMessage, index: number, bodyLength: number): void {
  const type = message.message.headerType as MessageHeader;
  if (index === 0) {
    if (type !== MessageHeader.Schema) {
      throw new WireFormatError(`invalid Arrow stream: the first message must be a schema, found header type ${type}`);
    }
    return;
  }
  if (type === MessageHeader.DictionaryBatch) {
    throw new WireFormatError("unsupported Arrow stream: dictionary batches are not part of the posttrain format");
  }
  if (type !== MessageHeader.RecordBatch) {
    throw new WireFormatError(`invalid Arrow stream: message ${index} has header type ${type}, expected a record batch`);
  }
  let regions: ReadonlyArray<{ offset: number; length: number }>;
  try {
    const header = message.header() as {
      buffers: ReadonlyArray<{ offset: number; length: number }>;
      compression: unknown;
    };
    if (header.compression !== null && header.compression !== undefined) {
      throw new WireFormatError("unsupported Arrow stream: compressed record batches are not supported");
    }
    regions = header.buffers;
  } catch (err) {
    if (err instanceof WireFormatError) throw err;
    throw new WireFormatError(`invalid Arrow stream: cannot read record batch ${index}: ${errorMessage(err)}`, {
      cause: err,
    });
  }
  for (const [i, region] of regions.entries()) {
    const { offset, length } = region;
    if (!(offset >= 0 && length >= 0 && offset + length <= bodyLength)) {
      throw new WireFormatError(
        `invalid Arrow stream: buffer ${i} of message ${index} (offset ${offset}, length ${length}) ` +
          `lies outside its ${bodyLength}-byte body`,
      );
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Metadata

function parseJson(text: string): unknown {
  try {
    return JSON.parse(text) as unknown;
  } catch {
    return undefined;
  }
}

function isIntArray(value: unknown, min: number): value is number[] {
  return Array.isArray(value) && value.every((d) => typeof d === "number" && Number.isSafeInteger(d) && d >= min);
}

function product(shape: readonly number[]): number {
  let n = 1;
  for (const d of shape) n *= d;
  return n;
}

function readBatchSize(metadata: ReadonlyMap<string, string>): number[] {
  const version = metadata.get(META_KEYS.version);
  if (version === undefined) {
    throw new WireFormatError(`invalid tensordict payload: the schema metadata has no "${META_KEYS.version}"`);
  }
  if (version !== WIRE_FORMAT_VERSION) {
    throw new WireFormatError(
      `unsupported tensordict payload: "${META_KEYS.version}" is ${JSON.stringify(version)}, ` +
        `this reader knows ${JSON.stringify(WIRE_FORMAT_VERSION)}`,
    );
  }
  const text = metadata.get(META_KEYS.batchSize);
  if (text === undefined) {
    throw new WireFormatError(`invalid tensordict payload: the schema metadata has no "${META_KEYS.batchSize}"`);
  }
  const value = parseJson(text);
  if (!isIntArray(value, 0) || !Number.isSafeInteger(product(value))) {
    throw new WireFormatError(
      `invalid tensordict payload: "${META_KEYS.batchSize}" must be a JSON array of non-negative integers, ` +
        `found ${JSON.stringify(text)}`,
    );
  }
  return value;
}

function readDType(field: Field, path: readonly string[]): DType {
  const dtype = field.metadata.get(META_KEYS.dtype);
  if (dtype === undefined) bad(path, `the field has no "${META_KEYS.dtype}" metadata`);
  if (!isDType(dtype)) bad(path, `unknown "${META_KEYS.dtype}" ${JSON.stringify(dtype)}`);
  return dtype;
}

/** How apache-arrow prints a type, e.g. `Float32` or `List<Uint16>`. */
function typeName(type: DataType): string {
  return (type as unknown as { toString(): string }).toString();
}

function checkStorage(type: DataType, dtype: DType, path: readonly string[], what: string): void {
  const expected = STORAGE_NAME[dtype];
  const isNumeric = DataType.isInt(type) || DataType.isFloat(type);
  if (!isNumeric || typeName(type) !== expected) {
    bad(path, `dtype ${dtype} must be stored as ${expected}, found ${what}${typeName(type)}`);
  }
}

function readFixedShape(field: Field, listSize: number, path: readonly string[]): number[] {
  const name = field.metadata.get(META_KEYS.extensionName);
  if (name !== FIXED_SHAPE_TENSOR) {
    bad(
      path,
      `a FixedSizeList column must carry "${META_KEYS.extensionName}" = "${FIXED_SHAPE_TENSOR}", ` +
        `found ${name === undefined ? "none" : JSON.stringify(name)}`,
    );
  }
  const text = field.metadata.get(META_KEYS.extensionMetadata) ?? "";
  const meta = parseJson(text);
  const shape: unknown = typeof meta === "object" && meta !== null ? (meta as { shape?: unknown }).shape : undefined;
  if (!isIntArray(shape, 0) || shape.length === 0) {
    bad(path, `"${META_KEYS.extensionMetadata}" must be a JSON object with a non-empty "shape", found ${JSON.stringify(text)}`);
  }
  const permutation = (meta as { permutation?: unknown }).permutation;
  if (permutation !== undefined && permutation !== null) {
    const identity = Array.isArray(permutation) && permutation.every((p, i) => p === i);
    if (!identity) bad(path, `fixed_shape_tensor permutation ${JSON.stringify(permutation)} is not supported`);
  }
  if (product(shape) !== listSize) {
    bad(path, `the row shape ${JSON.stringify(shape)} has ${product(shape)} elements, but the list size is ${listSize}`);
  }
  return shape;
}

function readRaggedShape(field: Field, listSize: number | null, path: readonly string[]): number[] {
  const text = field.metadata.get(META_KEYS.shape);
  if (text === undefined) bad(path, `a List column must carry "${META_KEYS.shape}" metadata`);
  const shape = parseJson(text);
  if (!isIntArray(shape, -1) || shape[0] !== -1 || shape.slice(1).some((d) => d < 0)) {
    bad(path, `"${META_KEYS.shape}" must be [-1, ...non-negative integers], found ${JSON.stringify(text)}`);
  }
  const tail = shape.slice(1);
  if (listSize === null && tail.length > 0) {
    bad(path, `"${META_KEYS.shape}" ${text} has a tail shape, but the list items are not fixed-size lists`);
  }
  if (listSize !== null && (tail.length === 0 || product(tail) !== listSize)) {
    bad(path, `"${META_KEYS.shape}" ${text} does not match the item list size ${listSize}`);
  }
  return tail;
}

// ---------------------------------------------------------------------------------------------------------------
// Columns of one record batch

function checkNode(data: Data, expectedLength: number, path: readonly string[], what: string): void {
  if (data.length !== expectedLength) {
    bad(path, `${what} has ${data.length} entries, expected ${expectedLength}`);
  }
  if (data.nullCount > 0) bad(path, `${what} has ${data.nullCount} nulls; the posttrain format has no nulls`);
}

/** The offsets of a List or Utf8 node, checked: `length + 1` non-negative, non-decreasing, last ≤ `childLength`. */
function listOffsets(data: Data, childLength: number, path: readonly string[]): Int32Array {
  const raw: unknown = data.valueOffsets;
  if (!(raw instanceof Int32Array)) bad(path, "cannot read the offsets buffer");
  const rows = data.length;
  if (rows === 0 && raw.length === 0) return new Int32Array(1);
  if (raw.length < data.offset + rows + 1) {
    bad(path, `the offsets buffer holds ${raw.length} entries, expected ${data.offset + rows + 1}`);
  }
  const offsets = raw.subarray(data.offset, data.offset + rows + 1);
  if (offsets[0]! < 0) bad(path, `offsets[0] is ${offsets[0]!}, expected >= 0`);
  for (let i = 0; i < rows; i++) {
    if (offsets[i + 1]! < offsets[i]!) {
      bad(path, `offsets must be non-decreasing, found offsets[${i}] = ${offsets[i]!} > offsets[${i + 1}] = ${offsets[i + 1]!}`);
    }
  }
  if (offsets[rows]! > childLength) bad(path, `the last offset is ${offsets[rows]!}, but the values hold ${childLength}`);
  return offsets;
}

const UTF8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

/**
 * A reader of the strings of a Utf8 node of `count` entries (offsets checked): `read(k, label)` decodes entry `k`,
 * and names it with `label()` when its bytes are not valid UTF-8.
 */
function utf8Reader(data: Data, count: number, path: readonly string[], what: string): (k: number, label: () => string) => string {
  checkNode(data, count, path, what);
  const bytes: unknown = data.values;
  if (!(bytes instanceof Uint8Array)) bad(path, `cannot read the string data buffer of ${what}`);
  const offsets = listOffsets(data, bytes.length, path);
  return (k, label) => {
    const a = offsets[k]!;
    const b = offsets[k + 1]!;
    if (a === b) return "";
    try {
      return UTF8.decode(bytes.subarray(a, b));
    } catch (err) {
      return bad(path, `${label()} is not valid UTF-8 (${errorMessage(err)})`);
    }
  };
}

function readStrings(data: Data, rows: number, path: readonly string[]): WireStrings {
  const read = utf8Reader(data, rows, path, "the column");
  const values: string[] = new Array<string>(rows);
  for (let i = 0; i < rows; i++) values[i] = read(i, () => `row ${i}`);
  return { kind: "strings", values };
}

const HISTORY_LAYOUT =
  "List<Struct<role: Utf8, content: Utf8, name: Utf8, tool_calls: Utf8, tool_responses: List<Utf8>, is_complete: Uint8>>";

/** Checks the Arrow type of a column that carries `posttrain.kind` (only `history` exists). */
function checkKind(field: Field, kind: string, path: readonly string[]): void {
  if (kind !== HISTORY_KIND) bad(path, `unknown "${META_KEYS.kind}" ${JSON.stringify(kind)}`);
  const type = field.type as DataType;
  const item = DataType.isList(type) ? (type.children[0]?.type as DataType | undefined) : undefined;
  const children = item !== undefined && DataType.isStruct(item) ? item.children : [];
  const matches =
    children.length === HISTORY_FIELDS.length &&
    children.every((child, k) => {
      const t = child.type as DataType;
      if (child.name !== HISTORY_FIELDS[k]) return false;
      if (k < 4) return DataType.isUtf8(t);
      if (k === 4) return DataType.isList(t) && DataType.isUtf8(t.children[0]?.type as DataType);
      return DataType.isInt(t) && typeName(t) === "Uint8";
    });
  if (!matches) bad(path, `a "${META_KEYS.kind}" = "${HISTORY_KIND}" column must be ${HISTORY_LAYOUT}, found ${typeName(type)}`);
  const dtype = children[5]!.metadata.get(META_KEYS.dtype);
  if (dtype !== "bool") {
    bad(path, `the is_complete field must carry "${META_KEYS.dtype}" = "bool", found ${dtype === undefined ? "none" : JSON.stringify(dtype)}`);
  }
}

/** A history column (type already checked by `checkKind`): absent optional values are omitted (docs/protocol.md). */
function readHistory(data: Data, rows: number, path: readonly string[]): WireHistory {
  checkNode(data, rows, path, "the column");
  const struct = data.children[0];
  if (struct === undefined || struct.children.length !== HISTORY_FIELDS.length) bad(path, "the message struct data does not match its fields");
  const count = struct.length;
  if (struct.nullCount > 0) bad(path, `the messages have ${struct.nullCount} nulls; the posttrain format has no nulls`);
  const offsets = listOffsets(data, count, path);
  const [role, content, name, toolCalls] = [0, 1, 2, 3].map((k) =>
    utf8Reader(struct.children[k]!, count, path, `the ${HISTORY_FIELDS[k]!} field`),
  ) as [ReturnType<typeof utf8Reader>, ReturnType<typeof utf8Reader>, ReturnType<typeof utf8Reader>, ReturnType<typeof utf8Reader>];
  const responsesList = struct.children[4]!;
  const responsesItems = responsesList.children[0];
  if (responsesItems === undefined) bad(path, "the tool_responses List has no child");
  checkNode(responsesList, count, path, "the tool_responses field");
  const responseOffsets = listOffsets(responsesList, responsesItems.length, path);
  const response = utf8Reader(responsesItems, responsesItems.length, path, "the tool_responses items");
  const completeData = struct.children[5]!;
  checkNode(completeData, count, path, "the is_complete field");
  const complete = primitiveValuesAt(completeData, "uint8", 0, count, path) as Uint8Array;

  const out: WireChatMessage[][] = new Array<WireChatMessage[]>(rows);
  for (let i = 0; i < rows; i++) {
    const row: WireChatMessage[] = [];
    for (let k = offsets[i]!, j = 0; k < offsets[i + 1]!; k++, j++) {
      const label = (what: string) => () => `row ${i}, message ${j}: ${what}`;
      const message: { -readonly [K in keyof WireChatMessage]: WireChatMessage[K] } = {
        role: role(k, label("role")),
        content: content(k, label("content")),
      };
      const participant = name(k, label("name"));
      if (participant !== "") message.name = participant;
      const calls = toolCalls(k, label("tool_calls"));
      if (calls !== "") {
        if (!isJSONArrayText(calls)) {
          const shown = calls.length > 40 ? `${calls.slice(0, 40)}…` : calls;
          bad(path, `row ${i}, message ${j}: tool_calls must be the JSON text of an array, found ${JSON.stringify(shown)}`);
        }
        message.toolCalls = calls;
      }
      const r0 = responseOffsets[k]!;
      const r1 = responseOffsets[k + 1]!;
      if (r1 > r0) {
        const responses: string[] = [];
        for (let r = r0; r < r1; r++) responses.push(response(r, label(`tool_responses[${r - r0}]`)));
        message.toolResponses = responses;
      }
      const flag = complete[k]!;
      if (flag === 0) message.isComplete = false;
      else if (flag !== 1) bad(path, `row ${i}, message ${j}: is_complete is ${flag}, expected 0 or 1`);
      row.push(message);
    }
    out[i] = row;
  }
  return { kind: "history", rows: out };
}

function readColumn(field: Field, data: Data, rows: number, path: readonly string[]): WireColumn {
  const type = field.type as DataType;
  const kind = field.metadata.get(META_KEYS.kind);
  if (kind !== undefined) {
    checkKind(field, kind, path);
    return readHistory(data, rows, path);
  }
  if (DataType.isStruct(type)) {
    checkNode(data, rows, path, "the column");
    const children = type.children;
    if (data.children.length !== children.length) bad(path, "the struct data does not match its fields");
    const columns: [string, WireColumn][] = children.map((child, i) => [
      child.name,
      readColumn(child, data.children[i]!, rows, [...path, child.name]),
    ]);
    checkUniqueNames(columns, path);
    return { kind: "struct", columns } satisfies WireStruct;
  }
  if (DataType.isUtf8(type)) return readStrings(data, rows, path);
  if (DataType.isInt(type) || DataType.isFloat(type)) {
    const dtype = readDType(field, path);
    checkStorage(type, dtype, path, "");
    checkNode(data, rows, path, "the column");
    return { kind: "dense", dtype, rowShape: [], data: primitiveValuesAt(data, dtype, 0, rows, path) };
  }
  if (DataType.isFixedSizeList(type)) {
    const dtype = readDType(field, path);
    const child = data.children[0];
    const itemType = type.children[0]?.type as DataType | undefined;
    if (child === undefined || itemType === undefined) bad(path, "the FixedSizeList has no child");
    checkStorage(itemType, dtype, path, "FixedSizeList of ");
    const rowShape = readFixedShape(field, type.listSize, path);
    checkNode(data, rows, path, "the column");
    const count = rows * type.listSize;
    checkNode(child, data.offset * type.listSize + count, path, "the FixedSizeList child");
    const values = primitiveValuesAt(child, dtype, data.offset * type.listSize, count, path);
    return { kind: "dense", dtype, rowShape, data: values };
  }
  if (DataType.isList(type)) {
    const child = data.children[0];
    const itemType = type.children[0]?.type as DataType | undefined;
    if (child === undefined || itemType === undefined) bad(path, "the List has no child");
    if (DataType.isStruct(itemType)) bad(path, `a List of Struct column must carry "${META_KEYS.kind}" = "${HISTORY_KIND}"`);
    const dtype = readDType(field, path);
    checkNode(data, rows, path, "the column");
    if (child.nullCount > 0) bad(path, "the list items have nulls; the posttrain format has no nulls");
    let tailShape: number[];
    let perItem = 1;
    let leaf = child;
    if (DataType.isFixedSizeList(itemType)) {
      const leafType = itemType.children[0]?.type as DataType | undefined;
      const grandchild = child.children[0];
      if (leafType === undefined || grandchild === undefined) bad(path, "the List item FixedSizeList has no child");
      checkStorage(leafType, dtype, path, "List of FixedSizeList of ");
      tailShape = readRaggedShape(field, itemType.listSize, path);
      perItem = itemType.listSize;
      checkNode(grandchild, child.length * perItem, path, "the FixedSizeList child");
      leaf = grandchild;
    } else {
      checkStorage(itemType, dtype, path, "List of ");
      tailShape = readRaggedShape(field, null, path);
    }
    const offsets = listOffsets(data, child.length, path);
    const values = primitiveValuesAt(leaf, dtype, 0, child.length * perItem, path);
    return { kind: "ragged", dtype, tailShape, values, offsets };
  }
  return bad(path, `unsupported Arrow type ${typeName(type)}`);
}

/** `count` elements of a primitive node starting at element `start` (relative to the node's own offset). */
function primitiveValuesAt(data: Data, dtype: DType, start: number, count: number, path: readonly string[]): AnyTypedArray {
  const values: unknown = data.values;
  const ctor = typedArrayConstructor(dtype);
  if (count === 0) return new ctor(0);
  if (!(values instanceof ctor)) bad(path, `cannot read the ${dtype} values buffer`);
  const from = data.offset + start;
  if (values.length < from + count) {
    bad(path, `the values buffer holds ${values.length * itemSize(dtype)} bytes, expected ${(from + count) * itemSize(dtype)}`);
  }
  return values.subarray(from, from + count);
}

function checkUniqueNames(columns: ReadonlyArray<readonly [string, WireColumn]>, path: readonly string[]): void {
  const seen = new Set<string>();
  for (const [name] of columns) {
    if (seen.has(name)) bad([...path, name], "duplicate key");
    seen.add(name);
  }
}

function readRecordBatch(fields: readonly Field[], batch: RecordBatch): WireColumns {
  const rows = batch.numRows;
  const data = batch.data;
  if (data.children.length !== fields.length) {
    throw new WireFormatError(
      `invalid tensordict payload: a record batch has ${data.children.length} columns, the schema ${fields.length}`,
    );
  }
  const columns: [string, WireColumn][] = fields.map((field, i) => [
    field.name,
    readColumn(field, data.children[i]!, rows, [field.name]),
  ]);
  checkUniqueNames(columns, []);
  return columns;
}

// ---------------------------------------------------------------------------------------------------------------
// Several record batches

function concatTyped<T extends AnyTypedArray>(dtype: DType, parts: readonly T[]): T {
  const ctor = typedArrayConstructor(dtype);
  let length = 0;
  for (const p of parts) length += p.length;
  const out = new ctor(length);
  let at = 0;
  for (const p of parts) {
    (out as unknown as { set(a: T, at: number): void }).set(p, at);
    at += p.length;
  }
  return out as T;
}

function concatColumn(parts: readonly WireColumn[]): WireColumn {
  const first = parts[0]!;
  switch (first.kind) {
    case "dense": {
      const dense = parts as readonly WireDense[];
      return { ...first, data: concatTyped(first.dtype, dense.map((p) => p.data)) };
    }
    case "ragged": {
      const ragged = parts as readonly WireRagged[];
      const perItem = product(first.tailShape);
      const rows = ragged.reduce((n, p) => n + p.offsets.length - 1, 0);
      const offsets = new Int32Array(rows + 1);
      let row = 0;
      let base = 0;
      const slices: AnyTypedArray[] = [];
      for (const p of ragged) {
        const start = p.offsets[0]!;
        for (let i = 1; i < p.offsets.length; i++) offsets[row + i] = base + p.offsets[i]! - start;
        row += p.offsets.length - 1;
        const end = p.offsets[p.offsets.length - 1]!;
        if (base + end - start > 2 ** 31 - 1) {
          throw new WireFormatError("invalid tensordict payload: the concatenated ragged column exceeds int32 offsets");
        }
        base += end - start;
        slices.push(p.values.subarray(start * perItem, end * perItem));
      }
      return { ...first, values: concatTyped(first.dtype, slices), offsets };
    }
    case "strings":
      return { kind: "strings", values: (parts as readonly WireStrings[]).flatMap((p) => p.values) };
    case "history":
      return { kind: "history", rows: (parts as readonly WireHistory[]).flatMap((p) => p.rows) };
    case "struct":
      return { kind: "struct", columns: concatColumns((parts as readonly WireStruct[]).map((p) => p.columns)) };
  }
}

function concatColumns(batches: readonly WireColumns[]): WireColumns {
  const first = batches[0]!;
  return first.map(([name], i) => [name, concatColumn(batches.map((b) => b[i]![1]))] as const);
}

// ---------------------------------------------------------------------------------------------------------------

/** The metadata of a record batch message: its row count, field nodes and body buffer regions. */
interface BatchHeader {
  readonly length: number;
  readonly nodes: ReadonlyArray<{ readonly length: number; readonly nullCount: number }>;
  readonly buffers: ReadonlyArray<{ readonly offset: number; readonly length: number }>;
}

/**
 * The Arrow data of one record batch whose body buffers are views into the parts of `stream` (no copy): the
 * schema's fields are walked in pre-order, each taking its field node and buffers as the Arrow format lays them
 * out. Only the types of the posttrain layout are accepted.
 */
function loadRecordBatch(schema: Schema, batch: BatchMessage, stream: Stream, index: number): RecordBatch {
  const header = batch.message.header() as BatchHeader;
  let nodeIndex = 0;
  let bufferIndex = 0;
  const what = `record batch ${index}`;
  const nextNode = (): { readonly length: number; readonly nullCount: number } => {
    const node = header.nodes[nodeIndex++];
    if (node === undefined) throw new WireFormatError(`invalid Arrow stream: ${what} has fewer field nodes than its schema needs`);
    return node;
  };
  const nextBuffer = (): Uint8Array => {
    const k = bufferIndex++;
    const region = header.buffers[k];
    if (region === undefined) throw new WireFormatError(`invalid Arrow stream: ${what} has fewer buffers than its schema needs`);
    return stream.bytes(batch.bodyStart + region.offset, region.length, () => `buffer ${k} of ${what}`);
  };
  const load = (type: DataType): Data => {
    const { length, nullCount } = nextNode();
    const nullBitmap = nextBuffer();
    const common = { length, nullCount, nullBitmap };
    if (DataType.isInt(type)) return makeData({ type, ...common, data: nextBuffer() });
    if (DataType.isFloat(type)) return makeData({ type, ...common, data: nextBuffer() });
    if (DataType.isUtf8(type)) {
      const valueOffsets = nextBuffer();
      return makeData({ type, ...common, valueOffsets, data: nextBuffer() });
    }
    if (DataType.isList(type)) {
      const valueOffsets = nextBuffer();
      return makeData({ type, ...common, valueOffsets, child: load(childType(type)) });
    }
    if (DataType.isFixedSizeList(type)) return makeData({ type, ...common, child: load(childType(type)) });
    if (DataType.isStruct(type)) return makeData({ type, ...common, children: type.children.map((f) => load(f.type as DataType)) });
    throw new WireFormatError(`unsupported Arrow type ${typeName(type)} in ${what}`);
  };
  const children = schema.fields.map((field) => load(field.type as DataType));
  if (nodeIndex !== header.nodes.length || bufferIndex !== header.buffers.length) {
    throw new WireFormatError(
      `invalid Arrow stream: ${what} has ${header.nodes.length} field nodes and ${header.buffers.length} buffers, ` +
        `its schema takes ${nodeIndex} and ${bufferIndex}`,
    );
  }
  const struct = makeData({ type: new Struct(schema.fields), length: header.length, nullCount: 0, children });
  return new RecordBatch(schema, struct);
}

function childType(type: DataType): DataType {
  const child = type.children[0]?.type as DataType | undefined;
  if (child === undefined) throw new WireFormatError(`invalid Arrow stream: the ${typeName(type)} field has no child`);
  return child;
}

/** The part itself when it starts 8-byte aligned, else an aligned copy (TypedArray views need alignment). */
function aligned(part: Uint8Array): Uint8Array {
  if (part.byteOffset % 8 === 0) return part;
  const copy = new Uint8Array(part.byteLength);
  copy.set(part);
  return copy;
}

/** Row count checks and the mapping of the record batches to wire columns, shared by both decoders. */
function toWireBatch(fields: readonly Field[], metadata: ReadonlyMap<string, string>, batches: readonly RecordBatch[]): WireBatch {
  const batchSize = readBatchSize(metadata);
  const rows = product(batchSize);
  let found = 0;
  for (const b of batches) found += b.numRows;
  if (found !== rows) {
    throw new WireFormatError(
      `invalid tensordict payload: batch size ${JSON.stringify(batchSize)} means ${rows} rows, ` +
        `but the record batches hold ${found}`,
    );
  }
  try {
    if (batches.length === 1) return { batchSize, columns: readRecordBatch(fields, batches[0]!) };
    if (batches.length === 0) {
      // A stream without record batches: every column is empty (rows is 0 here).
      return { batchSize, columns: emptyColumns(fields, []) };
    }
    return { batchSize, columns: concatColumns(batches.map((b) => readRecordBatch(fields, b))) };
  } catch (err) {
    if (err instanceof WireFormatError) throw err;
    throw new WireFormatError(`invalid tensordict payload: ${errorMessage(err)}`, { cause: err });
  }
}

function decodeParts(parts: readonly Uint8Array[]): WireBatch {
  if (parts.length === 0) throw new WireFormatError("invalid split payload: no parts");
  const input = parts.map((part, i) => {
    if (!(part instanceof Uint8Array)) throw new WireFormatError(`invalid split payload: part ${i} is not a Uint8Array`);
    if (part.byteLength === 0) throw new WireFormatError(`invalid split payload: part ${i} is empty`);
    return aligned(part);
  });
  if (input.length === 1) return decodeBatch(input[0]!);
  const stream = partsStream(input);
  const framing = checkFraming(stream);
  let schema: Schema;
  let batches: RecordBatch[];
  try {
    schema = framing.schema.header() as Schema;
    batches = framing.batches.map((b, i) => loadRecordBatch(schema, b, stream, i + 1));
  } catch (err) {
    if (err instanceof WireFormatError) throw err;
    throw new WireFormatError(`invalid Arrow stream: ${errorMessage(err)}`, { cause: err });
  }
  return toWireBatch(schema.fields, schema.metadata, batches);
}

/**
 * Decodes one Arrow IPC stream (as written by `encodeBatch` or by the Python worker) into a {@link WireBatch}.
 *
 * With a single record batch the TypedArrays of the result are views into `bytes` when `bytes` starts at a
 * multiple of 8 bytes (as a received ZeroMQ frame does); otherwise `bytes` is copied once to an aligned buffer.
 * Streams with several record batches are accepted and concatenated (a copy). The result's ragged offsets are
 * those of the stream (they start at 0 for canonical streams).
 *
 * The stream may come in parts (`encodeBatchParts`, or the frames of a split payload: docs/protocol.md, "Split
 * payloads"): the parts are read in place, each message header, metadata and body buffer within one part, and
 * the result's TypedArrays view the parts (a part that does not start 8-byte aligned is copied first).
 *
 * @example
 * const batch = decodeBatch(encodeBatchParts(td.toWire())); // views into td's own arrays for large buffers
 * @param bytes - the whole stream (schema message, record batches, end-of-stream marker, nothing after), or
 *   its parts in order.
 * @throws {@link WireFormatError} for anything that is not a valid posttrain stream: truncated or malformed
 *   framing, an Arrow parse failure, missing or invalid `posttrain.*` metadata, an unsupported Arrow type, nulls,
 *   lengths that do not add up, or a header, metadata or buffer that spans two parts. The message names the
 *   column concerned.
 */
export function decodeBatch(bytes: Uint8Array | readonly Uint8Array[]): WireBatch {
  if (!(bytes instanceof Uint8Array)) {
    if (Array.isArray(bytes)) return decodeParts(bytes);
    const found: unknown = bytes;
    throw new WireFormatError(`expected the stream as a Uint8Array, found ${found === null ? "null" : typeof found}`);
  }
  const input = aligned(bytes);
  const framing = checkFraming(wholeStream(input));
  let fields: Field[];
  let metadata: Map<string, string>;
  let batches: RecordBatch[];
  try {
    const reader = RecordBatchReader.from(input).open();
    const schema = reader.schema;
    fields = schema.fields;
    metadata = schema.metadata;
    // apache-arrow yields one empty placeholder batch for a stream without record batches: skip it.
    batches = framing.batches.length === 0 ? [] : [...reader];
  } catch (err) {
    throw new WireFormatError(`invalid Arrow stream: ${errorMessage(err)}`, { cause: err });
  }
  return toWireBatch(fields, metadata, batches);
}

function emptyColumns(fields: readonly Field[], path: readonly string[]): WireColumns {
  const columns: [string, WireColumn][] = fields.map((field) => {
    const here = [...path, field.name];
    const type = field.type as DataType;
    const kind = field.metadata.get(META_KEYS.kind);
    if (kind !== undefined) {
      checkKind(field, kind, here);
      return [field.name, { kind: "history", rows: [] }];
    }
    if (DataType.isStruct(type)) return [field.name, { kind: "struct", columns: emptyColumns(type.children, here) }];
    if (DataType.isUtf8(type)) return [field.name, { kind: "strings", values: [] }];
    const listItem = DataType.isList(type) ? (type.children[0]?.type as DataType | undefined) : undefined;
    if (listItem !== undefined && DataType.isStruct(listItem)) {
      bad(here, `a List of Struct column must carry "${META_KEYS.kind}" = "${HISTORY_KIND}"`);
    }
    const dtype = readDType(field, here);
    const data = typedArrayConstructor(dtype);
    if (DataType.isInt(type) || DataType.isFloat(type)) {
      checkStorage(type, dtype, here, "");
      return [field.name, { kind: "dense", dtype, rowShape: [], data: new data(0) }];
    }
    if (DataType.isFixedSizeList(type)) {
      return [field.name, { kind: "dense", dtype, rowShape: readFixedShape(field, type.listSize, here), data: new data(0) }];
    }
    if (DataType.isList(type)) {
      const listSize = listItem !== undefined && DataType.isFixedSizeList(listItem) ? listItem.listSize : null;
      const tailShape = readRaggedShape(field, listSize, here);
      return [field.name, { kind: "ragged", dtype, tailShape, values: new data(0), offsets: new Int32Array(1) }];
    }
    return bad(here, `unsupported Arrow type ${typeName(type)}`);
  });
  checkUniqueNames(columns, path);
  return columns;
}
