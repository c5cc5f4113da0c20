/**
 * `RunTrackers`: the experiment-tracker logger process of one run (`python -m posttrain_worker.tracking`, JSON lines
 * on its stdin; protocol in python_worker/posttrain_worker/tracking/loop.py). The run hands it each step's record
 * and samples after they are in `metrics.jsonl`; it writes them to TensorBoard, W&B, MLflow and trackio with each
 * tracker's own library.
 *
 * Failure policy (docs/trackers.md): a missing package or a tracker that cannot open its run fails `create`; once the
 * run trains, the trackers never stop it. A tracker failing to log is dropped by the logger (the others go on), a
 * logger process that dies is reported once through the run's log and the run goes on without trackers:
 * `metrics.jsonl` is the record the run resumes from and is written first, whatever the trackers do.
 */
import type { ChildProcess } from "node:child_process";
import { createInterface } from "node:readline";
import { z } from "zod";
import { resolvePython } from "../../../bridge/index.js";
import { signalGroup, spawnPythonModule, waitFor, type SpawnedPython } from "../../../bridge/worker/os-process.js";
import type { SampleRecord } from "../../reports/index.js";
import type { StepRecord } from "../records.js";
import type { TrackerName } from "./config.js";
import { TrackerError, TrackerUnavailableError } from "./errors.js";
import { trackerMetrics } from "./metric-names.js";

/** What the logger process needs to open the tracker runs. */
export interface RunTrackersOptions {
  /** The trackers to write to (at least one). */
  readonly trackers: readonly TrackerName[];
  /** Their folder (absolute): each writes in `<dir>/<tracker>`. */
  readonly dir: string;
  /** The project the tracker runs go in (W&B project, MLflow experiment, trackio project). */
  readonly project: string;
  /** The name of the tracker runs (the run directory's name unless configured). */
  readonly runName: string;
  /** Whether the run resumes: W&B, MLflow and trackio continue the run they logged to before. */
  readonly resume: boolean;
  /** The resolved run config, logged as hyperparameters. */
  readonly config: unknown;
  /** Gets the warnings (a tracker dropped, the process lost). */
  readonly log: (line: string) => void;
  /** The Python interpreter (default: the workers' one, `resolvePython()`). */
  readonly python?: string;
  /** Waits at most this long for the trackers to open their runs (default 300 000 ms). */
  readonly openTimeoutMs?: number;
}

/** How long `close()` waits for the trackers to flush and end their runs before stopping the process. */
const CLOSE_TIMEOUT_MS = 60_000;
/** How long `flush()` (the end of each `run()`) waits for the logger to have handed over every step. */
const FLUSH_TIMEOUT_MS = 30_000;
const DEFAULT_OPEN_TIMEOUT_MS = 300_000;

const ReplySchema = z.discriminatedUnion("type", [
  z.object({ type: z.literal("checked") }),
  z.object({ type: z.literal("ready"), trackers: z.array(z.string()) }),
  z.object({ type: z.literal("flushed") }),
  z.object({ type: z.literal("closed") }),
  z.object({ type: z.literal("warning"), tracker: z.string().nullable(), message: z.string() }),
  z.object({ type: z.literal("error"), code: z.string(), message: z.string(), details: z.record(z.string(), z.unknown()) }),
]);
type Reply = z.infer<typeof ReplySchema>;
type WaitedReply = "checked" | "ready" | "flushed";

/** JSON without non-finite numbers (they become `null`, as in `metrics.jsonl`). */
function jsonLine(value: unknown): string {
  return `${JSON.stringify(value, (_key, v: unknown) => (typeof v === "number" && !Number.isFinite(v) ? null : v))}\n`;
}

/** The logger process of a run (see the module notes). */
export class RunTrackers {
  readonly #process: SpawnedPython;
  readonly #options: RunTrackersOptions;
  /** Replies waited for (`checked`, `ready`), in order. */
  readonly #waiters: { readonly type: WaitedReply; resolve(): void; reject(error: Error): void }[] = [];
  #exited = false;
  #closing = false;
  #opened = false;
  /** The last step handed over (for the message when the process is lost). */
  #lastStep: number | null = null;
  #closed: Promise<void> | undefined;

  private constructor(spawned: SpawnedPython, options: RunTrackersOptions) {
    this.#process = spawned;
    this.#options = options;
    const lines = createInterface({ input: spawned.child.stdout! });
    lines.on("line", (line) => {
      this.#onLine(line);
    });
    void spawned.exited.then(({ exitCode, signal }) => {
      this.#onExit(exitCode, signal);
    });
  }

