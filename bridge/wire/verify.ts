/**
 * A bounds verifier for Arrow IPC message flatbuffers (format/Message.fbs, format/Schema.fbs).
 *
 * The flatbuffers JavaScript runtime has no verifier: reading a corrupted flatbuffer can loop over a garbage
 * vector length of billions and exhaust the heap. `decodeBatch` runs this check before handing the metadata to
 * apache-arrow, so every table, vector and string that apache-arrow will read lies inside the message.
 */

/** Thrown for a flatbuffer that does not verify; the caller wraps it into a `WireFormatError`. */
export class FlatbufferVerifyError extends Error {}

const MAX_DEPTH = 64;
const MAX_TABLES = 1_000_000;

// Union tags (format/Message.fbs, format/Schema.fbs).
const HEADER_SCHEMA = 1;
const HEADER_DICTIONARY_BATCH = 2;
const HEADER_RECORD_BATCH = 3;
const TYPE_TIMESTAMP = 10;
const TYPE_UNION = 14;

interface Table {
  readonly pos: number;
  readonly vtable: number;
  readonly vtableSize: number;
}

class Verifier {
  private readonly view: DataView;
  private readonly n: number;
  private tableCount = 0;

  constructor(bytes: Uint8Array) {
    this.view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    this.n = bytes.byteLength;
  }

  private need(at: number, size: number, what: string): void {
    if (!(at >= 0 && size >= 0 && at + size <= this.n)) {
      throw new FlatbufferVerifyError(`${what} at byte ${at} (${size} bytes) lies outside the ${this.n}-byte flatbuffer`);
    }
  }

  private u32(at: number): number {
    this.need(at, 4, "an offset");
    return this.view.getUint32(at, true);
  }

  /** The table that the uoffset at `at` points to. */
  tableAt(at: number, what: string): Table {
    if (++this.tableCount > MAX_TABLES) throw new FlatbufferVerifyError("too many flatbuffer tables");
    const pos = at + this.u32(at);
    this.need(pos, 4, what);
    const vtable = pos - this.view.getInt32(pos, true);
    this.need(vtable, 4, `the vtable of ${what}`);
    const vtableSize = this.view.getUint16(vtable, true);
    const objectSize = this.view.getUint16(vtable + 2, true);
    if (vtableSize < 4 || vtableSize % 2 !== 0) throw new FlatbufferVerifyError(`the vtable of ${what} is malformed`);
    this.need(vtable, vtableSize, `the vtable of ${what}`);
    this.need(pos, objectSize, what);
    return { pos, vtable, vtableSize };
  }

  /** Position of field `slot` of `t`, checked to hold `size` bytes; 0 when absent. */
  field(t: Table, slot: number, size: number): number {
    const entry = 4 + 2 * slot;
    if (entry + 2 > t.vtableSize) return 0;
    const offset = this.view.getUint16(t.vtable + entry, true);
    if (offset === 0) return 0;
    this.need(t.pos + offset, size, `field ${slot}`);
    return t.pos + offset;
  }

  u8Field(t: Table, slot: number): number {
    const at = this.field(t, slot, 1);
    return at === 0 ? 0 : this.view.getUint8(at);
  }

  /** A vector field: its element count and first element position; null when absent. */
  vector(t: Table, slot: number, elementSize: number, what: string): { start: number; length: number } | null {
    const at = this.field(t, slot, 4);
    if (at === 0) return null;
    const pos = at + this.u32(at);
    const length = this.u32(pos);
    this.need(pos + 4, length * elementSize, what);
    return { start: pos + 4, length };
  }

  tableField(t: Table, slot: number, what: string): Table | null {
    const at = this.field(t, slot, 4);
    return at === 0 ? null : this.tableAt(at, what);
  }

  tables(t: Table, slot: number, what: string, each: (table: Table) => void): void {
    const v = this.vector(t, slot, 4, what);
    if (v === null) return;
    for (let i = 0; i < v.length; i++) each(this.tableAt(v.start + 4 * i, what));
  }

  keyValues(t: Table, slot: number): void {
    this.tables(t, slot, "custom_metadata", (kv) => {
      this.vector(kv, 0, 1, "a metadata key");
      this.vector(kv, 1, 1, "a metadata value");
    });
  }

  arrowField(f: Table, depth: number): void {
    if (depth > MAX_DEPTH) throw new FlatbufferVerifyError("fields nested too deeply");
    this.vector(f, 0, 1, "a field name");
    const typeType = this.u8Field(f, 2);
    const type = this.tableField(f, 3, "a field type");
    if (type !== null && typeType === TYPE_UNION) this.vector(type, 1, 4, "union type ids");
    if (type !== null && typeType === TYPE_TIMESTAMP) this.vector(type, 1, 1, "a timestamp time zone");
    const dictionary = this.tableField(f, 4, "a dictionary encoding");
    if (dictionary !== null) this.tableField(dictionary, 1, "a dictionary index type");
    this.tables(f, 5, "field children", (child) => { this.arrowField(child, depth + 1); });
    this.keyValues(f, 6);
  }

  recordBatch(rb: Table): void {
    this.vector(rb, 1, 16, "field nodes");
    this.vector(rb, 2, 16, "buffers");
    this.tableField(rb, 3, "body compression");
    this.vector(rb, 4, 8, "variadic buffer counts");
  }

  message(): void {
    const m = this.tableAt(0, "the message");
    const headerType = this.u8Field(m, 1);
    const header = this.tableField(m, 2, "the message header");
    if (header !== null) {
      if (headerType === HEADER_SCHEMA) {
        this.tables(header, 1, "schema fields", (f) => { this.arrowField(f, 0); });
        this.keyValues(header, 2);
        this.vector(header, 3, 8, "schema features");
      } else if (headerType === HEADER_RECORD_BATCH) {
        this.recordBatch(header);
      } else if (headerType === HEADER_DICTIONARY_BATCH) {
        const data = this.tableField(header, 1, "dictionary batch data");
        if (data !== null) this.recordBatch(data);
      }
    }
    this.keyValues(m, 4);
  }
}

/**
 * Checks that every table, vector and string reachable from an Arrow `Message` flatbuffer lies inside it.
 *
 * @throws {@link FlatbufferVerifyError} naming what lies outside.
 */
export function verifyMessageFlatbuffer(metadata: Uint8Array): void {
  new Verifier(metadata).message();
}
