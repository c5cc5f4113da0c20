/**
 * The step loop under `RunBase`, so under every whole run: counts steps, runs held-out evaluations on schedule,
 * appends `metrics.jsonl` and `samples.jsonl`, logs a plain line per step, writes and prunes checkpoints, and handles
 * `stop()` and the abort signal (finish the step, checkpoint, report, end cleanly). A failure inside a step goes to
 * `recover` (the supervisor): when it answers with a checkpoint's step, the loop goes back to it and goes on; when it
 * answers `null` (stopped during the restart), the run ends at its last checkpoint.
 */
import { InvalidArgumentError } from "../core/errors.js";
import type { SampleRecord } from "../reports/index.js";
import type { RunDirectory } from "./run-directory.js";
import type { EvalRecord, StepRecord, TrainSummary } from "./records.js";

/** One step's outcome as a trainer computes it. */
export interface StepOutcome {
  readonly record: StepRecord;
  readonly samples: readonly SampleRecord[];
}

/**
 * Where the loop hands each record after `metrics.jsonl` has it (the run's experiment trackers, `RunTrackers`):
 * `record` must not throw nor wait; `flush` is awaited when `run()` ends (a sink bounds its own wait and never
 * rejects), so that a second `run()` keeps logging to the same sink; `close` ends it, from the run's `close()`.
 */
export interface RunRecordSink {
  record(record: StepRecord, samples: readonly SampleRecord[]): void;
  flush(): Promise<void>;
  close(): Promise<void>;
}

/** What the loop needs from a trainer. */
export interface RunLoopOptions {
  /** `"GRPOTrainer"` or `"SFTTrainer"` (in messages). */
  readonly name: string;
  readonly runDir: RunDirectory;
  /** Steps already taken (a resumed run). */
  readonly startStep: number;
  readonly totalSteps: number;
  /** Evaluate every this many steps (0 = never). */
  readonly evalEvery: number;
  /** Save every `every` steps or `everyMinutes` minutes since the last save, whichever comes first (0: off). */
  readonly checkpoint: { readonly every: number; readonly everyMinutes?: number; readonly keepLast: number };
  /** The clock of `checkpoint.everyMinutes`, in milliseconds (default `performance.now`). */
  readonly now?: () => number;
  readonly log: (line: string) => void;
  readonly signal: AbortSignal | undefined;
  /** Also gets each record and its samples, once they are written (default none). */
  readonly sink?: RunRecordSink | undefined;
  /** Takes step number `step` (1-based). */
  trainStep(step: number): Promise<StepOutcome>;
  /** A held-out evaluation after `step` steps. */
  evaluate(step: number): Promise<EvalRecord>;
  /** Writes the checkpoint of `step` into `dir`. */
  saveCheckpoint(dir: string, step: number): Promise<void>;
  /** The metrics an evaluation adds to its step's line. */
  evalLine(evaluation: EvalRecord): Record<string, number | null>;
  /**
   * Called with the error of a failed step (its training, evaluation, logging or checkpoint; `step` is its number, 0
   * for the evaluation before the first step): restarts what failed and resolves with the step of the checkpoint the
   * run continues from (its later lines already dropped from `metrics.jsonl`), or rejects to end the run; `null`: the
   * run was asked to stop meanwhile, and ends cleanly at its last checkpoint, as a stop does (the steps after it were
   * lost with their workers). Without it a failure ends the run.
   */
  recover?(error: unknown, step: number): Promise<number | null>;
}

const fmt = (v: number | null | undefined, digits = 3): string => (typeof v === "number" && Number.isFinite(v) ? v.toFixed(digits) : "-");

