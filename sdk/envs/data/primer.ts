/**
 * `DataLoadingPrimer`: TorchRL's transform that feeds dataset rows into an env at reset. It reads JSONL, Parquet
 * and Arrow files, or a Hub dataset / `save_to_disk` copy through the Python `datasets` library (hub.ts), repeats
 * each sample `repeats` times in a row (GRPO groups), shuffles each epoch with a seed, and can resume from a saved
 * position.
 */
import { z } from "zod";
import { TensorDict } from "../../tensordict/index.js";
import { parseOptions } from "../../core/index.js";
import { DatasetExhaustedError, DatasetFormatError, InvalidArgumentError } from "../errors.js";
import { buildColumns, columnLeaf, FieldsSchema, type DatasetColumns, type FieldKind } from "./fields.js";
import { PrimerBase } from "./primer-base.js";
import { readHubDataset } from "./hub.js";
import { DatasetSourceFields, datasetSourceProblem } from "./source.js";
import { readDatasetFile, type DatasetFile } from "./read.js";
import { seededPermutation } from "./shuffle.js";

/** Where the primer is in its stream of samples: the epoch, and the samples already delivered in it. */
export const DataPositionSchema = z.strictObject({
  /** The epoch (0-based). */
  epoch: z.number().int().nonnegative(),
  /** Samples delivered in this epoch, repeats included (`0 ≤ index < rows × repeats`). */
  index: z.number().int().nonnegative(),
});

/** Where the primer is in its stream of samples (save it with a checkpoint; pass it back as `position`). */
export type DataPosition = z.infer<typeof DataPositionSchema>;

/** Options of {@link DataLoadingPrimer}. */
export const DataLoadingPrimerOptionsSchema = z.strictObject({
  /** Dataset files (`.jsonl`, `.parquet`, `.arrow` / `.feather`), read in order as one dataset; or `hub` / `disk`. */
  files: z.union([z.string().min(1), z.array(z.string().min(1)).min(1)]).optional(),
  ...DatasetSourceFields,
  /** The Python interpreter for `hub` / `disk` (default: the workers', `resolvePython()`). */
  python: z.string().min(1).optional(),
  /**
   * TensorDict key → dataset column (or `{ column, kind, optional, default }`). Default: every column of the first
   * row under its own name, with kinds inferred from the data.
   */
  fields: FieldsSchema.optional(),
  /** How many times each sample is delivered in a row (the GRPO group size; default 1). */
  repeats: z.number().int().min(1).default(1),
  /** Shuffle the rows of each epoch (default true). */
  shuffle: z.boolean().default(true),
  /** The shuffle seed: the same seed gives the same order, epoch after epoch (default 0). */
  seed: z.number().int().default(0),
  /** Epochs to deliver; `null` (default) repeats the dataset forever. */
  epochs: z.number().int().min(1).nullable().default(null),
  /** Start from this position instead of the beginning (resume). */
  position: DataPositionSchema.optional(),
});

/** A step on the loaded dataset (the converted columns, and the rows as read): the columns to use. */
export type PrepareColumns = (columns: DatasetColumns, files: readonly DatasetFile[]) => DatasetColumns;

/** Options of {@link DataLoadingPrimer}. */
export type DataLoadingPrimerOptions = z.input<typeof DataLoadingPrimerOptionsSchema>;
type Resolved = z.output<typeof DataLoadingPrimerOptionsSchema>;

/** The first `limit` rows of `files`, in order. */
function firstRows(files: readonly DatasetFile[], limit: number): DatasetFile[] {
  const out: DatasetFile[] = [];
  let left = limit;
  for (const file of files) {
    if (left === 0) break;
    const rows = file.rows.slice(0, left);
    out.push({ ...file, rows, ...(file.lines !== undefined ? { lines: file.lines.slice(0, left) } : {}) });
    left -= rows.length;
  }
  return out;
}

/**
 * Loads dataset rows into the env at reset (TorchRL's `DataLoadingPrimer`), before the base env's reset: each reset
 * row gets the next sample of the stream, under the field keys (e.g. `"query"`, `"answer"`). With a `"_reset"` mask
 * only the reset rows get new samples; the others keep theirs.
 *
 * The stream: epoch `e` visits the rows in a seeded order (or file order without `shuffle`), each row `repeats`
 * times in a row. So with `repeats: 4` and batch size `[8]`, one reset gives two groups of 4 identical prompts.
 * Pick a batch size that is a multiple of `repeats` so that groups never straddle two resets.
 */
export class DataLoadingPrimer extends PrimerBase {
  /** The resolved options. */
  readonly config: Readonly<Resolved>;
  readonly #files: readonly string[];
  #columns: Promise<DatasetColumns> | undefined;
  #loaded: DatasetColumns | undefined;
  #epoch: number;
  #index: number;
  #order: { epoch: number; order: Int32Array } | undefined;

  readonly #prepare: PrepareColumns | undefined;

