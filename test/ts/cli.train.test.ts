// Real `posttrain sft` / `posttrain grpo` runs in child processes (tiny model, digit-sort, a local CPU worker, real
// ZeroMQ and torch), with the example configs of examples/configs and flag overrides: the plain progress lines
// (stdout is a pipe), the run directory, Ctrl-C sent to the process group as a terminal does (exit 130 with a
// checkpoint), SIGTERM sent to the process as docker stop does (exit 143 with a checkpoint), a second signal,
// --resume continuing the curve from the next step, a failed run's resume command (run by a real shell), and a
// resume with nothing to resume refused.
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { parse as parseYaml } from "yaml";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { formatMetric } from "../../sdk/cli/progress.js";

const ROOT = resolve(import.meta.dirname, "..", "..");
const CLI = join(ROOT, "sdk", "cli", "main.ts");
const SFT_CONFIG = join(ROOT, "examples", "configs", "sft-digit-sort.yaml");
const GRPO_CONFIG = join(ROOT, "examples", "configs", "grpo-digit-sort.yaml");
const DDP_CONFIG = join(ROOT, "examples", "configs", "grpo-ddp.yaml");

interface Run {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
  readonly stdout: string;
  readonly stderr: string;
}

/** A `posttrain` child process in its own process group (so a signal can go to the group, as Ctrl-C does). */
class Cli {
  readonly child: ChildProcess;
  readonly done: Promise<Run>;
  stdout = "";
  stderr = "";
  readonly #waiters: { pattern: RegExp; resolve: (line: string) => void }[] = [];

  constructor(args: readonly string[]) {
    this.child = spawn(process.execPath, ["--import", "tsx", CLI, ...args], { cwd: ROOT, detached: true, stdio: ["ignore", "pipe", "pipe"] });
    running.add(this.child);
    this.child.stdout?.setEncoding("utf8");
    this.child.stderr?.setEncoding("utf8");
    this.child.stdout?.on("data", (chunk: string) => {
      this.stdout += chunk;
      this.#check();
    });
    this.child.stderr?.on("data", (chunk: string) => (this.stderr += chunk));
    this.done = new Promise((done) => {
      this.child.once("close", (code, signal) => {
        running.delete(this.child);
        done({ code, signal, stdout: this.stdout, stderr: this.stderr });
      });
    });
  }

  /** Resolves with the first stdout line matching `pattern`. */
  waitFor(pattern: RegExp): Promise<string> {
    return new Promise((resolve) => {
      this.#waiters.push({ pattern, resolve });
      this.#check();
    });
  }

  /** Sends `signal` to the whole process group, as a terminal does on Ctrl-C. */
  signalGroup(signal: NodeJS.Signals): void {
    if (this.child.pid === undefined || this.child.exitCode !== null) return;
    process.kill(-this.child.pid, signal);
  }

  #check(): void {
    const lines = this.stdout.split("\n");
    for (const waiter of [...this.#waiters]) {
      const line = lines.find((l) => waiter.pattern.test(l));
      if (line !== undefined) {
        this.#waiters.splice(this.#waiters.indexOf(waiter), 1);
        waiter.resolve(line);
      }
    }
  }
}

const running = new Set<ChildProcess>();

function posttrain(...args: string[]): Promise<Run> {
  return new Cli(args).done;
}

/** Checks that stdout has lines matching `patterns`, in this order. */
function expectLines(stdout: string, patterns: readonly RegExp[]): string[] {
  const lines = stdout.split("\n");
  const found: string[] = [];
  let from = 0;
  for (const pattern of patterns) {
    const at = lines.findIndex((line, i) => i >= from && pattern.test(line));
    expect(at, `no line matching ${String(pattern)} (in order) in stdout:\n${stdout}`).toBeGreaterThanOrEqual(0);
    found.push(lines[at]!);
    from = at + 1;
  }
  return found;
}

function readJsonLines(path: string): Record<string, unknown>[] {
  return readFileSync(path, "utf8")
    .split("\n")
    .filter((l) => l.trim() !== "")
    .map((l) => JSON.parse(l) as Record<string, unknown>);
}

const NUM = String.raw`-?[\d.]+(?:e[-+]\d+)?`;
const STEP_TAIL = String.raw`tokens/s=${NUM} step_time=${NUM}s eta=\d+:\d\d$`;

