/**
 * TorchRL's `ReplayBuffer` (its `TensorDictReplayBuffer` flavour) over TensorDicts: a storage, a sampler, a writer
 * and transforms. See docs/replay-buffer.md.
 */
import { z } from "zod";
import type { JSONObject } from "../message.js";
import { InvalidArgumentError } from "../../tensordict/errors.js";
import type { NestedKey } from "../../tensordict/keys.js";
import { RaggedTensor } from "../../tensordict/ragged.js";
import { Tensor } from "../../tensordict/tensor.js";
import { TensorDict } from "../../tensordict/tensordict.js";
import { parseOptions } from "../../core/index.js";
import { lazyStack, unbindRows } from "./collate.js";
import { ReplayBufferEmptyError, ReplayBufferFileError } from "./errors.js";
import { readBufferFile, writeBufferFile } from "./file.js";
import { NestedKeySchema } from "./options.js";
import { PrioritizedSampler } from "./prioritized.js";
import { leafNumbers, reduce } from "./reduce.js";
import { SeededRNG } from "./rng.js";
import { RandomSampler, Sampler, SamplerWithoutReplacement } from "./samplers.js";
import { LazyStackStorage, ListStorage, Storage } from "./storage.js";
import { isReplayBufferTransform, type ReplayBufferTransform } from "./transform.js";
import { RoundRobinWriter, TensorDictMaxValueWriter, Writer } from "./writers.js";

/** Options of {@link ReplayBuffer} (TorchRL's names, camelCased). */
export const ReplayBufferOptionsSchema = z.strictObject({
  /** Where rows live (default `new ListStorage({ maxSize: 1000 })`, as TorchRL). */
  storage: z.custom<Storage>((v) => v instanceof Storage, "expected a Storage (ListStorage or LazyStackStorage)").optional(),
  /** Which rows `sample()` returns (default `new RandomSampler()`). */
  sampler: z.custom<Sampler>((v) => v instanceof Sampler, "expected a Sampler (RandomSampler, SamplerWithoutReplacement or PrioritizedSampler)").optional(),
  /** Where written rows go (default `new RoundRobinWriter()`). */
  writer: z.custom<Writer>((v) => v instanceof Writer, "expected a Writer (RoundRobinWriter or TensorDictMaxValueWriter)").optional(),
  /** Transforms: `inv` on write (last first), `forward` on sample (first first). */
  transforms: z.array(z.custom<ReplayBufferTransform>(isReplayBufferTransform, "expected a transform: { name, inv?, forward? }")).optional(),
  /** Rows per `sample()` when none is passed there; needed to iterate over the buffer. */
  batchSize: z.number().int().min(1).optional(),
  /** Seed of the sampling generator, for reproducible samples (default: a random seed). */
  seed: z.number().int().min(0).max(Number.MAX_SAFE_INTEGER).optional(),
  /** The key read for priorities when extending a buffer with a `PrioritizedSampler` (default `"td_error"`). */
  priorityKey: NestedKeySchema.default("td_error"),
});

/** Options of {@link ReplayBuffer}. */
export type ReplayBufferOptions = z.input<typeof ReplayBufferOptionsSchema>;

/** Options of {@link ReplayBuffer.load}. */
export interface LoadOptions {
  /** Transforms of the loaded buffer (they are not saved); each gets back the state saved under its `name`. */
  readonly transforms?: readonly ReplayBufferTransform[];
}

/** The version of the replay-buffer file layout written by {@link ReplayBuffer.save}. */
export const REPLAY_BUFFER_FILE_VERSION = 1;

const PartSchema = z.strictObject({ kind: z.string(), config: z.record(z.string(), z.unknown()), state: z.unknown() });

/**
 * The trajectories a transform held back: their rows (batch size `[]`, lazily stacked) as one base64 Arrow IPC stream
 * in the TensorDict wire layout (they lack what the transform adds, so they cannot share the stored rows' columns),
 * and the row count of each trajectory.
 */
