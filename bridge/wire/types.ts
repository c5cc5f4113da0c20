import type { DType, TypedArrayOf } from "./dtypes.js";

/**
 * The data model of one TensorDict on the wire: a tree of columns sharing a batch of rows.
 * The batch dimensions are flattened into `rows = prod(batchSize)` rows (row-major); see docs/protocol.md.
 * This is deliberately plain data: `sdk/tensordict` builds its TensorDict on top of it without copying.
 */
export interface WireBatch {
  /** Batch dimensions; `[]` means a single row. */
  readonly batchSize: readonly number[];
  /** Top-level columns, in key order. */
  readonly columns: WireColumns;
}

/** Ordered (name, column) pairs. */
export type WireColumns = ReadonlyArray<readonly [name: string, column: WireColumn]>;

/** One column of a {@link WireBatch}. */
export type WireColumn = WireDense | WireRagged | WireStrings | WireHistory | WireStruct;

/** A dense tensor leaf: every row has shape `rowShape`; `data` holds `rows × prod(rowShape)` elements, row-major. */
export interface WireDense<D extends DType = DType> {
  readonly kind: "dense";
  readonly dtype: D;
  readonly rowShape: readonly number[];
  readonly data: TypedArrayOf<D>;
}

/**
 * A ragged tensor leaf (TorchRL's nested tensor, jagged along the first dimension after the batch):
 * row `i` has shape `[offsets[i+1] − offsets[i], ...tailShape]`, its elements are
 * `values[offsets[i] × prod(tailShape) .. offsets[i+1] × prod(tailShape))`.
 * `offsets` has `rows + 1` entries and need not start at 0.
 */
export interface WireRagged<D extends DType = DType> {
  readonly kind: "ragged";
  readonly dtype: D;
  readonly tailShape: readonly number[];
  readonly values: TypedArrayOf<D>;
  readonly offsets: Int32Array;
}

/** A string leaf: one string per row. */
export interface WireStrings {
  readonly kind: "strings";
  readonly values: readonly string[];
}

/**
 * A conversation leaf: one list of chat messages per row (TorchRL's `History`), as
 * `List<Struct<role, content, name, tool_calls, tool_responses, is_complete>>` on the wire (docs/protocol.md).
 */
export interface WireHistory {
  readonly kind: "history";
  readonly rows: ReadonlyArray<ReadonlyArray<WireChatMessage>>;
}

/** One chat message on the wire. Absent optional fields travel as empty values (`""`, `[]`, true). */
export interface WireChatMessage {
  readonly role: string;
  readonly content: string;
  /** Participant name (absent: `""` on the wire). */
  readonly name?: string;
  /** The tool calls as JSON text of an array (absent: `""` on the wire); the SDK parses it. */
  readonly toolCalls?: string;
  /** Tool responses carried by this message (absent: `[]`). */
  readonly toolResponses?: readonly string[];
  /** False for a message cut off before its end token (absent: true). */
  readonly isComplete?: boolean;
}

/** A nested TensorDict: its columns share the parent's rows. */
export interface WireStruct {
  readonly kind: "struct";
  readonly columns: WireColumns;
}
