/**
 * Tensor specs (TorchRL's `TensorSpec` family): what a key holds — shape, dtype and, for `Bounded` and
 * `Categorical`, the allowed values. Envs expose `observationSpec`, `actionSpec`, `rewardSpec` and `doneSpec`, and
 * check what crosses their boundary with `assertIsIn`.
 *
 * Shapes are full shapes: a spec of a batched env starts with the batch size (`expand` prepends it), as in TorchRL.
 */
import { Tensor, TensorDict, isDType, type DType, type NestedKey } from "../tensordict/index.js";
import { InvalidArgumentError, SpecMismatchError } from "./errors.js";

/** A source of uniform floats in [0, 1) (`SeededRandom` is one); specs default to `Math.random`. */
export interface RandomSource {
  /** A float in [0, 1). */
  next(): number;
}

const MATH_RANDOM: RandomSource = { next: () => Math.random() };
const FLOAT_DTYPES: ReadonlySet<DType> = new Set<DType>(["float16", "bfloat16", "float32", "float64"]);

function formatShape(shape: readonly number[]): string {
  return `[${shape.join(", ")}]`;
}

function numelOf(shape: readonly number[]): number {
  return shape.reduce((a, b) => a * b, 1);
}

function checkSpecShape(shape: readonly number[], what: string): readonly number[] {
  const sizes: unknown = shape;
  if (!Array.isArray(sizes) || !sizes.every((s) => Number.isSafeInteger(s) && (s as number) >= 0)) {
    throw new InvalidArgumentError(`${what}.shape: expected an array of non-negative integers, got ${JSON.stringify(shape)}`);
  }
  return Object.freeze(shape.slice());
}

function checkDType(dtype: DType, what: string): DType {
  if (!isDType(dtype)) throw new InvalidArgumentError(`${what}.dtype: unknown dtype ${JSON.stringify(dtype)}`);
  return dtype;
}

function keyText(key: NestedKey): string {
  return typeof key === "string" ? key : key.join(".");
}

/** A standard normal draw (Box–Muller). */
function normal(rng: RandomSource): number {
  const u = 1 - rng.next();
  return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * rng.next());
}

/**
 * The base of the leaf specs: a shape and a dtype. `isIn` says whether a value fits; `assertIsIn` throws
 * {@link SpecMismatchError} (code `SPEC_MISMATCH`) naming the key, the spec and what came.
 *
 * ```ts
 * env.actionSpec.assertIsIn(td.get("action"), "action"); // throws SPEC_MISMATCH when it does not fit
 * ```
 */
export abstract class TensorSpec {
  /** The full shape of a value. */
  readonly shape: readonly number[];
  /** The dtype of a value. */
  readonly dtype: DType;

  protected constructor(shape: readonly number[], dtype: DType) {
    this.shape = checkSpecShape(shape, this.constructor.name);
    this.dtype = checkDType(dtype, this.constructor.name);
  }

  /** The number of elements of a value, `prod(shape)`. */
  get numel(): number {
    return numelOf(this.shape);
  }

  /** Why element `i` (value `v`) is not allowed, or undefined when it is. */
  protected abstract elementProblem(v: number, i: number): string | undefined;

  /** Why `value` does not fit this spec (`"dtype float32"`, `"shape [2]"`, ...), or undefined when it does. */
  mismatch(value: unknown): string | undefined {
    if (!(value instanceof Tensor)) {
      return value === undefined ? "nothing (the key is missing)" : `a ${value instanceof TensorDict ? "TensorDict" : typeof value}, not a dense tensor`;
    }
    if (value.dtype !== this.dtype) return `dtype ${value.dtype}`;
    const sameShape = value.shape.length === this.shape.length && value.shape.every((s, i) => s === this.shape[i]);
    if (!sameShape) return `shape ${formatShape(value.shape)}`;
    const nums = value.toNumbers();
    for (let i = 0; i < nums.length; i++) {
      const problem = this.elementProblem(nums[i]!, i);
      if (problem !== undefined) return problem;
    }
    return undefined;
  }

  /** True when `value` is a tensor of this shape and dtype whose elements are allowed. */
  isIn(value: unknown): value is Tensor {
    return this.mismatch(value) === undefined;
  }

  /**
   * Throws {@link SpecMismatchError} unless `value` fits. `key` names it in the error; `where` (e.g.
   * `"CartPoleEnv.step"`) says which call checked.
   */
  assertIsIn(value: unknown, key: NestedKey, where?: string): asserts value is Tensor {
    const problem = this.mismatch(value);
    if (problem !== undefined) throw new SpecMismatchError(keyText(key), this.toString(), problem, where);
  }

