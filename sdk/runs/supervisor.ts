/**
 * `Supervisor`: what a whole run does when one of its workers dies or stops answering (TorchTitan / torchft style:
 * the run owns its workers). It tells a worker failure from any other error, closes the run's parts (and so releases
 * the surviving workers at once), logs a line, waits with exponential backoff, has the run build its parts again from
 * the last checkpoint on fresh workers, then writes an event to `events.jsonl` with the step it resumed from; it gives
 * up after `supervision.maxRestarts` restarts in a row with a `RunWorkerLostError` that says how to resume. An abort
 * of the run's signal during a restart ends the run as a stop does. See docs/trainers.md, "Supervision and restarts".
 */
import type { z } from "zod";
import { findCause, isWorkerLoss, WorkerDiedError } from "../../bridge/errors.js";
import type { RunEvent, RunEventKind } from "../reports/index.js";
import type { WorkerClient } from "../workers/client.js";
import type { SupervisionConfigSchema } from "./config-blocks.js";
import { RunWorkerLostError } from "./errors.js";
import type { RunDirectory } from "./run-directory.js";

/** The resolved `supervision` block of a run config. */
export type SupervisionSettings = z.output<typeof SupervisionConfigSchema>;

/** What the supervisor reads of a worker: its name and whether its connection is alive. */
export interface SupervisedWorker {
  readonly name: WorkerClient["name"];
  readonly connection: { readonly alive: boolean; readonly failure?: Error | undefined };
}

/** A worker of the run and its role (`"trainer"`, `"generator"`, `"reference"`). */
export interface RoleWorker {
  readonly worker: SupervisedWorker;
  readonly role: string;
}

/** What a {@link Supervisor} needs from its run. */
export interface SupervisorOptions {
  /** `"GRPOTrainer"` or `"SFTTrainer"`. */
  readonly name: string;
  readonly settings: SupervisionSettings;
  readonly runDir: RunDirectory;
  readonly log: (line: string) => void;
  /** Why the run cannot restart its workers (they are the caller's), or `undefined` when it can. */
  readonly notRestartable: string | undefined;
  /** Aborted when the run is to stop: a restart in progress then ends the run cleanly instead. */
  readonly signal: AbortSignal | undefined;
  /** The run's workers now, with their roles (to name the one that failed); not those it already dropped. */
  workers(): readonly RoleWorker[];
}

/** How a run restarts: `close` releases its parts and workers (never throws), `build` starts fresh ones and resumes. */
export interface RestartSteps {
  /** Closes the run's parts and its pool, whatever state their workers are in. */
  close(): Promise<void>;
  /** Starts fresh workers, builds the parts from the last checkpoint (or from scratch); resolves with its step. */
  build(): Promise<number>;
}

/** How long a worker's exit takes to reach its connection after another worker's call failed because of it (ms). */
const EXIT_GRACE_MS = 300;

/** Lines of a worker's stderr kept in an event. */
const STDERR_LINES = 12;

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** Waits `ms`, or less when `signal` is aborted meanwhile. */
function abortableSleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  if (signal === undefined) return sleep(ms);
  if (signal.aborted) return Promise.resolve();
  return new Promise((resolve) => {
    const done = (): void => {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener("abort", done, { once: true });
  });
}

/** The run's restarts (see the module notes). */
export class Supervisor {
  readonly #o: SupervisorOptions;
  /** Restarts since the last `healthySteps` steps without a failure. */
  #attempt = 0;
  /** Restarts in the whole run. */
  #restarts = 0;
  #healthy = 0;

  constructor(options: SupervisorOptions) {
    this.#o = options;
  }

  /** Restarts made so far. */
  get restarts(): number {
    return this.#restarts;
  }

