/**
 * Checks and conversions shared by every way of starting workers (`launchLocalWorkers`, `launchRayWorkers`): the
 * worker arguments every worker gets, the pool keys, and the connection options passed through.
 */
import { resolve } from "node:path";
import { InvalidArgumentError } from "../errors.js";
import type { ConnectionOptions } from "./connection.js";
import { PoolKeysSchema, type PoolKeys } from "./keys.js";

/** The options that become worker command-line arguments. */
export interface WorkerArgOptions {
  readonly maxPayloadBytes?: number;
  readonly maxInFlight?: number;
  readonly extensions?: readonly string[];
}

/**
 * `--max-payload-bytes`, `--max-in-flight` and one `--extension <absolute path>` per extension, after checking each
 * option (an `InvalidArgumentError` naming the option otherwise). Defaults: 4 GiB, 64, none.
 */
export function workerArgs(options: WorkerArgOptions): string[] {
  const maxPayloadBytes = options.maxPayloadBytes ?? 4 * 1024 ** 3;
  if (!Number.isSafeInteger(maxPayloadBytes) || maxPayloadBytes < 1) {
    throw new InvalidArgumentError(`maxPayloadBytes: expected a positive integer, got ${String(maxPayloadBytes)}`);
  }
  const maxInFlight = options.maxInFlight ?? 64;
  if (!Number.isSafeInteger(maxInFlight) || maxInFlight < 1) {
    throw new InvalidArgumentError(`maxInFlight: expected a positive integer, got ${String(maxInFlight)}`);
  }
  const extensions: unknown = options.extensions ?? [];
  if (!Array.isArray(extensions) || extensions.some((e) => typeof e !== "string" || e === "")) {
    throw new InvalidArgumentError(`extensions: expected an array of Python file paths, got ${JSON.stringify(extensions)}`);
  }
  return [
    "--max-payload-bytes",
    String(maxPayloadBytes),
    "--max-in-flight",
    String(maxInFlight),
    // Absolute: the worker's working directory is not this process's (a Ray actor's is Ray's).
    ...(extensions as readonly string[]).flatMap((path) => ["--extension", resolve(path)]),
  ];
}

/** `keys` checked field by field; the message names the bad field, never a key's value. */
export function parsePoolKeys(keys: PoolKeys): PoolKeys {
  const parsed = PoolKeysSchema.safeParse(keys);
  if (!parsed.success) {
    const issue = parsed.error.issues[0]!;
    throw new InvalidArgumentError(`keys.${issue.path.join(".")}: ${issue.message}`);
  }
  return parsed.data;
}

/** The {@link ConnectionOptions} part of a launcher's options, with the absent ones left out. */
export function connectionOptions(options: ConnectionOptions): ConnectionOptions {
  const { requestTimeoutMs, heartbeatIntervalMs, heartbeatTimeoutMs, handshakeTimeoutMs, watchdogMs } = options;
  return {
    ...(requestTimeoutMs !== undefined ? { requestTimeoutMs } : {}),
    ...(heartbeatIntervalMs !== undefined ? { heartbeatIntervalMs } : {}),
    ...(heartbeatTimeoutMs !== undefined ? { heartbeatTimeoutMs } : {}),
    ...(handshakeTimeoutMs !== undefined ? { handshakeTimeoutMs } : {}),
    ...(watchdogMs !== undefined ? { watchdogMs } : {}),
  };
}