  /** A value of zeros (TorchRL's `zero()`). */
  zero(): Tensor {
    return Tensor.zeros(this.dtype, this.shape);
  }

  /** A random value inside the spec (TorchRL's `rand()`), drawn from `rng` (default `Math.random`). */
  rand(rng: RandomSource = MATH_RANDOM): Tensor {
    const values = Array.from({ length: this.numel }, (_, i) => this.sample(rng, i));
    return Tensor.from(Float64Array.from(values), { dtype: this.dtype, shape: this.shape });
  }

  /** One random element (index `i`), as a number. */
  protected abstract sample(rng: RandomSource, i: number): number;

  /** This spec with `batchSize` prepended to its shape (per-element bounds repeated). */
  abstract expand(batchSize: readonly number[]): TensorSpec;

  /** `Bounded(low=..., high=..., shape=[4], dtype=float32)`. */
  abstract toString(): string;
}

/**
 * Any value of the shape and dtype (TorchRL's `Unbounded`). `rand` draws floats from a standard normal, integers
 * uniformly in [-100, 100], bools from a fair coin.
 *
 * ```ts
 * const rewardSpec = new Unbounded({ shape: [1] }); // float32 [1]
 * ```
 */
export class Unbounded extends TensorSpec {
  constructor(options: { shape: readonly number[]; dtype?: DType }) {
    super(options.shape, options.dtype ?? "float32");
  }

  protected elementProblem(): string | undefined {
    return undefined;
  }

  protected sample(rng: RandomSource): number {
    if (FLOAT_DTYPES.has(this.dtype)) return normal(rng);
    if (this.dtype === "bool") return rng.next() < 0.5 ? 0 : 1;
    return Math.floor(rng.next() * 201) - 100;
  }

  expand(batchSize: readonly number[]): Unbounded {
    return new Unbounded({ shape: [...batchSize, ...this.shape], dtype: this.dtype });
  }

  toString(): string {
    return `Unbounded(shape=${formatShape(this.shape)}, dtype=${this.dtype})`;
  }
}

/**
 * Values within `[low, high]` (TorchRL's `Bounded`); `low` and `high` are numbers (every element) or one per element
 * (row-major over `shape`), and may be infinite. `rand` draws uniformly where both bounds are finite, and from a
 * (half-)normal beside an infinite bound.
 *
 * ```ts
 * const spec = new Bounded({ low: -2, high: 2, shape: [1] }); // Pendulum's torque
 * ```
 */
export class Bounded extends TensorSpec {
  /** The lower bound of each element (row-major). */
  readonly low: Float64Array;
  /** The upper bound of each element (row-major). */
  readonly high: Float64Array;

  constructor(options: { low: number | readonly number[]; high: number | readonly number[]; shape: readonly number[]; dtype?: DType }) {
    super(options.shape, options.dtype ?? "float32");
    this.low = this.#bounds(options.low, "low");
    this.high = this.#bounds(options.high, "high");
    this.low.forEach((l, i) => {
      if (!(l <= this.high[i]!)) throw new InvalidArgumentError(`Bounded.low: element ${i} (${l}) is above high (${this.high[i]})`);
    });
  }

  #bounds(value: number | readonly number[], name: "low" | "high"): Float64Array {
    const n = this.numel;
    if (typeof value === "number") {
      if (Number.isNaN(value)) throw new InvalidArgumentError(`Bounded.${name}: expected a number, got NaN`);
      return new Float64Array(n).fill(value);
    }
    if (!Array.isArray(value) || value.length !== n || value.some((v) => typeof v !== "number" || Number.isNaN(v))) {
      throw new InvalidArgumentError(`Bounded.${name}: expected a number or ${n} numbers (one per element of shape ${formatShape(this.shape)})`);
    }
    return Float64Array.from(value);
  }

  protected elementProblem(v: number, i: number): string | undefined {
    const low = this.low[i]!;
    const high = this.high[i]!;
    return v >= low && v <= high ? undefined : `element ${i} = ${v}, outside [${low}, ${high}]`;
  }

  protected sample(rng: RandomSource, i: number): number {
    const low = this.low[i]!;
    const high = this.high[i]!;
    let v: number;
    if (Number.isFinite(low) && Number.isFinite(high)) v = low + (high - low) * rng.next();
    else if (Number.isFinite(low)) v = low + Math.abs(normal(rng));
    else if (Number.isFinite(high)) v = high - Math.abs(normal(rng));
    else v = normal(rng);
    return FLOAT_DTYPES.has(this.dtype) ? v : Math.min(Math.floor(v), high);
  }

  expand(batchSize: readonly number[]): Bounded {
    const times = numelOf(batchSize);
    const tile = (a: Float64Array): number[] => Array.from({ length: times * a.length }, (_, i) => a[i % a.length]!);
    return new Bounded({ low: tile(this.low), high: tile(this.high), shape: [...batchSize, ...this.shape], dtype: this.dtype });
  }

  toString(): string {
    const show = (a: Float64Array): string => (a.every((v) => v === a[0]) ? String(a[0] ?? "[]") : `[${Array.from(a).join(", ")}]`);
    return `Bounded(low=${show(this.low)}, high=${show(this.high)}, shape=${formatShape(this.shape)}, dtype=${this.dtype})`;
  }
}

