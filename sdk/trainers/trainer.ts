import { z } from "zod";
import { WorkerError, type Payload, type RequestOptions } from "../../bridge/index.js";
import { InvalidArgumentError } from "../core/errors.js";
import type { JSONValue } from "../core/json.js";
import { parseOptions } from "../core/validation.js";
import type { TensorDict } from "../tensordict/index.js";
import { WorkerClient } from "../workers/client.js";
import type { CheckpointInfo, LossResult, RestoredState, TrainerState, TrainStepResult } from "../workers/trainer-results.js";
import { typedTrainingError } from "./errors.js";
import { storeAddress } from "./store-address.js";
import {
  TrainerGroupOptionsSchema,
  TrainerOptionsSchema,
  type ResolvedParallelOptions,
  type ResolvedTrainerOptions,
  type TrainerGroupOptions,
  type TrainerOptions,
} from "./options.js";
import { ReferenceModel } from "./reference.js";
import { shardByTokens } from "./shard.js";

function rethrowTyped(err: unknown): never {
  throw typedTrainingError(err);
}

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
 *
 * A trainer group ({@link Trainer.createGroup}) is the same trainer over several workers, its ranks: each step
 * splits the batch over them by token count and the update equals one worker's on the whole batch.
 */
export class Trainer {
  private constructor(
    /** The workers of the ranks, rank 0 first (one worker for a trainer of its own). */
    readonly workers: readonly WorkerClient[],
    /** The resolved options (defaults filled in). */
    readonly options: ResolvedTrainerOptions,
    /** What the loss reads from a batch. */
    readonly needs: TrainerNeeds,
    /** How the ranks train together, or `null` for a trainer of its own ({@link Trainer.create}). */
    readonly parallel: ResolvedParallelOptions | null,
  ) {}

  /**
   * The worker holding the model and the trainer; in a group, rank 0's: weight sync, generation and saving read the
   * policy there (with `"fsdp"` a full copy refreshed after every step).
   */
  get worker(): WorkerClient {
    return this.workers[0]!;
  }

  /** The number of ranks (1 for a trainer of its own). */
  get worldSize(): number {
    return this.workers.length;
  }

  /** The trained model's name in the worker(s). */
  get model(): string {
    return this.options.model;
  }

  /**
   * Creates the trainer in `worker` (options checked here first, then by the worker). A worker error
   * `TRAINER_EXISTS` means a trainer is already bound to the model (pass `replace: true`).
   */
  static async create(worker: WorkerClient, options: TrainerOptions, requestOptions: RequestOptions = {}): Promise<Trainer> {
    const resolved = parseOptions(TrainerOptionsSchema, options, "Trainer options");
    const callOptions = withWatchdog(requestOptions, resolved.callWatchdogMs);
    const reference = resolved.reference;
    const args = createArgs(resolved, reference !== null && reference.worker === worker ? reference.model : null, null);
    const { result } = await worker.invoke("trainer_create", args, [], callOptions);
    return new Trainer([worker], resolved, result.needs, null);
  }

