/**
 * `TrainingRun`, what every whole-run recipe (`GRPOTrainer`, `SFTTrainer`) offers, and `RunBase`, that face written
 * once over the step loop (`RunLoop`) and its supervision (`Supervisor`): each recipe adds only its setup, its step,
 * its evaluation, its checkpoint, the closing of its own parts and how it builds them again after a worker failure.
 */
import type { Trainer } from "../trainers/trainer.js";
import type { WorkerPool } from "../workers/pool.js";
import { TrainerClosedError } from "./errors.js";
import type { EvalRecord, StepRecord, TrainSummary } from "./records.js";
import type { RunDirectory } from "./run-directory.js";
import { RunLoop, type RunRecordSink, type StepOutcome } from "./run-loop.js";
import type { ReleaseReason, RunWorkers } from "./run-workers.js";
import { Supervisor, type RoleWorker, type SupervisionSettings } from "./supervisor.js";

/**
 * A whole training run, as `GRPOTrainer` and `SFTTrainer` are: what the `posttrain` command line drives.
 *
 * ```ts
 * async function drive(run: TrainingRun): Promise<void> {
 *   for await (const record of run.run()) console.log(`${record.step}/${run.totalSteps}`);
 *   await run.close();
 * }
 * ```
 */
export interface TrainingRun extends AsyncDisposable {
  /** The run directory (absolute). */
  readonly runDir: string;
  /** The step the run ends at. */
  readonly totalSteps: number;
  /** Optimizer steps taken so far (a resumed run counts the earlier ones). */
  readonly step: number;
  /**
   * Trains until `steps` (or `epochs`) or `stop()`, yielding each step's record after it is in `metrics.jsonl`. With
   * evaluation on, the held-out evaluation runs before the first step and every `eval.every` steps (and at the last).
   * At the end (or on stop) a checkpoint and `report.html` are written.
   */
  run(): AsyncIterable<StepRecord>;
  /** Drains {@link run}; returns the summary (steps, run directory, report, first and last evaluation). */
  train(): Promise<TrainSummary>;
  /**
   * The run so far: steps, whether it stopped early, the run directory, the report, the first evaluation (before the
   * first step) and the last one, the last checkpoint. What `train()` returns; useful after iterating `run()`.
   */
  summary(): TrainSummary;
  /** Finishes the current step, saves a checkpoint and the report, and ends `run()` cleanly. */
  stop(): Promise<void>;
  /** A held-out evaluation now (not written to `metrics.jsonl`). */
  evaluate(): Promise<EvalRecord>;
  /** Stops a running loop and releases the run's workers (or its models in a given pool). */
  close(): Promise<void>;
}

/** The config fields the step loop reads. */
export interface RunLoopConfig {
  readonly eval: { readonly every: number };
  readonly supervision: SupervisionSettings;
  readonly checkpoint: { readonly every: number; readonly keepLast: number };
}

/** What a recipe hands {@link RunBase} once its setup is done (`T`: its worker-side trainer, a `Trainer` unless said). */
export interface RunBaseParts<C extends RunLoopConfig, T = Trainer> {
  /** `"GRPOTrainer"` or `"SFTTrainer"` (in messages). */
  readonly name: string;
  readonly config: C;
  readonly runDir: RunDirectory;
  readonly trainer: T;
  readonly totalSteps: number;
  /** Steps already taken (a resumed run). */
  readonly startStep: number;
  readonly log: (line: string) => void;
  readonly signal: AbortSignal | undefined;
  /** The metrics an evaluation adds to its step's line. */
  readonly evalLine: (evaluation: EvalRecord) => Record<string, number | null>;
  /** Why the run cannot restart its workers after a failure (they are the caller's), or `undefined` when it can. */
  readonly notRestartable: string | undefined;
  /** The caller's `options.log`, if any: without it, worker failures and restarts (rare, and worth seeing) go to stderr. */
  readonly userLog: ((line: string) => void) | undefined;
  /** The run's workers now, with their roles (to name the one that failed). */
  readonly workers: () => readonly RoleWorker[];
  /** The workers the run starts itself (local or on Ray): released with each build's parts, stopped by `close()`. */
  readonly runWorkers: RunWorkers;
  /** The run's experiment trackers (`loggers`), open; flushed when `run()` ends, closed by `close()`. */
  readonly trackers?: RunRecordSink | undefined;
}

