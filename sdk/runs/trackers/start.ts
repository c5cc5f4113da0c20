/**
 * Starting a run's trackers from its config: nothing when `loggers` names only `"jsonl"`, else the logger process
 * with the tracker runs named and placed as `tracking` says.
 */
import { basename, resolve } from "node:path";
import type { z } from "zod";
import type { RunDirectory } from "../run-directory.js";
import { trackersOf, type LoggerName, type TrackingConfigSchema } from "./config.js";
import { RunTrackers } from "./run-trackers.js";

/** The config fields the trackers read. */
export interface TrackedConfig {
  readonly loggers: readonly LoggerName[];
  readonly tracking: z.output<typeof TrackingConfigSchema>;
}

/**
 * The run's {@link RunTrackers}, started and their packages checked (not yet open: `open(startStep)`), or `undefined`
 * when `config.loggers` names no tracker. Their warnings go to `log` (the run's `options.log`), else to stderr: a
 * tracker dropped mid-run is worth seeing.
 */
export async function startRunTrackers(
  config: TrackedConfig,
  runDir: RunDirectory,
  resume: boolean,
  log: ((line: string) => void) | undefined,
): Promise<RunTrackers | undefined> {
  const trackers = trackersOf(config.loggers);
  if (trackers.length === 0) return undefined;
  return RunTrackers.start({
    trackers,
    dir: resolve(runDir.path, config.tracking.dir),
    project: config.tracking.project,
    runName: config.tracking.runName ?? basename(runDir.path),
    resume,
    config,
    log:
      log ??
      ((line) => {
        console.warn(line);
      }),
  });
}
