// Runs every script in examples/ as a user would (`tsx examples/<name>.ts`, in a child process) and checks that it
// exits 0 and prints what it should. The demo runs in quick mode (no 64 MB transfer).
import { execFile } from "node:child_process";
import { readdirSync } from "node:fs";
import { join, resolve } from "node:path";
import { describe, expect, it } from "vitest";

const ROOT = resolve(import.meta.dirname, "..", "..");
const TSX = join(ROOT, "node_modules", ".bin", "tsx");

interface Run {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

function runTsx(script: string, args: readonly string[], env: Readonly<Record<string, string>> = {}): Promise<Run> {
  return new Promise((done) => {
    execFile(
      TSX,
      [script, ...args],
      { cwd: ROOT, env: { ...process.env, ...env }, timeout: 50_000, maxBuffer: 16 * 1024 ** 2 },
      (err, stdout, stderr) => {
        const code = err === null ? 0 : typeof err.code === "number" ? err.code : null;
        done({ code, stdout, stderr });
      },
    );
  });
}

/** Arguments and expected stdout lines (regexps, in order) per example; an example not listed must still exit 0. */
const EXPECTED: Record<string, { args?: readonly string[]; lines: readonly RegExp[] }> = {
  "demo.ts": {
    args: ["--quick"],
    lines: [
      /^posttrain demo:/,
      /^ {2}worker 0: pid \d+, python \S+, torch \S+, devices: /,
      /^ {2}worker 1: pid \d+, /,
      /^ {2}row sums from torch: 320 values over 5 leaves, worst relative error /,
      /^ {2}quick mode: skipping the 64 MB transfer$/,
      /^done in [\d.]+ s; workers stopped, sockets removed$/,
    ],
  },
  "quickstart.ts": {
    lines: [
      /^torch in worker 0: \d+\.\d+/,
      /^row sums of next\.reward: \[ 0\.5, 1 \]$/,
      /^row sums of tokens: \[ 6, 15 \]$/,
      /^computeFor\(10\) aborted after 100 ms: ABORTED$/,
    ],
  },
};

const examples = readdirSync(join(ROOT, "examples"))
  .filter((f) => f.endsWith(".ts"))
  .sort();

describe("examples/", () => {
  it("has the examples this test knows about", () => {
    expect(examples).toEqual(expect.arrayContaining(Object.keys(EXPECTED)));
  });

  it.each(examples)("%s runs and exits 0", { timeout: 60_000 }, async (name) => {
    const expected = EXPECTED[name];
    const started = performance.now();
    const run = await runTsx(join("examples", name), expected?.args ?? [], { POSTTRAIN_QUICK: "1" });
    const seconds = (performance.now() - started) / 1000;
    expect(run.code, `exit code of ${name}; stderr:\n${run.stderr}`).toBe(0);
    const lines = run.stdout.split("\n");
    let from = 0;
    for (const pattern of expected?.lines ?? []) {
      const at = lines.findIndex((line, i) => i >= from && pattern.test(line));
      expect(at, `${name}: no line matching ${String(pattern)} (in order) in stdout:\n${run.stdout}`).toBeGreaterThanOrEqual(0);
      from = at + 1;
    }
    // computeFor(10) in the quick start must have been cut short by its AbortSignal.
    if (name === "quickstart.ts") expect(seconds).toBeLessThan(10);
  });
});
