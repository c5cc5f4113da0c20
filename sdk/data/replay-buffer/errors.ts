/**
 * Typed errors thrown by the replay buffer, its samplers and its transforms. Each one is a {@link PosttrainError}
 * with a stable `code`; bad options and arguments throw the project-wide {@link InvalidArgumentError}
 * (`INVALID_ARGUMENT`) naming the field.
 */
import { InvalidArgumentError, PosttrainError } from "../../core/errors.js";

export { InvalidArgumentError, PosttrainError };

/** `sample()` on a buffer whose storage holds no rows (code `REPLAY_BUFFER_EMPTY`). */
export class ReplayBufferEmptyError extends PosttrainError {
  constructor(message = "cannot sample from an empty replay buffer") {
    super("REPLAY_BUFFER_EMPTY", message);
  }
}

/**
 * A write of data whose last step is not done, to a transform that needs whole trajectories (`MCAdvantage`,
 * `TopKRewardSelector`), as TorchRL's "Expected the trajectory to be done" (code `INCOMPLETE_TRAJECTORY`).
 */
export class IncompleteTrajectoryError extends PosttrainError {
  /** The done key that was read. */
  readonly doneKey: string | readonly string[];

  constructor(message: string, doneKey: string | readonly string[]) {
    super("INCOMPLETE_TRAJECTORY", message);
    this.doneKey = doneKey;
  }
}

/** A file that is not a replay buffer written by `ReplayBuffer.save`, or one this version cannot read (code `REPLAY_BUFFER_FILE`). */
export class ReplayBufferFileError extends PosttrainError {
  /** The file that was read. */
  readonly path: string;

  constructor(path: string, message: string, options?: { cause?: unknown }) {
    super("REPLAY_BUFFER_FILE", `${path}: ${message}`, options);
    this.path = path;
  }
}
