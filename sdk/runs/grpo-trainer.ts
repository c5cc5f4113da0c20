/**
 * `GRPOTrainer`: a whole GRPO run from one config — the task env and its rewards, the policy in a worker (generating
 * and training colocated, or in two workers), group advantages, the loss, the optimizer, weight sync, held-out
 * evaluation, checkpoints, resume, and the run directory with its report. See docs/trainers.md.
 */
import { z } from "zod";
import { InvalidArgumentError } from "../core/errors.js";
import { parseOptions } from "../core/index.js";
import type { JSONValue } from "../data/index.js";
import { EnvBase } from "../envs/env-base.js";
import { RewardSpecSchema, type RewardSpec } from "../envs/rewards.js";
import { TransformersWrapper } from "../modules/transformers.js";
import { ReferenceModel } from "../trainers/reference.js";
import { Trainer } from "../trainers/trainer.js";
import { SharedWeightSyncScheme, ZMQWeightSyncScheme, type WeightSyncScheme } from "../trainers/weight-sync.js";
import type { WorkerClient } from "../workers/client.js";
import type { WorkerPool } from "../workers/pool.js";
import { evaluateOnEnv } from "./evaluation.js";
import { GRPOTrainerConfigSchema, lossOf, type GRPOTrainerConfig, type GRPOTrainerConfigInput } from "./grpo-config.js";
import { grpoStep } from "./grpo-step.js";
import type { EvalRecord } from "./records.js";
import { RunBase } from "./run-base.js";
import { RunDirectory } from "./run-directory.js";
import type { StepOutcome } from "./run-loop.js";
import { createPolicyTrainer, loadPolicy, logger, modelPath, openPool, POLICY_MODEL, runLength, RunOptionsSchema, type RunOptions } from "./setup.js";
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

function customEnv(env: EnvBase): TaskEnv {
  return { env, position: () => null, epochSize: () => Promise.resolve(null), restart: () => undefined };
}

interface Parts {
  readonly config: GRPOTrainerConfig;
  readonly runDir: RunDirectory;
  readonly pool: WorkerPool;
  readonly ownsPool: boolean;
  readonly trainer: Trainer;
  readonly generator: WorkerClient;
  readonly generatorModel: string;
  readonly sync: WeightSyncScheme;
  readonly env: TaskEnv;
  readonly evalEnv: TaskEnv;
  readonly totalSteps: number;
  readonly startStep: number;
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
 * Each step takes `promptsPerStep` prompts from the task, renders them once, samples `groupSize` completions of each
 * (with their log-probs), scores them with the task's rewards, computes group advantages, and takes one optimizer
 * step in the policy's worker; the weight sync then moves the policy version. `evaluate()` measures the held-out
 * reward (greedy by default). The run's face (`run`, `train`, `summary`, `stop`, `evaluate`, `close`) is
 * `TrainingRun` (written once in `RunBase`).
 */
export class GRPOTrainer extends RunBase<GRPOTrainerConfig> {
  readonly #parts: Parts;
  readonly #policy: TransformersWrapper;
  readonly #evalPolicy: TransformersWrapper;
  #policyVersion = 0;