  /**
   * Creates a data-parallel trainer group over `workers` (rank i = `workers[i]`, each a different worker with the
   * model `options.model` loaded, the same weights in each): their workers join one torch.distributed process group
   * (`dist_init`, a store on a free port of rank 0's node unless `parallel.initMethod` is given), then each creates its
   * trainer with the model wrapped by DDP or sharded by FSDP2 (`parallel.strategy`). Every loss is normalised by
   * the whole batch's counts, so N ranks train as one worker on the whole batch. A worker belongs to at most one
   * process group: {@link close} leaves it. A KL reference is either a model outside the group or one per rank
   * (`options.reference` as an array, each in its rank's worker).
   *
   * ```ts
   * const group = await Trainer.createGroup([pool.worker(0), pool.worker(1)], {
   *   model: "policy", loss: new GRPOLoss(), parallel: { strategy: "ddp" },
   * });
   * const result = await group.step(batch); // rank 0's answer; the counts are the whole batch's
   * ```
   */
  static async createGroup(workers: readonly WorkerClient[], options: TrainerGroupOptions, requestOptions: RequestOptions = {}): Promise<Trainer> {
    const ranks = parseOptions(z.array(z.instanceof(WorkerClient)).min(1), workers, "Trainer.createGroup workers");
    if (new Set(ranks).size !== ranks.length) throw new InvalidArgumentError("Trainer.createGroup workers: every rank must be a different worker");
    const { parallel, reference, ...rest } = parseOptions(TrainerGroupOptionsSchema, options, "Trainer.createGroup options");
    const perRank = perRankReferences(reference, ranks);
    const resolved: ResolvedTrainerOptions = { ...rest, reference: perRank?.[0] ?? (reference as ReferenceModel | null) };
    const callOptions = withWatchdog(requestOptions, resolved.callWatchdogMs);
    const backend = parallel.backend ?? (await backendOf(ranks[0]!, resolved.model, callOptions));
    const initMethod = parallel.initMethod ?? (await storeAddress(ranks[0]!, callOptions));
    const group: ResolvedParallelOptions = { ...parallel, backend, initMethod };

    const joined = await settle(
      ranks.map((w, rank) =>
        w.invoke("dist_init", { backend, initMethod, rank, worldSize: ranks.length, timeoutMs: parallel.timeoutMs }, [], callOptions),
      ),
    );
    if (joined.error !== undefined) {
      await leave(ranks.filter((_, i) => joined.ok[i]), callOptions);
      throw joined.error;
    }
    const created = await settle(
      ranks.map((w, rank) => w.invoke("trainer_create", createArgs(resolved, perRank?.[rank]!.model ?? null, parallel.strategy), [], callOptions)),
    );
    if (created.error !== undefined) {
      await settle(ranks.filter((_, i) => created.ok[i]).map((w) => w.invoke("trainer_close", { model: resolved.model }, [], callOptions)));
      await leave(ranks, callOptions);
      throw created.error;
    }
    return new Trainer(ranks, resolved, created.values[0]!.result.needs, group);
  }

  /**
   * One optimizer step on `batch`. Rejects with `NonFiniteLossError` when the loss or the gradient norm is
   * NaN/Inf (nothing applied), and with a `WorkerError` (`BAD_PAYLOAD`: missing keys, all listed; advantages
   * whose shape does not fit the tokens) for a bad batch; the worker keeps serving either way. In a group the
   * batch (with the reference log-probs of a reference outside the group) is split over the ranks with
   * `shardByTokens`, every rank steps on its shard, and rank 0's result is returned (`numTokens`, `numSequences`
   * and the metrics are the whole batch's); a rank's failure fails the step on every rank, nothing applied, and
   * that rank's error is the one thrown.
   */
  async step(batch: TensorDict, requestOptions: RequestOptions = {}): Promise<TrainStepResult> {
    const callOptions = withWatchdog(requestOptions, this.options.callWatchdogMs);
    const payloads = await this.payloads(batch, "step", callOptions);
    return (await this.onRanks((w, i) => w.invoke("train_step", { model: this.model }, [payloads[i]!], callOptions))).result;
  }

  /**
   * The loss and metrics of `batch` under the current weights, without gradient or step (eval mode); in a group,
   * split over the ranks as in {@link step}.
   */
  async computeLoss(batch: TensorDict, requestOptions: RequestOptions = {}): Promise<LossResult> {
    const callOptions = withWatchdog(requestOptions, this.options.callWatchdogMs);
    const payloads = await this.payloads(batch, "computeLoss", callOptions);
    return (await this.onRanks((w, i) => w.invoke("compute_loss", { model: this.model }, [payloads[i]!], callOptions))).result;
  }

  /** Step count, policy version, learning rate, last metrics and the configs, as the worker (rank 0) holds them. */
  async state(requestOptions: RequestOptions = {}): Promise<TrainerState> {
    const callOptions = withWatchdog(requestOptions, this.options.callWatchdogMs);
    return (await this.worker.invoke("trainer_state", { model: this.model }, [], callOptions)).result;
  }

