/**
 * Setup shared by `GRPOTrainer` and `SFTTrainer`: the options of `create`, the worker pool, the policy model (built
 * when it is the tiny one), and the length of the run.
 */
import { access, readFile } from "node:fs/promises";
import { join } from "node:path";
import { z } from "zod";
import { InvalidArgumentError } from "../core/errors.js";
import { makeTinyModel } from "../models/tiny.js";
import type { WorkerClient } from "../workers/client.js";
import { WorkerPool, type WorkerPoolOptions } from "../workers/pool.js";
import type { LossConfigLike } from "../objectives/losses.js";
import type { ParallelStrategy } from "../trainers/options.js";
import type { ReferenceModel } from "../trainers/reference.js";
import { Trainer } from "../trainers/trainer.js";
import { toOptimizerConfig, toScheduleConfig, type ModelConfigSchema, type RunOptimizerSchema, type RunScheduleSchema } from "./config-blocks.js";
import type { RunDirectory } from "./run-directory.js";
import type { RunWorkers, RunWorkerSlot } from "./run-workers.js";

/** Options of `GRPOTrainer.create` and `SFTTrainer.create` that are not part of the run config. */
export const RunOptionsSchema = z.strictObject({
  /** Reuse these workers (the trainer then leaves them running on `close()`); default: start local workers. */
  pool: z.custom<WorkerPool>((v) => v instanceof WorkerPool, { message: "expected a WorkerPool" }).optional(),
  /** Aborting it stops the run as `stop()` does: the current step finishes and a checkpoint is written. */
  signal: z.instanceof(AbortSignal).optional(),
  /** Continue the run in `runDir` from its latest checkpoint (default false). */
  resume: z.boolean().default(false),
  /** Gets one plain line per step (and a few about setup). */
  log: z.custom<(line: string) => void>((v) => typeof v === "function", { message: "expected a function (line: string) => void" }).optional(),
});

/** Options of `create` besides the config (input form). */
export type RunOptions = z.input<typeof RunOptionsSchema>;

type ModelConfig = z.output<typeof ModelConfigSchema>;

/** The model name the policy is loaded under in its worker(s). */
export const POLICY_MODEL = "policy";

/** The model name of the frozen reference (a copy of the initial policy) in its worker(s). */
export const REFERENCE_MODEL = "ref";

async function exists(path: string): Promise<boolean> {
  try {
    await access(path);
    return true;
  } catch {
    return false;
  }
}

/** Where workers compute: `"auto"` (CUDA when there is a GPU), `"cpu"` or `"cuda"`. */
export type RunDevice = ModelConfig["device"];

/** The device of a role: its own `device` when given, else the model's. */
export function roleDevice(model: ModelConfig, role: { readonly device?: RunDevice | undefined }): RunDevice {
  return role.device ?? model.device;
}

/** The device to start a pool on for roles computing on `devices`: `"cuda"` if one asks for it, `"cpu"` if all do. */
export function poolDevice(devices: readonly RunDevice[]): RunDevice {
  if (devices.includes("cuda")) return "cuda";
  return devices.length > 0 && devices.every((d) => d === "cpu") ? "cpu" : "auto";
}

/** Extra options for the pools a run starts itself (test-only, see {@link POOL_OPTIONS}). */
export type RunPoolOptions = Pick<WorkerPoolOptions, "extensions" | "env">;

/**
 * Test-only, internal (not exported from the package): the key of `create`'s options under which a test hands extra
 * options to the pools the run starts, such as the fault-injection worker extension of test/ts/supervision.test.ts,
 * which must reach the workers of every restart too. A symbol: the options schema lets it through without keeping
 * it, and no documented option or type names it.
 *
 * ```ts
 * const options = { [POOL_OPTIONS]: { extensions: [faults] } };
 * await GRPOTrainer.create(config, options);
 * ```
 */
export const POOL_OPTIONS: unique symbol = Symbol("posttrain.runPoolOptions");