/**
 * The facade of a whole run over {@link RunLoop}: `step`, `run`, `train`, `summary`, `stop`, `evaluate`, `close` and
 * `await using`. A subclass implements the step, the evaluation, the checkpoint and the closing of its own parts.
 */
export abstract class RunBase<C extends RunLoopConfig, T = Trainer> implements TrainingRun {
  /** The resolved config (what `config.yaml` holds). */
  readonly config: C;
  /** The run directory (absolute). */
  readonly runDir: string;
  /** The step the run ends at. */
  readonly totalSteps: number;
  readonly #name: string;
  readonly #loop: RunLoop;
  readonly #supervisor: Supervisor;
  /** Aborted by the run's signal or `stop()`/`close()`: a restart in progress then ends the run instead. */
  readonly #stopping = new AbortController();
  readonly #runWorkers: RunWorkers;
  readonly #trackers: RunRecordSink | undefined;
  /** The run's signal and its own stopping, together. */
  readonly #stopSignal: AbortSignal;
  #trainer: T;
  /** Whether the current parts are closed (by `close()`, or by a restart before it builds new ones). */
  #partsClosed = false;

  /** The run loop's hook, not an extension point. @internal */
  protected constructor(parts: RunBaseParts<C, T>) {
    this.config = parts.config;
    this.runDir = parts.runDir.path;
    this.totalSteps = parts.totalSteps;
    this.#trainer = parts.trainer;
    this.#name = parts.name;
    this.#runWorkers = parts.runWorkers;
    this.#trackers = parts.trackers;
    this.#stopSignal = parts.signal === undefined ? this.#stopping.signal : AbortSignal.any([parts.signal, this.#stopping.signal]);
    this.#supervisor = new Supervisor({
      name: parts.name,
      settings: parts.config.supervision,
      runDir: parts.runDir,
      log:
        parts.userLog ??
        ((line) => {
          console.warn(line);
        }),
      notRestartable: parts.notRestartable,
      signal: this.#stopSignal,
      workers: parts.workers,
    });
    this.#loop = new RunLoop({
      name: parts.name,
      runDir: parts.runDir,
      startStep: parts.startStep,
      totalSteps: parts.totalSteps,
      evalEvery: parts.config.eval.every,
      checkpoint: parts.config.checkpoint,
      log: parts.log,
      signal: parts.signal,
      sink: parts.trackers,
      trainStep: async (step) => {
        const outcome = await this.trainStep(step);
        this.#supervisor.stepDone();
        return outcome;
      },
      evaluate: (step) => this.evaluateAt(step),
      saveCheckpoint: (dir, step) => this.saveCheckpoint(dir, step),
      evalLine: parts.evalLine,
      recover: (error, step) =>
        this.#supervisor.recover(error, step, {
          // a dead worker fails the closing of what it held: the workers the run started are released whatever happens
          close: () => this.#closeParts("restart").catch(() => undefined),
          build: async () => {
            const rebuilt = await this.restartParts();
            this.#partsClosed = false;
            this.#trainer = rebuilt.trainer;
            return rebuilt.startStep;
          },
        }),
    });
  }

  /** The low-level trainer in the policy's worker (a new one after each restart). */
  get trainer(): T {
    return this.#trainer;
  }

  /** Restarts after worker failures so far (see docs/trainers.md, "Supervision and restarts"). */
  get restarts(): number {
    return this.#supervisor.restarts;
  }

  /** Aborted when the run stops (its signal, `stop()` or `close()`): a restart's worker start then gives up. @internal */
  protected get stopSignal(): AbortSignal {
    return this.#stopSignal;
  }

  /** The run's supervisor (a recipe records generator failures with it). @internal */
  protected get supervisor(): Supervisor {
    return this.#supervisor;
  }

  /** Optimizer steps taken so far (a resumed run counts the earlier ones). */
  get step(): number {
    return this.#loop.step;
  }

  /**
   * Trains until `steps` (or `epochs`) or `stop()`, yielding each step's record after it is in `metrics.jsonl`. With
   * evaluation on, the held-out evaluation runs before the first step and every `eval.every` steps (and at the last).
   * At the end (or on stop) a checkpoint and `report.html` are written.
   */
  run(): AsyncIterable<StepRecord> {
    if (this.#loop.closed) throw new TrainerClosedError(`${this.#name}.run`);
    return this.#loop.run();
  }

  /** Drains {@link run}; returns the summary (steps, run directory, report, first and last evaluation). */
  async train(): Promise<TrainSummary> {
    const steps = this.run()[Symbol.asyncIterator]();
    while (!(await steps.next()).done) {
      // each step's record is already in metrics.jsonl
    }
    return this.#loop.summary();
  }

  /**
   * The run so far: steps, whether it stopped early, the run directory, the report, the first evaluation (before the
   * first step) and the last one, the last checkpoint. What `train()` returns; useful after iterating `run()`.
   */
  summary(): TrainSummary {
    return this.#loop.summary();
  }

  /** Finishes the current step, saves a checkpoint and the report, and ends `run()` cleanly. */
  async stop(): Promise<void> {
    this.#stopping.abort();
    await this.#loop.stop();
  }

  /** A held-out evaluation now (not written to `metrics.jsonl`); see the subclass for what it measures. */
  async evaluate(): Promise<EvalRecord> {
    if (this.#loop.closed) throw new TrainerClosedError(`${this.#name}.evaluate`);
    return this.evaluateAt(this.#loop.step);
  }

  /** Stops a running loop, then closes the run's own parts (once; later calls do nothing). */
  async close(): Promise<void> {
    if (this.#loop.closed) return;
    this.#stopping.abort();
    await this.#loop.close();
    try {
      await this.#closeParts("close");
    } finally {
      await this.#runWorkers.close();
      await this.#trackers?.close();
    }
  }

  /**
   * Closes the current parts once (a restart may have closed them already), then releases the workers the run started
   * for them: stopped for good on `close()`, brought back by the next build after a failure (`"restart"`).
   */
  async #closeParts(reason: ReleaseReason): Promise<void> {
    if (this.#partsClosed) return;
    this.#partsClosed = true;
    try {
      await this.closeParts();
    } finally {
      const { pool, owned } = this.workerPool();
      if (owned) await this.#runWorkers.release(pool, reason);
    }
  }

  /** For `await using`. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  /** Takes step number `step` (1-based) and returns its record and logged samples. @internal */
  protected abstract trainStep(step: number): Promise<StepOutcome>;

  /** A held-out evaluation after `step` steps. @internal */
  protected abstract evaluateAt(step: number): Promise<EvalRecord>;

  /** Writes the checkpoint of `step` into `dir` (weights, optimizer and the data position). @internal */
  protected abstract saveCheckpoint(dir: string, step: number): Promise<void>;

  /**
   * Releases what the subclass holds (envs, weight sync, its models in a given pool); called once per build. The
   * workers the run started are released after it by `RunBase` (see {@link workerPool}).
   * @internal
   */
  protected abstract closeParts(): Promise<void>;

  /** The pool the current parts run on, and whether the run started it (then released after every build's parts). @internal */
  protected abstract workerPool(): { readonly pool: WorkerPool; readonly owned: boolean };

  /**
   * After a worker failure, once the parts are closed: starts fresh workers and builds the parts again as a resume
   * does, from the last checkpoint (or from scratch when there is none), and installs them; resolves with the new
   * trainer and the step it resumed from.
   * @internal
   */
  protected abstract restartParts(): Promise<{ trainer: T; startStep: number }>;
}