/**
 * Integers in `[0, n)` (TorchRL's `Categorical`): an index per element, dtype int64 by default (bool with `n = 2`
 * for done flags).
 *
 * ```ts
 * const actionSpec = new Categorical({ n: 2, shape: [] }); // CartPole: 0 = push left, 1 = push right
 * ```
 */
export class Categorical extends TensorSpec {
  /** The number of categories. */
  readonly n: number;

  constructor(options: { n: number; shape: readonly number[]; dtype?: DType }) {
    super(options.shape, options.dtype ?? "int64");
    if (!Number.isSafeInteger(options.n) || options.n < 1) throw new InvalidArgumentError(`Categorical.n: expected an integer >= 1, got ${options.n}`);
    if (FLOAT_DTYPES.has(this.dtype)) throw new InvalidArgumentError(`Categorical.dtype: expected an integer or bool dtype, got ${this.dtype}`);
    if (this.dtype === "bool" && options.n !== 2) throw new InvalidArgumentError(`Categorical.n: a bool spec has n = 2, got ${options.n}`);
    this.n = options.n;
  }

  protected elementProblem(v: number, i: number): string | undefined {
    return Number.isInteger(v) && v >= 0 && v < this.n ? undefined : `element ${i} = ${v}, outside [0, ${this.n - 1}]`;
  }

  protected sample(rng: RandomSource): number {
    return Math.floor(rng.next() * this.n);
  }

  expand(batchSize: readonly number[]): Categorical {
    return new Categorical({ n: this.n, shape: [...batchSize, ...this.shape], dtype: this.dtype });
  }

  toString(): string {
    return `Categorical(n=${this.n}, shape=${formatShape(this.shape)}, dtype=${this.dtype})`;
  }
}

/** A spec held by a {@link Composite}: a leaf spec or a nested composite. */
export type Spec = TensorSpec | Composite;

/**
 * Specs by key (TorchRL's `Composite`): the spec of a TensorDict of batch size `shape`. Every leaf's shape starts
 * with `shape`. Nested composites give nested keys (`("next", "reward")`).
 *
 * ```ts
 * const spec = new Composite({ observation: new Bounded({ low: -1, high: 1, shape: [3] }) });
 * spec.assertIsIn(td, "CartPoleEnv.reset"); // every key present and fitting
 * ```
 */
export class Composite {
  /** The batch size of a TensorDict this spec describes. */
  readonly shape: readonly number[];
  readonly #specs = new Map<string, Spec>();

  constructor(specs: Readonly<Record<string, Spec>> = {}, options: { shape?: readonly number[] } = {}) {
    this.shape = checkSpecShape(options.shape ?? [], "Composite");
    for (const [key, spec] of Object.entries(specs)) this.set(key, spec);
  }

  /** Adds or replaces the spec at `key` (a nested key creates the composites on the way). */
  set(key: NestedKey, spec: Spec): this {
    const path = typeof key === "string" ? [key] : [...key];
    if (path.length === 0) throw new InvalidArgumentError("Composite.set: the key is empty");
    const prefix = spec.shape.slice(0, this.shape.length);
    if (prefix.length !== this.shape.length || prefix.some((s, i) => s !== this.shape[i])) {
      throw new InvalidArgumentError(`Composite.set ${JSON.stringify(keyText(key))}: shape ${formatShape(spec.shape)} does not start with the batch size ${formatShape(this.shape)}`);
    }
    const [head, ...rest] = path as [string, ...string[]];
    if (rest.length === 0) {
      this.#specs.set(head, spec);
      return this;
    }
    let child = this.#specs.get(head);
    if (!(child instanceof Composite)) {
      child = new Composite({}, { shape: this.shape });
      this.#specs.set(head, child);
    }
    child.set(rest, spec);
    return this;
  }

