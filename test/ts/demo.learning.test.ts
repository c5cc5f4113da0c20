// The demo's claim, checked: the full `examples/demo.ts` (not its quick mode) run as `npm run demo` runs it, in a
// scratch working directory, must raise the held-out reward with SFT and raise it again with GRPO. About a minute on
// an idle 2-core CPU; its own time budget keeps it under 5 minutes on a busy one.
import { execFile } from "node:child_process";
import { mkdtemp, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { afterAll, describe, expect, it } from "vitest";

const ROOT = resolve(import.meta.dirname, "..", "..");
const TSX = join(ROOT, "node_modules", ".bin", "tsx");
const TIMEOUT_MS = 330_000;

describe("npm run demo (full)", () => {
  let cwd = "";
  afterAll(async () => {
    if (cwd !== "") await rm(cwd, { recursive: true, force: true });
  });

  it(
    "learns: held-out reward before < after SFT < after GRPO, and writes both reports",
    async () => {
      cwd = await mkdtemp(join(tmpdir(), "posttrain-demo-full-"));
      const { code, stdout, stderr } = await new Promise<{ code: number | null; stdout: string; stderr: string }>((done) => {
        execFile(TSX, [join(ROOT, "examples", "demo.ts")], { cwd, timeout: TIMEOUT_MS - 10_000, maxBuffer: 16 * 1024 ** 2 }, (err, out, errOut) => {
          done({ code: err === null ? 0 : typeof err.code === "number" ? err.code : null, stdout: out, stderr: errOut });
        });
      });
      expect(code, `demo failed:\n${stdout}\n${stderr}`).toBe(0);
      const m = /held-out reward \(128 prompts, greedy\): before (\d\.\d+) → after SFT (\d\.\d+) → after GRPO (\d\.\d+)/.exec(stdout);
      expect(m, stdout).not.toBeNull();
      const [before, afterSft, afterGrpo] = [Number(m![1]), Number(m![2]), Number(m![3])];
      console.log(`demo: held-out reward ${before} → ${afterSft} (SFT) → ${afterGrpo} (GRPO)`);
      expect(afterSft).toBeGreaterThan(before + 0.3);
      expect(afterGrpo).toBeGreaterThan(afterSft + 0.03);
      for (const run of ["sft", "grpo"]) expect((await stat(join(cwd, "runs", "demo", run, "report.html"))).size).toBeGreaterThan(1000);
    },
    TIMEOUT_MS,
  );
});
