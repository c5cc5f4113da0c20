/**
 * The errors of experiment trackers (`loggers` in a run config, docs/trackers.md): a tracker whose Python packages
 * are not installed, and a logger process that could not start or open a tracker's run.
 */
import { PosttrainError } from "../../core/errors.js";

/**
 * A tracker in `loggers` needs Python packages that the worker environment lacks (code `TRACKER_UNAVAILABLE`); the
 * message names the tracker, the missing packages and the extra to install. Thrown by `create`, before the run starts.
 *
 * ```ts
 * try { await GRPOTrainer.create(config); } catch (e) { if (e instanceof TrackerUnavailableError) console.error(e.install); }
 * ```
 */
export class TrackerUnavailableError extends PosttrainError {
  /** The tracker (`"wandb"`, ...). */
  readonly tracker: string;
  /** The Python modules not found. */
  readonly missing: readonly string[];
  /** The command that installs them. */
  readonly install: string;

  constructor(tracker: string, missing: readonly string[], message: string, install: string) {
    super("TRACKER_UNAVAILABLE", message);
    this.tracker = tracker;
    this.missing = missing;
    this.install = install;
  }
}

/**
 * The tracker logger process could not start, or a tracker could not open its run (code `TRACKER_FAILED`); the
 * message carries the process's reason and the last lines of its stderr. Thrown by `create`.
 */
export class TrackerError extends PosttrainError {
  /** The tracker that failed, or `null` when the process itself did. */
  readonly tracker: string | null;

  constructor(tracker: string | null, message: string, options?: { cause?: unknown }) {
    super("TRACKER_FAILED", message, options);
    this.tracker = tracker;
  }
}
