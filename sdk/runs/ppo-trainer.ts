/**
 * `PPOTrainer`: a PPO run on a classic control env from one config — N copies of the env stepped in TS
 * (`SerialEnv`/`ParallelEnv`), the agent (MLP actor and critic, Adam) in a worker, `SyncDataCollector` batches,
 * GAE and `ClipPPOLoss` epochs over mini-batches in the worker, deterministic evaluations, checkpoints, resume, and the
 * run directory with its report. See docs/classic-rl.md.
 */
import { mkdir, readdir } from "node:fs/promises";
import { join } from "node:path";
import type { z } from "zod";
import { writeFileAtomic } from "../core/atomic-file.js";
import { parseOptions } from "../core/index.js";
import { EpisodeTracker, SyncDataCollector, type EpisodeStats } from "../collectors/sync-data-collector.js";
import { createControlEnv, controlEnvShape, defaultMaxEpisodeSteps, type ControlEnv } from "./ppo-env.js";
import { NEXT_KEY } from "../envs/keys.js";
import { ControlAgent } from "../modules/control-agent.js";
import { ProbabilisticActor } from "../modules/probabilistic-actor.js";
import { ClipPPOLoss, GAE } from "../objectives/ppo.js";
import type { TensorDict } from "../tensordict/index.js";
import type { WorkerPool } from "../workers/pool.js";
import { PPOTrainerConfigSchema, ppoSteps, type PPOTrainerConfig, type PPOTrainerConfigInput } from "./ppo-config.js";
import type { EvalRecord } from "./records.js";
import { restoreCheckpoint } from "./restore.js";
import { RunBase } from "./run-base.js";
import { readTrainerState, TRAINER_STATE_FILE, type RunDirectory, type RunCheckpoint } from "./run-directory.js";
import type { StepOutcome } from "./run-loop.js";
import { buildRunParts, openRunDirectory } from "./open-run.js";
import { runWorkers, type RunWorkers } from "./run-workers.js";
import { logger, openPool, poolOptionsOf, RunOptionsSchema, type RunOptions } from "./setup.js";
import { rewardStats } from "./step-metrics.js";
import type { RunTrackers } from "./trackers/run-trackers.js";

/** Options of {@link PPOTrainer.create} besides the config. */
export const PPOTrainerOptionsSchema = RunOptionsSchema;

/** Options of {@link PPOTrainer.create} besides the config (input form). */
export type PPOTrainerOptions = RunOptions;

/** Fields a resume may change (the others must match the saved `config.yaml`). */
const FREE_FIELDS = ["steps", "totalFrames", "eval", "checkpoint", "supervision", "loggers", "tracking", "cluster", "runDir"] as const;

/** The agent's name in its worker. */
const AGENT_NAME = "ppo";
/** A checkpoint's agent directory (`control_save`) and the state written after it. */
const AGENT_DIR = "agent";
/** The keys `control_update` reads (the rest of a collected batch stays in TS). */
const UPDATE_KEYS = ["observation", "action", "action_log_prob", ["next", "observation"], ["next", "reward"], ["next", "done"], ["next", "terminated"]];
/** The evaluation envs' seeds start here (past the training envs' for any sensible run), the same at every evaluation. */
const EVAL_SEED_OFFSET = 1_000_000;

/** What `trainer_state.json` of a PPO checkpoint holds. */
interface PPOState {
  readonly step: number;
  readonly frames: number;
  readonly updates: number;
}

interface Setup {
  readonly config: PPOTrainerConfig;
  readonly options: z.output<typeof PPOTrainerOptionsSchema>;
  readonly runDir: RunDirectory;
  readonly log: (line: string) => void;
  readonly workers: RunWorkers;
  readonly trackers: RunTrackers | undefined;
}

interface Parts {
  readonly setup: Setup;
  readonly config: PPOTrainerConfig;
  readonly runDir: RunDirectory;
  readonly pool: WorkerPool;
  readonly ownsPool: boolean;
  readonly trainer: ControlAgent;
  readonly actor: ProbabilisticActor;
  readonly env: ControlEnv;
  readonly evalEnv: ControlEnv;
  readonly collector: SyncDataCollector;
  /** Optimizer steps of the agent when the parts were built (restored from a checkpoint, else 0). */
  readonly updates: number;
  readonly totalSteps: number;
  readonly startStep: number;
  readonly log: (line: string) => void;
  readonly signal: AbortSignal | undefined;
}