  /** The spec at `key`, or undefined. */
  get(key: NestedKey): Spec | undefined {
    const [head, ...rest] = typeof key === "string" ? [key] : key;
    const child = head === undefined ? undefined : this.#specs.get(head);
    if (rest.length === 0) return child;
    return child instanceof Composite ? child.get(rest) : undefined;
  }

  /** The keys of the leaf specs, nested keys as tuples, in insertion order. */
  keys(): NestedKey[] {
    const out: NestedKey[] = [];
    for (const [key, spec] of this.#specs) {
      if (spec instanceof Composite) for (const sub of spec.keys()) out.push([key, ...(typeof sub === "string" ? [sub] : sub)]);
      else out.push(key);
    }
    return out;
  }

  /** The leaf specs with their keys. */
  entries(): [NestedKey, TensorSpec][] {
    return this.keys().map((key) => [key, this.get(key) as TensorSpec]);
  }

  /** The first key whose value in `td` does not fit, with why; undefined when every key fits. */
  mismatch(td: TensorDict): { key: string; expected: string; got: string } | undefined {
    for (const [key, spec] of this.entries()) {
      const got = spec.mismatch(td.has(key) ? td.get(key) : undefined);
      if (got !== undefined) return { key: keyText(key), expected: spec.toString(), got };
    }
    return undefined;
  }

  /** True when every key of the spec is in `td` and fits. */
  isIn(td: TensorDict): boolean {
    return this.mismatch(td) === undefined;
  }

  /** Throws {@link SpecMismatchError} naming the first key of `td` that is missing or does not fit. */
  assertIsIn(td: TensorDict, where?: string): void {
    const problem = this.mismatch(td);
    if (problem !== undefined) throw new SpecMismatchError(problem.key, problem.expected, problem.got, where);
  }

  /** A TensorDict of zeros for every key. */
  zero(): TensorDict {
    const td = new TensorDict({}, { batchSize: this.shape });
    for (const [key, spec] of this.entries()) td.set(key, spec.zero());
    return td;
  }

  /** A TensorDict of random values inside the specs. */
  rand(rng: RandomSource = MATH_RANDOM): TensorDict {
    const td = new TensorDict({}, { batchSize: this.shape });
    for (const [key, spec] of this.entries()) td.set(key, spec.rand(rng));
    return td;
  }

  /** This composite with `batchSize` prepended to its shape and to every leaf's. */
  expand(batchSize: readonly number[]): Composite {
    const out = new Composite({}, { shape: [...batchSize, ...this.shape] });
    for (const [key, spec] of this.#specs) out.#specs.set(key, spec.expand(batchSize));
    return out;
  }

  /** `Composite(observation: Bounded(...), shape=[])`. */
  toString(): string {
    const inner = [...this.#specs].map(([k, s]) => `${k}: ${s.toString()}`).join(", ");
    return `Composite(${inner}, shape=${formatShape(this.shape)})`;
  }
}

/**
 * The specs an env exposes (TorchRL's names): what `reset`/`step` write (`observationSpec`), what the policy must
 * write (`actionSpec`, checked at `step`), the reward under `next` and the done keys.
 */
export interface EnvSpecs {
  /** The observation keys (e.g. `observation`), a composite of the env's batch size. */
  readonly observationSpec: Composite;
  /** The action the policy writes at `"action"`. */
  readonly actionSpec: TensorSpec;
  /** `("next", "reward")`, `[...batch, 1]` float32. */
  readonly rewardSpec: TensorSpec;
  /** `done`, `terminated`, `truncated`, each `[...batch, 1]` bool. */
  readonly doneSpec: Composite;
}

/** The done spec of a batch size: `done`, `terminated`, `truncated` as `Categorical(2, [...batch, 1], bool)`. */
export function doneSpecOf(batchSize: readonly number[]): Composite {
  const flag = (): Categorical => new Categorical({ n: 2, shape: [...batchSize, 1], dtype: "bool" });
  return new Composite({ done: flag(), terminated: flag(), truncated: flag() }, { shape: batchSize });
}
