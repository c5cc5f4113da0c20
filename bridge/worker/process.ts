import type { ChildProcess } from "node:child_process";
import { createInterface } from "node:readline";
import { z } from "zod";
import { WorkerStartError } from "../errors.js";
import { signalGroup, spawnPythonModule } from "./os-process.js";
import type { LineTail } from "./stderr-tail.js";

/** How a worker's stderr is handled: kept as a tail for errors only, or also forwarded to this process's stderr. */
export type WorkerLogMode = "tail" | "inherit";

/** Options of {@link WorkerProcess.start}. */
export interface WorkerProcessOptions {
  /** Name used in messages, e.g. `"worker 0"`. */
  readonly name: string;
  /** Python interpreter with `posttrain_worker` installed. */
  readonly python: string;
  /** Arguments after `python -m posttrain_worker`. */
  readonly args: readonly string[];
  /** Extra environment variables. */
  readonly env?: Readonly<Record<string, string>>;
  /** Milliseconds to wait for the READY line (default 120 000: importing torch is slow on a cold disk). */
  readonly startTimeoutMs?: number;
  /** Stops waiting for READY and kills the process. */
  readonly signal?: AbortSignal;
  /** Default `"tail"`. */
  readonly log?: WorkerLogMode;
  /**
   * Written to the worker's stdin right after the spawn (the `--auth-stdin` line with the pool's secret and keys):
   * a private channel, unlike argv and the environment, which other processes of the user read in `/proc`.
   */
  readonly stdinLine?: string;
}

const ReadySchema = z.object({ endpoint: z.string(), pid: z.number().int(), protocolVersion: z.number().int() });

/** What the worker reported on its READY line. */
export type WorkerReady = z.infer<typeof ReadySchema>;

/** How a worker process ended. */
export interface WorkerExit {
  readonly exitCode: number | null;
  readonly signal: string | null;
  /** Set when the worker was lost with its node (a Ray node that left the cluster): the node's id and address. */
  readonly lostNode?: { readonly id: string; readonly address: string };
}

/**
 * What a `WorkerConnection` supervises: a worker's exit (which fails the connection with `WorkerDiedError`), a way
 * to kill it (hung or unresponsive worker) and its last stderr lines. {@link WorkerProcess} is one (a local child
 * process); a Ray-placed worker's handle is another (`launchRayWorkers`).
 */
export interface SupervisedWorker {
  /** Name used in messages, e.g. `"worker 0"`. */
  readonly name: string;
  /** What the worker reported when it was ready: its endpoint and pid. */
  readonly ready: WorkerReady;
  /** Resolves once the worker is gone. */
  readonly exited: Promise<WorkerExit>;
  /** The exit, once it has happened. */
  readonly exit: WorkerExit | undefined;
  /** Kills the worker (no-op once it has exited). */
  kill(signal?: NodeJS.Signals): void;
  /** Tells the worker to exit when its stdin is the client's to close (a local child); else a no-op. */
  closeStdin(): void;
  /** The last lines the worker wrote to stderr. */
  stderrTail(): string;
}

const READY_PREFIX = "POSTTRAIN_READY ";


/**
 * One `python -m posttrain_worker` child process: spawn, wait for its READY line, keep its stderr tail,
 * report its exit. Its stdin is a pipe the worker watches: when this Node process dies, the worker exits.
 */
export class WorkerProcess implements SupervisedWorker {
  /**
   * Resolves soon after the process has exited: at once when its pipes close with it, else after
   * a short drain of reading what is left of its stderr (a grandchild may hold the pipes open).
   */
  readonly exited: Promise<WorkerExit>;
  private exitInfo: WorkerExit | undefined;

  private constructor(
    readonly name: string,
    private readonly child: ChildProcess,
    private readonly tail: LineTail,
    readonly ready: WorkerReady,
    exited: Promise<WorkerExit>,
  ) {
    this.exited = exited.then((info) => {
      this.exitInfo = info;
      // what the worker started and left running (a vLLM engine of a worker that crashed) is still in its group
      signalGroup(child, "SIGKILL");
      return info;
    });
  }