/** Why a PPO checkpoint cannot be resumed from, as far as its files tell (`undefined`: it looks whole). */
async function checkpointProblem(checkpoint: RunCheckpoint): Promise<string | undefined> {
  const state = await readTrainerState(checkpoint.path);
  if (typeof state === "string") return state;
  const files = await readdir(join(checkpoint.path, AGENT_DIR)).catch(() => [] as string[]);
  return files.length === 0 ? `its agent (${AGENT_DIR}/) is missing or empty` : undefined;
}

/** The seed of the training envs' first reset after `step` steps: a fresh run and each resume point differ. */
function envSeed(c: PPOTrainerConfig, step: number): number {
  return c.seed + step * c.env.numEnvs;
}

/**
 * Builds a run's parts: the worker (or `options.pool`), the envs, the agent; `"resume"` restores the newest readable
 * checkpoint, `"restart"` (after a worker failure) the same when there is one; both drop the lines logged after it.
 */
async function buildParts(s: Setup, mode: "fresh" | "resume" | "restart", signal: AbortSignal | undefined = s.options.signal): Promise<Parts> {
  const { config: c, options: o, runDir, log } = s;
  const { pool, owned } = await openPool(s.workers, [{ role: "trainer", device: c.device }], o.pool, signal, c.device);
  const made: ControlEnv[] = [];
  try {
    const worker = pool.worker(0);
    const env = createControlEnv(c.env, c.env.numEnvs);
    made.push(env);
    // in this thread: an evaluation is a few hundred steps of `eval.episodes` copies
    const evalEnv = createControlEnv({ ...c.env, parallel: false }, c.eval.episodes);
    made.push(evalEnv);
    const shape = controlEnvShape(env);
    const { agent } = await ControlAgent.create(
      worker,
      {
        name: AGENT_NAME,
        ...shape,
        actor: c.actor,
        critic: c.critic,
        optimizer: { type: "adam", lr: c.optimizer.lr, eps: c.optimizer.eps, weightDecay: c.optimizer.weightDecay },
        loss: new ClipPPOLoss(c.loss, "PPOTrainer config.loss").toWire(),
        advantage: new GAE(c.advantage, "PPOTrainer config.advantage").toWire(),
        maxGradNorm: c.maxGradNorm,
        seed: c.seed,
        replace: true,
      },
      signal === undefined ? {} : { signal },
    );
    let startStep = 0;
    let updates = 0;
    const restore = mode === "resume" || (mode === "restart" && (await runDir.checkpoints()).length > 0);
    if (restore) {
      const loader = {
        loadCheckpoint: async (dir: string): Promise<PPOState> => {
          const state = await readTrainerState(dir); // checked by checkpointProblem just before
          const step = typeof state === "string" ? 0 : state.step;
          return { step, frames: step * c.framesPerBatch, updates: await agent.load(join(dir, AGENT_DIR)) };
        },
      };
      const latest = await restoreCheckpoint(runDir, loader, log, { checkFiles: checkpointProblem });
      startStep = latest.restored.step;
      updates = latest.restored.updates;
      log(`resumed ${runDir.path} at step ${String(startStep)} from ${latest.path}`);
    }
    if (mode !== "fresh") await runDir.truncateAfter(restore ? startStep : -1);
    env.setSeed(envSeed(c, startStep));
    const actor = new ProbabilisticActor(agent, { exploration: "random" });
    // no signal: a stop finishes the step in progress (the run loop checks it between steps)
    const collector = new SyncDataCollector({ env, policy: actor, framesPerBatch: c.framesPerBatch });
    return { setup: s, config: c, runDir, pool, ownsPool: owned, trainer: agent, actor, env, evalEnv, collector, updates, totalSteps: ppoSteps(c), startStep, log, signal: o.signal };
  } catch (err) {
    for (const env of made) await env.close().catch(() => undefined);
    if (owned) await s.workers.release(pool, mode === "restart" ? "restart" : "close");
    throw err;
  }
}

