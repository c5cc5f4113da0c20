/**
 * Leaf types: the values a TensorDict holds besides dense and ragged tensors, strings and nested TensorDicts (TorchRL's
 * non-tensor data, such as conversations). TensorDict knows none of them: a leaf type registers once, from the module
 * that defines it, how its values count rows, follow batch operations, copy, print and cross the wire, and TensorDict
 * asks the registry. See docs/tensordict.md, "Leaf types".
 */
import type { WireColumn } from "../../bridge/wire/index.js";
import { InvalidArgumentError } from "./errors.js";
import type { RowPlan } from "./rows.js";

/**
 * The value of each registered leaf type, by kind. Empty here; the module that registers a leaf type adds its kind
 * with a module augmentation, so that TypeScript accepts its values in a TensorDict (`TensorDictValue`) and knows what
 * `TensorDict.getLeaf` returns:
 *
 * ```ts
 * declare module "posttrain/tensordict" {
 *   interface TensorDictLeaves { points: PointBatch } // kind name: value type
 * }
 * ```
 */
// eslint-disable-next-line @typescript-eslint/no-empty-object-type -- filled by module augmentation
export interface TensorDictLeaves {}

/** The kind name of a registered leaf type (a key of {@link TensorDictLeaves}). */
export type LeafKind = Extract<keyof TensorDictLeaves, string>;

/** A value of any registered leaf type. */
export type LeafValue = TensorDictLeaves[LeafKind];

/** The wire column kinds TensorDict reads and writes itself. */
type NativeWireKind = "dense" | "ragged" | "strings" | "struct";

/** The wire column kinds of `bridge/wire` that TensorDict leaves to registered leaf types. */
export type LeafWireKind = Exclude<WireColumn["kind"], NativeWireKind>;

/** The wire column type of kind `K`. */
export type LeafWireColumn<K extends LeafWireKind = LeafWireKind> = Extract<WireColumn, { readonly kind: K }>;

/**
 * How the values of one leaf type behave in a TensorDict. A value holds one entry per batch row, in row-major order
 * over the TensorDict's batch size (like a string leaf). Register it with {@link registerLeafType}; docs/tensordict.md
 * ("Leaf types") walks through a complete one.
 *
 * ```ts
 * const pointsLeaf: LeafType<PointBatch> = { kind: "points", name: "PointBatch", is: (v) => v instanceof PointBatch, ... };
 * ```
 */
export interface LeafType<T, K extends LeafWireKind = LeafWireKind> {
  /** The kind name: what `kindOf` returns and `LeafKindMismatchError` names, the key in {@link TensorDictLeaves}. */
  readonly kind: string;
  /** The class name, for messages (`"PointBatch has 5 rows but batch size [2, 3] has 6"`). */
  readonly name: string;
  /** The wire column kind values of this type travel as. */
  readonly wireKind: K;
  /** Whether `value` is of this type. */
  is(value: unknown): value is T;
  /** The number of rows `value` holds; a TensorDict accepts it when that is `prod(batchSize)`. */
  rows(value: T): number;
  /**
   * The rows a plan selects, as a new value (every batch operation: `index`, `split`, `stack`, `cat`, ...): run `r`
   * takes `plan.count[r]` rows of `sources[plan.source[r]]` from row `plan.start[r]`, in order. `takeRows` does it for
   * a value held as one JS value per row.
   */
  take(sources: readonly T[], plan: RowPlan): T;
  /** The copy `TensorDict.clone` holds: new storage for anything mutable (immutable row values may be shared). */
  clone(value: T): T;
  /** One line for `TensorDict.toString`, e.g. `PointBatch(2 rows)`. Default `String(value)`. */
  describe?(value: T): string;
  /**
   * A hint for a value that is not of this type but was probably meant as one (e.g. a lone row), appended to the
   * INVALID_ARGUMENT error of the constructor and `set`; `undefined` when it does not apply.
   */
  hint?(value: unknown): string | undefined;
  /** `value` as a wire column of kind {@link wireKind}; the column may share the value's data. */
  toWire(value: T): LeafWireColumn<K>;
  /**
   * The value of a wire column of kind {@link wireKind}, validated. `context` (e.g. `fromWire: key "p"`) starts error
   * messages; the TensorDict checks the row count afterwards.
   */
  fromWire(column: LeafWireColumn<K>, context: string): T;
}

/** Kind names TensorDict uses for the values it holds itself. */
const NATIVE_KINDS: ReadonlySet<string> = new Set(["tensor", "ragged", "strings", "tensordict"]);

/**
 * The public module that registers the leaf type of each wire kind, named in the error a program gets when it reads
 * such a column without having loaded that module. Keyed by every {@link LeafWireKind}, so a new wire kind in
 * `bridge/wire` must say where its leaf type lives.
 */
const REGISTERING_MODULES: { readonly [K in LeafWireKind]: string } = { history: "posttrain/data" };

const byKind = new Map<string, LeafType<unknown>>();
const byWireKind = new Map<LeafWireKind, LeafType<unknown>>();

/**
 * Registers a leaf type, so that TensorDicts hold, index, stack, cat, clone, print and send its values, and
 * `TensorDict.fromWire` reads columns of its wire kind as its values. Call it once, when the module defining the type
 * loads; registering the same object again does nothing. Throws INVALID_ARGUMENT for a kind of TensorDict's own
 * (`"tensor"`, `"ragged"`, `"strings"`, `"tensordict"`) or a kind or wire kind another leaf type has.
 *
 * ```ts
 * registerLeafType(pointsLeaf); // at the end of the module that defines PointBatch
 * ```
 */
export function registerLeafType<T, K extends LeafWireKind>(type: LeafType<T, K>): void {
  // Stored with T erased: TensorDict only ever hands a type the values its `is` accepted.
  const erased = type as unknown as LeafType<unknown>;
  const known = byKind.get(type.kind);
  if (known === erased) return;
  if (NATIVE_KINDS.has(type.kind)) throw new InvalidArgumentError(`registerLeafType: "${type.kind}" is a kind TensorDict holds itself`);
  if (known !== undefined) throw new InvalidArgumentError(`registerLeafType: kind "${type.kind}" is already registered (by ${known.name})`);
  const sameWire = byWireKind.get(type.wireKind);
  if (sameWire !== undefined) {
    throw new InvalidArgumentError(`registerLeafType: wire kind "${type.wireKind}" already carries leaf type "${sameWire.kind}" (${sameWire.name})`);
  }
  byKind.set(type.kind, erased);
  byWireKind.set(type.wireKind, erased);
}

/** The registered leaf type of `value`, or undefined (internal). */
export function leafTypeOf(value: unknown): LeafType<unknown> | undefined {
  for (const type of byKind.values()) if (type.is(value)) return type;
  return undefined;
}

/** The registered leaf type read from wire columns of kind `wireKind`, or undefined (internal). */
export function leafTypeForWire(wireKind: LeafWireKind): LeafType<unknown> | undefined {
  return byWireKind.get(wireKind);
}

/** The registered leaf types, in registration order (internal). */
export function leafTypes(): LeafType<unknown>[] {
  return [...byKind.values()];
}

/** The public module that registers the leaf type of wire kind `wireKind` (internal, for messages). */
export function registeringModule(wireKind: LeafWireKind): string {
  return REGISTERING_MODULES[wireKind];
}
