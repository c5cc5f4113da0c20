/**
 * Typed errors. Every error posttrain throws is a {@link PosttrainError} with a stable `code`,
 * so callers can branch on `err.code` (or `instanceof`) instead of parsing messages.
 */
export class PosttrainError extends Error {
  /** Stable machine-readable code, e.g. `"WORKER_DIED"` or `"KEY_NOT_FOUND"`. */
  readonly code: string;

  constructor(code: string, message: string, options?: { cause?: unknown }) {
    super(message, options);
    this.code = code;
    this.name = new.target.name;
  }
}

/** Bytes that are not a valid posttrain Arrow stream or raw tensor frame. */
export class WireFormatError extends PosttrainError {
  constructor(message: string, options?: { cause?: unknown }) {
    super("WIRE_FORMAT", message, options);
  }
}

/** A message that breaks the envelope protocol (bad envelope, version mismatch, unexpected reply). */
export class ProtocolError extends PosttrainError {
  constructor(message: string, options?: { cause?: unknown }) {
    super("PROTOCOL", message, options);
  }
}

/** Error codes a worker may answer with (docs/protocol.md). */
export type WorkerErrorCode =
  | "BAD_ENVELOPE"
  | "UNSUPPORTED_VERSION"
  | "UNKNOWN_METHOD"
  | "BAD_ARGUMENTS"
  | "BAD_PAYLOAD"
  | "PAYLOAD_TOO_LARGE"
  | "UNAUTHENTICATED"
  | "OVERLOADED"
  | "CANCELLED"
  | "INTERNAL"
  | (string & {});

/** The worker received the request and answered with an error; the worker is still serving. */
export class WorkerError extends PosttrainError {
  /** The method that failed. */
  readonly method: string;
  /** Extra facts from the worker (for `INTERNAL`: `type` and `traceback`). */
  readonly details: Readonly<Record<string, unknown>>;

  constructor(code: WorkerErrorCode, method: string, message: string, details: Record<string, unknown> = {}) {
    super(code, `${method}: ${message}`);
    this.method = method;
    this.details = details;
  }
}

/**
 * The worker already holds as many compute requests as its `--max-in-flight` allows (running and queued, over all
 * its clients): this request was not queued and can be sent again once some are answered. The worker is serving.
 *
 * ```ts
 * try { await worker.call("compute_for", { seconds: 1 }); } catch (err) { if (err instanceof WorkerOverloadedError) retryLater(); }
 * ```
 */
export class WorkerOverloadedError extends WorkerError {
  /** The worker's limit on compute requests in flight (`details.maxInFlight`), when it said. */
  readonly maxInFlight: number | undefined;

  constructor(method: string, message: string, details: Record<string, unknown> = {}) {
    super("OVERLOADED", method, message, details);
    this.maxInFlight = typeof details.maxInFlight === "number" ? details.maxInFlight : undefined;
  }
}

/** A request got no reply within its timeout. */
export class RequestTimeoutError extends PosttrainError {
  constructor(method: string, timeoutMs: number) {
    super("TIMEOUT", `${method}: no reply within ${timeoutMs} ms`);
  }
}

/** A request was cancelled through its AbortSignal. */
export class RequestAbortedError extends PosttrainError {
  constructor(method: string, reason?: unknown) {
    super("ABORTED", `${method}: aborted${reason instanceof Error ? ` (${reason.message})` : ""}`, { cause: reason });
  }
}

/** The connection was closed (by `close()`) while the request was pending, or before it was sent. */
export class ConnectionClosedError extends PosttrainError {
  constructor(message: string) {
    super("CONNECTION_CLOSED", message);
  }
}

/** The worker process exited; every request pending on it is rejected with this error. */
export class WorkerDiedError extends PosttrainError {
  /** Exit code, or `null` when it was killed by a signal. */
  readonly exitCode: number | null;
  /** The signal that killed it, or `null`. */
  readonly signal: string | null;
  /** The last lines the worker wrote to stderr. */
  readonly stderrTail: string;

  /** The node the worker was lost with (a Ray worker whose node left the cluster), else `undefined`. */
  readonly lostNode: { readonly id: string; readonly address: string } | undefined;

  constructor(
    workerName: string,
    exitCode: number | null,
    signal: string | null,
    stderrTail: string,
    options: { lostNode?: { readonly id: string; readonly address: string } } = {},
  ) {
    const lost = options.lostNode;
    const how =
      lost !== undefined
        ? `was lost with its node ${lost.id} (${lost.address}), which left the Ray cluster`
        : signal !== null
          ? `was killed by ${signal}`
          : `exited with code ${String(exitCode)}`;
    const tail = stderrTail.trim() === "" ? " (no stderr output)" : `; last stderr lines:\n${stderrTail}`;
    super("WORKER_DIED", `worker ${workerName} ${how}${tail}`);
    this.exitCode = exitCode;
    this.signal = signal;
    this.stderrTail = stderrTail;
    this.lostNode = lost;
  }
}