/**
 * A PPO run from one zod-validated config (docs/classic-rl.md):
 *
 * ```ts
 * await using ppo = await PPOTrainer.create({
 *   env: { name: "CartPole-v1", numEnvs: 8 },
 *   framesPerBatch: 2048, totalFrames: 100_000, epochs: 10, miniBatchSize: 256,
 *   optimizer: { lr: 1e-3 }, eval: { every: 5 }, runDir: "runs/ppo-cartpole",
 * });
 * const summary = await ppo.train(); // summary.lastEval.rewardMean: the mean evaluation return
 * ```
 *
 * Each step collects `framesPerBatch` frames with the sampling policy, then runs `epochs` passes of `ClipPPOLoss` over
 * shuffled mini-batches in the worker. `evaluate()` plays `eval.episodes` episodes with the deterministic policy;
 * its `rewardMean`/`rewardStd` are the episodes' mean and std return (`eval_return_mean`, `eval_return_std` in
 * `metrics.jsonl`). A resume restores the agent exactly (weights, Adam state, sampling generator) and the step count;
 * the envs start fresh episodes (seeded from `seed` and the step), so the frames after a resume differ from an
 * uninterrupted run's (docs/classic-rl.md, "Resume").
 */
export class PPOTrainer extends RunBase<PPOTrainerConfig, ControlAgent> {
  #parts!: Parts;
  /** The agent's optimizer steps so far (for `trainer_state.json`). */
  #updates = 0;
  /** `eval_length_mean` of the evaluation of each step, for its line. */
  readonly #evalLengths = new Map<number, number>();
  /**
   * Aborted by {@link close}: cancels the worker calls of a step or evaluation in flight. `stop()` and the run's signal
   * do not: they finish the step (RunLoop's contract, as every run), so its checkpoint matches the agent.
   */
  readonly #closing = new AbortController();

