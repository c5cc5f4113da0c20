/**
 * The opening and the first build every whole-run recipe shares (`GRPOTrainer`, `SFTTrainer`, `PPOTrainer`): the run
 * directory prepared (a resume checked against the saved config), the config written and the trackers started; then
 * the run's parts built, or on failure the trackers and the workers the run started released.
 */
import type { z } from "zod";
import { RunDirectory } from "./run-directory.js";
import type { RunWorkers } from "./run-workers.js";
import type { RunTrackers } from "./trackers/run-trackers.js";
import { startRunTrackers, type TrackedConfig } from "./trackers/start.js";

/** What {@link openRunDirectory} gives a recipe. */
export interface OpenedRun {
  readonly runDir: RunDirectory;
  /** Whether the run resumes (`resume` asked and the directory holds an earlier run). */
  readonly resumable: boolean;
  /** The config's trackers, started, not yet open (undefined: `metrics.jsonl` only). */
  readonly trackers: RunTrackers | undefined;
}

/**
 * Prepares `config.runDir` (with `resume`, checks the saved config against `config`, `freeFields` aside, resolved by
 * `schema`), writes the config and starts its trackers.
 */
export async function openRunDirectory(
  config: TrackedConfig & { readonly runDir: string },
  resume: boolean,
  freeFields: readonly string[],
  schema: z.ZodType,
  log: ((line: string) => void) | undefined,
): Promise<OpenedRun> {
  const runDir = new RunDirectory(config.runDir);
  const resumable = await runDir.prepare(resume);
  if (resumable) await runDir.checkResumable(config, freeFields, schema);
  await runDir.writeConfig(config);
  const trackers = await startRunTrackers(config, runDir, resumable, log);
  return { runDir, resumable, trackers };
}

/** `build()`'s parts with the trackers opened at their start step; on failure closes the trackers and `workers`. */
export async function buildRunParts<P extends { readonly startStep: number }>(
  trackers: RunTrackers | undefined,
  workers: RunWorkers,
  build: () => Promise<P>,
): Promise<P> {
  try {
    const parts = await build();
    await trackers?.open(parts.startStep);
    return parts;
  } catch (err) {
    await trackers?.close();
    await workers.close();
    throw err;
  }
}