/** The pool options `options` carries under {@link POOL_OPTIONS}, if any. */
export function poolOptionsOf(options: object): RunPoolOptions | undefined {
  return (options as { readonly [POOL_OPTIONS]?: RunPoolOptions })[POOL_OPTIONS];
}

/**
 * The workers of a run: `pool` when given (`owned` false), else the run's own workers for `slots` (one per worker, in
 * pool order) from `workers`, on `device` (default the model's; each role then loads its models on its own device,
 * see {@link loadPolicy}).
 */
export async function openPool(
  workers: RunWorkers,
  slots: readonly RunWorkerSlot[],
  pool: WorkerPool | undefined,
  signal: AbortSignal | undefined,
  device: RunDevice,
): Promise<{ pool: WorkerPool; owned: boolean }> {
  if (pool !== undefined) {
    if (pool.size < slots.length) throw new InvalidArgumentError(`options.pool: the run needs ${slots.length} workers, the pool has ${pool.size}`);
    return { pool, owned: false };
  }
  return { pool: await workers.open(slots, device, signal), owned: true };
}

/**
 * The model directory of a run: `model.path`, or for `"tiny"` the tiny model built into `<runDir>/model` (once: a
 * resumed run finds it there).
 */
export async function modelPath(model: ModelConfig, runDir: RunDirectory, seed: number, log: (line: string) => void): Promise<string> {
  if (model.path !== "tiny") return model.path;
  const dir = runDir.modelPath;
  if (await exists(join(dir, "config.json"))) return dir;
  const built = await makeTinyModel(dir, { ...model.tiny, seed: model.tiny?.seed ?? seed });
  log(`built the tiny model (${String(built.parameters)} parameters) in ${dir}`);
  return built.path;
}

/** Options of {@link loadPolicy}. */
export interface LoadPolicyOptions {
  /** `"cpu"` or `"cuda"` loads there; `"auto"` (the default) on the worker's own device. */
  readonly device?: RunDevice;
  /** The name in the worker (default {@link POLICY_MODEL}). */
  readonly name?: string;
}

/** Loads the policy at `path` into `worker` under {@link POLICY_MODEL} (or `options.name`), on `options.device`. */
export async function loadPolicy(worker: WorkerClient, path: string, model: ModelConfig, options: LoadPolicyOptions = {}): Promise<void> {
  const device = options.device === undefined || options.device === "auto" ? {} : { device: options.device };
  const template = await chatTemplateOf(model);
  await worker.loadModel({ name: options.name ?? POLICY_MODEL, path, dtype: model.dtype, replace: true, ...device, ...template });
}

/** `{ chatTemplate }` read from `model.chatTemplateFile`, or nothing (`InvalidArgumentError` naming the field). */
async function chatTemplateOf(model: ModelConfig): Promise<{ chatTemplate?: string }> {
  const file = model.chatTemplateFile;
  if (file === undefined) return {};
  try {
    return { chatTemplate: await readFile(file, "utf8") };
  } catch (err) {
    throw new InvalidArgumentError(`model.chatTemplateFile: cannot read ${JSON.stringify(file)} (${(err as Error).message})`);
  }
}

/** The engine options of a vLLM generator (the run config's `generator.vllm`, less what is not a `loadModel` option). */
export interface VllmLoadFields {
  readonly gpuMemoryUtilization?: number | undefined;
  readonly maxModelLen?: number | undefined;
  readonly enforceEager?: boolean | undefined;
  readonly enablePrefixCaching?: boolean | undefined;
}

/**
 * Loads the policy at `path` into `worker` under `name` on the vLLM backend (a generator: it samples, the trainer's
 * weights reach it through the weight sync), with the engine options of `vllm`.
 */