  private constructor(parts: Parts) {
    super({
      ...parts,
      runWorkers: parts.setup.workers,
      trackers: parts.setup.trackers,
      name: "PPOTrainer",
      evalLine: (e) => ({ eval_return_mean: e.rewardMean, eval_return_std: e.rewardStd, eval_length_mean: this.#evalLengths.get(e.step) ?? null }),
      userLog: parts.setup.options.log,
      notRestartable: parts.setup.options.pool !== undefined ? "its worker is options.pool's: restart it, then resume" : undefined,
      workers: () => [{ worker: this.#parts.trainer.worker, role: "trainer" }],
    });
    this.#install(parts);
  }

  #install(parts: Parts): void {
    this.#parts = parts;
    this.#updates = parts.updates;
  }

  /**
   * Checks the config (an `InvalidArgumentError` names the field), prepares the run directory, starts a worker (or
   * uses `options.pool`), builds the envs and the agent, and with `resume` restores the latest checkpoint.
   */
  static async create(config: PPOTrainerConfigInput, options: PPOTrainerOptions = {}): Promise<PPOTrainer> {
    const c = parseOptions(PPOTrainerConfigSchema, config, "PPOTrainer config");
    const o = parseOptions(PPOTrainerOptionsSchema, options, "PPOTrainer options");
    const { runDir, resumable, trackers } = await openRunDirectory(c, o.resume, FREE_FIELDS, PPOTrainerConfigSchema, o.log);
    const setup: Setup = { config: c, options: o, runDir, log: logger(o.log), workers: runWorkers(c.cluster, poolOptionsOf(options)), trackers };
    return new PPOTrainer(await buildRunParts(trackers, setup.workers, () => buildParts(setup, resumable ? "resume" : "fresh")));
  }

  /** The agent in the worker (the same as `trainer`): `ProbabilisticActor`s over it act with the current policy. */
  get agent(): ControlAgent {
    return this.#parts.trainer;
  }

  /** The sampling policy the collector runs (`exploration: "random"`). */
  get actor(): ProbabilisticActor {
    return this.#parts.actor;
  }

  /** Frames collected so far (a resumed run counts the earlier ones). */
  get frames(): number {
    return this.step * this.config.framesPerBatch;
  }

  /**
   * Closes the run (see `RunBase.close`); a step or evaluation in flight is cancelled (its worker calls aborted:
   * `run()` then rejects with `RequestAbortedError`, and a resume starts from the last checkpoint) instead of waited for.
   */
  override async close(): Promise<void> {
    this.#closing.abort();
    await super.close();
  }

  /** Closes the envs (and drops the agent from `options.pool`'s worker), each even when another fails. @internal */
  protected override async closeParts(): Promise<void> {
    const p = this.#parts;
    const results = await Promise.allSettled([p.env.close(), p.evalEnv.close(), p.ownsPool ? Promise.resolve() : p.trainer.close()]);
    // RunBase releases a worker the run started; a worker of `options.pool` keeps serving: a failed close there is its own
    const failed = results.slice(0, 2).find((r): r is PromiseRejectedResult => r.status === "rejected");
    if (failed !== undefined) throw failed.reason;
  }

  /** The run loop's hook, not an extension point. @internal */
  protected override workerPool(): { pool: WorkerPool; owned: boolean } {
    return { pool: this.#parts.pool, owned: this.#parts.ownsPool };
  }

  /** After a worker failure (the parts closed): builds them again on a fresh worker from the last checkpoint. @internal */
  protected override async restartParts(): Promise<{ trainer: ControlAgent; startStep: number }> {
    const parts = await buildParts(this.#parts.setup, "restart", this.stopSignal);
    this.#install(parts);
    return parts;
  }

  /** Collects a batch, then updates the agent on it. @internal */
  protected override async trainStep(step: number): Promise<StepOutcome> {
    const { collector, trainer: agent, config: c } = this.#parts;
    const start = performance.now();
    const batch = await collector.next();
    const collected = performance.now();
    const rows = batch.reshape([batch.numel()]).select(...UPDATE_KEYS);
    const result = await agent.update(rows, { numEnvs: collector.numEnvs, epochs: c.epochs, miniBatchSize: c.miniBatchSize }, { signal: this.#closing.signal });
    const end = performance.now();
    this.#updates = result.updates;
    const episodes = collector.takeFinishedEpisodes();
    const mean = (values: readonly number[]): number | null => (values.length === 0 ? null : values.reduce((a, b) => a + b, 0) / values.length);
    const m = result.metrics;
    const record: Record<string, number | null> = {
      step,
      frames: step * c.framesPerBatch,
      episodes: episodes.length,
      episode_return_mean: mean(episodes.map((e) => e.return)),
      episode_length_mean: mean(episodes.map((e) => e.length)),
      loss: m.loss_objective + m.loss_critic + m.loss_entropy,
      ...m,
      updates: result.updates,
      fps: c.framesPerBatch / ((end - start) / 1000),
      collect_time_s: (collected - start) / 1000,
      update_time_s: (end - collected) / 1000,
      step_time_s: (end - start) / 1000,
    };
    return { record: record as StepOutcome["record"], samples: [] };
  }

  /**
   * `eval.episodes` episodes of the deterministic policy on fresh copies of the env (the same seeds every time), each
   * cut at `eval.maxSteps`: their mean and std return and mean length. @internal
   */
  protected override async evaluateAt(step: number): Promise<EvalRecord> {
    const { evalEnv, actor, config: c } = this.#parts;
    const n = c.eval.episodes;
    const maxSteps = c.eval.maxSteps ?? c.env.maxEpisodeSteps ?? defaultMaxEpisodeSteps(c.env.name);
    const call = { signal: this.#closing.signal };
    const episodes = new EpisodeTracker(n);
    const first = new Map<number, EpisodeStats>(); // each copy's first episode: later ones do not count
    evalEnv.setSeed(c.seed + EVAL_SEED_OFFSET);
    let td: TensorDict = await evalEnv.reset(undefined, call);
    for (let t = 0; t < maxSteps && first.size < n; t++) {
      const acted = await actor.forward(td, { ...call, exploration: "deterministic" });
      const [stepped, next] = await evalEnv.stepAndMaybeReset(acted, call);
      for (const e of episodes.record(stepped.getTensorDict(NEXT_KEY))) if (!first.has(e.env)) first.set(e.env, e);
      td = next;
    }
    // a copy still playing at maxSteps counts its episode so far
    const played = Array.from({ length: n }, (_, i) => first.get(i) ?? episodes.running(i));
    const { mean, std } = rewardStats(played.map((e) => e.return));
    this.#evalLengths.set(step, played.reduce((a, e) => a + e.length, 0) / n);
    return { step, count: n, rewardMean: mean, rewardStd: std, rewards: {}, loss: null, samples: [] };
  }

  /** The agent (`agent/`, by `control_save`), then `trainer_state.json` (step, frames, updates) written last. @internal */
  protected override async saveCheckpoint(dir: string, step: number): Promise<void> {
    await mkdir(dir, { recursive: true });
    await this.#parts.trainer.save(join(dir, AGENT_DIR));
    const state: PPOState = { step, frames: step * this.config.framesPerBatch, updates: this.#updates };
    await writeFileAtomic(join(dir, TRAINER_STATE_FILE), `${JSON.stringify(state)}\n`);
  }
}
