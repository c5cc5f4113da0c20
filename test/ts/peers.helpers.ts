// Running a parity peer (a script of test/python/peers/ in the project's .venv) from a TS test: its JSON answer, or
// the reason it cannot run. Where peers are required (CI set to a truthy value, or POSTTRAIN_REQUIRE_PEERS=1) a
// peer that cannot run fails the test instead of skipping it, as test/python/peers/require.py does.
import { execFile } from "node:child_process";
import { join } from "node:path";
import { resolvePython } from "../../bridge/worker/python.js";

/** Where the peer scripts live. */
export const PEERS_DIR = join(import.meta.dirname, "..", "python", "peers");

/** How to install the peers. */
export const INSTALL_HINT =
  "install the test extra into the project's .venv: `.venv/bin/pip install -e '.[test]'` (`npm test` and `node bridge/setup/bootstrap.mjs` bootstrap it)";

/** True when a peer that cannot run must fail the test rather than skip it: `CI` truthy or `POSTTRAIN_REQUIRE_PEERS=1`. */
export function peersRequired(): boolean {
  const ci = (process.env.CI ?? "").trim().toLowerCase();
  return !["", "0", "false", "no", "off"].includes(ci) || (process.env.POSTTRAIN_REQUIRE_PEERS ?? "").trim() === "1";
}

/** Runs `script` (a file of {@link PEERS_DIR}) with `input` as JSON on stdin; resolves with its JSON answer. */
export function runPeer<T>(script: string, input: unknown, timeoutMs = 120_000): Promise<T & { unavailable?: string }> {
  return new Promise((resolve, reject) => {
    const child = execFile(resolvePython(), [join(PEERS_DIR, script)], { timeout: timeoutMs, maxBuffer: 64 * 1024 * 1024 }, (err, stdout, stderr) => {
      if (stdout.trim() !== "") {
        try {
          resolve(JSON.parse(stdout) as T & { unavailable?: string });
          return;
        } catch {
          // fall through to the error
        }
      }
      reject(new Error(`the peer ${script} failed: ${err?.message ?? "no output"}\n${stderr}`));
    });
    child.stdin?.end(JSON.stringify(input));
  });
}

/** Skips the test (with the reason) when the peer is unavailable, or throws where peers are required. */
export function skipUnlessPeer(peer: { unavailable?: string }, what: string, skip: (note: string) => void): void {
  if (peer.unavailable === undefined) return;
  const reason = `parity peer ${what} (run by ${resolvePython()}) cannot be imported (${peer.unavailable})`;
  if (peersRequired()) throw new Error(`${reason}; peers are required here (CI or POSTTRAIN_REQUIRE_PEERS=1): ${INSTALL_HINT}`);
  console.warn(`${reason}; parity not checked. ${INSTALL_HINT}`);
  skip(`${reason}; ${INSTALL_HINT}`);
}
