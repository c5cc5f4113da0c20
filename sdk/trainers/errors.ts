import { WorkerError } from "../../bridge/index.js";
import { PosttrainError } from "../core/errors.js";

/** Error codes of the worker's training methods (docs/training.md, "Errors"). */
export const TRAINING_ERROR_CODES = [
  "TRAINER_NOT_FOUND",
  "TRAINER_EXISTS",
  "NON_FINITE_LOSS",
  "NON_FINITE_GRADIENT",
  "LORA_UNAVAILABLE",
  "CHECKPOINT_NOT_FOUND",
  "CHECKPOINT_INVALID",
  "CHECKPOINT_MISMATCH",
  "WEIGHT_SYNC_FAILED",
  "DISTRIBUTED_ERROR",
] as const;

/** One of {@link TRAINING_ERROR_CODES}. */
export type TrainingErrorCode = (typeof TRAINING_ERROR_CODES)[number];

/**
 * A step whose loss (code `NON_FINITE_LOSS`) or gradient norm (`NON_FINITE_GRADIENT`) was NaN or infinite.
 * Nothing was applied: the weights, the optimizer state and the step count are as before the call.
 */
export class NonFiniteLossError extends PosttrainError {
  /** The step that failed (one more than the steps taken). */
  readonly step: number;
  /** The worker's facts (`microBatch` and `loss`, or `gradNorm`). */
  readonly details: Readonly<Record<string, unknown>>;

  constructor(cause: WorkerError) {
    super(cause.code, cause.message, { cause });
    const step = cause.details.step;
    this.step = typeof step === "number" ? step : -1;
    this.details = cause.details;
  }
}

/** `err` as a {@link NonFiniteLossError} when it is the worker's NaN/Inf report, else unchanged. */
export function typedTrainingError(err: unknown): unknown {
  if (err instanceof WorkerError && (err.code === "NON_FINITE_LOSS" || err.code === "NON_FINITE_GRADIENT")) {
    return new NonFiniteLossError(err);
  }
  return err;
}
