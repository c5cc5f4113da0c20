/**
 * Typed errors of the whole runs (`GRPOTrainer`, `SFTTrainer`) and their run directories. Each one is a
 * `PosttrainError` with a stable `code`.
 */
import { PosttrainError } from "../core/errors.js";

/** A run directory that cannot be used as asked (code `RUN_DIRECTORY`): already a run, or nothing to resume. */
export class RunDirectoryError extends PosttrainError {
  /** The run directory. */
  readonly runDir: string;

  constructor(runDir: string, problem: string) {
    super("RUN_DIRECTORY", `runDir ${JSON.stringify(runDir)}: ${problem}`);
    this.runDir = runDir;
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
