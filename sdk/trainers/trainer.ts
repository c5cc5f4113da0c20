import { z } from "zod";
import type { Payload, RequestOptions } from "../../bridge/index.js";
import type { JSONValue } from "../core/json.js";
import { parseOptions } from "../core/validation.js";
import type { TensorDict } from "../tensordict/index.js";
import type { WorkerClient } from "../workers/client.js";
import type { CheckpointInfo, LossResult, RestoredState, TrainerState, TrainStepResult } from "../workers/trainer-results.js";
import { typedTrainingError } from "./errors.js";

function rethrowTyped(err: unknown): never {
  throw typedTrainingError(err);
}
import { TrainerOptionsSchema, type ResolvedTrainerOptions, type TrainerOptions } from "./options.js";

/** Which inputs the trainer's loss reads from a batch (besides `("tokens","full")` and the loss mask). */
export interface TrainerNeeds {
  /** `("log_probs","full")`: the behaviour policy's log-probs (every policy-gradient loss). */
  readonly oldLogProbs: boolean;
  /** `("ref_log_probs","full")` must come with the batch (a KL term, and no reference model in the worker). */
  readonly refLogProbs: boolean;
  /** `"advantage"`: `[B]`, `[B, 1]`, or per token (every policy-gradient loss). */
  readonly advantages: boolean;
}

/** Options of {@link Trainer.saveCheckpoint}. */
export interface SaveCheckpointOptions {
  /** Where the data stream is (epoch, index, replay-buffer cursor...): saved as JSON, given back on load. */
  readonly dataPosition?: JSONValue;
}

/**
 * A trainer bound to a model held by a worker: the loss, the optimizer and its schedule live in that worker,
 * and each `step` is one forward/backward over the batch (in micro-batches of at most `microBatchTokens`
 * padded tokens, accumulating gradients) and one optimizer step.
 *
 * The batch uses TorchRL's keys: `("tokens","full")`, the loss mask (`("masks","all_assistant_mask")` or the
 * response after `("tokens","prompt")`), `("log_probs","full")` (behaviour log-probs), `"advantage"`, and
 * `("ref_log_probs","full")` when a KL term needs it and no reference model is in the worker. See
 * docs/training.md.
 *
 * ```ts
 * const trainer = await Trainer.create(worker, {
 *   model: "policy",
 *   loss: new GRPOLoss({ clipEpsilon: 0.2 }),
 *   optimizer: { type: "adamw", lr: 1e-5 },
 *   schedule: { type: "cosine", warmupSteps: 10, totalSteps: 500 },
 * });
 * const { metrics } = await trainer.step(batch);
 * ```
 */
export class Trainer {
  private constructor(
    /** The worker holding the model and the trainer. */
    readonly worker: WorkerClient,
    /** The resolved options (defaults filled in). */
    readonly options: ResolvedTrainerOptions,
    /** What the loss reads from a batch. */
    readonly needs: TrainerNeeds,
  ) {}

  /** The trained model's name in the worker. */
  get model(): string {
    return this.options.model;
  }

  /**
   * Creates the trainer in `worker` (options checked here first, then by the worker). A worker error
   * `TRAINER_EXISTS` means a trainer is already bound to the model (pass `replace: true`).
   */
  static async create(worker: WorkerClient, options: TrainerOptions, requestOptions: RequestOptions = {}): Promise<Trainer> {
    const resolved = parseOptions(TrainerOptionsSchema, options, "Trainer options");
    const reference = resolved.reference;
    const args = {
      model: resolved.model,
      loss: resolved.loss.toWire(),
      optimizer: resolved.optimizer,
      schedule: resolved.schedule,
      gradClip: resolved.gradClip,
      microBatchTokens: resolved.microBatchTokens,
      refModel: reference !== null && reference.worker === worker ? reference.model : null,
      autocast: resolved.autocast,
      lora: resolved.lora,
      replace: resolved.replace,
    };
    const { result } = await worker.invoke("trainer_create", args, [], requestOptions);
    return new Trainer(worker, resolved, result.needs);
  }

  /**
   * One optimizer step on `batch`. Rejects with `NonFiniteLossError` when the loss or the gradient norm is
   * NaN/Inf (nothing applied), and with a `WorkerError` (`BAD_PAYLOAD`: missing keys, all listed; advantages
   * whose shape does not fit the tokens) for a bad batch; the worker keeps serving either way.
   */
  async step(batch: TensorDict, requestOptions: RequestOptions = {}): Promise<TrainStepResult> {
    const payload = await this.payload(batch, requestOptions);
    return (await this.worker.invoke("train_step", { model: this.model }, [payload], requestOptions).catch(rethrowTyped)).result;
  }

  /** The loss and metrics of `batch` under the current weights, without gradient or step (eval mode). */
  async computeLoss(batch: TensorDict, requestOptions: RequestOptions = {}): Promise<LossResult> {
    const payload = await this.payload(batch, requestOptions);
    return (await this.worker.invoke("compute_loss", { model: this.model }, [payload], requestOptions).catch(rethrowTyped)).result;
  }

  /** Step count, policy version, learning rate, last metrics and the configs, as the worker holds them. */
  async state(requestOptions: RequestOptions = {}): Promise<TrainerState> {
    return (await this.worker.invoke("trainer_state", { model: this.model }, [], requestOptions)).result;
  }

  /**
   * Writes a checkpoint to `dir` in the worker's filesystem: the model in Hugging Face format (safetensors) and
   * its tokenizer, the optimizer, the schedule, the RNG state, the step, the policy version and
   * `dataPosition`. It is written aside and renamed into place: a crash mid-save leaves the previous `dir`.
   */
  async saveCheckpoint(dir: string, options: SaveCheckpointOptions = {}, requestOptions: RequestOptions = {}): Promise<CheckpointInfo> {
    const path = parseOptions(z.string().min(1), dir, "saveCheckpoint dir");
    const args = { model: this.model, dir: path, dataPosition: options.dataPosition ?? null };
    return (await this.worker.invoke("save_checkpoint", args, [], requestOptions, "saveCheckpoint options")).result;
  }

  /**
   * Restores weights, optimizer, schedule, RNG, step and policy version from `dir` (written by a trainer with the
   * same optimizer type); returns the state with the saved `dataPosition`. The next step then equals the one
   * the saving run took.
   */
  async loadCheckpoint(dir: string, requestOptions: RequestOptions = {}): Promise<RestoredState> {
    const path = parseOptions(z.string().min(1), dir, "loadCheckpoint dir");
    return (await this.worker.invoke("load_checkpoint", { model: this.model, dir: path }, [], requestOptions)).result;
  }

  /** Drops the trainer (and its optimizer state) from the worker; the model stays loaded. */
  async close(requestOptions: RequestOptions = {}): Promise<void> {
    await this.worker.invoke("trainer_close", { model: this.model }, [], requestOptions);
  }

  /** The batch as a payload, with the reference log-probs added when the loss needs them from another worker. */
  private async payload(batch: TensorDict, requestOptions: RequestOptions): Promise<Payload> {
    const reference = this.options.reference;
    let td = batch;
    if (this.needs.refLogProbs && reference !== null && !td.has(["ref_log_probs", "full"])) {
      td = await reference.forward(td, requestOptions);
    }
    return { kind: "tensordict", data: td.toArrow() };
  }
}
