/**
 * Typed errors thrown by `sdk/tensordict`. Each one is a {@link PosttrainError} with a stable `code`,
 * so callers can branch on `err.code` or `instanceof` instead of parsing messages.
 *
 * `INVALID_ARGUMENT` reuses the project-wide {@link InvalidArgumentError} from the bridge, so one class
 * stands for that code everywhere in posttrain.
 */
import { InvalidArgumentError, PosttrainError } from "../core/errors.js";
import type { DType } from "../../bridge/wire/dtypes.js";
import type { LeafKind, LeafWireKind } from "./leaf.js";

export { InvalidArgumentError, PosttrainError };

/** A key (top-level string or nested tuple) as it appears in error messages. */
type KeyPath = string | readonly string[];

function formatKeyPath(key: KeyPath): string {
  return typeof key === "string" ? JSON.stringify(key) : JSON.stringify(key.length === 1 ? key[0] : key);
}

/** The most keys listed in a {@link KeyNotFoundError} message. */
const MAX_LISTED_KEYS = 40;

/** A key that is not in the TensorDict. The message names the key and lists the keys that exist. */
export class KeyNotFoundError extends PosttrainError {
  /** The key that was looked up. */
  readonly key: KeyPath;
  /** The keys that exist (nested keys included), in key order. */
  readonly availableKeys: readonly KeyPath[];

  constructor(key: KeyPath, availableKeys: readonly KeyPath[], context?: string) {
    const listed = availableKeys.slice(0, MAX_LISTED_KEYS).map(formatKeyPath).join(", ");
    const more = availableKeys.length > MAX_LISTED_KEYS ? `, ... (${availableKeys.length} keys)` : "";
    const existing = availableKeys.length === 0 ? "the TensorDict has no keys" : `existing keys: ${listed}${more}`;
    const prefix = context === undefined ? "" : `${context}: `;
    super("KEY_NOT_FOUND", `${prefix}key ${formatKeyPath(key)} not found; ${existing}`);
    this.key = key;
    this.availableKeys = availableKeys;
  }
}

/** A leaf or TensorDict whose leading dimensions do not match the batch size it must share. */
export class BatchSizeMismatchError extends PosttrainError {
  /** The batch size that was required. */
  readonly expected: readonly number[];
  /** The batch size (or leading shape) that was found. */
  readonly actual: readonly number[];

  constructor(message: string, expected: readonly number[], actual: readonly number[]) {
    super("BATCH_SIZE_MISMATCH", message);
    this.expected = expected;
    this.actual = actual;
  }
}

/** Two tensors whose dtypes must agree do not. The message names both. */
export class DTypeMismatchError extends PosttrainError {
  /** The dtype that was required (or the first side). */
  readonly expected: DType;
  /** The dtype that was found (or the second side). */
  readonly actual: DType;

  constructor(message: string, expected: DType, actual: DType) {
    super("DTYPE_MISMATCH", message);
    this.expected = expected;
    this.actual = actual;
  }
}

/** Two shapes that must agree do not (or data does not fill a shape). The message names both. */
export class ShapeMismatchError extends PosttrainError {
  /** The shape that was required (or the first side). */
  readonly expected: readonly number[];
  /** The shape that was found (or the second side). */
  readonly actual: readonly number[];

  constructor(message: string, expected: readonly number[], actual: readonly number[]) {
    super("SHAPE_MISMATCH", message);
    this.expected = expected;
    this.actual = actual;
  }
}

/** An index (or dimension) outside `[-size, size)`. */
export class IndexOutOfRangeError extends PosttrainError {
  /** The index as given. */
  readonly index: number;
  /** The size of the indexed dimension (or the number of dimensions, for a dimension index). */
  readonly size: number;

  constructor(message: string, index: number, size: number) {
    super("INDEX_OUT_OF_RANGE", message);
    this.index = index;
    this.size = size;
  }
}

/**
 * The kinds of value a TensorDict holds under a key: its own (`"tensor"`, `"ragged"`, `"strings"`, `"tensordict"`)
 * and those of the registered leaf types (`"history"` once `posttrain/data` is loaded; see `registerLeafType`).
 */
export type ValueKind = "tensor" | "ragged" | "strings" | "tensordict" | LeafKind;

/** A key holds another kind of value than the one asked for (e.g. `getTensor` on a ragged leaf). */
export class LeafKindMismatchError extends PosttrainError {
  /** The key that was looked up. */
  readonly key: KeyPath;
  /** The kind that was asked for. */
  readonly expected: ValueKind;
  /** The kind the key holds. */
  readonly actual: ValueKind;

  constructor(key: KeyPath, expected: ValueKind, actual: ValueKind, context?: string) {
    const prefix = context === undefined ? "" : `${context}: `;
    super("LEAF_KIND_MISMATCH", `${prefix}key ${formatKeyPath(key)} holds a ${actual} value, expected a ${expected}`);
    this.key = key;
    this.expected = expected;
    this.actual = actual;
  }
}

/**
 * A wire column of a kind whose leaf type no loaded module has registered (`TensorDict.fromWire` / `fromArrow`).
 * The message names the key and the module to import, e.g. `import posttrain/data` for a `"history"` column.
 */
export class LeafTypeNotRegisteredError extends PosttrainError {
  /** The key of the column. */
  readonly key: KeyPath;
  /** The wire kind of the column (`"history"`). */
  readonly wireKind: LeafWireKind;
  /** The public module that registers the leaf type of that wire kind (`"posttrain/data"`). */
  readonly module: string;

  constructor(key: KeyPath, wireKind: LeafWireKind, module: string, context?: string) {
    const prefix = context === undefined ? "" : `${context}: `;
    super(
      "LEAF_TYPE_NOT_REGISTERED",
      `${prefix}key ${formatKeyPath(key)} is a "${wireKind}" column but no leaf type is registered for that wire kind; import ${module}, which registers it`,
    );
    this.key = key;
    this.wireKind = wireKind;
    this.module = module;
  }
}