let dir: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), "posttrain-cli-train-"));
});
afterAll(() => {
  for (const child of running) if (child.pid !== undefined) process.kill(-child.pid, "SIGKILL");
  rmSync(dir, { recursive: true, force: true });
});

describe("posttrain sft and grpo: real runs (in order: the later ones start from the SFT checkpoint)", { concurrent: false }, () => {
  it("sft: 3 steps of the example config write a run directory", { timeout: 240_000 }, async () => {
    const runDir = join(dir, "sft");
    const run = await posttrain("sft", "--config", SFT_CONFIG, "--steps", "3", "--run-dir", runDir, "--set", "eval.every=3", "--set", "eval.prompts=8");
    expect(run.code, run.stderr).toBe(0);
    expectLines(run.stdout, [
      new RegExp(String.raw`^built the tiny model \(\d+ parameters\) in ${runDir}/model$`),
      new RegExp(`^sft: run directory ${runDir}, 3 steps$`),
      /^SFTTrainer before training: /,
      new RegExp(String.raw`^step 1/3 loss=${NUM} ${STEP_TAIL}`),
      new RegExp(String.raw`^step 2/3 loss=${NUM} ${STEP_TAIL}`),
      new RegExp(String.raw`^step 3/3 eval_reward=${NUM} eval_loss=${NUM} loss=${NUM} ${STEP_TAIL}`),
      new RegExp(String.raw`^done: step 3/3 \(3 this run, [\d.]+ s\); checkpoint ${runDir}/checkpoints/step-3; report ${runDir}/report.html$`),
    ]);
    const config = parseYaml(readFileSync(join(runDir, "config.yaml"), "utf8")) as { steps: number; runDir: string; eval: { every: number } };
    expect(config.steps).toBe(3);
    expect(config.eval.every).toBe(3);
    const metrics = readJsonLines(join(runDir, "metrics.jsonl"));
    expect(metrics.map((m) => m.step)).toEqual([0, 1, 2, 3]);
    expect(existsSync(join(runDir, "checkpoints", "step-3", "model.safetensors"))).toBe(true);
    expect(readFileSync(join(runDir, "report.html"), "utf8")).toContain("<svg");
  });

  it("grpo: 3 steps from the SFT checkpoint; the printed figures are those of metrics.jsonl", { timeout: 240_000 }, async () => {
    const runDir = join(dir, "grpo");
    const model = join(dir, "sft", "checkpoints", "step-3");
    const run = await posttrain(
      "grpo", "--config", GRPO_CONFIG, "--steps", "3", "--run-dir", runDir,
      "--set", `model.path=${model}`, "--set", "promptsPerStep=4", "--set", "eval.every=0",
    );
    expect(run.code, run.stderr).toBe(0);
    const lines = expectLines(run.stdout, [
      new RegExp(`^grpo: run directory ${runDir}, 3 steps$`),
      ...[1, 2, 3].map((s) => new RegExp(String.raw`^step ${s}/3 reward=${NUM} reward_std=${NUM} kl=${NUM} loss=${NUM} ${STEP_TAIL}`)),
      new RegExp(String.raw`^done: step 3/3 \(3 this run, [\d.]+ s\); checkpoint ${runDir}/checkpoints/step-3; report ${runDir}/report.html$`),
    ]);
    const metrics = readJsonLines(join(runDir, "metrics.jsonl"));
    expect(metrics.map((m) => m.step)).toEqual([1, 2, 3]);
    expect(metrics.map((m) => m.policy_version)).toEqual([1, 2, 3]);
    metrics.forEach((m, i) => {
      const reward = m.reward_mean as number;
      expect(reward).toBeGreaterThanOrEqual(0);
      expect(reward).toBeLessThanOrEqual(1);
      expect(lines[i + 1]).toContain(`reward=${formatMetric(reward)} reward_std=${formatMetric(m.reward_std as number)}`);
      expect(lines[i + 1]).toContain(`kl=${formatMetric(m.kl_approx as number)} loss=${formatMetric(m.loss as number)}`);
    });
    const samples = readJsonLines(join(runDir, "samples.jsonl"));
    expect(samples.length).toBeGreaterThan(0);
    expect(samples[0]).toMatchObject({ step: 1, prompt: expect.stringMatching(/sort 4 digits: \d{4}/) as unknown });
    expect(readFileSync(join(runDir, "config.yaml"), "utf8")).toContain(`path: ${model}`);
    expect(existsSync(join(runDir, "report.html"))).toBe(true);

    // The same run directory again, without --resume: a config mistake, exit 2.
    const again = await posttrain("grpo", "--config", GRPO_CONFIG, "--run-dir", runDir, "--set", `model.path=${model}`);
    expect(again.code).toBe(2);
    expect(again.stderr).toContain("already holds a run");
  });

  it("grpo with examples/configs/grpo-ddp.yaml: two FSDP trainer ranks and two generators, saved as one sharded checkpoint", { timeout: 240_000 }, async () => {
    const runDir = join(dir, "grpo-ddp");
    const run = await posttrain(
      "grpo", "--config", DDP_CONFIG, "--steps", "2", "--run-dir", runDir,
      "--set", "workers.trainer.strategy=fsdp", "--set", "promptsPerStep=2", "--set", "eval.every=0",
    );
    expect(run.code, run.stderr).toBe(0);
    expectLines(run.stdout, [
      new RegExp(`^grpo: run directory ${runDir}, 2 steps$`),
      ...[1, 2].map((s) => new RegExp(String.raw`^step ${s}/2 reward=${NUM} `)),
      new RegExp(String.raw`^done: step 2/2 \(2 this run, [\d.]+ s\); checkpoint ${runDir}/checkpoints/step-2; `),
    ]);
    const metrics = readJsonLines(join(runDir, "metrics.jsonl"));
    expect(metrics.map((m) => m.policy_version)).toEqual([1, 2]);
    const checkpoint = join(runDir, "checkpoints", "step-2");
    const state = JSON.parse(readFileSync(join(checkpoint, "trainer_state.json"), "utf8")) as { worldSize: number; parallel: unknown };
    expect(state).toMatchObject({ worldSize: 2, parallel: { strategy: "fsdp" } });
    // one DCP shard per rank, and the full model written by rank 0
    expect(readdirSync(join(checkpoint, "dcp")).filter((f) => f.endsWith(".distcp"))).toHaveLength(2);
    expect(existsSync(join(checkpoint, "model.safetensors"))).toBe(true);
  });

  it("Ctrl-C finishes the step, saves a checkpoint and the report, exits 130; --resume continues the curve", { timeout: 300_000 }, async () => {
    const runDir = join(dir, "interrupted");
    const model = join(dir, "sft", "checkpoints", "step-3");
    const cli = new Cli(["grpo", "--config", GRPO_CONFIG, "--steps", "1000", "--run-dir", runDir, "--set", `model.path=${model}`, "--set", "promptsPerStep=4", "--set", "eval.every=0"]);
    await cli.waitFor(/^step 2\/1000 /);
    cli.signalGroup("SIGINT"); // the worker is in the group too: it must survive to save the checkpoint
    const run = await cli.done;
    expect(run.code, run.stderr).toBe(130);
    expect(run.stderr).toBe("");
    const [, stopLine] = expectLines(run.stdout, [
      /^Ctrl-C: finishing the current step, then saving a checkpoint and the report \(Ctrl-C again to quit at once\)$/,
      new RegExp(`^interrupted at step \\d+: checkpoint ${runDir}/checkpoints/step-\\d+; report ${runDir}/report.html$`),
      new RegExp(`^resume with: posttrain grpo --resume --run-dir ${runDir}$`),
    ]);
    const stoppedAt = Number(/^interrupted at step (\d+)/.exec(stopLine!)?.[1]);
    expect(stoppedAt).toBeGreaterThanOrEqual(2);
    expect(stoppedAt).toBeLessThan(1000);
    expect(stopLine).toContain(`checkpoints/step-${String(stoppedAt)};`);
    const state = JSON.parse(readFileSync(join(runDir, "checkpoints", `step-${String(stoppedAt)}`, "trainer_state.json"), "utf8")) as { step: number };
    expect(state.step).toBe(stoppedAt);
    expect(readJsonLines(join(runDir, "metrics.jsonl")).at(-1)?.step).toBe(stoppedAt);
    expect(existsSync(join(runDir, "report.html"))).toBe(true);

    // A resume whose config changed in a field that matters: exit 2 naming it, nothing started.
    const changed = await posttrain("grpo", "--resume", "--run-dir", runDir, "--set", "optimizer.lr=0.1");
    expect(changed.code).toBe(2);
    expect(changed.stderr).toContain("config field optimizer.lr is 0.1 but the run was started with 0.0003");

    // --resume (the run's own config.yaml) with a new end: the next steps, and one curve in metrics.jsonl.
    const end = stoppedAt + 2;
    const resumed = await posttrain("grpo", "--resume", "--run-dir", runDir, "--steps", String(end));
    expect(resumed.code, resumed.stderr).toBe(0);
    expectLines(resumed.stdout, [
      new RegExp(`^resumed ${runDir} at step ${String(stoppedAt)} from ${runDir}/checkpoints/step-${String(stoppedAt)}$`),
      new RegExp(`^grpo: run directory ${runDir}, ${String(end)} steps$`),
      new RegExp(`^step ${String(stoppedAt + 1)}/${String(end)} reward=`),
      new RegExp(`^step ${String(end)}/${String(end)} reward=`),
      new RegExp(String.raw`^done: step ${String(end)}/${String(end)} \(2 this run, [\d.]+ s\); checkpoint ${runDir}/checkpoints/step-${String(end)}; `),
    ]);
    const printed = [...resumed.stdout.matchAll(/^step (\d+)\//gm)].map((m) => Number(m[1]));
    expect(printed).toEqual([stoppedAt + 1, end]);
    const metrics = readJsonLines(join(runDir, "metrics.jsonl"));
    expect(metrics.map((m) => m.step)).toEqual(Array.from({ length: end }, (_, i) => i + 1));
    // the resume publishes the restored weights to the generator as a version of its own
    expect(metrics.map((m) => m.policy_version)).toEqual(Array.from({ length: end }, (_, i) => (i < stoppedAt ? i + 1 : i + 2)));
  });

  it("a second signal exits at once with its own code: Ctrl-C then SIGTERM gives 143", { timeout: 240_000 }, async () => {
    const runDir = join(dir, "twice");
    const cli = new Cli(["grpo", "--config", GRPO_CONFIG, "--steps", "1000", "--run-dir", runDir, "--set", `model.path=${join(dir, "sft", "checkpoints", "step-3")}`, "--set", "eval.every=0"]);
    await cli.waitFor(/^step 1\/1000 /);
    cli.signalGroup("SIGINT");
    await cli.waitFor(/^Ctrl-C: finishing the current step/);
    cli.signalGroup("SIGTERM");
    const run = await cli.done;
    expect(run.code).toBe(143);
    expect(run.stderr).toContain("posttrain: second SIGTERM, exiting now without waiting for the step");
    expect(run.stdout).not.toMatch(/^interrupted at step/m);
  });

  it("SIGTERM (as docker stop sends it) finishes the step, saves a checkpoint and the report, exits 143; --resume continues from it", { timeout: 300_000 }, async () => {
    const runDir = join(dir, "terminated");
    const model = join(dir, "sft", "checkpoints", "step-3");
    const cli = new Cli(["grpo", "--config", GRPO_CONFIG, "--steps", "1000", "--run-dir", runDir, "--set", `model.path=${model}`, "--set", "promptsPerStep=4", "--set", "eval.every=0"]);
    await cli.waitFor(/^step 2\/1000 /);
    cli.child.kill("SIGTERM"); // to the posttrain process alone, as docker stop and Kubernetes do
    const run = await cli.done;
    expect(run.code, run.stderr).toBe(143);
    expect(run.stderr).toBe("");
    const [, stopLine] = expectLines(run.stdout, [
      /^SIGTERM: finishing the current step, then saving a checkpoint and the report \(a second signal to quit at once\)$/,
      new RegExp(`^interrupted at step \\d+: checkpoint ${runDir}/checkpoints/step-\\d+; report ${runDir}/report.html$`),
      new RegExp(`^resume with: posttrain grpo --resume --run-dir ${runDir}$`),
    ]);
    const stoppedAt = Number(/^interrupted at step (\d+)/.exec(stopLine!)?.[1]);
    expect(stoppedAt).toBeGreaterThanOrEqual(2);
    // the checkpoint is the last finished step's, and metrics.jsonl ends there
    const state = JSON.parse(readFileSync(join(runDir, "checkpoints", `step-${String(stoppedAt)}`, "trainer_state.json"), "utf8")) as { step: number };
    expect(state.step).toBe(stoppedAt);
    expect(readJsonLines(join(runDir, "metrics.jsonl")).map((m) => m.step)).toEqual(Array.from({ length: stoppedAt }, (_, i) => i + 1));
    expect(existsSync(join(runDir, "report.html"))).toBe(true);

    const resumed = await posttrain("grpo", "--resume", "--run-dir", runDir, "--steps", String(stoppedAt + 1));
    expect(resumed.code, resumed.stderr).toBe(0);
    expectLines(resumed.stdout, [
      new RegExp(`^resumed ${runDir} at step ${String(stoppedAt)} from ${runDir}/checkpoints/step-${String(stoppedAt)}$`),
      new RegExp(`^step ${String(stoppedAt + 1)}/${String(stoppedAt + 1)} reward=`),
    ]);
    expect(readJsonLines(join(runDir, "metrics.jsonl")).map((m) => m.step)).toEqual(Array.from({ length: stoppedAt + 1 }, (_, i) => i + 1));
  });

  it("a failed run prints on stderr the exact command that resumes it, quoted for a shell, and a shell runs it", { timeout: 300_000 }, async () => {
    // lr 1e30 makes the weights overflow after step 1, so step 2's loss is not finite (NON_FINITE_LOSS): a real failure
    const runDir = join(dir, "failed run"); // a space, so the printed command must quote it
    const args = ["sft", "--config", SFT_CONFIG, "--steps", "50", "--run-dir", runDir, "--set", "optimizer.lr=1e30", "--set", "checkpoint.every=1", "--set", "eval.every=0"];
    const run = await posttrain(...args);
    expect(run.code).toBe(1);
    const resumeLine = `resume with: posttrain ${args.slice(0, 6).join(" ")} '${runDir}' ${args.slice(7).join(" ")} --resume`;
    expect(run.stderr).toMatch(/^posttrain: NON_FINITE_LOSS: train_step: step 2: /);
    expect(run.stderr.trimEnd().split("\n").at(-1)).toBe(resumeLine);
    expect(existsSync(join(runDir, "checkpoints", "step-1", "trainer_state.json"))).toBe(true);

    // the printed line, run by a real shell (posttrain being this checkout's CLI): it resumes from step 1, and fails
    // again at step 2 the same way, printing the same line (--resume is not added twice)
    const command = resumeLine.slice("resume with: ".length);
    const shell = spawn("sh", ["-c", `posttrain() { "${process.execPath}" --import tsx "${CLI}" "$@"; }; ${command}`], { cwd: ROOT, stdio: ["ignore", "pipe", "pipe"] });
    running.add(shell);
    let stdout = "";
    let stderr = "";
    shell.stdout.on("data", (chunk: Buffer) => (stdout += chunk.toString()));
    shell.stderr.on("data", (chunk: Buffer) => (stderr += chunk.toString()));
    const code = await new Promise<number | null>((done) => shell.once("close", (c) => {
      done(c);
    }));
    running.delete(shell);
    expect(code, stderr).toBe(1);
    expect(stdout).toContain(`resumed ${runDir} at step 1 from ${runDir}/checkpoints/step-1`);
    expect(stderr).toContain("NON_FINITE_LOSS: train_step: step 2: ");
    expect(stderr.trimEnd().split("\n").at(-1)).toBe(resumeLine);
  });

  it("a resume with no checkpoint refuses (exit 2) and prints no resume command", { timeout: 120_000 }, async () => {
    const runDir = join(dir, "never-ran");
    const run = await posttrain("sft", "--config", SFT_CONFIG, "--run-dir", runDir, "--resume");
    expect(run.code).toBe(2);
    expect(run.stderr).toBe(`posttrain: cannot resume runDir ${JSON.stringify(runDir)}: it holds no run (no config.yaml); to start over, run without resume (--resume), or check the runDir\n`);
  });
});
