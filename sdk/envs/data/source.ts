/**
 * Where a dataset comes from: exactly one of `files` (local files read in TypeScript), `hub` (a Hub dataset id,
 * read through the Python `datasets` library) or `disk` (a `save_to_disk` directory), each with only the options
 * that apply to it. One check, used by `DataLoadingPrimer` and by the run config's `task` block.
 */
import { z } from "zod";

/**
 * The zod fields of a `hub` / `disk` source and its options, shared by `DataLoadingPrimer`'s options and the run
 * config's `task` block (where `files` is declared by each).
 */
export const DatasetSourceFields = {
  /**
   * A Hub dataset id (`"openai/gsm8k"`), read through the Python `datasets` library (offline from its cache with
   * `HF_HUB_OFFLINE=1`); also a local directory `load_dataset` reads or a `save_to_disk` directory.
   */
  hub: z.string().min(1).optional(),
  /** A `save_to_disk` directory, read with `datasets.load_from_disk` (`split` picks one of a `DatasetDict`). */
  disk: z.string().min(1).optional(),
  /** The dataset config (subset) of a Hub id, e.g. `"main"`. */
  config: z.string().min(1).optional(),
  /** The split of a Hub id (required) or of a saved `DatasetDict`, e.g. `"train"`. */
  split: z.string().min(1).optional(),
  /** A Hub revision: branch, tag or commit. */
  revision: z.string().min(1).optional(),
  /** Stream a Hub split instead of downloading it whole (with `limit`, only those rows are read). */
  streaming: z.boolean().optional(),
  /** Keep only the first `limit` rows of the dataset (before shuffling). */
  limit: z.number().int().min(1).optional(),
};

/** The source options a dataset may carry. */
export type DatasetSourceOptions = Partial<Record<"files" | "hub" | "disk" | "config" | "split" | "revision" | "streaming", unknown>>;

/** A problem with the source options: the field it is in, and what is expected. */
export interface DatasetSourceProblem {
  readonly field: string;
  readonly message: string;
}

/** Whether a `hub` value is a filesystem path (a directory) rather than a Hub id. */
function looksLikePath(hub: unknown): boolean {
  return typeof hub === "string" && /^(\/|\.|~|[A-Za-z]:[\\/])/.test(hub);
}

/** Options only a Hub dataset takes (`split` also fits a saved `DatasetDict`). */
const HUB_ONLY = ["config", "revision", "streaming"] as const;

/**
 * The first problem with `options` as a dataset source, or `undefined` when they name exactly one source and only
 * options it takes (a Hub id also needs a `split`; a `hub` path to a directory need not have one).
 *
 * ```ts
 * datasetSourceProblem({ files: "a.jsonl", hub: "openai/gsm8k" }); // { field: "hub", message: "give exactly one of ..." }
 * ```
 */
export function datasetSourceProblem(options: DatasetSourceOptions): DatasetSourceProblem | undefined {
  const given = (["files", "hub", "disk"] as const).filter((k) => options[k] !== undefined);
  if (given.length !== 1) {
    return {
      field: given[1] ?? "files",
      message:
        "give exactly one of files (local .jsonl/.parquet/.arrow files), hub (a Hub dataset id) or disk (a save_to_disk directory)" +
        (given.length > 1 ? `, not ${given.join(" and ")}` : ""),
    };
  }
  const source = given[0]!;
  for (const key of HUB_ONLY) {
    if (options[key] !== undefined && source !== "hub") return { field: key, message: `applies only to a Hub dataset (hub), not to ${source}` };
  }
  if (options.split !== undefined && source === "files") return { field: "split", message: "applies to hub and disk, not to files" };
  if (source === "hub" && options.split === undefined && !looksLikePath(options.hub)) {
    return { field: "split", message: 'a Hub dataset needs a split, e.g. split: "train"' };
  }
  return undefined;
}