/** The plain progress line of a step record. */
export function formatStepLine(record: StepRecord, totalSteps: number): string {
  const parts = [`step ${String(record.step)}/${String(totalSteps)}`];
  if (record.reward_mean !== undefined) parts.push(`reward ${fmt(record.reward_mean)}±${fmt(record.reward_std)}`);
  if (record.episode_return_mean !== undefined) parts.push(`return ${fmt(record.episode_return_mean, 1)}`);
  if (record.loss !== undefined) parts.push(`loss ${fmt(record.loss, 4)}`);
  if (record.kl_approx !== undefined) parts.push(`kl ${fmt(record.kl_approx, 4)}`);
  if (record.tokens_per_s !== undefined) parts.push(`${fmt(record.tokens_per_s, 0)} tok/s`);
  if (record.step_time_s !== undefined) parts.push(`${fmt(record.step_time_s, 3)} s/step`);
  if (record.eval_reward_mean !== undefined) parts.push(`eval reward ${fmt(record.eval_reward_mean)}`);
  if (record.eval_loss !== undefined) parts.push(`eval loss ${fmt(record.eval_loss, 4)}`);
  if (record.eval_return_mean !== undefined) parts.push(`eval return ${fmt(record.eval_return_mean, 1)}`);
  return parts.join("  ");
}

