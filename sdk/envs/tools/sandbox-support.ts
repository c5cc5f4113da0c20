/** What the OS lets the Python sandbox do, detected once per Node process. */
import { execFile } from "node:child_process";

/** The outcome of {@link sandboxSupport}. */
export interface SandboxSupport {
  /** Whether `unshare -rn` works here: a new user and network namespace, whose only interface is a loopback that is down. */
  readonly networkIsolation: boolean;
  /** Why not, when it does not (e.g. not Linux, no `unshare`, user namespaces disabled). */
  readonly reason?: string;
}

let detected: Promise<SandboxSupport> | undefined;

/**
 * Detects, once, whether sandboxed code can be cut off the network with `unshare -rn` (Linux with unprivileged
 * user namespaces). Where it cannot — macOS, Windows, containers whose seccomp profile forbids `unshare`, kernels
 * with `kernel.unprivileged_userns_clone=0` — sandboxes in `network: "auto"` mode run with the network.
 */
export function sandboxSupport(): Promise<SandboxSupport> {
  detected ??= detect();
  return detected;
}

function detect(): Promise<SandboxSupport> {
  if (process.platform !== "linux") {
    return Promise.resolve({ networkIsolation: false, reason: `network namespaces need Linux (this is ${process.platform})` });
  }
  return new Promise((resolve) => {
    execFile("unshare", ["-rn", "true"], { timeout: 10_000 }, (err, _stdout, stderr) => {
      if (err === null) {
        resolve({ networkIsolation: true });
        return;
      }
      const detail = stderr.trim() !== "" ? stderr.trim() : err.message;
      resolve({ networkIsolation: false, reason: `\`unshare -rn true\` failed: ${detail}` });
    });
  });
}
