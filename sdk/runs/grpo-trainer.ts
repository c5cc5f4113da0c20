/**
 * `GRPOTrainer`: a whole GRPO run from one config — the task env and its rewards, the policy on generator workers
 * (or colocated with the trainer), the collector and its replay buffer with the group advantages, the loss, the
 * optimizer, weight sync, asynchronous collection with a bounded policy age, held-out evaluation, checkpoints,
 * resume, and the run directory with its report. See docs/trainers.md.
 */
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
import { RewardSpecSchema, type RewardSpec } from "../envs/rewards.js";
import { TransformersWrapper } from "../modules/transformers.js";
import { Tensor, type TensorDict } from "../tensordict/index.js";
import { ReferenceModel } from "../trainers/reference.js";
import { Trainer } from "../trainers/trainer.js";
import { SharedWeightSyncScheme, ZMQWeightSyncScheme, type WeightEndpoint, type WeightSyncScheme } from "../trainers/weight-sync.js";
import type { WorkerClient } from "../workers/client.js";
import type { WorkerPool } from "../workers/pool.js";
import { evaluateOnEnv } from "./evaluation.js";
import {
  bufferGroupsOf,
  GRPOTrainerConfigSchema,
  lossOf,
  maxPolicyAgeOf,
  type GRPOTrainerConfig,
  type GRPOTrainerConfigInput,
} from "./grpo-config.js";
import { grpoStep } from "./grpo-step.js";
import type { EvalRecord } from "./records.js";
import { RunBase } from "./run-base.js";
import { RunDirectory } from "./run-directory.js";
import type { StepOutcome } from "./run-loop.js";
import {
  createPolicyTrainer,
  loadPolicy,
  logger,
  modelPath,
  openPool,
  POLICY_MODEL,
  poolDevice,
  REFERENCE_MODEL,
  roleDevice,
  runLength,
  RunOptionsSchema,
  type RunOptions,
} from "./setup.js";
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
const FREE_FIELDS = ["steps", "epochs", "eval", "checkpoint", "log", "runDir"] as const;

/** The generator model's name next to the policy (colocated layout). */
const GENERATOR_MODEL = "generator";

/** Where the collector stamps the number of the batch a row was collected in (to find its data position). */
const BATCH_KEY = ["collector", "batch"] as const;

function customEnv(env: EnvBase): TaskEnv {
  return { env, position: () => null, epochSize: () => Promise.resolve(null), restart: () => undefined };
}

interface Parts {
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
  readonly log: (line: string) => void;
  readonly signal: AbortSignal | undefined;
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
 * `promptsPerStep` prompts `groupSize` times each; an `LLMCollector` samples them with a `TransformersWrapper` on the
 * generator worker(s) (recording each row's policy version) and writes them into a `ReplayBuffer` whose `MCAdvantage`
 * transform computes the group advantages; each step takes the oldest `promptsPerStep` groups, the worker-bound
 * `Trainer` takes one optimizer step, and the weight sync moves the policy version. With `async: { maxPolicyAge: k }`
 * the collector runs up to k versions ahead in the background while the trainer trains (k = 0 is the synchronous
 * algorithm; without `async` the collector is iterated one batch per step, with the same results). `evaluate()`
 * measures the held-out reward (greedy by default). The run's face (`run`, `train`, `summary`, `stop`, `evaluate`,
 * `close`) is `TrainingRun` (written once in `RunBase`).
 */
export class GRPOTrainer extends RunBase<GRPOTrainerConfig> {
  readonly #parts: Parts;
  readonly #collector: LLMCollector;
  readonly #generatorPool: GeneratorPool;
  readonly #evalPolicy: TransformersWrapper;
  /** The data position after each collected batch not yet trained, by batch number. */
  readonly #positions = new Map<number, JSONValue>();
  #trainedPosition: JSONValue;
  #policyVersion: number;
  /** The last sync's delivery to the generators, still running while the next step trains (background sync). */
  #delivery: Promise<void> = Promise.resolve();
  #collecting = false;
  /** Without `async`: the collector iterated one batch per step, nothing collected in the background. */
  #iteration: AsyncIterator<TensorDict> | undefined;
  #windowStart = 0;
  #busyAtStart = 0;