  /**
   * Starts the logger process and resolves once it found every tracker's packages (a
   * {@link TrackerUnavailableError} naming the extra to install when it did not). The tracker runs are opened by
   * {@link open}, once the run knows its start step.
   */
  static async start(options: RunTrackersOptions): Promise<RunTrackers> {
    const spawned = spawnPythonModule(resolvePython(options.python), "posttrain_worker.tracking", [], {});
    const trackers = new RunTrackers(spawned, options);
    const checked = trackers.#waitFor("checked");
    trackers.#send({
      type: "start",
      trackers: options.trackers,
      dir: options.dir,
      project: options.project,
      runName: options.runName,
      resume: options.resume,
      config: options.config,
    });
    try {
      await checked;
    } catch (err) {
      await trackers.close();
      throw err;
    }
    return trackers;
  }

  /** The process (tests kill it to check that a run goes on without it). @internal */
  get child(): ChildProcess {
    return this.#process.child;
  }

  /** Whether the process is gone (closed, or died). */
  get exited(): boolean {
    return this.#exited;
  }

  /**
   * Opens the tracker runs, the run continuing after `startStep` (0: a fresh run); rejects with a
   * {@link TrackerError} (the process then stopped) when a tracker cannot open its run.
   */
  async open(startStep: number): Promise<void> {
    const ready = this.#waitFor("ready");
    this.#send({ type: "open", startStep });
    const timeoutMs = this.#options.openTimeoutMs ?? DEFAULT_OPEN_TIMEOUT_MS;
    try {
      if (!(await waitFor(ready, timeoutMs))) throw new TrackerError(null, `loggers: the trackers did not open their runs within ${String(timeoutMs)} ms`);
      await ready;
      this.#opened = true;
    } catch (err) {
      await this.close();
      throw err;
    }
  }

  /** Hands a step's record (under the trackers' names) and its samples to the trackers; never throws. */
  record(record: StepRecord, samples: readonly SampleRecord[]): void {
    if (!this.#opened || this.#exited || this.#closing) return;
    this.#lastStep = record.step;
    this.#send({ type: "metrics", step: record.step, values: trackerMetrics(record) });
    if (samples.length > 0) this.#send({ type: "samples", step: record.step, rows: samples });
  }

  /**
   * Resolves once the logger has handed every step recorded so far to the tracker libraries (a `flush` message
   * answered in order), waiting at most 30 s; never rejects (a lost process was already reported). The trackers stay
   * open, so a later `run()` of the same trainer keeps logging.
   */
  async flush(): Promise<void> {
    if (!this.#opened || this.#exited || this.#closing) return;
    const flushed = this.#waitFor("flushed");
    this.#send({ type: "flush" });
    if (!(await waitFor(flushed, FLUSH_TIMEOUT_MS))) {
      this.#options.log(`trackers: the logger process did not catch up within ${String(FLUSH_TIMEOUT_MS)} ms; it goes on in the background`);
    }
  }

  /** Lets the trackers flush and end their runs, then ends the process (stopped after a minute); once. */
  close(): Promise<void> {
    this.#closed ??= this.#close();
    return this.#closed;
  }

  async #close(): Promise<void> {
    this.#closing = true;
    const { child, exited } = this.#process;
    if (!this.#exited) {
      this.#send({ type: "close" });
      child.stdin?.end();
      if (!(await waitFor(exited, CLOSE_TIMEOUT_MS))) {
        this.#options.log(`trackers: the logger process did not finish within ${String(CLOSE_TIMEOUT_MS)} ms; stopping it`);
        signalGroup(child, "SIGTERM");
        if (!(await waitFor(exited, 5000))) signalGroup(child, "SIGKILL");
        await exited;
      }
    }
    // helpers a tracker library left in the logger's process group go with it (wandb-core starts its own
    // session, so it is not among them: W&B's own close ends it)
    signalGroup(child, "SIGKILL");
  }

  #send(message: object): void {
    const stdin = this.#process.child.stdin;
    if (stdin === null || !stdin.writable) return;
    stdin.write(jsonLine(message));
  }

  #waitFor(type: WaitedReply): Promise<void> {
    return new Promise((resolve, reject) => {
      if (this.#exited) reject(this.#lostError());
      else this.#waiters.push({ type, resolve, reject });
    });
  }

  #onLine(line: string): void {
    let reply: Reply;
    try {
      reply = ReplySchema.parse(JSON.parse(line));
    } catch {
      this.#options.log(`trackers: unreadable line from the logger process: ${line.slice(0, 200)}`);
      return;
    }
    if (reply.type === "warning") {
      this.#options.log(`trackers: ${reply.message}`);
    } else if (reply.type === "error") {
      this.#failWaiters(errorOf(reply));
    } else if (reply.type !== "closed") {
      const index = this.#waiters.findIndex((w) => w.type === reply.type);
      if (index >= 0) this.#waiters.splice(index, 1)[0]!.resolve();
    }
  }

  #onExit(exitCode: number | null, signal: NodeJS.Signals | null): void {
    this.#exited = true;
    this.#failWaiters(this.#lostError());
    if (this.#opened && !this.#closing) {
      const after = this.#lastStep === null ? "before the first step" : `after step ${String(this.#lastStep)}`;
      this.#options.log(
        `trackers: the logger process exited (${signal ?? `code ${String(exitCode)}`}) ${after}; training goes on, ` +
          `metrics.jsonl stays complete, the trackers miss the later steps. Its last stderr lines:\n${this.#process.tail.text()}`,
      );
    }
  }

  #failWaiters(error: Error): void {
    for (const waiter of this.#waiters.splice(0)) waiter.reject(error);
  }

  #lostError(): TrackerError {
    const { exitCode, signalCode } = this.#process.child;
    const how = signalCode ?? `code ${String(exitCode)}`;
    return new TrackerError(null, `loggers: the tracker logger process exited (${how}) before its trackers were ready. Its last stderr lines:\n${this.#process.tail.text()}`);
  }
}

/** The error of an `error` reply. */
function errorOf(reply: Extract<Reply, { type: "error" }>): Error {
  const tracker = typeof reply.details.tracker === "string" ? reply.details.tracker : null;
  if (reply.code === "TRACKER_UNAVAILABLE" && tracker !== null) {
    const missing = Array.isArray(reply.details.missing) ? reply.details.missing.map(String) : [];
    // the logger's own hint (tracking/errors.py): one wording of how to install the extra
    const install = typeof reply.details.install === "string" ? reply.details.install : "npx posttrain setup --extras trackers";
    return new TrackerUnavailableError(tracker, missing, reply.message, install);
  }
  return new TrackerError(tracker, reply.message);
}