  /** Spawns the worker and resolves once it has bound its socket and printed READY. */
  static start(options: WorkerProcessOptions): Promise<WorkerProcess> {
    const { child, tail, exited } = spawnPythonModule(options.python, "posttrain_worker", options.args, {
      ...(options.env !== undefined ? { env: options.env } : {}),
      ...(options.log === "inherit" ? { forwardAs: options.name } : {}),
    });
    // the stdin pipe also ends the worker when this process dies, whatever its process group
    if (options.stdinLine !== undefined) child.stdin?.write(options.stdinLine);

    return new Promise<WorkerProcess>((resolve, reject) => {
      let settled = false;
      const timeoutMs = options.startTimeoutMs ?? 120_000;
      const finish = (error: Error | undefined, ready?: WorkerReady): void => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        options.signal?.removeEventListener("abort", onAbort);
        if (error !== undefined || ready === undefined) {
          signalGroup(child, "SIGKILL");
          reject(error ?? new WorkerStartError(`${options.name}: no READY line`));
        } else {
          resolve(new WorkerProcess(options.name, child, tail, ready, exited));
        }
      };
      const onAbort = (): void => {
        finish(new WorkerStartError(`${options.name}: start aborted`, tail.text()));
      };
      const timer = setTimeout(() => {
        finish(new WorkerStartError(`${options.name}: not ready after ${timeoutMs} ms`, tail.text()));
      }, timeoutMs);
      options.signal?.addEventListener("abort", onAbort, { once: true });
      if (options.signal?.aborted === true) onAbort();

      child.once("error", (err) => {
        finish(
          new WorkerStartError(
            `${options.name}: could not run ${options.python} (${err.message}); run \`npx posttrain setup\` ` +
              "(`npm run bootstrap` in a checkout) or set POSTTRAIN_PYTHON to a Python with posttrain_worker installed",
          ),
        );
      });
      void exited.then(({ exitCode, signal }) => {
        const how = signal !== null ? `was killed by ${signal}` : `exited with code ${String(exitCode)}`;
        const missing = tail.text().includes("No module named posttrain_worker")
          ? ` (${options.python} has no posttrain_worker: run \`npx posttrain setup\` in your project ` +
            "(`npm run bootstrap` in a posttrain checkout), or set POSTTRAIN_PYTHON to a Python that has it)"
          : "";
        finish(new WorkerStartError(`${options.name}: ${how} before it was ready${missing}`, tail.text()));
      });
      if (child.stdout !== null) {
        const lines = createInterface({ input: child.stdout });
        lines.on("line", (line) => {
          if (!settled && line.startsWith(READY_PREFIX)) {
            let parsed: WorkerReady;
            try {
              parsed = ReadySchema.parse(JSON.parse(line.slice(READY_PREFIX.length)));
            } catch (err) {
              finish(new WorkerStartError(`${options.name}: malformed READY line ${JSON.stringify(line)} (${String(err)})`));
              return;
            }
            finish(undefined, parsed);
            return;
          }
          // Anything else a worker prints to stdout is log output.
          tail.push(`${line}\n`, options.log === "inherit" ? (l) => process.stderr.write(`[${options.name}] ${l}\n`) : undefined);
        });
      }
    });
  }

  /** The OS process id. */
  get pid(): number {
    return this.ready.pid;
  }

  /** The exit, once it has happened. */
  get exit(): WorkerExit | undefined {
    return this.exitInfo;
  }

  /** The last lines the worker wrote to stderr (and stray stdout). */
  stderrTail(): string {
    return this.tail.text();
  }

  /**
   * Sends a signal to the worker's process group: the worker and the processes it started (a vLLM engine, say),
   * which a signal to the worker alone would leave running. No-op once it has exited.
   */
  kill(signal: NodeJS.Signals = "SIGTERM"): void {
    if (this.exitInfo === undefined) signalGroup(this.child, signal);
  }

  /** Closes the worker's stdin, which tells it to exit. */
  closeStdin(): void {
    this.child.stdin?.end();
  }
}
