/**
 * Datasets read through the Python `datasets` library: a Hub id (`hub: "openai/gsm8k"`, with `config`, `split`,
 * `revision`, `streaming`, `limit`) or a `save_to_disk` copy (`disk`, or `hub` naming such a directory). A child
 * `python -m posttrain_worker.data.hub_dataset` writes the split as an Arrow IPC stream into a private temporary
 * directory; its rows are then read like a local `.arrow` file, so the field mapping and envs are the same. The
 * library reads `HF_HOME`, `HF_DATASETS_CACHE`, `HF_HUB_OFFLINE` / `HF_DATASETS_OFFLINE` and `HF_TOKEN` from the
 * environment this process passes on.
 */
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { z } from "zod";
import { spawnPythonModule } from "../../../bridge/worker/os-process.js";
import { resolvePython } from "../../../bridge/worker/python.js";
import { DatasetFormatError, DatasetNotCachedError, DatasetNotFoundError, DatasetsNotInstalledError, InvalidArgumentError } from "../errors.js";
import { parseArrow } from "./arrow.js";
import type { DatasetFile } from "./read.js";

/** A dataset read through the `datasets` library: exactly one of `hub` and `disk`. */
export interface HubDatasetSource {
  /** A Hub dataset id (`"openai/gsm8k"`), a local directory `load_dataset` reads, or a `save_to_disk` directory. */
  readonly hub?: string | undefined;
  /** A `save_to_disk` directory (a `Dataset`, or a `DatasetDict` with `split`). */
  readonly disk?: string | undefined;
  /** The dataset config (subset), e.g. `"main"`; Hub ids only. */
  readonly config?: string | undefined;
  /** The split (`"train"`); required for a Hub id and for a saved `DatasetDict`. */
  readonly split?: string | undefined;
  /** A Hub revision (branch, tag or commit). */
  readonly revision?: string | undefined;
  /** Stream the split instead of downloading it whole (with `limit`, only those rows are read). */
  readonly streaming?: boolean | undefined;
  /** Keep only the first `limit` rows of the split. */
  readonly limit?: number | undefined;
  /** The Python interpreter (default: `resolvePython()`, the one workers run on). */
  readonly python?: string | undefined;
}

/** How messages name a dataset of the `datasets` library: `openai/gsm8k (main, train)`. */
export function hubDatasetLabel(source: HubDatasetSource): string {
  const name = source.hub ?? source.disk ?? "(none)";
  const parts = [source.config, source.split].filter((p): p is string => p !== undefined);
  return parts.length === 0 ? name : `${name} (${parts.join(", ")})`;
}

const ResultSchema = z.union([
  z.object({ ok: z.literal(true), rows: z.number().int().nonnegative(), columns: z.array(z.string()) }),
  z.object({ ok: z.literal(false), code: z.string(), message: z.string(), details: z.record(z.string(), z.unknown()).default({}) }),
]);

function programArgs(source: HubDatasetSource, out: string): string[] {
  const args: string[] = [];
  const add = (flag: string, value: string | number | undefined): void => {
    if (value !== undefined) args.push(flag, String(value));
  };
  add("--hub", source.hub);
  add("--disk", source.disk);
  add("--config", source.config);
  add("--split", source.split);
  add("--revision", source.revision);
  add("--limit", source.limit);
  if (source.streaming === true) args.push("--streaming");
  args.push("--out", out);
  return args;
}

function failure(source: HubDatasetSource, label: string, python: string, code: string, message: string, details: Record<string, unknown>): Error {
  switch (code) {
    case "DATASET_NOT_FOUND":
      return new DatasetNotFoundError(label, typeof details.reason === "string" ? details.reason : message, typeof details.field === "string" ? { field: details.field } : undefined);
    case "DATASET_NOT_CACHED":
      return new DatasetNotCachedError(
        { hub: source.hub ?? label, config: source.config, split: source.split, cacheDir: typeof details.cacheDir === "string" ? details.cacheDir : undefined },
        `dataset ${JSON.stringify(label)}: ${message}`,
      );
    case "DATASETS_NOT_INSTALLED":
      return new DatasetsNotInstalledError(python, `dataset ${JSON.stringify(label)}: ${message}`);
    case "BAD_ARGUMENTS": {
      // a source the loader rejects (a `config` for a save_to_disk copy, a Hub id without `split`)
      const field = typeof details.field === "string" ? details.field : "hub";
      return new InvalidArgumentError(`task.${field}: ${message}`);
    }
    default:
      return new DatasetFormatError(label, `${code}: ${message}`);
  }
}

/**
 * Reads one split through the `datasets` library (see the module notes). Throws DATASET_NOT_FOUND (no such id,
 * directory, config or split; `field` names which), DATASET_NOT_CACHED (offline and not in the cache: names the
 * id, config, split and cache), DATASETS_NOT_INSTALLED (names the extra), or DATASET_FORMAT.
 *
 * ```ts
 * const { rows } = await readHubDataset({ hub: "openai/gsm8k", config: "main", split: "train", limit: 100 });
 * ```
 */
export async function readHubDataset(source: HubDatasetSource): Promise<DatasetFile> {
  const label = hubDatasetLabel(source);
  const python = resolvePython(source.python);
  const dir = await mkdtemp(join(tmpdir(), "posttrain-dataset-"));
  try {
    const out = join(dir, "rows.arrows");
    const { child, tail, exited } = spawnPythonModule(python, "posttrain_worker.data.hub_dataset", programArgs(source, out), {});
    child.stdin?.end();
    let stdout = "";
    child.stdout?.setEncoding("utf8");
    child.stdout?.on("data", (chunk: string) => {
      stdout += chunk;
    });
    const spawnError = new Promise<Error | undefined>((resolve) => {
      child.once("error", resolve);
      child.once("exit", () => {
        resolve(undefined);
      });
    });
    const { exitCode, signal } = await exited;
    const startError = await spawnError;
    if (startError !== undefined) {
      throw new DatasetFormatError(label, `cannot start ${python} (${startError.message}); set POSTTRAIN_PYTHON or the python option`, undefined, { cause: startError });
    }
    const lastLine = stdout.trim().split("\n").at(-1) ?? "";
    let parsed: z.infer<typeof ResultSchema> | undefined;
    try {
      parsed = ResultSchema.parse(JSON.parse(lastLine));
    } catch {
      parsed = undefined;
    }
    if (parsed === undefined) {
      const how = signal !== null ? `was killed by ${signal}` : `exited with status ${String(exitCode)}`;
      throw new DatasetFormatError(label, `python -m posttrain_worker.data.hub_dataset ${how} without a result:\n${tail.text()}`);
    }
    if (!parsed.ok) throw failure(source, label, python, parsed.code, parsed.message, parsed.details);
    return { file: label, rows: parseArrow(label, await readFile(out)) };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}