const HeldSchema = z.strictObject({
  name: z.string(),
  lengths: z.array(z.number().int().min(1)),
  raggedKeys: z.array(NestedKeySchema),
  arrow: z.string(),
});

const FileMetadataSchema = z.strictObject({
  format: z.literal("posttrain.replay_buffer"),
  version: z.literal(REPLAY_BUFFER_FILE_VERSION),
  storage: z.strictObject({ kind: z.enum(["list", "lazy-stack"]), maxSize: z.number().int().min(1).nullable(), length: z.number().int().min(0) }),
  raggedKeys: z.array(NestedKeySchema),
  sampler: PartSchema,
  writer: PartSchema,
  batchSize: z.number().int().min(1).nullable(),
  priorityKey: NestedKeySchema,
  rng: z.array(z.number().int()).length(4),
  transforms: z.array(z.strictObject({ name: z.string(), state: z.record(z.string(), z.unknown()).nullable() })),
  /** The rows each transform held back (`heldBack`), absent in files of earlier releases. */
  held: z.array(HeldSchema).default([]),
});

type FileMetadata = z.output<typeof FileMetadataSchema>;

function makeStorage(meta: FileMetadata["storage"]): Storage {
  const options = meta.maxSize === null ? {} : { maxSize: meta.maxSize };
  return meta.kind === "list" ? new ListStorage(options) : new LazyStackStorage(options);
}

function makeSampler(kind: string, config: Record<string, unknown>): Sampler {
  switch (kind) {
    case "random":
      return new RandomSampler();
    case "without-replacement":
      return new SamplerWithoutReplacement(config);
    case "prioritized":
      return new PrioritizedSampler(config as unknown as ConstructorParameters<typeof PrioritizedSampler>[0]);
    default:
      throw new InvalidArgumentError(`unknown sampler kind ${JSON.stringify(kind)}`);
  }
}

function makeWriter(kind: string, config: Record<string, unknown>): Writer {
  switch (kind) {
    case "round-robin":
      return new RoundRobinWriter();
    case "max-value":
      return new TensorDictMaxValueWriter(config);
    default:
      throw new InvalidArgumentError(`unknown writer kind ${JSON.stringify(kind)}`);
  }
}

/**
 * A replay buffer of TensorDict rows.
 *
 * ```ts
 * const rb = new ReplayBuffer({ storage: new LazyStackStorage({ maxSize: 512 }), sampler: new SamplerWithoutReplacement(),
 *   transforms: [new MCAdvantage({ groupSize: 4 })], batchSize: 8, seed: 0 });
 * rb.extend(trajectories);       // rows along the first batch dimension; MCAdvantage holds them until a group is complete
 * for (const batch of rb) ...    // one pass without replacement, 8 rows at a time
 * await rb.save("buffer.arrow"); // Arrow IPC file; ReplayBuffer.load("buffer.arrow")
 * ```
 *
 * A sample is a new TensorDict of the sampled rows with `"index"` (int64 storage positions) and, with a
 * `PrioritizedSampler`, `"priority_weight"` (float32 importance weights), as TorchRL's `TensorDictReplayBuffer`.
 */
export class ReplayBuffer implements Iterable<TensorDict> {
  /** Where rows live. */
  readonly storage: Storage;
  /** Which rows `sample()` returns. */
  readonly sampler: Sampler;
  /** Where written rows go. */
  readonly writer: Writer;
  /** Rows per `sample()` when none is passed there. */
  readonly batchSize: number | undefined;
  /** The key read for priorities when extending a buffer with a `PrioritizedSampler`. */
  readonly priorityKey: NestedKey;
  readonly #transforms: ReplayBufferTransform[];
  #rng: SeededRNG;

