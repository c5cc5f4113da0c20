/**
 * TensorDict: named leaves sharing a leading batch size, as in TorchRL's `tensordict`. It holds dense and ragged
 * tensors, strings and nested TensorDicts itself, and every other leaf through its registered leaf type (leaf.ts).
 */
import { decodeBatch, encodeBatch, encodeBatchParts, type WireBatch, type WireColumn, type WireColumns } from "../../bridge/wire/index.js";
import type { DType } from "../../bridge/wire/dtypes.js";
import {
  BatchSizeMismatchError,
  DTypeMismatchError,
  InvalidArgumentError,
  KeyNotFoundError,
  LeafKindMismatchError,
  LeafTypeNotRegisteredError,
  ShapeMismatchError,
  type ValueKind,
} from "./errors.js";
import { planCat, planIndex, planStack, planUnbind, type Index, type IndexPlan } from "./indexing.js";
import { canonicalKey, formatKey, keyPath, type NestedKey } from "./keys.js";
import {
  leafTypeForWire,
  leafTypeOf,
  leafTypes,
  registeringModule,
  type LeafKind,
  type LeafValue,
  type LeafWireColumn,
  type TensorDictLeaves,
} from "./leaf.js";
import { RaggedTensor } from "./ragged.js";
import { takeDense, takeRagged, takeRows, type RowPlan } from "./rows.js";
import { checkShape, formatShape, normalizeDim, prod, resolveShape, sameShape } from "./shape.js";
import { Tensor } from "./tensor.js";
import { denseFromWire, denseToWire, raggedFromWire, raggedToWire } from "./wire.js";

/** A tensor leaf: dense or ragged. */
export type TensorLeaf = Tensor | RaggedTensor;

/**
 * A value a TensorDict holds under a key: a dense {@link Tensor} (shape starts with the batch size), a
 * {@link RaggedTensor} (one row per batch element), strings (one per batch element, row-major), a value of a
 * registered leaf type ({@link TensorDictLeaves}; one entry per batch element, row-major) or a nested TensorDict (same
 * batch size).
 */
export type TensorDictValue = Tensor | RaggedTensor | readonly string[] | LeafValue | TensorDict;

/** The plain-object form accepted by the constructor and `set`: nested objects become nested TensorDicts. */
export interface TensorDictSource {
  readonly [key: string]: TensorDictValue | TensorDictSource;
}

/** Options of the {@link TensorDict} constructor. */
export interface TensorDictOptions {
  /** The leading dimensions every leaf shares (default `[]`: a single element). */
  readonly batchSize?: readonly number[];
}

/** Options of {@link TensorDict.keys}, {@link TensorDict.values} and {@link TensorDict.entries}. */
export interface KeysOptions {
  /** Include the keys inside nested TensorDicts, as tuples (default false: top-level keys only). */
  readonly nested?: boolean;
  /** Leave out the keys of nested TensorDicts themselves, keeping only leaves (default false). */
  readonly leavesOnly?: boolean;
}

/** The function {@link TensorDict.apply} calls on each tensor leaf; `undefined` drops the leaf. */
export type ApplyFunction = (value: TensorLeaf, key: NestedKey) => TensorLeaf | undefined;

/**
 * The kind of a value: `"tensor"`, `"ragged"`, `"strings"`, `"tensordict"` or the kind of its registered leaf type.
 *
 * ```ts
 * kindOf(td.get("obs")); // "tensor"
 * ```
 */
export function kindOf(value: TensorDictValue): ValueKind {
  if (value instanceof Tensor) return "tensor";
  if (value instanceof RaggedTensor) return "ragged";
  if (value instanceof TensorDict) return "tensordict";
  const leaf = leafTypeOf(value);
  if (leaf !== undefined) return leaf.kind as LeafKind;
  return "strings";
}

/** Whether `a` after its first `aFrom` sizes equals `b` after its first `bFrom` (without slicing either). */
function sameTail(a: readonly number[], aFrom: number, b: readonly number[], bFrom: number): boolean {
  if (a.length - aFrom !== b.length - bFrom) return false;
  for (let i = aFrom, j = bFrom; i < a.length; i++, j++) if (a[i] !== b[j]) return false;
  return true;
}

function isPlainObject(value: unknown): value is TensorDictSource {
  if (typeof value !== "object" || value === null) return false;
  const proto: unknown = Object.getPrototypeOf(value);
  return proto === Object.prototype || proto === null;
}

function describe(value: unknown): string {
  if (value === null) return "null";
  if (typeof value === "object") return value.constructor.name;
  return typeof value;
}

