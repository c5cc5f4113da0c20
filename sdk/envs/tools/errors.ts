/**
 * Typed errors of the tools (`sdk/envs/tools`). A tool that fails *while the env runs* (a crash, a timeout, bad
 * arguments from the model) does not throw: it becomes an error `tool` message and the episode goes on. These
 * errors are for the caller's mistakes and for infrastructure that cannot start.
 */
import { PosttrainError } from "../../core/errors.js";

/** The sandbox's Python process could not be started or did not report ready. Code `SANDBOX_START_FAILED`. */
export class SandboxStartError extends PosttrainError {
  /** What the process wrote to stderr before it failed. */
  readonly stderrTail: string;

  constructor(message: string, stderrTail = "") {
    super("SANDBOX_START_FAILED", stderrTail.trim() === "" ? message : `${message}; last stderr lines:\n${stderrTail}`);
    this.stderrTail = stderrTail;
  }
}

/**
 * A sandbox feature that was required is not available on this machine, e.g. `isolation: "strict"` without user
 * namespaces, or `network: "blocked"` without a network namespace. Code `SANDBOX_UNAVAILABLE`.
 */
export class SandboxUnavailableError extends PosttrainError {
  constructor(message: string) {
    super("SANDBOX_UNAVAILABLE", message);
  }
}

/** The sandbox (or the tool transform that owns it) was closed. Code `SANDBOX_CLOSED`. */
export class SandboxClosedError extends PosttrainError {
  constructor(message: string) {
    super("SANDBOX_CLOSED", message);
  }
}

/** An MCP server could not be started, connected or listed. Code `MCP_CONNECTION_FAILED`. */
export class MCPConnectionError extends PosttrainError {
  /** The server's name in the transform's `servers` option. */
  readonly server: string;

  constructor(server: string, message: string, options?: { cause?: unknown }) {
    super("MCP_CONNECTION_FAILED", `MCP server ${JSON.stringify(server)}: ${message}`, options);
    this.server = server;
  }
}