  private constructor(parts: Parts) {
    super({
      ...parts,
      name: "GRPOTrainer",
      evalLine: (e) => ({ eval_reward_mean: e.rewardMean, eval_reward_std: e.rewardStd }),
    });
    this.#parts = parts;
    const { config, generatorModel } = parts;
    const s = config.sampling;
    this.#policy = new TransformersWrapper(parts.generator, {
      model: generatorModel,
      numSamples: config.groupSize,
      generateKwargs: {
        max_new_tokens: config.maxNewTokens,
        temperature: s.temperature,
        top_p: s.topP,
        top_k: s.topK,
        repetition_penalty: s.repetitionPenalty,
      },
    });
    this.#evalPolicy = new TransformersWrapper(parts.generator, {
      model: generatorModel,
      returnLogProbs: false,
      generateKwargs: {
        max_new_tokens: config.maxNewTokens,
        ...(config.eval.greedy ? { do_sample: false } : { temperature: s.temperature, top_p: s.topP, top_k: s.topK }),
        repetition_penalty: s.repetitionPenalty,
      },
    });
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
    if (resumable) await runDir.checkResumable(c, FREE_FIELDS);
    await runDir.writeConfig(c);

    const layout = c.workers.layout;
    const { pool, owned } = await openPool(c.model, layout === "separate" ? 2 : 1, o.pool, o.signal);
    try {
      const worker = pool.worker(0);
      const path = await modelPath(c.model, runDir, c.seed, log);
      await loadPolicy(worker, path, c.model);
      const reference = c.klToRefCoeff > 0 ? await ReferenceModel.copyOf(worker, POLICY_MODEL, "ref") : null;
      const trainer = await createPolicyTrainer(worker, c, lossOf(c), totalSteps, reference);
      let generator = worker;
      let generatorModel = GENERATOR_MODEL;
      let sync: WeightSyncScheme;
      if (layout === "separate") {
        generator = pool.worker(1);
        generatorModel = POLICY_MODEL;
        await loadPolicy(generator, path, c.model);
        sync = new ZMQWeightSyncScheme(trainer, [{ worker: generator, model: POLICY_MODEL }]);
      } else {
        sync = await SharedWeightSyncScheme.create(trainer, { target: GENERATOR_MODEL });
      }

      let startStep = 0;
      let position: JSONValue | undefined;
      const latest = resumable ? await runDir.latestCheckpoint() : undefined;
      if (latest !== undefined) {
        const restored = await trainer.loadCheckpoint(latest.path);
        startStep = restored.step;
        const saved = restored.dataPosition as { task?: JSONValue } | null;
        position = saved?.task ?? undefined;
        if (layout === "separate") await sync.updateWeights();
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
        trainer,
        generator,
        generatorModel,
        sync,
        env,
        evalEnv,
        totalSteps,
        startStep,
        log,
        signal: o.signal,
      });
    } catch (err) {
      if (owned) await pool.close();
      throw err;
    }
  }

  /** Closes the envs and the weight sync, and stops the workers it started (or unloads its models from `pool`). */
  protected override async closeParts(): Promise<void> {
    const p = this.#parts;
    await p.env.env.close();
    await p.evalEnv.env.close();
    await p.sync.close();
    if (p.ownsPool) {
      await p.pool.close();
      return;
    }
    await p.trainer.close().catch(() => undefined);
    for (const w of new Set([p.trainer.worker, p.generator])) {
      for (const name of [POLICY_MODEL, GENERATOR_MODEL, "ref"]) await w.unloadModel(name).catch(() => undefined);
    }
  }

  /** One GRPO step (`grpoStep`); remembers the policy version for the checkpoint. */
  protected override async trainStep(step: number): Promise<StepOutcome> {
    const p = this.#parts;
    const { config } = p;
    const ctx = { env: p.env, policy: this.#policy, trainer: this.trainer, sync: p.sync, groupSize: config.groupSize, promptsPerStep: config.promptsPerStep, seed: config.seed };
    const outcome = await grpoStep(ctx, step, config.log.samplesPerStep);
    this.#policyVersion = outcome.policyVersion;
    return outcome;
  }

  /** The held-out reward of the generator after `step` steps. */
  protected override evaluateAt(step: number): Promise<EvalRecord> {
    return evaluateOnEnv(this.#parts.evalEnv, this.#evalPolicy, step);
  }

  /** The trainer's checkpoint, with the task's data position, the step and the policy version. */
  protected override async saveCheckpoint(dir: string, step: number): Promise<void> {
    await this.trainer.saveCheckpoint(dir, { dataPosition: { task: this.#parts.env.position(), step, policyVersion: this.#policyVersion } });
  }
}