/**
 * Named leaves with a shared leading batch size (TorchRL's `TensorDict`).
 *
 * - Keys are strings; nested keys are tuples such as `["next", "reward"]` (`["obs"]` is the same as `"obs"`).
 * - `set`, `del` mutate in place and return `this`; every other operation returns a new TensorDict.
 * - Batch operations (`index`, `reshape`, `split`, ...) return views that share leaf data where possible
 *   (see each method); `clone()` copies everything.
 * - The batch is stored flattened into `numel()` rows, row-major, which is also its wire form.
 */
export class TensorDict {
  /** The leading dimensions every leaf shares. */
  readonly batchSize: readonly number[];
  readonly #entries = new Map<string, TensorDictValue>();

  /**
   * A TensorDict from a (nested) plain object of values. Nested plain objects become nested TensorDicts with the same
   * batch size; TensorDict values are kept by reference (as in TorchRL), string arrays are copied and frozen, values
   * of registered leaf types are kept as they are.
   * Throws BATCH_SIZE_MISMATCH (naming the key) when a value does not fit `batchSize`.
   */
  constructor(source: TensorDictSource = {}, options: TensorDictOptions = {}) {
    this.batchSize = checkShape(options.batchSize ?? [], "batchSize");
    if (!isPlainObject(source)) throw new InvalidArgumentError(`TensorDict: the source must be a plain object, got ${describe(source)}`);
    this.#fill(source, []);
  }

