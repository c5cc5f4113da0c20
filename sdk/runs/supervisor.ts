/**
 * `Supervisor`: what a whole run does when one of its workers dies or stops answering (TorchTitan / torchft style:
 * the run owns its workers). It tells a worker failure from any other error, writes an event to `events.jsonl` (and a
 * line to the log), waits with exponential backoff, has the run rebuild its parts from the last checkpoint on fresh
 * workers, and gives up after `supervision.maxRestarts` restarts in a row with a `RunWorkerLostError` that says how
 * to resume. See docs/trainers.md, "Supervision and restarts".
 */
import type { z } from "zod";
import { WorkerDiedError } from "../../bridge/errors.js";
import { isWorkerLoss } from "../collectors/generator-pool.js";
import type { RunEvent, RunEventKind } from "../reports/index.js";
import type { WorkerClient } from "../workers/client.js";
import type { SupervisionConfigSchema } from "./config-blocks.js";
import { RunWorkerLostError } from "./errors.js";
import type { RunDirectory } from "./run-directory.js";

/** The resolved `supervision` block of a run config. */
export type SupervisionSettings = z.output<typeof SupervisionConfigSchema>;

/** A worker of the run and its role (`"trainer"`, `"generator"`, `"reference"`). */
export interface RoleWorker {
  readonly worker: WorkerClient;
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
  /** The run's workers now, with their roles (to name the one that failed). */
  workers(): readonly RoleWorker[];
}

/** How long a worker's exit takes to reach its connection after another worker's call failed because of it (ms). */
const EXIT_GRACE_MS = 300;

/** Lines of a worker's stderr kept in an event. */
const STDERR_LINES = 12;

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

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
   * Handles the failure `error` of step `step`: a worker failure restarts the run with `rebuild` (which closes the
   * run's parts, starts fresh workers and resumes from the last checkpoint, resolving with its step), after a backoff,
   * as many times as allowed; anything else is rethrown as it is.
   */
  async recover(error: unknown, step: number, rebuild: () => Promise<number>): Promise<number> {
    if (!(await this.#isWorkerFailure(error))) throw error;
    let failure = error;
    for (;;) {
      const { settings, notRestartable, name } = this.#o;
      if (notRestartable !== undefined) {
        await this.#event("gave_up", step, failure, { attempt: null, backoffMs: null, resumeStep: null });
        throw new RunWorkerLostError(`${name}: a worker failed and the run cannot restart it (${notRestartable})`, {
          restarts: this.#restarts,
          step,
          resumeWith: this.#resumeWith(),
          cause: failure,
        });
      }
      if (this.#attempt >= settings.maxRestarts) {
        await this.#event("gave_up", step, failure, { attempt: null, backoffMs: null, resumeStep: null });
        throw new RunWorkerLostError(
          `${name}: gave up after ${String(this.#restarts)} restart(s) (supervision.maxRestarts = ${String(settings.maxRestarts)})`,
          { restarts: this.#restarts, step, resumeWith: this.#resumeWith(), cause: failure },
        );
      }
      this.#attempt += 1;
      this.#restarts += 1;
      this.#healthy = 0;
      const backoffMs = Math.min(settings.maxBackoffMs, settings.backoffMs * 2 ** (this.#attempt - 1));
      const resumeStep = (await this.#o.runDir.latestCheckpoint())?.step ?? 0;
      await this.#event("restart", step, failure, { attempt: this.#attempt, backoffMs, resumeStep });
      await sleep(backoffMs);
      try {
        const resumed = await rebuild();
        this.#o.log(`${name}: restarted (attempt ${String(this.#attempt)}), continuing from step ${String(resumed)}`);
        return resumed;
      } catch (err) {
        // a worker lost (or not started) while restarting counts as one more failure; anything else ends the run
        if (!isWorkerLoss(err) && (err as { code?: unknown } | null)?.code !== "WORKER_START_FAILED") throw err;
        failure = err;
      }
    }
  }

  /**
   * Records that generator worker `worker` was dropped while the others took its rows (the run goes on without it
   * until its next restart).
   */
  async generatorLost(step: number, worker: WorkerClient, error: unknown): Promise<void> {
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

  async #event(
    kind: RunEventKind,
    step: number,
    error: unknown,
    restart: Pick<RunEvent, "attempt" | "backoffMs" | "resumeStep">,
    who: RoleWorker | undefined = this.#failedWorker(),
  ): Promise<void> {
    const died = findCause(error, (e): e is WorkerDiedError => e instanceof WorkerDiedError);
    const stderrTail = (died?.stderrTail ?? "").trimEnd().split("\n").slice(-STDERR_LINES).join("\n");
    const code = (error as { code?: unknown } | null)?.code;
    const event: RunEvent = {
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
    await this.#o.runDir.appendEvent(event);
    this.#o.log(`${this.#o.name}: ${describe(event)}`);
  }
}

/** The first error in `error`'s cause chain that `is` accepts. */
function findCause<T>(error: unknown, is: (e: unknown) => e is T): T | undefined {
  for (let e = error, depth = 0; e instanceof Error && depth < 8; e = e.cause, depth++) if (is(e)) return e;
  return undefined;
}

/** The log line of an event. */
function describe(e: RunEvent): string {
  const who = e.worker === null ? "a worker" : `${e.worker}${e.role === null ? "" : ` (${e.role})`}`;
  const how = e.signal !== null ? `killed by ${e.signal}` : e.exitCode !== null ? `exited with code ${String(e.exitCode)}` : e.cause;
  const what =
    e.kind === "restart"
      ? `restarting the workers in ${String(e.backoffMs)} ms from the checkpoint of step ${String(e.resumeStep)} (attempt ${String(e.attempt)})`
      : e.kind === "generator_failure"
        ? "its rows go to the other generators until the next restart"
        : "giving up";
  return `${who} failed at step ${String(e.step)} (${how}): ${what}`;
}