/** The worker process could not be started or did not become ready. */
export class WorkerStartError extends PosttrainError {
  readonly stderrTail: string;

  constructor(message: string, stderrTail = "") {
    super("WORKER_START_FAILED", stderrTail.trim() === "" ? message : `${message}; last stderr lines:\n${stderrTail}`);
    this.stderrTail = stderrTail;
  }
}

/** The worker stopped answering heartbeats while its process is still alive. */
export class WorkerUnresponsiveError extends PosttrainError {
  constructor(workerName: string, silentMs: number) {
    super("WORKER_UNRESPONSIVE", `worker ${workerName} answered no heartbeat for ${silentMs} ms`);
  }
}

/**
 * A call outlived its watchdog (`RequestOptions.watchdogMs`, or the connection's `watchdogMs`): the worker's compute
 * thread is taken to have stopped making progress, so the connection failed with this error (every pending request
 * is rejected with it) and the worker process was killed. Unlike `RequestTimeoutError`, which gives up on one
 * request and leaves the worker serving, this ends the worker; a supervisor restarts it.
 */
export class WorkerHungError extends PosttrainError {
  /** The method whose call outlived the watchdog. */
  readonly method: string;
  /** The watchdog limit, in ms. */
  readonly limitMs: number;

  constructor(workerName: string, method: string, limitMs: number) {
    super(
      "WORKER_HUNG",
      `${workerName}: ${method} got no reply within its watchdog limit of ${limitMs} ms; the worker was ` +
        "taken to be hung and killed",
    );
    this.method = method;
    this.limitMs = limitMs;
  }
}

/**
 * A request too large for the worker, refused before anything was sent: its payload frames add up to more than the
 * worker's `maxPayloadBytes`, or its envelope (the JSON `args`) is over the worker's 1 MiB envelope limit. Sending
 * it would get a `PAYLOAD_TOO_LARGE` or `BAD_ENVELOPE` reply, or the connection cut by the worker's socket
 * (`ZMQ_MAXMSGSIZE`).
 */
export class PayloadTooLargeError extends PosttrainError {
  /** The size that is over the limit, in bytes. */
  readonly sizeBytes: number;
  /** The limit, in bytes. */
  readonly limitBytes: number;

  constructor(message: string, sizeBytes: number, limitBytes: number) {
    super("PAYLOAD_TOO_LARGE", message);
    this.sizeBytes = sizeBytes;
    this.limitBytes = limitBytes;
  }
}

/**
 * Ray cannot be used: the Python that runs the Ray driver has no `ray` package. The message says what to install.
 *
 * ```ts
 * try { await launchRayWorkers(options); } catch (err) { if (err instanceof RayUnavailableError) console.error(err.message); }
 * ```
 */
export class RayUnavailableError extends PosttrainError {
  constructor(message: string) {
    super("RAY_UNAVAILABLE", message);
  }
}

/**
 * `posttrain setup` could not build the workers' Python environment: no Python >= 3.10 with the venv module
 * (`PYTHON_NOT_FOUND`, the message says what to install) or a step (venv, pip) failed (`SETUP_STEP_FAILED`, the
 * message names the command and its exit status; pip's own output is above it on stderr).
 *
 * ```ts
 * if (err instanceof WorkerEnvSetupError && err.code === "PYTHON_NOT_FOUND") console.error(err.message); // what to install
 * ```
 */
export class WorkerEnvSetupError extends PosttrainError {
  /** Which kind of failure: `PYTHON_NOT_FOUND` or `SETUP_STEP_FAILED`. */
  declare readonly code: "PYTHON_NOT_FOUND" | "SETUP_STEP_FAILED";
}

/**
 * No Python environment for the workers was found (code `PYTHON_ENV_MISSING`): `$POSTTRAIN_VENV` names a folder
 * without an interpreter, or none of the places `resolvePython` looks in has one. The message lists them and says to
 * run `npx posttrain setup`.
 *
 * ```ts
 * try { resolvePython(); } catch (err) { if (err instanceof PythonEnvMissingError) console.error(err.searched); }
 * ```
 */
export class PythonEnvMissingError extends PosttrainError {
  /** The interpreter paths that were looked for, in order. */
  readonly searched: readonly string[];

  constructor(message: string, searched: readonly string[]) {
    super("PYTHON_ENV_MISSING", message);
    this.searched = searched;
  }
}