  #fill(source: TensorDictSource, prefix: readonly string[]): void {
    for (const [key, value] of Object.entries(source)) {
      this.#entries.set(key, this.#validate(value, [...prefix, key]));
    }
  }

  /** A TensorDict holding `entries` as they are (internal: the values are known to fit). */
  static #trusted(batchSize: readonly number[], entries: Iterable<readonly [string, TensorDictValue]>): TensorDict {
    const td = new TensorDict({}, { batchSize });
    for (const [k, v] of entries) td.#entries.set(k, v);
    return td;
  }

  /** Checks that `value` fits this batch size and returns the form to store. `path` is the full key, for messages. */
  #validate(value: unknown, path: readonly string[]): TensorDictValue {
    // the key is formatted only where an error is thrown: this runs for every value set
    const batchDims = this.batchSize.length;
    if (value instanceof Tensor) {
      if (value.shape.length < batchDims || !sameShape(value.shape.slice(0, batchDims), this.batchSize)) {
        throw new BatchSizeMismatchError(
          `key ${formatKey(path)}: tensor shape ${formatShape(value.shape)} does not start with the batch size ${formatShape(this.batchSize)}`,
          this.batchSize,
          value.shape.slice(0, batchDims),
        );
      }
      return value;
    }
    if (value instanceof RaggedTensor) {
      if (value.rows !== this.numel()) {
        throw new BatchSizeMismatchError(
          `key ${formatKey(path)}: ragged tensor has ${value.rows} rows but batch size ${formatShape(this.batchSize)} has ${this.numel()}`,
          this.batchSize,
          [value.rows],
        );
      }
      return value;
    }
    if (value instanceof TensorDict) {
      if (!sameShape(value.batchSize, this.batchSize)) {
        throw new BatchSizeMismatchError(
          `key ${formatKey(path)}: nested TensorDict has batch size ${formatShape(value.batchSize)} but the parent has ${formatShape(this.batchSize)}`,
          this.batchSize,
          value.batchSize,
        );
      }
      return value;
    }
    const leaf = leafTypeOf(value);
    if (leaf !== undefined) {
      const rows = leaf.rows(value);
      if (rows !== this.numel()) {
        throw new BatchSizeMismatchError(
          `key ${formatKey(path)}: ${leaf.name} has ${rows} rows but batch size ${formatShape(this.batchSize)} has ${this.numel()}`,
          this.batchSize,
          [rows],
        );
      }
      return value as LeafValue;
    }
    if (Array.isArray(value)) {
      const items: unknown[] = value;
      const bad = items.findIndex((s) => typeof s !== "string");
      if (bad !== -1) throw new InvalidArgumentError(`key ${formatKey(path)}: a string leaf must hold strings only, element ${bad} is ${describe(items[bad])}`);
      if (items.length !== this.numel()) {
        throw new BatchSizeMismatchError(
          `key ${formatKey(path)}: ${items.length} strings but batch size ${formatShape(this.batchSize)} has ${this.numel()} rows`,
          this.batchSize,
          [items.length],
        );
      }
      return Object.isFrozen(items) ? (items as string[]) : Object.freeze(items.slice() as string[]);
    }
    if (isPlainObject(value)) {
      const child = new TensorDict({}, { batchSize: this.batchSize });
      child.#fill(value, path);
      return child;
    }
    let hint: string | undefined;
    if (ArrayBuffer.isView(value)) hint = "wrap TypedArrays with Tensor.from or new Tensor";
    else for (const type of leafTypes()) hint ??= type.hint?.(value);
    const expected = ["Tensor", "RaggedTensor", "string array", ...leafTypes().map((type) => type.name), "TensorDict"].join(", ");
    throw new InvalidArgumentError(
      `key ${formatKey(path)}: expected a ${expected} or plain object, got ${describe(value)}${hint === undefined ? "" : ` (${hint})`}`,
    );
  }

  /** Number of batch dimensions. */
  get batchDims(): number {
    return this.batchSize.length;
  }

  /** Number of batch elements, `prod(batchSize)` (1 for batch size `[]`): the rows of the wire form. */
  numel(): number {
    return prod(this.batchSize);
  }

  /** The same as {@link numel}: the number of rows on the wire. */
  get rows(): number {
    return this.numel();
  }

  // ---------------------------------------------------------------------------------------------- keys and values

  /** The TensorDict holding the last part of `path`, or undefined when an intermediate key is missing. */
  static #parentOf(root: TensorDict, path: readonly string[]): TensorDict | undefined {
    let td = root;
    for (let i = 0; i < path.length - 1; i++) {
      const next = td.#entries.get(path[i]!);
      if (!(next instanceof TensorDict)) return undefined;
      td = next;
    }
    return td;
  }

  #lookup(key: NestedKey): TensorDictValue | undefined {
    const path = keyPath(key);
    const parent = TensorDict.#parentOf(this, path);
    return parent === undefined ? undefined : parent.#entries.get(path[path.length - 1]!);
  }

  #notFound(key: NestedKey, op: string): KeyNotFoundError {
    return new KeyNotFoundError(canonicalKey(keyPath(key)), this.keys({ nested: true }), op);
  }

  /** The value under `key`; throws KEY_NOT_FOUND (naming the key and listing the existing ones) when absent. */
  get(key: NestedKey): TensorDictValue;
  /** The value under `key`, or `defaultValue` when absent. */
  get<T>(key: NestedKey, defaultValue: T): TensorDictValue | T;
  get(key: NestedKey, ...rest: unknown[]): unknown {
    const value = this.#lookup(key);
    if (value !== undefined) return value;
    if (rest.length > 0) return rest[0];
    throw this.#notFound(key, "get");
  }

  #getKind(key: NestedKey, kind: ValueKind, op: string): TensorDictValue {
    const value = this.#lookup(key);
    if (value === undefined) throw this.#notFound(key, op);
    const actual = kindOf(value);
    if (actual !== kind) throw new LeafKindMismatchError(canonicalKey(keyPath(key)), kind, actual, op);
    return value;
  }

  /** The dense tensor under `key`; throws KEY_NOT_FOUND or LEAF_KIND_MISMATCH. */
  getTensor(key: NestedKey): Tensor;
  /** The dense tensor under `key`, checked to have `dtype` (DTYPE_MISMATCH otherwise). */
  getTensor<D extends DType>(key: NestedKey, dtype: D): Tensor<D>;
  getTensor(key: NestedKey, dtype?: DType): Tensor {
    const value = this.#getKind(key, "tensor", "getTensor") as Tensor;
    if (dtype !== undefined && value.dtype !== dtype) {
      throw new DTypeMismatchError(`getTensor: key ${formatKey(key)} has dtype ${value.dtype}, expected ${dtype}`, dtype, value.dtype);
    }
    return value;
  }

  /** The ragged tensor under `key`; throws KEY_NOT_FOUND or LEAF_KIND_MISMATCH. */
  getRagged(key: NestedKey): RaggedTensor;
  /** The ragged tensor under `key`, checked to have `dtype` (DTYPE_MISMATCH otherwise). */
  getRagged<D extends DType>(key: NestedKey, dtype: D): RaggedTensor<D>;
  getRagged(key: NestedKey, dtype?: DType): RaggedTensor {
    const value = this.#getKind(key, "ragged", "getRagged") as RaggedTensor;
    if (dtype !== undefined && value.dtype !== dtype) {
      throw new DTypeMismatchError(`getRagged: key ${formatKey(key)} has dtype ${value.dtype}, expected ${dtype}`, dtype, value.dtype);
    }
    return value;
  }

  /** The strings under `key` (one per batch element, row-major; frozen); throws KEY_NOT_FOUND or LEAF_KIND_MISMATCH. */
  getStrings(key: NestedKey): readonly string[] {
    return this.#getKind(key, "strings", "getStrings") as readonly string[];
  }

  /**
   * The value of the registered leaf type `kind` under `key` (typed by {@link TensorDictLeaves}); throws KEY_NOT_FOUND
   * or LEAF_KIND_MISMATCH. A leaf module may add a shorthand getter by module augmentation (docs/tensordict.md).
   *
   * ```ts
   * const points = td.getLeaf(["scene", "points"], "points");
   * ```
   */
  getLeaf<K extends LeafKind>(key: NestedKey, kind: K): TensorDictLeaves[K] {
    return this.#getKind(key, kind, "getLeaf") as TensorDictLeaves[K];
  }

  /** The nested TensorDict under `key`; throws KEY_NOT_FOUND or LEAF_KIND_MISMATCH. */
  getTensorDict(key: NestedKey): TensorDict {
    return this.#getKind(key, "tensordict", "getTensorDict") as TensorDict;
  }

  /** True when `key` exists (a leaf or a nested TensorDict). */
  has(key: NestedKey): boolean {
    return this.#lookup(key) !== undefined;
  }

  /**
   * Sets `key` to `value` in place and returns `this`. Missing intermediate TensorDicts of a nested key are created;
   * a plain object becomes a nested TensorDict. An existing key keeps its position. Throws BATCH_SIZE_MISMATCH
   * (naming the key) when the value does not fit the batch size, LEAF_KIND_MISMATCH when an intermediate key holds a
   * leaf.
   */
  set(key: NestedKey, value: TensorDictValue | TensorDictSource): this {
    TensorDict.#setPath(this, keyPath(key), value);
    return this;
  }

  static #setPath(root: TensorDict, path: readonly string[], value: unknown): void {
    const chain: TensorDict[] = [root];
    let td = root;
    for (let i = 0; i < path.length - 1; i++) {
      const part = path[i]!;
      const next = td.#entries.get(part);
      if (next === undefined) {
        const created = new TensorDict({}, { batchSize: root.batchSize });
        td.#entries.set(part, created);
        td = created;
      } else if (next instanceof TensorDict) {
        td = next;
      } else {
        throw new LeafKindMismatchError(canonicalKey(path.slice(0, i + 1)), "tensordict", kindOf(next), `set ${formatKey(path)}`);
      }
      chain.push(td);
    }
    const stored = td.#validate(value, path);
    if (stored instanceof TensorDict && chain.some((ancestor) => stored.#contains(ancestor))) {
      throw new InvalidArgumentError(`set ${formatKey(path)}: a TensorDict cannot contain itself`);
    }
    td.#entries.set(path[path.length - 1]!, stored);
  }

  #contains(td: TensorDict): boolean {
    if (td === this) return true;
    for (const value of this.#entries.values()) if (value instanceof TensorDict && value.#contains(td)) return true;
    return false;
  }

  /** Removes `key` (with everything under it) in place and returns `this`; throws KEY_NOT_FOUND when absent. */
  del(key: NestedKey): this {
    const path = keyPath(key);
    const parent = TensorDict.#parentOf(this, path);
    if (parent === undefined || !parent.#entries.delete(path[path.length - 1]!)) throw this.#notFound(key, "del");
    return this;
  }

  /**
   * The keys, in insertion order. Top-level keys are strings; with `nested: true` the keys inside nested TensorDicts
   * follow their parent's key as tuples (`["next", "reward"]`), depth first. With `leavesOnly: true` the keys of
   * nested TensorDicts themselves are left out.
   */
  keys(options: KeysOptions = {}): NestedKey[] {
    return this.entries(options).map(([key]) => key);
  }

  /** The values, in the order of {@link keys}. */
  values(options: KeysOptions = {}): TensorDictValue[] {
    return this.entries(options).map(([, value]) => value);
  }

  /** `[key, value]` pairs, in the order of {@link keys}. */
  entries(options: KeysOptions = {}): [NestedKey, TensorDictValue][] {
    const out: [NestedKey, TensorDictValue][] = [];
    const walk = (td: TensorDict, prefix: readonly string[]): void => {
      for (const [k, v] of td.#entries) {
        const path = [...prefix, k];
        const isTd = v instanceof TensorDict;
        if (!isTd || options.leavesOnly !== true) out.push([canonicalKey(path), v]);
        if (isTd && options.nested === true) walk(v, path);
      }
    };
    walk(this, []);
    return out;
  }

  /** A new TensorDict with only `keys` (nested keys keep their nesting); values are shared. Throws KEY_NOT_FOUND. */
  select(...keys: NestedKey[]): TensorDict {
    const out = new TensorDict({}, { batchSize: this.batchSize });
    for (const key of keys) {
      const value = this.#lookup(key);
      if (value === undefined) throw this.#notFound(key, "select");
      out.set(key, value instanceof TensorDict ? value.#shallowCopy() : value);
    }
    return out;
  }

  /** A new TensorDict without `keys` (absent keys are ignored); values are shared. */
  exclude(...keys: NestedKey[]): TensorDict {
    const out = this.#shallowCopy();
    for (const key of keys) if (out.has(key)) out.del(key);
    return out;
  }

  /** New TensorDict objects down the tree, sharing the leaves. */
  #shallowCopy(): TensorDict {
    return TensorDict.#trusted(
      this.batchSize,
      [...this.#entries].map(([k, v]) => [k, v instanceof TensorDict ? v.#shallowCopy() : v] as const),
    );
  }

  // ----------------------------------------------------------------------------------------- batch operations

  /** Applies a row plan to every leaf (sources share this TensorDict's structure, already checked). */
  static #take(sources: readonly TensorDict[], plan: RowPlan, batchSize: readonly number[], allowView: boolean): TensorDict {
    const first = sources[0]!;
    const entries: [string, TensorDictValue][] = [];
    for (const [key, value] of first.#entries) {
      const all = sources.map((s) => s.#entries.get(key)!);
      let out: TensorDictValue;
      if (value instanceof Tensor) out = takeDense(all as Tensor[], plan, first.batchDims, batchSize, allowView);
      else if (value instanceof RaggedTensor) out = takeRagged(all as RaggedTensor[], plan, allowView);
      else if (value instanceof TensorDict) out = TensorDict.#take(all as TensorDict[], plan, batchSize, allowView);
      else {
        const leaf = leafTypeOf(value);
        out = leaf === undefined ? Object.freeze(takeRows(all as (readonly string[])[], plan)) : (leaf.take(all, plan) as LeafValue);
      }
      entries.push([key, out]);
    }
    return TensorDict.#trusted(batchSize, entries);
  }

  #applyPlan({ batchSize, plan }: IndexPlan, allowView: boolean): TensorDict {
    return TensorDict.#take([this], plan, batchSize, allowView);
  }

  /**
   * Indexes batch dimension `dim` (default 0) with an integer (drops the dimension), a range `{start, stop, step}`,
   * a boolean mask or an index array (see {@link Index}). On the first batch dimension, integers and ranges with
   * step 1 return zero-copy views (dense and ragged leaves share data with this TensorDict); other indices copy.
   * Throws INDEX_OUT_OF_RANGE for indices outside `[-size, size)`, SHAPE_MISMATCH for a mask of the wrong length,
   * INVALID_ARGUMENT for a TensorDict with batch size `[]`.
   */
  index(index: Index, dim = 0): TensorDict {
    return this.#applyPlan(planIndex(this.batchSize, index, dim), true);
  }

  /** The TensorDicts along batch dimension `dim`, each without that dimension (TorchRL's `unbind`). */
  unbind(dim = 0): TensorDict[] {
    const d = normalizeDim(dim, this.batchDims, "unbind");
    return planUnbind(this.batchSize, d).map((plan) => this.#applyPlan(plan, true));
  }

  /**
   * Splits batch dimension `dim` into chunks of `size` (the last may be smaller) or of the given `sizes`
   * (which must add up to the dimension's size). Chunks of the first dimension are zero-copy views.
   */
  split(sizeOrSizes: number | readonly number[], dim = 0): TensorDict[] {
    if (this.batchDims === 0) throw new InvalidArgumentError("split: a TensorDict with batch size [] has no batch dimension");
    const d = normalizeDim(dim, this.batchDims, "split");
    const total = this.batchSize[d]!;
    let sizes: number[];
    if (typeof sizeOrSizes === "number") {
      if (!Number.isInteger(sizeOrSizes) || sizeOrSizes <= 0) throw new InvalidArgumentError(`split: size must be a positive integer, got ${sizeOrSizes}`);
      sizes = [];
      for (let start = 0; start < total; start += sizeOrSizes) sizes.push(Math.min(sizeOrSizes, total - start));
    } else {
      sizes = [...sizeOrSizes];
      if (sizes.some((s) => !Number.isInteger(s) || s < 0)) throw new InvalidArgumentError(`split: sizes must be non-negative integers, got ${JSON.stringify(sizes)}`);
      const sum = sizes.reduce((a, b) => a + b, 0);
      if (sum !== total) {
        throw new ShapeMismatchError(
          `split: sizes ${JSON.stringify(sizes)} add up to ${sum} but batch dimension ${d} has size ${total}`,
          [total],
          [sum],
        );
      }
    }
    let start = 0;
    return sizes.map((size) => {
      const part = this.index({ start, stop: start + size }, d);
      start += size;
      return part;
    });
  }

  /** The same leaves under another batch size (same data: dense leaves are reshaped views). */
  #withBatchSize(batchSize: readonly number[]): TensorDict {
    const frozen = Object.freeze(batchSize.slice());
    const batchDims = this.batchDims;
    return TensorDict.#trusted(
      frozen,
      [...this.#entries].map(([key, value]) => {
        let out: TensorDictValue = value;
        if (value instanceof Tensor) out = value.reshape([...frozen, ...value.shape.slice(batchDims)]);
        else if (value instanceof TensorDict) out = value.#withBatchSize(frozen);
        return [key, out] as const;
      }),
    );
  }

  /** A view with another batch size of the same number of elements (one size may be -1); leaves share data. */
  reshape(batchSize: readonly number[]): TensorDict {
    return this.#withBatchSize(resolveShape(batchSize, this.numel(), this.batchSize, "reshape"));
  }

  /** A view with batch dimensions `startDim..endDim` (inclusive, negative allowed) merged into one; `[]` becomes `[1]`. */
  flatten(startDim = 0, endDim = -1): TensorDict {
    if (this.batchDims === 0) return this.#withBatchSize([1]);
    const s = normalizeDim(startDim, this.batchDims, "flatten");
    const e = normalizeDim(endDim, this.batchDims, "flatten");
    if (s > e) throw new InvalidArgumentError(`flatten: startDim ${startDim} comes after endDim ${endDim}`);
    const b = this.batchSize;
    return this.#withBatchSize([...b.slice(0, s), prod(b.slice(s, e + 1)), ...b.slice(e + 1)]);
  }

  /** A view with a batch dimension of size 1 inserted at `dim` (in `[-(n+1), n]`). */
  unsqueeze(dim: number): TensorDict {
    const d = normalizeDim(dim, this.batchDims + 1, "unsqueeze");
    return this.#withBatchSize([...this.batchSize.slice(0, d), 1, ...this.batchSize.slice(d)]);
  }

  /** A view without batch dimension `dim` if its size is 1 (unchanged otherwise), or without every size-1 dimension. */
  squeeze(dim?: number): TensorDict {
    if (dim === undefined) return this.#withBatchSize(this.batchSize.filter((s) => s !== 1));
    const d = normalizeDim(dim, this.batchDims, "squeeze");
    if (this.batchSize[d] !== 1) return this;
    return this.#withBatchSize([...this.batchSize.slice(0, d), ...this.batchSize.slice(d + 1)]);
  }

  /** Checks that `tds` have the same keys, kinds, dtypes and row shapes (recursively), for `op` (stack or cat). */
  static #checkCompatible(tds: readonly TensorDict[], op: string, prefix: readonly string[]): void {
    const first = tds[0]!;
    tds.forEach((td, i) => {
      if (i === 0) return;
      for (const key of td.#entries.keys()) {
        if (!first.#entries.has(key)) {
          throw new KeyNotFoundError(canonicalKey([...prefix, key]), first.keys({ nested: true }), `${op}: tds[${i}] has a key that tds[0] lacks`);
        }
      }
      for (const [key, a] of first.#entries) {
        // the key's path and name are built only where an error is thrown: this loop runs for every row of a stack
        const b = td.#entries.get(key);
        if (b === undefined) throw new KeyNotFoundError(canonicalKey([...prefix, key]), td.keys({ nested: true }), `${op}: tds[${i}]`);
        const kindA = kindOf(a);
        const kindB = kindOf(b);
        if (kindA !== kindB) throw new LeafKindMismatchError(canonicalKey([...prefix, key]), kindA, kindB, `${op}: tds[${i}] (tds[0] holds a ${kindA})`);
        if (a instanceof Tensor && b instanceof Tensor) {
          if (a.dtype !== b.dtype) {
            throw new DTypeMismatchError(`${op}: key ${formatKey([...prefix, key])} has dtype ${a.dtype} in tds[0] but ${b.dtype} in tds[${i}]`, a.dtype, b.dtype);
          }
          if (!sameTail(a.shape, first.batchDims, b.shape, td.batchDims)) {
            const rowA = a.shape.slice(first.batchDims);
            const rowB = b.shape.slice(td.batchDims);
            throw new ShapeMismatchError(
              `${op}: key ${formatKey([...prefix, key])} has shape ${formatShape(rowA)} after the batch dimensions in tds[0] but ${formatShape(rowB)} in tds[${i}]`,
              rowA,
              rowB,
            );
          }
        } else if (a instanceof RaggedTensor && b instanceof RaggedTensor) {
          if (a.dtype !== b.dtype) {
            throw new DTypeMismatchError(`${op}: key ${formatKey([...prefix, key])} has dtype ${a.dtype} in tds[0] but ${b.dtype} in tds[${i}]`, a.dtype, b.dtype);
          }
          if (!sameShape(a.tailShape, b.tailShape)) {
            throw new ShapeMismatchError(
              `${op}: ragged key ${formatKey([...prefix, key])} has tail shape ${formatShape(a.tailShape)} in tds[0] but ${formatShape(b.tailShape)} in tds[${i}]`,
              a.tailShape,
              b.tailShape,
            );
          }
        }
      }
    });
    for (const [key, value] of first.#entries) {
      if (value instanceof TensorDict) TensorDict.#checkCompatible(tds.map((td) => td.#entries.get(key) as TensorDict), op, [...prefix, key]);
    }
  }

  /**
   * Stacks TensorDicts of equal batch size along a new batch dimension `dim` (in `[-(n+1), n]`), copying the data.
   * Every input must have the same keys (any order; the result follows `tds[0]`), kinds, dtypes and row shapes
   * (ragged: tail shapes). Throws INVALID_ARGUMENT for an empty list, BATCH_SIZE_MISMATCH, KEY_NOT_FOUND,
   * LEAF_KIND_MISMATCH, DTYPE_MISMATCH or SHAPE_MISMATCH naming both sides.
   */
  static stack(tds: readonly TensorDict[], dim = 0): TensorDict {
    const first = tds[0];
    if (first === undefined) throw new InvalidArgumentError("stack: needs at least one TensorDict");
    tds.forEach((td, i) => {
      if (!sameShape(td.batchSize, first.batchSize)) {
        throw new BatchSizeMismatchError(
          `stack: tds[0] has batch size ${formatShape(first.batchSize)} but tds[${i}] has ${formatShape(td.batchSize)}`,
          first.batchSize,
          td.batchSize,
        );
      }
    });
    const d = normalizeDim(dim, first.batchDims + 1, "stack");
    TensorDict.#checkCompatible(tds, "stack", []);
    const { batchSize, plan } = planStack(tds.length, first.batchSize, d);
    return TensorDict.#take(tds, plan, batchSize, false);
  }

  /**
   * Concatenates TensorDicts along existing batch dimension `dim`, copying the data. The batch sizes must agree on
   * every other dimension; keys, kinds, dtypes and row shapes as for {@link stack}.
   */
  static cat(tds: readonly TensorDict[], dim = 0): TensorDict {
    const first = tds[0];
    if (first === undefined) throw new InvalidArgumentError("cat: needs at least one TensorDict");
    if (first.batchDims === 0) throw new InvalidArgumentError("cat: TensorDicts with batch size [] have no dimension to concatenate; use stack");
    const d = normalizeDim(dim, first.batchDims, "cat");
    tds.forEach((td, i) => {
      const same = td.batchDims === first.batchDims && td.batchSize.every((s, j) => j === d || s === first.batchSize[j]);
      if (!same) {
        throw new BatchSizeMismatchError(
          `cat: along dim ${d}, tds[0] has batch size ${formatShape(first.batchSize)} but tds[${i}] has ${formatShape(td.batchSize)} (only dim ${d} may differ)`,
          first.batchSize,
          td.batchSize,
        );
      }
    });
    TensorDict.#checkCompatible(tds, "cat", []);
    const { batchSize, plan } = planCat(tds.map((td) => td.batchSize), d);
    return TensorDict.#take(tds, plan, batchSize, false);
  }

  // ----------------------------------------------------------------------------------------- per-leaf operations

  /**
   * A new TensorDict with `fn` applied to every dense and ragged leaf (nested ones included); `fn` gets the leaf and
   * its key (a string at top level, a tuple below). Returning `undefined` drops the leaf. String leaves and values of
   * registered leaf types are not passed to `fn`: they are kept as they are. Each result must fit the batch size
   * (BATCH_SIZE_MISMATCH otherwise).
   */
  apply(fn: ApplyFunction): TensorDict {
    const walk = (td: TensorDict, prefix: readonly string[]): TensorDict => {
      const out = new TensorDict({}, { batchSize: td.batchSize });
      for (const [key, value] of td.#entries) {
        const path = [...prefix, key];
        if (value instanceof TensorDict) {
          out.#entries.set(key, walk(value, path));
        } else if (value instanceof Tensor || value instanceof RaggedTensor) {
          const result = fn(value, canonicalKey(path));
          if (result !== undefined) {
            if (!(result instanceof Tensor || result instanceof RaggedTensor)) {
              throw new InvalidArgumentError(`apply: the function returned ${describe(result)} for key ${formatKey(path)}, expected a Tensor, RaggedTensor or undefined`);
            }
            out.#entries.set(key, out.#validate(result, path));
          }
        } else {
          out.#entries.set(key, value);
        }
      }
      return out;
    };
    return walk(this, []);
  }

  /**
   * A deep copy: every tensor's data is copied (ragged values compacted), string arrays copied, and values of
   * registered leaf types copied by their type's `clone` (which may share immutable row values).
   */
  clone(): TensorDict {
    return TensorDict.#trusted(
      this.batchSize,
      [...this.#entries].map(([key, value]) => {
        let out: TensorDictValue;
        if (value instanceof Tensor || value instanceof RaggedTensor || value instanceof TensorDict) out = value.clone();
        else {
          const leaf = leafTypeOf(value);
          out = leaf === undefined ? Object.freeze((value as readonly string[]).slice()) : (leaf.clone(value) as LeafValue);
        }
        return [key, out] as const;
      }),
    );
  }

  // ------------------------------------------------------------------------------------------------- wire

  #columns(): WireColumns {
    return [...this.#entries].map(([key, value]): readonly [string, WireColumn] => {
      if (value instanceof Tensor) return [key, denseToWire(value, this.batchDims)];
      if (value instanceof RaggedTensor) return [key, raggedToWire(value)];
      if (value instanceof TensorDict) return [key, { kind: "struct", columns: value.#columns() }];
      const leaf = leafTypeOf(value);
      if (leaf !== undefined) return [key, leaf.toWire(value)];
      return [key, { kind: "strings", values: value as readonly string[] }];
    });
  }

  /**
   * The wire form (`bridge/wire`): columns share the leaves' arrays, nothing is copied. A value of a registered leaf
   * type becomes the column its type's `toWire` writes.
   */
  toWire(): WireBatch {
    return { batchSize: this.batchSize, columns: this.#columns() };
  }

  /**
   * A TensorDict over a wire batch, without copying its arrays; validates shapes and row counts. A column of another
   * kind than dense, ragged, strings and struct is read by the leaf type registered for its wire kind (which
   * validates it, its errors naming the key); LEAF_TYPE_NOT_REGISTERED, naming the key and the module to import,
   * when none is.
   */
  static fromWire(batch: WireBatch): TensorDict {
    const batchSize = checkShape(batch.batchSize, "fromWire: batchSize");
    const build = (columns: WireColumns, prefix: readonly string[]): TensorDict => {
      const td = new TensorDict({}, { batchSize });
      for (const [key, column] of columns) {
        const path = [...prefix, key];
        if (td.#entries.has(key)) throw new InvalidArgumentError(`fromWire: duplicate key ${formatKey(path)}`);
        let value: TensorDictValue;
        switch (column.kind) {
          case "dense":
            value = denseFromWire(column, batchSize, key);
            break;
          case "ragged":
            value = raggedFromWire(column);
            break;
          case "strings":
            value = column.values;
            break;
          case "struct":
            value = build(column.columns, path);
            break;
          default:
            value = TensorDict.#leafFromWire(column, path);
        }
        td.#entries.set(key, td.#validate(value, path));
      }
      return td;
    };
    return build(batch.columns, []);
  }

  /** The value of a leaf column, read by the leaf type registered for its wire kind. */
  static #leafFromWire(column: LeafWireColumn, path: readonly string[]): TensorDictValue {
    const leaf = leafTypeForWire(column.kind);
    if (leaf === undefined) throw new LeafTypeNotRegisteredError(canonicalKey(path), column.kind, registeringModule(column.kind), "fromWire");
    return leaf.fromWire(column, `fromWire: key ${formatKey(path)}`) as LeafValue;
  }

  /** This TensorDict as one Arrow IPC stream (docs/protocol.md), ready to send as a ZeroMQ frame. */
  toArrow(): Uint8Array {
    return encodeBatch(this.toWire());
  }

  /**
   * The same stream as {@link toArrow}, in parts that send without copying large tensors: each tensor buffer of
   * at least 64 KiB (a multiple of 8 bytes) is a view of this TensorDict's own memory (docs/protocol.md, "Split
   * payloads"). Do not modify the tensors until the parts have been sent (for a worker call: until it settles).
   *
   * @example
   * const parts = td.toArrowParts(); // Buffer.concat(parts) equals td.toArrow()
   */
  toArrowParts(): Uint8Array[] {
    return encodeBatchParts(this.toWire());
  }

  /**
   * A TensorDict from an Arrow IPC stream written by {@link toArrow} or the Python worker, whole or in parts
   * ({@link toArrowParts}, the frames of a split payload); its tensors view `bytes` where aligned.
   */
  static fromArrow(bytes: Uint8Array | readonly Uint8Array[]): TensorDict {
    return TensorDict.fromWire(decodeBatch(bytes));
  }

  /** A readable summary: batch size, and each key with its kind, shape and dtype. */
  toString(): string {
    const lines = [`TensorDict(batchSize=${formatShape(this.batchSize)})`];
    const walk = (td: TensorDict, indent: string): void => {
      for (const [key, value] of td.#entries) {
        if (value instanceof TensorDict) {
          lines.push(`${indent}${key}: TensorDict`);
          walk(value, `${indent}  `);
        } else if (value instanceof Tensor || value instanceof RaggedTensor) {
          lines.push(`${indent}${key}: ${value.toString()}`);
        } else {
          const leaf = leafTypeOf(value);
          const text = leaf === undefined ? "strings" : (leaf.describe?.(value) ?? String(value));
          lines.push(`${indent}${key}: ${text}`);
        }
      }
    };
    walk(this, "  ");
    return lines.join("\n");
  }
}