  private constructor(parts: Parts) {
    super({
      ...parts,
      name: "GRPOTrainer",
      evalLine: (e) => ({ eval_reward_mean: e.rewardMean, eval_reward_std: e.rewardStd }),
    });
    this.#parts = parts;
    const { config, generators, env } = parts;
    const s = config.sampling;
    const G = config.groupSize;
    const policies = generators.map(
      ({ worker, model }) =>
        new TransformersWrapper(worker, {
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
    this.#evalPolicy = new TransformersWrapper(generators[0]!.worker, {
      model: generators[0]!.model,
      returnLogProbs: false,
      generateKwargs: {
        max_new_tokens: config.maxNewTokens,
        ...(config.eval.greedy ? { do_sample: false } : { temperature: s.temperature, top_p: s.topP, top_k: s.topK }),
        repetition_penalty: s.repetitionPenalty,
      },
    });
    const groups = bufferGroupsOf(config);
    const replayBuffer = new ReplayBuffer({
      storage: new LazyStackStorage({ maxSize: groups * G }),
      transforms: [new MCAdvantage({ groupSize: G, promptKey: ["history", "prompt"] })],
    });
    this.#generatorPool = new GeneratorPool(policies, { groupSize: G });
    let batchNumber = parts.startStep;
    this.#trainedPosition = env.position();
    this.#collector = new LLMCollector({
      env: env.env,
      policy: seededPolicy(this.#generatorPool, config.seed, parts.startStep),
      dialogTurnsPerBatch: config.promptsPerStep * G,
      // the steps left: the collector's gate keeps every batch within maxPolicyAge, so none is dropped or extra
      totalDialogTurns: Math.max(1, parts.totalSteps - parts.startStep) * config.promptsPerStep * G,
      replayBuffer,
      resetAtEachIter: true,
      trackPolicyVersion: true,
      weightUpdater: () => this.#publishWeights(),
      postproc: (batch) => {
        const n = batchNumber++;
        this.#positions.set(n, env.position());
        return batch.set([...BATCH_KEY], Tensor.full("int64", batch.batchSize, BigInt(n)));
      },
      // no signal: an abort stops the run between steps (RunLoop), and the step in flight finishes its batch
    });
    this.#policyVersion = parts.startVersion;
    this.#collector.setPolicyVersion(parts.startVersion);
  }

  /**
   * The weight sync of a step (the collector's `weightUpdater`). With a background sync it returns once the trainer's
   * worker has copied the weights: the next step trains while the generators receive them (after their generation
   * in flight). One delivery at a time; a failed one fails the next sync.
   */
  async #publishWeights(): Promise<void> {
    await this.#delivery;
    const sync = this.#parts.sync;
    if (!(sync instanceof ZMQWeightSyncScheme)) {
      this.#policyVersion = (await sync.updateWeights()).policyVersion;
      return;
    }
    const started = await sync.startUpdate();
    this.#policyVersion = started.policyVersion;
    const delivery = started.delivered.then(() => undefined);
    delivery.catch(() => undefined); // awaited (and so rethrown) by the next sync, an evaluation or close
    this.#delivery = delivery;
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
    const rowsPerStep = c.promptsPerStep * c.groupSize;
    if (o.env !== undefined && o.env.numel !== rowsPerStep) {
      throw new InvalidArgumentError(
        `GRPOTrainer options.env: its batch size [${o.env.batchSize.join(", ")}] must hold promptsPerStep × groupSize = ${rowsPerStep} rows`,
      );
    }
    const log = logger(o.log);
    const taskOptions = {
      seed: c.seed,
      where: `${where}.task`,
      ...(o.rewards !== undefined ? { rewards: o.rewards } : {}),
    };
    // built first to check the task (and count an epoch) before anything is started or written
    const probe = o.env !== undefined ? customEnv(o.env) : createTaskEnv(c.task, { ...taskOptions, batchSize: rowsPerStep, repeats: c.groupSize, split: "train" });
    const evalEnv =
      o.evalEnv !== undefined
        ? customEnv(o.evalEnv)
        : createTaskEnv(c.evalTask ?? c.task, {
            ...taskOptions,
            batchSize: c.eval.prompts,
            repeats: 1,
            split: "eval",
            where: `${where}.${c.evalTask !== undefined ? "evalTask" : "task"}`,
          });
    const totalSteps = runLength(c.steps, c.epochs, c.epochs === undefined ? null : await probe.epochSize(), c.promptsPerStep, where);
    const runDir = new RunDirectory(c.runDir);
    const resumable = await runDir.prepare(o.resume);
    if (resumable) await runDir.checkResumable(c, FREE_FIELDS, GRPOTrainerConfigSchema);
    await runDir.writeConfig(c);