  constructor(options: ReplayBufferOptions = {}) {
    const parsed = parseOptions(ReplayBufferOptionsSchema, options, "ReplayBuffer options");
    this.storage = parsed.storage ?? new ListStorage({ maxSize: 1000 });
    this.sampler = parsed.sampler ?? new RandomSampler();
    this.writer = parsed.writer ?? new RoundRobinWriter();
    this.#transforms = [...(parsed.transforms ?? [])];
    this.batchSize = parsed.batchSize;
    this.priorityKey = parsed.priorityKey;
    this.#rng = new SeededRNG(parsed.seed);
  }

  /** The number of rows held. */
  get length(): number {
    return this.storage.length;
  }

  /** Rows written so far (overwrites included; rows a transform held back or dropped are not counted). */
  get writeCount(): number {
    return this.writer.writeCount;
  }

  /** The transforms, in order. */
  get transforms(): readonly ReplayBufferTransform[] {
    return [...this.#transforms];
  }

  /** Adds a transform after the existing ones and returns `this`. */
  appendTransform(transform: ReplayBufferTransform): this {
    if (!isReplayBufferTransform(transform)) throw new InvalidArgumentError("appendTransform: expected a transform: { name, inv?, forward? }");
    this.#transforms.push(transform);
    return this;
  }

  /**
   * Writes the rows of `td` (one per element of its first batch dimension) after the transforms' `inv`, and returns
   * the storage position of each written row (`-1` for a row a max-value writer did not keep; an empty array when a
   * transform held everything back, e.g. an incomplete GRPO group). Rows share data with what is written.
   * With a `PrioritizedSampler`, rows holding `priorityKey` get that priority, the others the default one.
   */
  extend(td: TensorDict): Int32Array {
    if (!(td instanceof TensorDict)) throw new InvalidArgumentError("ReplayBuffer.extend: expected a TensorDict");
    if (td.batchDims === 0) throw new InvalidArgumentError("ReplayBuffer.extend: expected a TensorDict with a batch dimension, got batch size [] (use add)");
    let data: TensorDict | null = td;
    for (let i = this.#transforms.length - 1; i >= 0 && data !== null; i--) {
      const transform = this.#transforms[i]!;
      if (transform.inv !== undefined) data = transform.inv(data);
    }
    if (data === null) return new Int32Array(0);
    return this.#write(unbindRows(data, `ReplayBuffer.extend (after transform inv)`), data);
  }

  /** Writes one element (a TensorDict of any batch size, stored as one row), as `extend(td.unsqueeze(0))`. */
  add(td: TensorDict): Int32Array {
    if (!(td instanceof TensorDict)) throw new InvalidArgumentError("ReplayBuffer.add: expected a TensorDict");
    return this.extend(td.unsqueeze(0));
  }

  #write(rows: readonly TensorDict[], data: TensorDict): Int32Array {
    if (rows.length === 0) return new Int32Array(0);
    const positions = this.writer.positions(rows, this.storage);
    const kept: number[] = [];
    for (let i = 0; i < positions.length; i++) if (positions[i]! >= 0) kept.push(i);
    // Ascending positions, so a storage that is still filling up is appended to in order; the sort is stable, so of
    // two rows sent to one position the later is written last and kept.
    kept.sort((a, b) => positions[a]! - positions[b]!);
    this.storage.set(kept.map((i) => positions[i]!), kept.map((i) => rows[i]!));
    this.sampler.onWrite?.(positions);
    if (this.sampler instanceof PrioritizedSampler && data.has(this.priorityKey)) {
      const reduction = this.sampler.reduction;
      const priorities = rows.map((row) => {
        const values = leafNumbers(row, this.priorityKey, "ReplayBuffer.extend priority");
        return values.length === 1 ? values[0]! : reduce(values, reduction);
      });
      this.sampler.updatePriority(positions, priorities);
    }
    return positions;
  }