  /**
   * `prepare` (for task envs) runs once on the loaded dataset, before the stream starts, and returns the rows to
   * use: IFEvalEnv drops the rows whose instructions it cannot check.
   */
  constructor(options: DataLoadingPrimerOptions, prepare?: PrepareColumns) {
    super();
    this.#prepare = prepare;
    this.config = parseOptions(DataLoadingPrimerOptionsSchema, options, "DataLoadingPrimer options");
    const problem = datasetSourceProblem(this.config);
    if (problem !== undefined) throw new InvalidArgumentError(`DataLoadingPrimer options.${problem.field}: ${problem.message}`);
    const files = this.config.files;
    this.#files = files === undefined ? [] : typeof files === "string" ? [files] : files;
    this.#epoch = this.config.position?.epoch ?? 0;
    this.#index = this.config.position?.index ?? 0;
  }

  /**
   * Reads and checks every file, or the Hub dataset (once; later calls return the same result). Throws
   * DATASET_NOT_FOUND, DATASET_FORMAT, or DATASET_FIELD naming the file, row and field; for `hub` / `disk` also
   * DATASET_NOT_CACHED and DATASETS_NOT_INSTALLED (see `readHubDataset`). Called by the first reset if not before.
   */
  async load(): Promise<DatasetColumns> {
    this.#columns ??= (async () => {
      const { hub, disk, limit } = this.config;
      let files: DatasetFile[] = [];
      if (hub !== undefined || disk !== undefined) {
        const { config, split, revision, streaming, python } = this.config;
        files.push(await readHubDataset({ hub, disk, config, split, revision, streaming, limit, python }));
      } else {
        for (const file of this.#files) files.push(await readDatasetFile(file));
      }
      if (limit !== undefined) files = firstRows(files, limit);
      const built = buildColumns(files, this.config.fields);
      const columns = this.#prepare === undefined ? built : this.#prepare(built, files);
      if (columns.size === 0) throw new DatasetFormatError(files[0]?.file ?? "(none)", "no row of the dataset is left to use");
      this.#loaded = columns;
      this.#checkPosition(this.position, columns.size, "DataLoadingPrimer options.position");
      return columns;
    })();
    try {
      return await this.#columns;
    } catch (err) {
      this.#columns = undefined;
      throw err;
    }
  }

  /** The number of dataset rows (after {@link load}). */
  get size(): number {
    if (this.#loaded === undefined) throw new InvalidArgumentError("DataLoadingPrimer.size: the dataset is not loaded yet; await load() first");
    return this.#loaded.size;
  }

  /** The keys written at reset, with their kinds (after {@link load}). */
  get fieldKinds(): ReadonlyMap<string, FieldKind> {
    if (this.#loaded === undefined) throw new InvalidArgumentError("DataLoadingPrimer.fieldKinds: the dataset is not loaded yet; await load() first");
    return this.#loaded.kinds;
  }

  /** The current position: pass it as `position` (or to {@link seek}) to resume the same stream. */
  get position(): DataPosition {
    return { epoch: this.#epoch, index: this.#index };
  }

  #checkPosition(position: DataPosition, size: number, where: string): void {
    const perEpoch = size * this.config.repeats;
    if (position.index >= perEpoch) {
      throw new InvalidArgumentError(`${where}.index: ${position.index} is past the end of an epoch (${size} rows × ${this.config.repeats} repeats = ${perEpoch})`);
    }
  }

  /** Moves to `position` (as given by `position`). */
  seek(position: DataPosition): void {
    const checked = parseOptions(DataPositionSchema, position, "DataLoadingPrimer.seek position");
    if (this.#loaded !== undefined) this.#checkPosition(checked, this.#loaded.size, "DataLoadingPrimer.seek position");
    this.#epoch = checked.epoch;
    this.#index = checked.index;
  }

  /** Starts again from the first epoch (TorchRL's `reset_dataloader`). */
  resetDataloader(): this {
    this.#epoch = 0;
    this.#index = 0;
    return this;
  }

  #orderOf(epoch: number, size: number): Int32Array {
    if (this.#order?.epoch !== epoch) {
      const order = this.config.shuffle ? seededPermutation(size, this.config.seed, epoch) : Int32Array.from({ length: size }, (_, i) => i);
      this.#order = { epoch, order };
    }
    return this.#order.order;
  }

  /** The dataset row indices of the next `count` samples; advances the position. Throws DATASET_EXHAUSTED. */
  #next(count: number, size: number): number[] {
    const { repeats, epochs } = this.config;
    const perEpoch = size * repeats;
    const out: number[] = [];
    let epoch = this.#epoch;
    let index = this.#index;
    while (out.length < count) {
      if (epochs !== null && epoch >= epochs) throw new DatasetExhaustedError(epochs);
      out.push(this.#orderOf(epoch, size)[Math.floor(index / repeats)]!);
      index++;
      if (index === perEpoch) {
        epoch++;
        index = 0;
      }
    }
    this.#epoch = epoch;
    this.#index = index;
    return out;
  }

  /** The next `count` samples as a TensorDict of batch size `[count]` (what a reset of `count` rows gets). */
  async take(count: number): Promise<TensorDict> {
    const n = parseOptions(z.number().int().nonnegative(), count, "DataLoadingPrimer.take count");
    const columns = await this.load();
    return this.#build(columns, this.#next(n, columns.size), [n]);
  }

  #build(columns: DatasetColumns, rows: readonly number[], batchSize: readonly number[]): TensorDict {
    const td = new TensorDict({}, { batchSize });
    for (const key of columns.keys) td.set(key, columnLeaf(columns, key, rows, batchSize));
    return td;
  }
}