    // workers 0..T−1 are the trainer ranks, the generators come next, the reference worker (if any) last
    const roles = c.workers;
    const generatorCount = roles.generator.count;
    const devices = { trainer: roleDevice(c.model, roles.trainer), generator: roleDevice(c.model, roles.generator), reference: roleDevice(c.model, roles.reference) };
    const used = [devices.trainer, ...(generatorCount > 0 ? [devices.generator] : []), ...(roles.reference.count > 0 ? [devices.reference] : [])];
    const workerCount = roles.trainer.count + generatorCount + roles.reference.count;
    const { pool, owned } = await openPool(c.model, workerCount, o.pool, o.signal, poolDevice(used));
    try {
      const ranks = pool.workers.slice(0, roles.trainer.count);
      const worker = ranks[0]!;
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
      if (generatorCount > 0) {
        generators = Array.from({ length: generatorCount }, (_, i) => ({ worker: pool.worker(roles.trainer.count + i), model: POLICY_MODEL }));
        await Promise.all(generators.map((g) => loadPolicy(g.worker, path, c.model, { device: devices.generator })));
        // collecting ahead: the trainer hands over a copy of its weights and trains on while the generators receive it
        sync = new ZMQWeightSyncScheme(trainer, generators, { background: maxPolicyAgeOf(c) > 0 });
      } else {
        generators = [{ worker, model: GENERATOR_MODEL }];
        // collecting ahead in the trainer's own worker needs a copy: shared weights would change under a queued generation
        sync = await SharedWeightSyncScheme.create(trainer, { target: GENERATOR_MODEL, share: maxPolicyAgeOf(c) === 0 });
      }

      let startStep = 0;
      let startVersion = 0;
      let position: JSONValue | undefined;
      const latest = resumable ? await runDir.latestCheckpoint() : undefined;
      if (latest !== undefined) {
        const restored = await trainer.loadCheckpoint(latest.path);
        startStep = restored.step;
        const saved = restored.dataPosition as { task?: JSONValue } | null;
        position = saved?.task ?? undefined;
        // the restored weights go to the generators as a new version (also labels a colocated generator's rows)
        startVersion = (await sync.updateWeights()).policyVersion;
        log(`resumed ${runDir.path} at step ${String(startStep)} from ${latest.path}`);
      }
      if (resumable) await runDir.truncateAfter(latest === undefined ? -1 : startStep);

      const env =
        o.env !== undefined || position === undefined
          ? probe
          : createTaskEnv(c.task, { ...taskOptions, batchSize: rowsPerStep, repeats: c.groupSize, split: "train", position });
      return new GRPOTrainer({
        config: c,
        runDir,
        pool,
        ownsPool: owned,
        workers: pool.workers.slice(0, workerCount),
        trainer,
        generators,
        sync,
        env,
        evalEnv,
        totalSteps,
        startStep,
        startVersion,
        log,
        signal: o.signal,
      });
    } catch (err) {
      if (owned) await pool.close();
      throw err;
    }
  }

  /** Stops the collector and closes the envs and the weight sync; stops the workers it started (or unloads its models from `pool`). */
  protected override async closeParts(): Promise<void> {
    const p = this.#parts;
    await this.#delivery.catch(() => undefined);
    await this.#iteration?.return?.();
    await this.#collector.close();
    await p.evalEnv.env.close();
    await p.sync.close();
    if (p.ownsPool) {
      await p.pool.close();
      return;
    }
    await p.trainer.close().catch(() => undefined); // a trainer group also leaves its process group on every rank
    for (const w of p.workers) {
      for (const name of [POLICY_MODEL, GENERATOR_MODEL, REFERENCE_MODEL]) await w.unloadModel(name).catch(() => undefined);
    }
  }

  /** One GRPO step (`grpoStep`); starts the collector on the first one, and remembers the version and data position. */
  protected override async trainStep(step: number): Promise<StepOutcome> {
    const { config } = this.#parts;
    if (!this.#collecting) {
      this.#collecting = true;
      if (config.async === undefined) this.#iteration = this.#collector[Symbol.asyncIterator]();
      else this.#collector.start({ maxPolicyAge: config.async.maxPolicyAge });
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
      maxPolicyAge: maxPolicyAgeOf(config),
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

  /** The held-out reward of the generator after `step` steps (not counted in the next step's timing window). */
  protected override async evaluateAt(step: number): Promise<EvalRecord> {
    await this.#delivery; // the generator evaluates this step's weights
    const evaluation = await evaluateOnEnv(this.#parts.evalEnv, this.#evalPolicy, step);
    this.#windowStart = performance.now();
    this.#busyAtStart = this.#collector.stats.busyMs;
    return evaluation;
  }

  /** The trainer's checkpoint, with the data position after the last trained batch, the step and the policy version. */
  protected override async saveCheckpoint(dir: string, step: number): Promise<void> {
    await this.trainer.saveCheckpoint(dir, { dataPosition: { task: this.#trainedPosition, step, policyVersion: this.#policyVersion } });
  }
}

/**
 * The collector's policy: every call samples with a seed derived from the run's seed and the call's number (so a run
 * and its resume are reproducible), its groups pulled in chunks by whichever generator is free (`GeneratorPool`).
 */
function seededPolicy(generators: GeneratorPool, seed: number, firstCall: number): Policy {
  let call = firstCall;
  return (td: TensorDict, options: RequestOptions): Promise<TensorDict> => generators.forward(td, { ...options, seed: stepSeed(seed, call++) });
}

/** The sampling seed of call `call` of a run seeded with `seed` (defined with `GeneratorPool`, which derives its chunks' seeds with it). */
export { stepSeed };
