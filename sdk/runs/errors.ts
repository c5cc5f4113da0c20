/**
 * Typed errors of the whole runs (`GRPOTrainer`, `SFTTrainer`) and their run directories. Each one is a
 * `PosttrainError` with a stable `code`.
 */
import { PosttrainError } from "../core/errors.js";

/** A run directory that cannot be used as asked (code `RUN_DIRECTORY`): it already holds a run. */
export class RunDirectoryError extends PosttrainError {
  /** The run directory. */
  readonly runDir: string;

  constructor(runDir: string, problem: string) {
    super("RUN_DIRECTORY", `runDir ${JSON.stringify(runDir)}: ${problem}`);
    this.runDir = runDir;
  }
}

/** A checkpoint a resume could not use, and why (it was renamed aside, never deleted). */
export interface SetAsideCheckpoint {
  /** Where it is now (`checkpoints/step-<N>.corrupt`). */
  readonly path: string;
  /** Its step. */
  readonly step: number;
  /** Why it was unreadable. */
  readonly reason: string;
}

/**
 * A resume with no checkpoint to resume from (code `NO_CHECKPOINT`): the run directory holds no run, no checkpoint,
 * or only unreadable ones (`setAside`). A resume never silently starts over: start in a fresh `runDir`, or without
 * `resume` when the directory holds no `metrics.jsonl` yet.
 */
export class NoCheckpointError extends PosttrainError {
  /** The run directory. */
  readonly runDir: string;
  /** The unreadable checkpoints this resume renamed aside, newest first (empty when there were none). */
  readonly setAside: readonly SetAsideCheckpoint[];

  constructor(runDir: string, problem: string, startOver: string, setAside: readonly SetAsideCheckpoint[] = []) {
    super("NO_CHECKPOINT", `cannot resume runDir ${JSON.stringify(runDir)}: ${problem}; to start over, ${startOver}`);
    this.runDir = runDir;
    this.setAside = setAside;
  }
}

/**
 * A resume whose config differs from the saved `config.yaml` in a field that matters (code
 * `RUN_CONFIG_MISMATCH`); `field` is its dotted path (`"loss.clipEpsilon"`).
 */
export class RunConfigMismatchError extends PosttrainError {
  /** The dotted path of the first differing field. */
  readonly field: string;
  /** The saved value. */
  readonly saved: unknown;
  /** The value of the config given now. */
  readonly current: unknown;

  constructor(runDir: string, field: string, saved: unknown, current: unknown) {
    super(
      "RUN_CONFIG_MISMATCH",
      `cannot resume ${runDir}: config field ${field} is ${JSON.stringify(current) ?? "missing"} but the run was started with ${JSON.stringify(saved) ?? "nothing"}`,
    );
    this.field = field;
    this.saved = saved;
    this.current = current;
  }
}

/** A trainer used after `close()` (code `TRAINER_CLOSED`). */
export class TrainerClosedError extends PosttrainError {
  constructor(what: string) {
    super("TRAINER_CLOSED", `${what}: the trainer is closed`);
  }
}

/**
 * A run that could not go on after one of its workers died or stopped answering (code `RUN_WORKER_LOST`): it gave up
 * after `restarts` restarts (`supervision.maxRestarts`), or its workers were the caller's (`options.pool`, which the
 * run cannot restart; `restarts` is then 0). `cause` is the worker's error; the message says how to resume.
 */
export class RunWorkerLostError extends PosttrainError {
  /** Restarts made before giving up. */
  readonly restarts: number;
  /** The step that was in progress. */
  readonly step: number;
  /** How to continue the run from its last checkpoint (the call, and the command line). */
  readonly resumeWith: string;

  constructor(problem: string, details: { restarts: number; step: number; resumeWith: string; cause: unknown }) {
    const why = details.cause instanceof Error ? details.cause.message : String(details.cause);
    super("RUN_WORKER_LOST", `${problem} (at step ${String(details.step)}): ${why}\nresume with ${details.resumeWith}`, { cause: details.cause });
    this.restarts = details.restarts;
    this.step = details.step;
    this.resumeWith = details.resumeWith;
  }
}