  /**
   * Writes a checkpoint to `dir` in the worker's filesystem: the model in Hugging Face format (safetensors) and
   * its tokenizer, the optimizer, the schedule, the RNG state, the step, the policy version and
   * `dataPosition`. It is written aside and renamed into place: a crash mid-save leaves the previous `dir`. In a
   * group every rank writes its part into the same `dir` (a shared filesystem), and a checkpoint loads into a
   * group of any size.
   */
  async saveCheckpoint(dir: string, options: SaveCheckpointOptions = {}, requestOptions: RequestOptions = {}): Promise<CheckpointInfo> {
    const callOptions = withWatchdog(requestOptions, this.options.callWatchdogMs);
    const path = parseOptions(z.string().min(1), dir, "saveCheckpoint dir");
    const args = { model: this.model, dir: path, dataPosition: options.dataPosition ?? null };
    return (await this.onRanks((w) => w.invoke("save_checkpoint", args, [], callOptions, "saveCheckpoint options"))).result;
  }

  /**
   * Restores weights, optimizer, schedule, RNG, step and policy version from `dir` (written by a trainer with the
   * same optimizer type, alone or in a group of any size); returns the state with the saved `dataPosition`. The
   * next step then equals the one the saving run took.
   */
  async loadCheckpoint(dir: string, requestOptions: RequestOptions = {}): Promise<RestoredState> {
    const callOptions = withWatchdog(requestOptions, this.options.callWatchdogMs);
    const path = parseOptions(z.string().min(1), dir, "loadCheckpoint dir");
    return (await this.onRanks((w) => w.invoke("load_checkpoint", { model: this.model, dir: path }, [], callOptions))).result;
  }

  /**
   * Drops the trainer (and its optimizer state) from the worker; the model stays loaded. A group also leaves its
   * process group on every rank (`dist_close`), so the workers may join another.
   */
  async close(requestOptions: RequestOptions = {}): Promise<void> {
    const callOptions = withWatchdog(requestOptions, this.options.callWatchdogMs);
    const closed = await settle(this.workers.map((w) => w.invoke("trainer_close", { model: this.model }, [], callOptions)));
    if (this.parallel !== null) await leave(this.workers, callOptions);
    if (closed.error !== undefined) throw closed.error;
  }

  /** `call` on every rank at once; rank 0's reply, or the first rank's typed error once every rank has answered. */
  private async onRanks<T>(call: (worker: WorkerClient, rank: number) => Promise<T>): Promise<T> {
    const outcome = await settle(this.workers.map(call));
    if (outcome.error !== undefined) rethrowTyped(outcome.error);
    return outcome.values[0]!;
  }

  /**
   * The batch as one payload per rank: the reference log-probs added first when the loss needs them from a model
   * outside the workers (scored on the whole batch), then split over the ranks.
   */
  private async payloads(batch: TensorDict, where: string, requestOptions: RequestOptions): Promise<Payload[]> {
    const reference = this.options.reference;
    let td = batch;
    if (this.needs.refLogProbs && reference !== null && !td.has(["ref_log_probs", "full"])) {
      td = await reference.forward(td, requestOptions);
    }
    const shards = this.worldSize === 1 ? [td] : shardBatch(td, this.worldSize, where);
    return shards.map((shard) => ({ kind: "tensordict", data: shard.toArrow() }));
  }
}

/** `requestOptions` with the trainer's `callWatchdogMs`, unless the call sets a watchdog of its own. */
function withWatchdog(requestOptions: RequestOptions, callWatchdogMs: number | undefined): RequestOptions {
  return callWatchdogMs === undefined || requestOptions.watchdogMs !== undefined
    ? requestOptions
    : { ...requestOptions, watchdogMs: callWatchdogMs };
}

/** The `trainer_create` arguments of resolved options. */
function createArgs(resolved: ResolvedTrainerOptions, refModel: string | null, strategy: ResolvedParallelOptions["strategy"] | null) {
  return {
    model: resolved.model,
    loss: resolved.loss.toWire(),
    optimizer: resolved.optimizer,
    schedule: resolved.schedule,
    gradClip: resolved.gradClip,
    microBatchTokens: resolved.microBatchTokens,
    refModel,
    autocast: resolved.autocast,
    lora: resolved.lora,
    replace: resolved.replace,
    parallel: strategy === null ? null : { strategy },
    gradientCheckpointing: resolved.gradientCheckpointing,
  };
}