  /**
   * `batchSize` rows (default: the constructor's) chosen by the sampler, as a new TensorDict after the transforms'
   * `forward`, with `"index"` and, when prioritized, `"priority_weight"`. Throws REPLAY_BUFFER_EMPTY on an empty
   * buffer, INVALID_ARGUMENT without a batch size.
   */
  sample(batchSize?: number): TensorDict {
    const size = batchSize ?? this.batchSize;
    if (size === undefined) throw new InvalidArgumentError("ReplayBuffer.sample: batchSize: pass it here or in the constructor options");
    if (!Number.isInteger(size) || size < 1) throw new InvalidArgumentError(`ReplayBuffer.sample: batchSize must be a positive integer, got ${String(size)}`);
    if (this.storage.length === 0) throw new ReplayBufferEmptyError();
    const { index, priorityWeight } = this.sampler.sample(this.storage.length, size, this.#rng);
    let data = this.storage.get(index);
    for (const transform of this.#transforms) if (transform.forward !== undefined) data = transform.forward(data);
    data.set("index", new Tensor("int64", [index.length], BigInt64Array.from(index, (i) => BigInt(i))));
    if (priorityWeight !== undefined) data.set("priority_weight", new Tensor("float32", [priorityWeight.length], priorityWeight));
    return data;
  }

  /** Sets priorities of stored rows (`PrioritizedSampler` only; INVALID_ARGUMENT otherwise). See {@link PrioritizedSampler.updatePriority}. */
  updatePriority(index: number | ArrayLike<number>, priority: number | ArrayLike<number>): void {
    if (!(this.sampler instanceof PrioritizedSampler)) {
      throw new InvalidArgumentError(`ReplayBuffer.updatePriority: the sampler is a ${this.sampler.constructor.name}, not a PrioritizedSampler`);
    }
    this.sampler.updatePriority(index, priority);
  }

  /** Sets priorities from a sampled TensorDict: its `"index"` and `priorityKey` (one value per row, reduced by the sampler's reduction). */
  updateTensorDictPriority(td: TensorDict): void {
    const index = td.getTensor("index").toNumbers();
    const rows = td.batchDims === 0 ? [td] : td.unbind(0);
    const reduction = this.sampler instanceof PrioritizedSampler ? this.sampler.reduction : "max";
    const priorities = rows.map((row) => {
      const values = leafNumbers(row, this.priorityKey, "updateTensorDictPriority");
      return values.length === 1 ? values[0]! : reduce(values, reduction);
    });
    this.updatePriority(index, priorities);
  }

  /**
   * Removes the `batchSize` oldest rows (in write order) and returns them, after the transforms' `forward`: the read
   * of on-policy and asynchronous GRPO, where each collected row is trained on once and room is made for the
   * collector (docs/collectors.md). Needs a `RoundRobinWriter` and a sampler that is not prioritized
   * (INVALID_ARGUMENT otherwise, or when fewer than `batchSize` rows are held; REPLAY_BUFFER_EMPTY when none is).
   */
  take(batchSize: number): TensorDict {
    this.#checkRemovable("take");
    if (!Number.isInteger(batchSize) || batchSize < 1) throw new InvalidArgumentError(`ReplayBuffer.take: batchSize must be a positive integer, got ${String(batchSize)}`);
    if (this.storage.length === 0) throw new ReplayBufferEmptyError();
    if (this.storage.length < batchSize) throw new InvalidArgumentError(`ReplayBuffer.take: batchSize ${batchSize} is more than the ${this.storage.length} rows held`);
    const order = this.#writeOrder();
    let data = this.storage.get(order.slice(0, batchSize));
    this.#keep(order.slice(batchSize));
    for (const transform of this.#transforms) if (transform.forward !== undefined) data = transform.forward(data);
    return data;
  }

  /**
   * Removes the stored rows for which `predicate` is true (for example samples older than the policy allows) and
   * returns how many; the others keep their write order. Same requirements as {@link take}.
   */
  discardWhere(predicate: (row: TensorDict) => boolean): number {
    this.#checkRemovable("discardWhere");
    const order = this.#writeOrder();
    const kept = order.filter((p) => !predicate(this.storage.row(p)));
    if (kept.length !== order.length) this.#keep(kept);
    return order.length - kept.length;
  }

  #checkRemovable(method: string): void {
    if (!(this.writer instanceof RoundRobinWriter) || this.sampler instanceof PrioritizedSampler) {
      throw new InvalidArgumentError(
        `ReplayBuffer.${method}: needs a RoundRobinWriter and a non-prioritized sampler, got a ${this.writer.constructor.name} and a ${this.sampler.constructor.name}`,
      );
    }
  }

  /** Storage positions, oldest write first: once the storage is full, the round-robin cursor points at the oldest row. */
  #writeOrder(): number[] {
    const n = this.storage.length;
    const start = n < this.storage.maxSize ? 0 : this.writer.state().cursor as number;
    return Array.from({ length: n }, (_, i) => (start + i) % n);
  }

  /** Keeps only the rows at `positions` (in that order), moved to positions 0.. so later writes follow them. */
  #keep(positions: readonly number[]): void {
    const rows = positions.map((p) => this.storage.row(p));
    const { writeCount } = this.writer.state() as { writeCount: number };
    this.storage.empty();
    this.storage.set(Int32Array.from(rows, (_, i) => i), rows);
    this.writer.loadState({ cursor: rows.length % this.storage.maxSize, writeCount });
    this.sampler.empty();
  }

