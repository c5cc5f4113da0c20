/**
 * Typed errors thrown by the collectors. Each one is a {@link PosttrainError} with a stable `code`; bad options throw
 * the project-wide {@link InvalidArgumentError} (`INVALID_ARGUMENT`) naming the field.
 */
import { InvalidArgumentError, PosttrainError } from "../core/errors.js";

export { InvalidArgumentError, PosttrainError };

/** A collector used out of turn: iterated after `close()`, or iterated twice at once (code `COLLECTOR_STATE`). */
export class CollectorStateError extends PosttrainError {
  constructor(message: string) {
    super("COLLECTOR_STATE", message);
  }
}
