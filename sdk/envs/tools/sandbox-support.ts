/** What the OS lets the Python sandbox do, detected once per interpreter and Node process. */
import { execFile } from "node:child_process";
import { join } from "node:path";
import { PythonEnvMissingError } from "../../../bridge/errors.js";
import { packageRoot, resolvePython } from "../../../bridge/worker/python.js";

/** The outcome of {@link sandboxSupport}. */
export interface SandboxSupport {
  /**
   * Whether the sandbox's jail can create its user, pid, mount, ipc and network namespaces here; the network
   * namespace's only interface is a loopback that is down.
   */
  readonly networkIsolation: boolean;
  /** Same as `networkIsolation`: all the namespaces come together or none does. */
  readonly namespaces: boolean;
  /** Why not, when they cannot be created (e.g. not Linux, user namespaces disabled or forbidden by seccomp). */
  readonly reason?: string;
}

const detected = new Map<string, Promise<SandboxSupport>>();

/**
 * The interpreter a sandbox runs: `explicit`, else the workers' one (`resolvePython`), else — the sandbox needs
 * only the standard library — `python3` on the PATH (`python` on Windows) when no worker environment exists.
 */
export function sandboxPython(explicit?: string): string {
  try {
    return resolvePython(explicit);
  } catch (err) {
    if (err instanceof PythonEnvMissingError) return process.platform === "win32" ? "python" : "python3";
    throw err;
  }
}

/** The jail script, shipped in the npm package under `python_worker/`. */
export function sandboxJailPath(): string {
  return join(packageRoot(), "python_worker", "posttrain_worker", "sandbox", "jail.py");
}

/**
 * Detects, once per interpreter (`sandboxPython(python)`: the worker environment's Python, else `python3`),
 * whether sandboxed code can be put in its own namespaces (Linux with user namespaces) by running the jail's probe;
 * never throws (a failure is a rejection). Where it cannot — macOS, Windows, containers whose seccomp profile
 * forbids `unshare`, kernels with user namespaces disabled — sandboxes in `network: "auto"` mode run with the
 * network and the isolation they report as missing.
 *
 * ```ts
 * const { namespaces, reason } = await sandboxSupport();
 * ```
 */
export function sandboxSupport(python?: string): Promise<SandboxSupport> {
  let interpreter: string;
  try {
    interpreter = sandboxPython(python);
  } catch (err) {
    return Promise.reject(err instanceof Error ? err : new Error(String(err)));
  }
  let support = detected.get(interpreter);
  if (support === undefined) {
    support = detect(interpreter);
    detected.set(interpreter, support);
  }
  return support;
}

function detect(python: string): Promise<SandboxSupport> {
  if (process.platform !== "linux") {
    const reason = `namespaces need Linux (this is ${process.platform})`;
    return Promise.resolve({ networkIsolation: false, namespaces: false, reason });
  }
  return new Promise((resolve) => {
    execFile(python, ["-I", sandboxJailPath(), "--probe"], { timeout: 20_000, env: { PATH: process.env.PATH ?? "/usr/bin:/bin" } }, (err, stdout, stderr) => {
      if (err === null) {
        try {
          const probe = JSON.parse(stdout) as { namespaces?: unknown; reason?: unknown };
          if (probe.namespaces === true) {
            resolve({ networkIsolation: true, namespaces: true });
            return;
          }
          const reason = typeof probe.reason === "string" ? probe.reason : "the probe failed";
          resolve({ networkIsolation: false, namespaces: false, reason });
          return;
        } catch {
          // fall through: an unreadable answer counts as no support
        }
      }
      const detail = stderr.trim() !== "" ? stderr.trim() : (err?.message ?? `unreadable probe output ${JSON.stringify(stdout)}`);
      resolve({ networkIsolation: false, namespaces: false, reason: `the sandbox probe failed: ${detail}` });
    });
  });
}