/**
 * The Ray cluster cannot place the workers: it could never satisfy the placement (`PLACEMENT_INFEASIBLE`, reported
 * before waiting) or did not within `placementTimeoutMs` (`PLACEMENT_TIMEOUT`). The message names what was asked and
 * what the cluster has; `asked` and `available` hold the same facts as the driver reported them.
 *
 * ```ts
 * try { await WorkerPool.ray(options); } catch (err) { if (err instanceof PlacementError) console.error(err.asked, err.available); }
 * ```
 */
export class PlacementError extends PosttrainError {
  /** What was asked: one entry per bundle (worker), as the driver reported it. */
  readonly asked: readonly unknown[];
  /** What the cluster has available, per resource (and per node in `nodes`, when reported). */
  readonly available: Readonly<Record<string, unknown>>;
  /** The cluster's nodes and their resources, when reported. */
  readonly nodes: readonly unknown[];

  constructor(
    code: "PLACEMENT_INFEASIBLE" | "PLACEMENT_TIMEOUT",
    message: string,
    facts: { asked?: readonly unknown[]; available?: Readonly<Record<string, unknown>>; nodes?: readonly unknown[] } = {},
  ) {
    super(code, message);
    this.asked = facts.asked ?? [];
    this.available = facts.available ?? {};
    this.nodes = facts.nodes ?? [];
  }
}

/**
 * Codes of {@link RayDriverError}.
 *
 * ```ts
 * const retryable = (code: RayDriverErrorCode) => code === "RESTART_TIMEOUT";
 * ```
 */
export type RayDriverErrorCode =
  | "RAY_DRIVER_FAILED"
  | "RAY_DRIVER_INTERNAL"
  | "RAY_CONNECT_FAILED"
  | "RESTARTS_EXHAUSTED"
  | "RESTART_TIMEOUT";

/**
 * The Ray driver process failed: it died or printed something that is not the protocol (`RAY_DRIVER_FAILED`, with its
 * stderr tail), an op raised an unexpected error inside a driver that keeps serving (`RAY_DRIVER_INTERNAL`: a bug
 * or a Ray API failure; the message has the Python exception), could not connect to the cluster
 * (`RAY_CONNECT_FAILED`), or could not bring a worker back (`RESTARTS_EXHAUSTED`: its actor is dead for good;
 * `RESTART_TIMEOUT`).
 *
 * ```ts
 * try { await pool.restart(); } catch (err) { if (err instanceof RayDriverError && err.code === "RESTARTS_EXHAUSTED") await pool.close(); }
 * ```
 */
export class RayDriverError extends PosttrainError {
  /** The last lines the driver wrote to stderr, when it died. */
  readonly stderrTail: string;

  constructor(code: RayDriverErrorCode, message: string, stderrTail = "") {
    super(code, stderrTail.trim() === "" ? message : `${message}; last driver stderr lines:\n${stderrTail}`);
    this.stderrTail = stderrTail;
  }
}

/** An option or argument that does not fit; the message names the field and what was expected. */
export class InvalidArgumentError extends PosttrainError {
  constructor(message: string) {
    super("INVALID_ARGUMENT", message);
  }
}

/**
 * The first error in `error`'s `cause` chain (itself first, at most 8 deep) that `is` accepts.
 *
 * ```ts
 * const died = findCause(err, (e): e is WorkerDiedError => e instanceof WorkerDiedError);
 * ```
 */
export function findCause<T>(error: unknown, is: (e: unknown) => e is T): T | undefined {
  for (let e = error, depth = 0; e instanceof Error && depth < 8; e = e.cause, depth++) if (is(e)) return e;
  return undefined;
}

/** The error codes of a worker that is gone: its process died, or it answers nothing any more. */
export const WORKER_LOSS_CODES: ReadonlySet<string> = new Set(["WORKER_DIED", "WORKER_UNRESPONSIVE", "WORKER_HUNG"]);

/**
 * Whether `error` (or an error in its `cause` chain) says a worker is gone: `WorkerDiedError`,
 * `WorkerUnresponsiveError` or `WorkerHungError` (codes {@link WORKER_LOSS_CODES}). Such a worker answers nothing
 * more: what it held must be rebuilt elsewhere.
 *
 * ```ts
 * if (isWorkerLoss(err)) restartWorkers();
 * ```
 */
export function isWorkerLoss(error: unknown): boolean {
  const lost = (e: unknown): e is Error => {
    const code = (e as { code?: unknown }).code;
    return typeof code === "string" && WORKER_LOSS_CODES.has(code);
  };
  return findCause(error, lost) !== undefined;
}