  /** Removes every row and resets the sampler and the writer (`writeCount` included). */
  empty(): void {
    this.writer.empty();
    this.sampler.empty();
    this.storage.empty();
  }

  /**
   * Batches of `batchSize` rows until the sampler runs out: one pass over the buffer with a
   * `SamplerWithoutReplacement` (the next iteration starts a new pass). With a sampler that never runs out
   * (`RandomSampler`, `PrioritizedSampler`) the iteration is endless, as in TorchRL: break out of it.
   */
  *[Symbol.iterator](): Iterator<TensorDict> {
    if (this.batchSize === undefined) throw new InvalidArgumentError("ReplayBuffer: iterating needs batchSize in the constructor options");
    this.sampler.resetRanOut();
    do {
      yield this.sample();
    } while (!this.sampler.ranOut);
  }

  /**
   * Saves the rows and the state (sampler, writer, priorities, counters, generator, transform state) to an Arrow IPC
   * file, written to a temporary file and renamed. Transforms themselves are not saved: pass them to `load`.
   * Rows a transform holds back (`heldBack`: `MCAdvantage`'s incomplete GRPO groups) are saved too. What is saved is
   * taken before the first `await`, so writes after the call do not reach the file.
   */
  async save(path: string): Promise<void> {
    const all = this.storage.all();
    const metadata: JSONObject = {
      format: "posttrain.replay_buffer",
      version: REPLAY_BUFFER_FILE_VERSION,
      storage: { kind: this.storage.kind, maxSize: Number.isFinite(this.storage.maxSize) ? this.storage.maxSize : null, length: this.storage.length },
      raggedKeys: (all?.raggedKeys ?? []),
      sampler: { kind: this.sampler.kind, config: this.sampler.config(), state: this.sampler.state() },
      writer: { kind: this.writer.kind, config: this.writer.config(), state: this.writer.state() },
      batchSize: this.batchSize ?? null,
      priorityKey: this.priorityKey,
      rng: this.#rng.state(),
      transforms: this.#transforms.map((t) => ({ name: t.name, state: t.state?.() ?? null })),
      held: this.#transforms.flatMap((t) => {
        const trajectories = t.heldBack?.() ?? [];
        return trajectories.length === 0 ? [] : [{ name: t.name, ...encodeHeld(trajectories) }];
      }),
    };
    await writeBufferFile(path, all?.td ?? new TensorDict({}, { batchSize: [0] }), metadata);
  }

  /**
   * A buffer saved by {@link save}: same storage, sampler, writer, rows, priorities, counters and generator state,
   * and the rows each given transform held back.
   * Throws REPLAY_BUFFER_FILE for a file that is not a replay buffer of this version.
   */
  static async load(path: string, options: LoadOptions = {}): Promise<ReplayBuffer> {
    const { rows, metadata } = await readBufferFile(path);
    const checked = FileMetadataSchema.safeParse(metadata);
    if (!checked.success) {
      const issue = checked.error.issues[0]!;
      throw new ReplayBufferFileError(path, `bad metadata at ${issue.path.map(String).join(".") || "(root)"}: ${issue.message}`);
    }
    const meta = checked.data;
    try {
      const transforms = [...(options.transforms ?? [])];
      const buffer = new ReplayBuffer({
        storage: makeStorage(meta.storage),
        sampler: makeSampler(meta.sampler.kind, meta.sampler.config),
        writer: makeWriter(meta.writer.kind, meta.writer.config),
        transforms,
        ...(meta.batchSize !== null ? { batchSize: meta.batchSize } : {}),
        priorityKey: meta.priorityKey,
      });
      buffer.#rng = SeededRNG.fromState(meta.rng);
      buffer.sampler.loadState(meta.sampler.state);
      buffer.writer.loadState(meta.writer.state);
      for (const saved of meta.transforms) {
        const transform = transforms.find((t) => t.name === saved.name);
        if (transform?.loadState !== undefined && saved.state !== null) transform.loadState(saved.state as JSONObject);
      }
      // held-back rows go back to their transform (without it, as without its state, they are not loaded)
      for (const held of meta.held) transforms.find((t) => t.name === held.name)?.restoreHeldBack?.(decodeHeld(held));
      if (meta.storage.length > 0) {
        const stored = rows.unbind(0).map((row) => denseRow(row, meta.raggedKeys));
        buffer.storage.set(Int32Array.from(stored, (_, i) => i), stored);
      }
      if (buffer.storage.length !== meta.storage.length) {
        throw new InvalidArgumentError(`the file holds ${buffer.storage.length} rows but its metadata says ${meta.storage.length}`);
      }
      return buffer;
    } catch (err) {
      if (err instanceof ReplayBufferFileError) throw err;
      throw new ReplayBufferFileError(path, err instanceof Error ? err.message : String(err), { cause: err });
    }
  }
}

