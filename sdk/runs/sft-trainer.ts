/**
 * `SFTTrainer`: a supervised fine-tuning run from one config — the examples (files or the digit-sort task) rendered
 * with the model's chat template, `SFTLoss` on the assistant tokens, the optimizer, held-out loss (and task reward),
 * checkpoints, resume, and the run directory with its report. See docs/trainers.md.
 */
import type { z } from "zod";
import { parseOptions } from "../core/index.js";
import type { JSONValue } from "../data/index.js";
import { DigitSortEnv } from "../envs/tasks/digit-sort.js";
import { TransformersWrapper } from "../modules/transformers.js";
import { SFTLoss } from "../objectives/index.js";
import type { TensorDict } from "../tensordict/index.js";
import { ReferenceModel } from "../trainers/reference.js";
import { Trainer } from "../trainers/trainer.js";
import type { WorkerPool } from "../workers/pool.js";
import { evaluateOnEnv } from "./evaluation.js";
import type { EvalRecord, StepRecord } from "./records.js";
import { restoreCheckpoint } from "./restore.js";
import { RunBase } from "./run-base.js";
import type { RunDirectory } from "./run-directory.js";
import type { StepOutcome } from "./run-loop.js";
import { buildRunParts, openRunDirectory } from "./open-run.js";
import { createPolicyTrainer, loadPolicy, logger, modelPath, openPool, POLICY_MODEL, poolOptionsOf, runLength, RunOptionsSchema, type RunOptions } from "./setup.js";
import { runWorkers, type RunWorkers } from "./run-workers.js";
import { SFTTrainerConfigSchema, type SFTTrainerConfig, type SFTTrainerConfigInput, type SFTDataConfigSchema } from "./sft-config.js";
import { loadConversations, renderConversations, SFTBatches, type SFTPosition } from "./sft-data.js";
import type { RunTrackers } from "./trackers/run-trackers.js";

/** Options of {@link SFTTrainer.create} besides the config. */
export const SFTTrainerOptionsSchema = RunOptionsSchema;

/** Options of {@link SFTTrainer.create} besides the config (input form). */
export type SFTTrainerOptions = RunOptions;

const FREE_FIELDS = ["steps", "epochs", "eval", "checkpoint", "supervision", "loggers", "tracking", "cluster", "runDir"] as const;

type SftData = z.output<typeof SFTDataConfigSchema>;

/** What `create` settles once and every build of the parts reads (the first one, and each after a restart). */
interface Setup {
  readonly config: SFTTrainerConfig;
  readonly options: z.output<typeof SFTTrainerOptionsSchema>;
  readonly runDir: RunDirectory;
  readonly log: (line: string) => void;
  /** The worker the run starts itself (unless `options.pool`), across restarts. */
  readonly workers: RunWorkers;
  /** The experiment trackers of `loggers` (undefined: `metrics.jsonl` only). */
  readonly trackers: RunTrackers | undefined;
}

interface Parts {
  readonly setup: Setup;
  readonly config: SFTTrainerConfig;
  readonly runDir: RunDirectory;
  readonly pool: WorkerPool;
  readonly ownsPool: boolean;
  readonly trainer: Trainer;
  readonly batches: SFTBatches;
  readonly evalExamples: TensorDict | null;
  readonly evalEnv: DigitSortEnv | null;
  readonly totalSteps: number;
  readonly startStep: number;
  readonly log: (line: string) => void;
  readonly signal: AbortSignal | undefined;
}

/** The held-out data of a run: `evalData`, else the digit-sort task's held-out split, else none. */
function heldOutData(config: SFTTrainerConfig): SftData | null {
  if (config.evalData !== undefined) return config.evalData;
  return config.data.type === "digit-sort" ? config.data : null;
}

/**
 * Builds a run's parts on its worker: starts it (or takes `options.pool`), loads the policy, renders the examples,
 * creates the trainer; `"resume"` restores the newest readable checkpoint and the data position, `"restart"` (after a
 * worker failure) the same when there is one and starts from scratch when there is none; both drop the lines logged
 * after it.
 */
