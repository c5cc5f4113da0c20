/**
 * `ControlAgent`: the TS handle of a control agent (an MLP actor, an MLP critic, their Adam optimizer and the sampling
 * generator) held by a worker under a name, over the typed `control_*` worker methods. `ProbabilisticActor` acts
 * with it; `PPOTrainer` updates, saves and restores it. See docs/classic-rl.md.
 */
import type { Payload, RequestOptions } from "../../bridge/index.js";
import { ProtocolError } from "../core/errors.js";
import { TensorDict } from "../tensordict/index.js";
import type { WorkerClient } from "../workers/client.js";
import type { ExplorationType } from "../workers/control.js";
import type { MethodArgs, MethodResult } from "../workers/methods.js";

/** What `control_create` takes: the agent's name and its whole resolved config (docs/classic-rl.md). */
export type ControlAgentConfig = MethodArgs<"control_create">;

/** The layout of a batch given to {@link ControlAgent.update}: its rows are `numEnvs × T` steps, env-major. */
export interface ControlUpdateOptions {
  /** The copies the batch was collected from (row `env * T + t`). */
  readonly numEnvs: number;
  /** Passes over the batch. */
  readonly epochs: number;
  /** Rows per optimizer step (the last, partial mini-batch of each pass is kept). */
  readonly miniBatchSize: number;
}

/** What one {@link ControlAgent.update} answers: the loss terms and statistics (means over its mini-batches), and the optimizer steps so far. */
export type ControlUpdateResult = MethodResult<"control_update">;

function tensorDictPayload(td: TensorDict): Payload {
  return { kind: "tensordict", data: td.toArrowParts() };
}

function replyTensorDict(method: string, payloads: readonly Payload[]): TensorDict {
  const payload = payloads[0];
  if (payloads.length !== 1 || payload?.kind !== "tensordict") {
    throw new ProtocolError(`${method}: expected one tensordict payload in the reply, got ${payloads.length}`);
  }
  return TensorDict.fromArrow(payload.data);
}

/**
 * An agent in a worker, by name (one worker may hold several).
 *
 * ```ts
 * const agent = await ControlAgent.create(worker, { name: "ppo", observationSize: 4, action: { type: "categorical", n: 2 }, ...config });
 * const out = await agent.act(td.select("observation"), "random"); // action, action_log_prob
 * ```
 */
export class ControlAgent {
  /** The worker holding the agent. */
  readonly worker: WorkerClient;
  /** The agent's name in its worker. */
  readonly name: string;

  private constructor(worker: WorkerClient, name: string) {
    this.worker = worker;
    this.name = name;
  }

  /**
   * Creates the agent in `worker` from its full config (`control_create`: every field given, as the worker checks it
   * strictly); resolves with the handle and the parameter counts.
   */
  static async create(worker: WorkerClient, config: ControlAgentConfig, options: RequestOptions = {}): Promise<{ agent: ControlAgent; actorParameters: number; criticParameters: number }> {
    const { result } = await worker.invoke("control_create", config, [], options, "ControlAgent config");
    return { agent: new ControlAgent(worker, result.name), actorParameters: result.actorParameters, criticParameters: result.criticParameters };
  }

  /**
   * The agent saved in `dir` (`control_load`), under `name`: restored into the agent of that name when the worker holds
   * one (of the same config), else created from the saved config. Resolves with the handle and its optimizer steps.
   */
  static async load(worker: WorkerClient, name: string, dir: string, options: RequestOptions = {}): Promise<{ agent: ControlAgent; updates: number }> {
    const { result } = await worker.invoke("control_load", { name, dir }, [], options);
    return { agent: new ControlAgent(worker, result.name), updates: result.updates };
  }

  /**
   * One action per row of `td` (`observation`, float32 `[N, obsSize]`, is the only key sent): a TensorDict `[N]` with
   * `action` and `action_log_prob` (the log-probability of that action under the current policy).
   */
  async act(td: TensorDict, exploration: ExplorationType, options: RequestOptions = {}): Promise<TensorDict> {
    const reply = await this.worker.invoke("control_act", { name: this.name, exploration }, [tensorDictPayload(td.select("observation"))], options);
    return replyTensorDict("control_act", reply.payloads);
  }

  /**
   * PPO on a collected batch (`control_update`): GAE over `[numEnvs, T]`, then `epochs` passes of shuffled
   * mini-batches with `ClipPPOLoss`. `batch` holds `observation`, `action`, `action_log_prob`, and under `next` the
   * `observation`, `reward`, `done` and `terminated` of each step, rows env-major (`env * T + t`).
   */
  async update(batch: TensorDict, layout: ControlUpdateOptions, options: RequestOptions = {}): Promise<ControlUpdateResult> {
    const args = { name: this.name, numEnvs: layout.numEnvs, epochs: layout.epochs, miniBatchSize: layout.miniBatchSize };
    return (await this.worker.invoke("control_update", args, [tensorDictPayload(batch)], options)).result;
  }

  /** Saves the agent (config, weights, optimizer, sampling generator) into `dir` (safetensors + JSON). */
  async save(dir: string, options: RequestOptions = {}): Promise<MethodResult<"control_save">> {
    return (await this.worker.invoke("control_save", { name: this.name, dir }, [], options)).result;
  }

  /** Restores the agent saved in `dir` into this one (same config); resolves with its optimizer steps. */
  async load(dir: string, options: RequestOptions = {}): Promise<number> {
    return (await this.worker.invoke("control_load", { name: this.name, dir }, [], options)).result.updates;
  }

  /** Drops the agent from its worker. */
  async close(options: RequestOptions = {}): Promise<void> {
    await this.worker.invoke("control_close", { name: this.name }, [], options);
  }
}