export async function loadGenerator(worker: WorkerClient, path: string, model: ModelConfig, name: string, vllm: VllmLoadFields | undefined): Promise<void> {
  const options = {
    ...(vllm?.gpuMemoryUtilization !== undefined ? { gpuMemoryUtilization: vllm.gpuMemoryUtilization } : {}),
    ...(vllm?.maxModelLen !== undefined ? { maxModelLen: vllm.maxModelLen } : {}),
    ...(vllm?.enforceEager !== undefined ? { enforceEager: vllm.enforceEager } : {}),
    ...(vllm?.enablePrefixCaching !== undefined ? { enablePrefixCaching: vllm.enablePrefixCaching } : {}),
  };
  const template = await chatTemplateOf(model);
  await worker.loadModel({ name, path, dtype: model.dtype, replace: true, backend: "vllm", ...options, ...template });
}

/** The run-config fields of the policy's `Trainer` (optimizer, schedule, clipping, micro-batching). */
interface TrainerFields {
  readonly optimizer: z.output<typeof RunOptimizerSchema>;
  readonly schedule: z.output<typeof RunScheduleSchema>;
  readonly gradClip: number | null;
  readonly microBatchTokens: number | null;
  readonly supervision: { readonly callWatchdogMs: number };
}

/** How the trainer ranks of a run train (the run config's `workers.trainer`). */
export interface TrainerRoleFields {
  /** `"ddp"` or `"fsdp"`, when there are several ranks. */
  readonly strategy: ParallelStrategy;
  readonly gradientCheckpointing: boolean;
}

/**
 * The trainer of the policy in `workers` (one worker, or the ranks of a data-parallel group), from the run config's
 * fields, its schedule ending at `totalSteps`. `reference` is a model outside the ranks, or one per rank in the ranks'
 * workers (one in the worker of a single trainer).
 */
export function createPolicyTrainer(
  workers: WorkerClient | readonly WorkerClient[],
  config: TrainerFields,
  loss: LossConfigLike,
  totalSteps: number,
  reference: ReferenceModel | readonly ReferenceModel[] | null,
  role: TrainerRoleFields = { strategy: "ddp", gradientCheckpointing: false },
): Promise<Trainer> {
  const ranks = Array.isArray(workers) ? (workers as readonly WorkerClient[]) : [workers as WorkerClient];
  const options = {
    model: POLICY_MODEL,
    loss,
    optimizer: toOptimizerConfig(config.optimizer),
    schedule: toScheduleConfig(config.schedule, totalSteps),
    gradClip: config.gradClip,
    microBatchTokens: config.microBatchTokens,
    gradientCheckpointing: role.gradientCheckpointing,
    replace: true,
    // 0 (off) is left out: the connection's own watchdog, if any, then applies
    ...(config.supervision.callWatchdogMs > 0 ? { callWatchdogMs: config.supervision.callWatchdogMs } : {}),
  };
  if (ranks.length > 1) return Trainer.createGroup(ranks, { ...options, reference, parallel: { strategy: role.strategy } });
  const single = Array.isArray(reference) ? (reference as readonly ReferenceModel[])[0]! : (reference as ReferenceModel | null);
  return Trainer.create(ranks[0]!, { ...options, reference: single });
}

/**
 * Optimizer steps of a run: `steps`, or `epochs` passes over `epochSize` items at `perStep` a step (the smaller of
 * the two when both are given).
 */
export function runLength(steps: number | undefined, epochs: number | undefined, epochSize: number | null, perStep: number, where: string): number {
  if (epochs === undefined) return steps ?? 1;
  if (epochSize === null) {
    throw new InvalidArgumentError(`${where}.epochs: this task is an endless procedural stream and has no epochs; give steps instead`);
  }
  const byEpochs = epochs * Math.max(1, Math.ceil(epochSize / perStep));
  return steps === undefined ? byEpochs : Math.min(steps, byEpochs);
}

/** `log` or a function that drops the line. */
export function logger(log: ((line: string) => void) | undefined): (line: string) => void {
  return log ?? (() => undefined);
}