/** `shardByTokens`, its error naming the trainer method and the batch. */
function shardBatch(batch: TensorDict, ranks: number, where: string): TensorDict[] {
  try {
    return shardByTokens(batch, ranks);
  } catch (err) {
    if (err instanceof InvalidArgumentError) throw new InvalidArgumentError(`Trainer.${where} ${err.message.replace(/^shardByTokens /, "")}`);
    throw err;
  }
}

/**
 * The per-rank in-worker references of a group (`null` when the reference is outside the group or absent): an array
 * must hold one per rank, each in its rank's worker; a single reference in a rank's worker is one per rank only in a
 * group of one.
 */
function perRankReferences(reference: ReferenceModel | readonly ReferenceModel[] | null, ranks: readonly WorkerClient[]): readonly ReferenceModel[] | null {
  if (reference === null) return null;
  const where = "Trainer.createGroup options.reference";
  if (!Array.isArray(reference)) {
    const single = reference as ReferenceModel;
    if (!ranks.includes(single.worker)) return null;
    if (ranks.length === 1) return [single];
    throw new InvalidArgumentError(
      `${where}: a reference in a rank's worker must be given for every rank (an array, one ReferenceModel in each rank's worker), or be outside the group`,
    );
  }
  const list = reference as readonly ReferenceModel[];
  if (list.length !== ranks.length) {
    throw new InvalidArgumentError(`${where}: one reference per rank: expected ${String(ranks.length)}, got ${String(list.length)}`);
  }
  list.forEach((ref, i) => {
    if (ref.worker !== ranks[i]) throw new InvalidArgumentError(`${where}[${String(i)}]: must be in rank ${String(i)}'s worker (${ranks[i]!.name}), is in ${ref.worker.name}`);
  });
  return list;
}

/** `"nccl"` when `model` sits on a CUDA device in `worker`, else `"gloo"`. */
async function backendOf(worker: WorkerClient, model: string, requestOptions: RequestOptions): Promise<"gloo" | "nccl"> {
  const info = (await worker.listModels(requestOptions)).find((m) => m.name === model);
  return info?.device.startsWith("cuda") === true ? "nccl" : "gloo";
}

/** Every rank's outcome: the values (in rank order), which ranks succeeded, and the error to report if any failed. */
interface Settled<T> {
  readonly values: readonly (T | undefined)[];
  readonly ok: readonly boolean[];
  readonly error: Error | undefined;
}

/**
 * Waits for every call (a rank's collective cannot be cancelled, so none is abandoned). The error to report is the
 * first rank's own failure, in the order they failed: a rank that failed only because another did (its
 * `WorkerError` names the failed `ranks`, or it timed out waiting in a collective after the other had failed) is
 * reported only when no rank has an error of its own.
 */
async function settle<T>(calls: readonly Promise<T>[]): Promise<Settled<T>> {
  const failures: Error[] = [];
  const outcomes = await Promise.allSettled(
    calls.map((call) =>
      call.catch((reason: unknown) => {
        const error = reason instanceof Error ? reason : new Error(String(reason));
        failures.push(error);
        throw error;
      }),
    ),
  );
  const own = failures.find((e) => !(e instanceof WorkerError && Array.isArray(e.details.ranks)));
  return {
    values: outcomes.map((o) => (o.status === "fulfilled" ? o.value : undefined)),
    ok: outcomes.map((o) => o.status === "fulfilled"),
    error: own ?? failures[0],
  };
}

/** Leaves the process group on every worker (errors ignored: the workers may have left it already). */
async function leave(workers: readonly WorkerClient[], requestOptions: RequestOptions): Promise<void> {
  await Promise.allSettled(workers.map((w) => w.invoke("dist_close", {}, [], requestOptions)));
}