async function buildParts(s: Setup, mode: "fresh" | "resume" | "restart", signal: AbortSignal | undefined = s.options.signal): Promise<Parts> {
  const { config: c, options: o, runDir, log } = s;
  const { pool, owned } = await openPool(s.workers, [{ role: "trainer", device: c.model.device }], o.pool, signal, c.model.device);
  try {
    const worker = pool.worker(0);
    const path = await modelPath(c.model, runDir, c.seed, log);
    await loadPolicy(worker, path, c.model);
    const needsReference = c.loss.lossFunction === "minor_sft" || (c.loss.klToRefCoeff ?? 0) > 0;
    const reference = needsReference ? await ReferenceModel.copyOf(worker, POLICY_MODEL, "ref") : null;
    const train = await renderConversations(worker, POLICY_MODEL, await loadConversations(c.data, c.seed, "train"));
    const held = heldOutData(c);
    const evalExamples =
      held === null ? null : await renderConversations(worker, POLICY_MODEL, await loadConversations(held, c.seed, "eval", c.eval.examples));
    const totalSteps = runLength(c.steps, c.epochs, train.numel(), c.batchSize, "SFTTrainer config");
    const trainer = await createPolicyTrainer(worker, c, new SFTLoss(c.loss), totalSteps, reference);
    let startStep = 0;
    let position: SFTPosition | undefined;
    // a restart before the first checkpoint starts over (a resume with nothing to resume from refuses instead)
    const restore = mode === "resume" || (mode === "restart" && (await runDir.checkpoints()).length > 0);
    const latest = restore ? await restoreCheckpoint(runDir, trainer, log) : undefined;
    if (latest !== undefined) {
      const restored = latest.restored;
      startStep = restored.step;
      position = (restored.dataPosition as { data?: SFTPosition } | null)?.data;
      log(`resumed ${runDir.path} at step ${String(startStep)} from ${latest.path}`);
    }
    if (mode !== "fresh") await runDir.truncateAfter(latest === undefined ? -1 : startStep);
    const shuffle = c.data.type === "dataset" ? c.data.shuffle : true;
    const batches = new SFTBatches(train, { batchSize: c.batchSize, seed: c.data.seed ?? c.seed, shuffle, position });
    const evalEnv =
      held?.type === "digit-sort"
        ? new DigitSortEnv({
            numDigits: held.numDigits,
            heldOutFraction: held.heldOutFraction,
            split: "eval",
            seed: held.seed ?? c.seed,
            batchSize: [c.eval.prompts],
            ...(held.systemPrompt !== undefined ? { systemPrompt: held.systemPrompt } : {}),
          })
        : null;
    return { setup: s, config: c, runDir, pool, ownsPool: owned, trainer, batches, evalExamples, evalEnv, totalSteps, startStep, log, signal: o.signal };
  } catch (err) {
    // a restart's worker comes back for its next attempt; a failed create or resume stops it
    if (owned) await s.workers.release(pool, mode === "restart" ? "restart" : "close");
    throw err;
  }
}

/**
 * An SFT run from one zod-validated config (docs/trainers.md):
 *
 * ```ts
 * await using sft = await SFTTrainer.create({
 *   model: { path: "tiny" },
 *   data: { type: "digit-sort", examples: 2000 },
 *   batchSize: 16, steps: 100, optimizer: { lr: 3e-3 }, eval: { every: 50 },
 *   runDir: "runs/sft",
 * });
 * const summary = await sft.train(); // summary.lastEval.loss, .rewardMean
 * ```
 *
 * `evaluate()` measures the held-out loss (and, for digit-sort, the greedy task reward). The run's face (`run`,
 * `train`, `summary`, `stop`, `evaluate`, `close`) is `TrainingRun` (written once in `RunBase`). When the worker it
 * started dies, the run restarts it from the last checkpoint (docs/trainers.md, "Supervision and restarts").
 */
export class SFTTrainer extends RunBase<SFTTrainerConfig> {
  // built again after a restart (#install)
  #parts!: Parts;
  #evalPolicy!: TransformersWrapper;