/** The loop (see the module notes). */
export class RunLoop {
  readonly #o: RunLoopOptions;
  #step: number;
  #stopRequested = false;
  #running = false;
  /** Paused at a `yield`: the consumer holds the step's record. */
  #suspended = false;
  #saving: Promise<void> = Promise.resolve();
  #done: Promise<void> = Promise.resolve();
  #closed = false;
  #firstEval: EvalRecord | null = null;
  #lastEval: EvalRecord | null = null;
  #lastCheckpoint: { step: number; path: string } | null = null;
  /** When the last save ended (or `run()` began): `checkpoint.everyMinutes` counts from there. */
  #lastSaveAt = 0;
  readonly #onAbort = (): void => {
    this.#stopRequested = true;
  };

  constructor(options: RunLoopOptions) {
    this.#o = options;
    this.#step = options.startStep;
    if (options.startStep > 0) this.#lastCheckpoint = { step: options.startStep, path: options.runDir.checkpointPath(options.startStep) };
    if (options.signal?.aborted === true) this.#stopRequested = true;
    options.signal?.addEventListener("abort", this.#onAbort, { once: true });
  }

  /** Steps taken. */
  get step(): number {
    return this.#step;
  }

  /** Whether `close()` was called. */
  get closed(): boolean {
    return this.#closed;
  }

  /** Runs the steps (see `TrainingRun.run`). */
  async *run(): AsyncGenerator<StepRecord> {
    if (this.#running) throw new InvalidArgumentError(`${this.#o.name}.run: already running`);
    this.#running = true;
    this.#lastSaveAt = this.#now();
    let finished!: () => void;
    this.#done = new Promise((resolve) => (finished = resolve));
    let failed = false;
    const o = this.#o;
    /** The step being taken (0: the evaluation before the first), for `recover`. */
    let current = 0;
    try {
      for (;;) {
        try {
          if (this.#step === 0 && o.evalEvery > 0 && this.#firstEval === null && !this.#stopRequested) {
            current = 0;
            const evaluation = await o.evaluate(0);
            await o.runDir.appendMetrics({ step: 0, ...o.evalLine(evaluation) });
            await o.runDir.appendSamples(evaluation.samples);
            o.sink?.record({ step: 0, ...o.evalLine(evaluation) }, evaluation.samples);
            this.#firstEval = evaluation;
            this.#lastEval = evaluation;
            o.log(`${o.name} before training: ${formatStepLine({ step: 0, ...o.evalLine(evaluation) }, o.totalSteps)}`);
          }
          while (this.#step < o.totalSteps && !this.#stopRequested) {
            const step = this.#step + 1;
            current = step;
            const outcome = await o.trainStep(step);
            this.#step = step;
            let record: StepRecord = outcome.record;
            const samples = [...outcome.samples];
            if (o.evalEvery > 0 && (step % o.evalEvery === 0 || step === o.totalSteps)) {
              const evaluation = await o.evaluate(step);
              this.#lastEval = evaluation;
              record = { ...record, ...o.evalLine(evaluation) };
              samples.push(...evaluation.samples);
            }
            await o.runDir.appendMetrics(record);
            await o.runDir.appendSamples(samples);
            o.sink?.record(record, samples);
            o.log(formatStepLine(record, o.totalSteps));
            if (this.#checkpointDue(step)) await this.#checkpoint();
            this.#suspended = true;
            try {
              yield record;
            } finally {
              this.#suspended = false;
            }
          }
          break;
        } catch (err) {
          if (o.recover === undefined) throw err;
          const resumed = await o.recover(err, current);
          if (resumed !== null) {
            this.#rewind(resumed);
            continue;
          }
          // stopped while restarting: the last checkpoint is what is left (nothing more to save)
          this.#stopRequested = true;
          this.#step = this.#lastCheckpoint?.step ?? 0;
          break;
        }
      }
    } catch (err) {
      failed = true;
      throw err;
    } finally {
      try {
        if (!failed) await this.#checkpoint();
        await this.#writeReport();
      } finally {
        await o.sink?.flush(); // the trackers have every step once `run()` (so `train()`) returns
        this.#running = false;
        finished();
      }
    }
  }

  /**
   * Goes back to the checkpoint of `step` after a recovery: the steps after it are taken again (their lines were
   * dropped), and with nothing to resume from (`step` 0) the evaluation before the first step runs again.
   */
  #rewind(step: number): void {
    this.#step = step;
    this.#lastCheckpoint = step > 0 ? { step, path: this.#o.runDir.checkpointPath(step) } : null;
    this.#lastSaveAt = this.#now(); // the run continues from a save: `everyMinutes` counts from the restart
    if (step === 0) {
      this.#firstEval = null;
      this.#lastEval = null;
    }
  }

  /** Writes `report.html`; a failure is logged, not thrown (the run and its checkpoint matter more). */
  async #writeReport(): Promise<void> {
    await this.#o.runDir.writeReport().catch((err: unknown) => {
      this.#o.log(`${this.#o.name}: could not write ${this.#o.runDir.reportPath}: ${err instanceof Error ? err.message : String(err)}`);
    });
  }

  #now(): number {
    return this.#o.now?.() ?? performance.now();
  }

  /**
   * Whether to save after `step`: every `every` steps or once `everyMinutes` have passed since the last save,
   * whichever comes first; never the last step (the end saves it anyway), and `#writeCheckpoint` never saves a step
   * twice.
   */
  #checkpointDue(step: number): boolean {
    const { every, everyMinutes = 0 } = this.#o.checkpoint;
    if (step >= this.#o.totalSteps) return false;
    if (every > 0 && step % every === 0) return true;
    return everyMinutes > 0 && this.#now() - this.#lastSaveAt >= everyMinutes * 60_000;
  }

  /** Writes the current step's checkpoint unless it exists; calls are serialised. */
  #checkpoint(): Promise<void> {
    const next = this.#saving.then(() => this.#writeCheckpoint());
    this.#saving = next.catch(() => undefined);
    return next;
  }

  async #writeCheckpoint(): Promise<void> {
    if (this.#step === 0 || this.#lastCheckpoint?.step === this.#step) return;
    const dir = this.#o.runDir.checkpointPath(this.#step);
    await this.#o.runDir.sync(); // the metrics up to this step are on disk before the checkpoint that resumes after them
    await this.#o.saveCheckpoint(dir, this.#step);
    this.#lastCheckpoint = { step: this.#step, path: dir };
    this.#lastSaveAt = this.#now();
    await this.#o.runDir.pruneCheckpoints(this.#o.checkpoint.keepLast);
  }

  /**
   * Asks the loop to stop after the current step; resolves once the checkpoint and report are written. Called while
   * the consumer of `run()` holds a record (inside its `for await`), it writes them at once and `run()` ends at
   * its next iteration.
   */
  async stop(): Promise<void> {
    this.#stopRequested = true;
    if (this.#running && !this.#suspended) {
      await this.#done;
      return;
    }
    if (this.#closed) return;
    await this.#checkpoint();
    if (this.#step > 0) await this.#writeReport();
  }

  /** Stops a running loop and detaches from the signal. */
  async close(): Promise<void> {
    if (this.#running) await this.stop();
    this.#closed = true;
    this.#o.signal?.removeEventListener("abort", this.#onAbort);
  }

  /** The summary of the run so far. */
  summary(): TrainSummary {
    return {
      steps: this.#step,
      stopped: this.#step < this.#o.totalSteps,
      runDir: this.#o.runDir.path,
      reportPath: this.#o.runDir.reportPath,
      firstEval: this.#firstEval,
      lastEval: this.#lastEval,
      checkpoint: this.#lastCheckpoint?.path ?? null,
    };
  }
}
