/**
 * Typed errors thrown by `sdk/envs`. Each one is a {@link PosttrainError} with a stable `code`; the fields say which
 * file, row, field, reward or sample the problem is in, so callers need not parse messages.
 */
import { InvalidArgumentError, PosttrainError } from "../core/errors.js";

export { InvalidArgumentError, PosttrainError };

/**
 * A dataset file that does not exist or cannot be read; for a Hub dataset or a `save_to_disk` copy, no such id,
 * directory, config or split (`field` says which). Code `DATASET_NOT_FOUND`.
 */
export class DatasetNotFoundError extends PosttrainError {
  /** The path as given (for a Hub dataset, its id with config and split). */
  readonly file: string;
  /** The option that names what is missing (`"hub"`, `"disk"`, `"config"`, `"split"`), when it is one. */
  readonly field: string | undefined;

  constructor(file: string, reason: string, options?: { cause?: unknown; field?: string }) {
    super("DATASET_NOT_FOUND", `dataset ${JSON.stringify(file)}: ${reason}`, options);
    this.file = file;
    this.field = options?.field;
  }
}

/**
 * A Hub dataset that cannot be fetched (offline: `HF_HUB_OFFLINE=1` / `HF_DATASETS_OFFLINE=1`, or the hub
 * unreachable) and whose config is not in the `datasets` cache. Code `DATASET_NOT_CACHED`; the message names the
 * id, config, split and cache directory, and says how to fill the cache (or to use a `save_to_disk` copy).
 */
export class DatasetNotCachedError extends PosttrainError {
  /** The Hub id. */
  readonly hub: string;
  /** The config asked for (undefined: the default one). */
  readonly config: string | undefined;
  /** The split asked for. */
  readonly split: string | undefined;
  /** The `datasets` cache that was searched. */
  readonly cacheDir: string | undefined;

  constructor(source: { hub: string; config?: string | undefined; split?: string | undefined; cacheDir?: string | undefined }, message: string) {
    super("DATASET_NOT_CACHED", message);
    this.hub = source.hub;
    this.config = source.config;
    this.split = source.split;
    this.cacheDir = source.cacheDir;
  }
}

/**
 * The worker's Python cannot import the `datasets` library, which loads Hub datasets and `save_to_disk` copies.
 * Code `DATASETS_NOT_INSTALLED`; install the `datasets` extra (`npx posttrain setup --extras datasets`; in a checkout
 * of posttrain, `.venv/bin/pip install -e '.[datasets]'`).
 */
export class DatasetsNotInstalledError extends PosttrainError {
  /** The Python interpreter that lacks it. */
  readonly python: string;
  /** The extra of the worker package that installs it. */
  readonly extra = "datasets";

  constructor(python: string, message: string) {
    super("DATASETS_NOT_INSTALLED", message);
    this.python = python;
  }
}

/**
 * A dataset file whose content is not what its format promises (a JSONL line that is not a JSON object, a Parquet
 * or Arrow file that does not parse, an unknown extension). Code `DATASET_FORMAT`. `row` is the 0-based row (for
 * JSONL, the line number is `row + 1`) when the problem is in one row.
 */
export class DatasetFormatError extends PosttrainError {
  /** The file. */
  readonly file: string;
  /** The 0-based row, when the problem is in one row. */
  readonly row: number | undefined;

  constructor(file: string, reason: string, row?: number, options?: { cause?: unknown }) {
    super("DATASET_FORMAT", `dataset ${JSON.stringify(file)}${row === undefined ? "" : `, row ${row}`}: ${reason}`, options);
    this.file = file;
    this.row = row;
  }
}

/**
 * A dataset row that lacks a field the environment needs, or holds a value of the wrong type. Code
 * `DATASET_FIELD`. The message names the file, the 0-based row and the field.
 */
export class DatasetFieldError extends PosttrainError {
  /** The file. */
  readonly file: string;
  /** The 0-based row in that file. */
  readonly row: number;
  /** The dataset field (column). */
  readonly field: string;

  constructor(file: string, row: number, field: string, reason: string) {
    super("DATASET_FIELD", `dataset ${JSON.stringify(file)}, row ${row}, field ${JSON.stringify(field)}: ${reason}`);
    this.file = file;
    this.row = row;
    this.field = field;
  }
}

/** Every epoch asked for (`epochs`) has been delivered. Code `DATASET_EXHAUSTED`. */
export class DatasetExhaustedError extends PosttrainError {
  /** The number of epochs that were delivered. */
  readonly epochs: number;

  constructor(epochs: number) {
    super("DATASET_EXHAUSTED", `the dataset is exhausted: all ${epochs} epoch(s) were delivered (reset the primer or raise epochs)`);
    this.epochs = epochs;
  }
}

/**
 * A reward function that threw (or returned a value that is not a finite number) for one sample, when no default
 * is configured. Code `REWARD_FAILED`; the original error is the `cause`.
 */
export class RewardError extends PosttrainError {
  /** The reward's name. */
  readonly reward: string;
  /** The sample's row in the batch (row-major over the batch size). */
  readonly sampleIndex: number;
  /** The sample's id, when the data has one. */
  readonly sampleId: string | undefined;

  constructor(reward: string, sampleIndex: number, sampleId: string | undefined, reason: string, options?: { cause?: unknown }) {
    const id = sampleId === undefined ? "" : ` (id ${JSON.stringify(sampleId)})`;
    super("REWARD_FAILED", `reward ${JSON.stringify(reward)} failed on sample ${sampleIndex}${id}: ${reason}`, options);
    this.reward = reward;
    this.sampleIndex = sampleIndex;
    this.sampleId = sampleId;
  }
}

/** An environment used out of order, e.g. `step` on data that lacks the policy's output. Code `ENV_STATE`. */
export class EnvStateError extends PosttrainError {
  constructor(message: string) {
    super("ENV_STATE", message);
  }
}

/**
 * A value that does not fit its spec (TorchRL's `TensorSpec.assert_is_in`): wrong kind, shape or dtype, or an element
 * out of bounds. Code `SPEC_MISMATCH`; the message names the key and says what was expected and what came.
 */
export class SpecMismatchError extends PosttrainError {
  /** The key whose value does not fit (e.g. `"action"`). */
  readonly key: string;
  /** The spec, as text (`Categorical(n=2, shape=[], dtype=int64)`). */
  readonly expected: string;
  /** What came instead (`dtype float32`, `shape [2]`, `element 0 = 3, outside [0, 1]`). */
  readonly got: string;

  constructor(key: string, expected: string, got: string, where?: string) {
    super("SPEC_MISMATCH", `${where === undefined ? "" : `${where} `}${JSON.stringify(key)}: expected ${expected}, got ${got}`);
    this.key = key;
    this.expected = expected;
    this.got = got;
  }
}

/**
 * One copy of a batched env (`SerialEnv`, `ParallelEnv`) failed. Code `SUB_ENV_FAILED`; `copyIndex` says which copy,
 * `causeCode` the code of the copy's own error (when it had one), and the message repeats the copy's message.
 */
export class SubEnvError extends PosttrainError {
  /** The copy (0-based, over the whole batch). */
  readonly copyIndex: number;
  /** The code of the copy's error (e.g. `SPEC_MISMATCH`), when it was a posttrain error. */
  readonly causeCode: string | undefined;

  constructor(env: string, copyIndex: number, message: string, options?: { cause?: unknown; causeCode?: string | undefined }) {
    super("SUB_ENV_FAILED", `${env} copy ${copyIndex}: ${message}`, options);
    this.copyIndex = copyIndex;
    this.causeCode = options?.causeCode;
  }
}