  private constructor(parts: Parts) {
    super({
      ...parts,
      runWorkers: parts.setup.workers,
      trackers: parts.setup.trackers,
      name: "SFTTrainer",
      evalLine: (e) => ({ eval_loss: e.loss, ...(e.rewardMean !== null ? { eval_reward_mean: e.rewardMean, eval_reward_std: e.rewardStd } : {}) }),
      userLog: parts.setup.options.log,
      notRestartable: parts.setup.options.pool !== undefined ? "its worker is options.pool's: restart it, then resume" : undefined,
      workers: () => [{ worker: this.#parts.trainer.worker, role: "trainer" }],
    });
    this.#install(parts);
  }

  #install(parts: Parts): void {
    this.#parts = parts;
    this.#evalPolicy = new TransformersWrapper(parts.trainer.worker, {
      model: POLICY_MODEL,
      returnLogProbs: false,
      generateKwargs: { max_new_tokens: parts.config.eval.maxNewTokens, do_sample: false },
    });
  }

  /**
   * Checks the config (an `InvalidArgumentError` names the field), prepares the run directory, starts a worker (or
   * uses `options.pool`), loads or builds the model, renders the examples once, and with `resume` restores the latest
   * checkpoint and the data position.
   */
  static async create(config: SFTTrainerConfigInput, options: SFTTrainerOptions = {}): Promise<SFTTrainer> {
    const c = parseOptions(SFTTrainerConfigSchema, config, "SFTTrainer config");
    const o = parseOptions(SFTTrainerOptionsSchema, options, "SFTTrainer options");
    const { runDir, resumable, trackers } = await openRunDirectory(c, o.resume, FREE_FIELDS, SFTTrainerConfigSchema, o.log);
    const setup: Setup = { config: c, options: o, runDir, log: logger(o.log), workers: runWorkers(c.cluster, poolOptionsOf(options)), trackers };
    return new SFTTrainer(await buildRunParts(trackers, setup.workers, () => buildParts(setup, resumable ? "resume" : "fresh")));
  }

  /** Stops the worker it started (or drops its trainer and model from `pool`). @internal */
  protected override async closeParts(): Promise<void> {
    const p = this.#parts;
    await p.evalEnv?.close();
    if (p.ownsPool) return; // RunBase releases the worker the run started
    await p.trainer.close().catch(() => undefined);
    for (const name of [POLICY_MODEL, "ref"]) await p.trainer.worker.unloadModel(name).catch(() => undefined);
  }

  /** The run loop's hook, not an extension point. @internal */
  protected override workerPool(): { pool: WorkerPool; owned: boolean } {
    return { pool: this.#parts.pool, owned: this.#parts.ownsPool };
  }

  /** After a worker failure (the parts closed): builds them again on fresh workers from the last checkpoint. @internal */
  protected override async restartParts(): Promise<{ trainer: Trainer; startStep: number }> {
    const parts = await buildParts(this.#parts.setup, "restart", this.stopSignal);
    this.#install(parts);
    return parts;
  }

  /** One optimizer step on the next batch of examples. @internal */
  protected override async trainStep(step: number): Promise<StepOutcome> {
    const start = performance.now();
    const batch = this.#parts.batches.next();
    const result = await this.trainer.step(batch);
    const seconds = (performance.now() - start) / 1000;
    const record: Record<string, number | null> = { step, policy_version: result.policyVersion };
    for (const [name, value] of Object.entries(result.metrics)) record[name] = value;
    Object.assign(record, { lr: result.lr, tokens_per_s: result.numTokens / seconds, step_time_s: seconds, epoch: this.#parts.batches.position.epoch });
    return { record: record as StepRecord, samples: [] };
  }

  /** Held-out loss (and greedy task reward for digit-sort) after `step` steps. @internal */
  protected override async evaluateAt(step: number): Promise<EvalRecord> {
    const { evalExamples, evalEnv } = this.#parts;
    const loss = evalExamples === null ? null : ((await this.trainer.computeLoss(evalExamples)).metrics.loss ?? null);
    if (evalEnv === null) return { step, count: evalExamples?.numel() ?? 0, rewardMean: null, rewardStd: null, rewards: {}, loss, samples: [] };
    const heldOut = { env: evalEnv, position: () => null, epochSize: () => Promise.resolve(null), restart: () => void evalEnv.primer.resetDataloader() };
    return evaluateOnEnv(heldOut, this.#evalPolicy, step, loss);
  }

  /** The trainer's checkpoint, with the batch order's position. @internal */
  protected override async saveCheckpoint(dir: string): Promise<void> {
    const data = this.#parts.batches.position;
    const dataPosition: JSONValue = { data: { epoch: data.epoch, index: data.index } };
    await this.trainer.saveCheckpoint(dir, { dataPosition });
  }
}