  /** A step finished: after `healthySteps` of them in a row, the restart count starts again. */
  stepDone(): void {
    this.#healthy += 1;
    if (this.#healthy >= this.#o.settings.healthySteps) this.#attempt = 0;
  }

  /**
   * Handles the failure `error` of step `step`: a worker failure restarts the run (`restart.close`, a backoff,
   * `restart.build`, resolving with the step it resumed from), as many times as allowed; anything else is rethrown as
   * it is. Resolves with `null` (no restart made or counted) when the run's signal is aborted before or
   * during the restart: the run then ends at its last checkpoint, as a stop does.
   */
  async recover(error: unknown, step: number, restart: RestartSteps): Promise<number | null> {
    if (!(await this.#isWorkerFailure(error))) throw error;
    const { settings, notRestartable, name, signal } = this.#o;
    const aborted = (): boolean => signal?.aborted === true; // read afresh after each await
    let failure = error;
    // named before the parts are closed (closing ends every worker's connection); a failure while restarting is of
    // a fresh worker the run does not hold yet, and goes unnamed
    let who = this.#failedWorker();
    // another worker's error may come first (a collective broken by the dead rank): the event names the death itself
    const death = who?.worker.connection.failure;
    if (!isWorkerLoss(failure) && isWorkerLoss(death)) failure = death;
    for (;;) {
      if (aborted()) return this.#stopped(step);
      if (notRestartable !== undefined) {
        await this.#event("gave_up", step, failure, { attempt: null, backoffMs: null, resumeStep: null }, who);
        throw new RunWorkerLostError(`${name}: a worker failed and the run cannot restart it (${notRestartable})`, {
          restarts: this.#restarts,
          step,
          resumeWith: this.#resumeWith(),
          cause: failure,
        });
      }
      if (this.#attempt >= settings.maxRestarts) {
        await this.#event("gave_up", step, failure, { attempt: null, backoffMs: null, resumeStep: null }, who);
        throw new RunWorkerLostError(
          `${name}: gave up after ${String(this.#restarts)} restart(s) (supervision.maxRestarts = ${String(settings.maxRestarts)})`,
          { restarts: this.#restarts, step, resumeWith: this.#resumeWith(), cause: failure },
        );
      }
      const attempt = this.#attempt + 1;
      const backoffMs = Math.min(settings.maxBackoffMs, settings.backoffMs * 2 ** (attempt - 1));
      const planned = this.#failure("restart", step, failure, { attempt, backoffMs, resumeStep: null }, who);
      this.#o.log(`${name}: ${describe(planned)}`);
      await restart.close(); // the surviving workers are released now, not after the backoff
      await abortableSleep(backoffMs, signal);
      if (aborted()) return this.#stopped(step);
      let resumed: number;
      try {
        resumed = await restart.build();
      } catch (err) {
        // the start was aborted (the run is stopping; a Ray restart ends with the abort's own error): not a failure
        if (aborted()) return this.#stopped(step);
        // a worker lost (or not started) while restarting counts as one more failure; anything else ends the run
        if (!isWorkerLoss(err) && codeOf(err) !== "WORKER_START_FAILED") throw err;
        this.#counted(attempt);
        await this.#o.runDir.appendEvent(planned); // resumed from nothing: resumeStep stays null
        failure = err;
        who = undefined;
        continue;
      }
      this.#counted(attempt);
      await this.#o.runDir.appendEvent({ ...planned, resumeStep: resumed });
      this.#o.log(`${name}: restarted (attempt ${String(attempt)}), continuing from step ${String(resumed)}`);
      return resumed;
    }
  }

  /** A restart attempt was made: counts it, and the healthy steps start again. */
  #counted(attempt: number): void {
    this.#attempt = attempt;
    this.#restarts += 1;
    this.#healthy = 0;
  }

  /** The run was asked to stop during a restart: says so; the recovery resolves with `null`. */
  #stopped(step: number): null {
    this.#o.log(`${this.#o.name}: stopped while restarting after the failure at step ${String(step)}; the run ends at its last checkpoint`);
    return null;
  }

  /**
   * Records that generator worker `worker` was dropped while the others took its rows (the run goes on without it
   * until its next restart).
   */
  async generatorLost(step: number, worker: SupervisedWorker, error: unknown): Promise<void> {
    await this.#event("generator_failure", step, error, { attempt: null, backoffMs: null, resumeStep: null }, { worker, role: "generator" });
  }

  /** A worker's error, or any error while one of the run's workers is gone (its exit given a moment to be seen). */
  async #isWorkerFailure(error: unknown): Promise<boolean> {
    if (isWorkerLoss(error)) return true;
    if (this.#failedWorker() !== undefined) return true;
    await sleep(EXIT_GRACE_MS);
    return this.#failedWorker() !== undefined;
  }

  #failedWorker(): RoleWorker | undefined {
    return this.#o.workers().find((w) => !w.worker.connection.alive);
  }

  #resumeWith(): string {
    const { name, runDir } = this.#o;
    const command = name === "SFTTrainer" ? "sft" : "grpo";
    return `${name}.create(config, { resume: true }) with runDir ${JSON.stringify(runDir.path)}, or on the command line: posttrain ${command} --config <the run's config file> --resume`;
  }

  /** Writes the event of `error` to `events.jsonl` and logs its line. */
  async #event(
    kind: RunEventKind,
    step: number,
    error: unknown,
    restart: Pick<RunEvent, "attempt" | "backoffMs" | "resumeStep">,
    who: RoleWorker | undefined = this.#failedWorker(),
  ): Promise<void> {
    const event = this.#failure(kind, step, error, restart, who);
    await this.#o.runDir.appendEvent(event);
    this.#o.log(`${this.#o.name}: ${describe(event)}`);
  }

  /** The event of `error` (at this time, of worker `who`). */
  #failure(kind: RunEventKind, step: number, error: unknown, restart: Pick<RunEvent, "attempt" | "backoffMs" | "resumeStep">, who: RoleWorker | undefined): RunEvent {
    const died = findCause(error, (e): e is WorkerDiedError => e instanceof WorkerDiedError);
    const stderrTail = (died?.stderrTail ?? "").trimEnd().split("\n").slice(-STDERR_LINES).join("\n");
    const code = codeOf(error);
    return {
      time: new Date().toISOString(),
      kind,
      step,
      worker: who?.worker.name ?? null,
      role: who?.role ?? null,
      cause: typeof code === "string" ? code : error instanceof Error ? error.name : "UNKNOWN",
      exitCode: died?.exitCode ?? null,
      signal: died?.signal ?? null,
      stderrTail,
      message: error instanceof Error ? error.message.split("\n")[0]! : String(error),
      ...restart,
    };
  }
}

/** The `code` of an error, if it has a string one. */
function codeOf(error: unknown): string | undefined {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === "string" ? code : undefined;
}

/** The log line of an event. */
function describe(e: RunEvent): string {
  const who = e.worker === null ? "a worker" : `${e.worker}${e.role === null ? "" : ` (${e.role})`}`;
  const how = e.signal !== null ? `killed by ${e.signal}` : e.exitCode !== null ? `exited with code ${String(e.exitCode)}` : e.cause;
  const what =
    e.kind === "restart"
      ? `restarting the workers in ${String(e.backoffMs)} ms from the last checkpoint (attempt ${String(e.attempt)})`
      : e.kind === "generator_failure"
        ? "its rows go to the other generators until the next restart"
        : "giving up";
  return `${who} failed at step ${String(e.step)} (${how}): ${what}`;
}