/** A loaded row with its lazily stacked keys (ragged with one row) back to dense leaves. */
function denseRow(row: TensorDict, raggedKeys: readonly NestedKey[]): TensorDict {
  if (raggedKeys.length === 0) return row;
  const out = row.exclude();
  for (const key of raggedKeys) {
    const value = row.get(key, undefined);
    if (value instanceof RaggedTensor) out.set(key, value.row(0));
  }
  return out;
}

/** Held-back trajectories as {@link HeldSchema} fields. */
function encodeHeld(trajectories: readonly TensorDict[]): Omit<z.output<typeof HeldSchema>, "name"> {
  const rows = trajectories.flatMap((t) => t.unbind(0));
  const { td, raggedKeys } = lazyStack(rows, true);
  return { lengths: trajectories.map((t) => t.batchSize[0]!), raggedKeys: [...raggedKeys], arrow: Buffer.from(td.toArrow()).toString("base64") };
}

/** The trajectories {@link encodeHeld} wrote (each `[T]`, its leaves dense again). */
function decodeHeld(held: z.output<typeof HeldSchema>): TensorDict[] {
  const rows = TensorDict.fromArrow(Buffer.from(held.arrow, "base64")).unbind(0).map((row) => denseRow(row, held.raggedKeys));
  const total = held.lengths.reduce((a, b) => a + b, 0);
  if (rows.length !== total) throw new InvalidArgumentError(`held-back rows of ${held.name}: ${rows.length} rows but lengths sum to ${total}`);
  const out: TensorDict[] = [];
  let at = 0;
  for (const length of held.lengths) {
    out.push(lazyStack(rows.slice(at, at + length), true).td);
    at += length;
  }
  return out;
}
