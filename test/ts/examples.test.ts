// Runs every script in examples/ as a user would (`tsx examples/<name>.ts`, in a child process, quick mode) and checks
// that it exits 0 and prints what it should: real workers, real torch, the tiny model. One at a time: each example
// starts its own worker, and CI has two cores.
import { execFile } from "node:child_process";
import { readdirSync } from "node:fs";
import { join, resolve } from "node:path";
import { describe, expect, it } from "vitest";

const ROOT = resolve(import.meta.dirname, "..", "..");
const TSX = join(ROOT, "node_modules", ".bin", "tsx");
/** Per example: quick runs take 10–30 s alone; the margin is for a busy machine. */
const EXAMPLE_TIMEOUT_MS = 110_000;

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
      { cwd: ROOT, env: { ...process.env, ...env }, timeout: EXAMPLE_TIMEOUT_MS - 5_000, maxBuffer: 16 * 1024 ** 2 },
      (err, stdout, stderr) => {
        const code = err === null ? 0 : typeof err.code === "number" ? err.code : null;
        done({ code, stdout, stderr });
      },
    );
  });
}

const NUM = String.raw`-?\d+(?:\.\d+)?`;

/** What an example must print. */
interface Expected {
  readonly args?: readonly string[];
  /** Stdout lines, in order (regexps). */
  readonly lines: readonly RegExp[];
  /** Further checks of stdout. */
  readonly check?: (stdout: string) => void;
}

/** The number captured by `pattern` in `text` (first group). */
function captured(text: string, pattern: RegExp): number {
  const m = pattern.exec(text);
  expect(m, `no match for ${String(pattern)} in:\n${text}`).not.toBeNull();
  return Number(m![1]);
}

/** Arguments and expected stdout per example; an example not listed must still exit 0. */
const EXPECTED: Record<string, Expected> = {
  "demo.ts": {
    args: ["--quick"],
    lines: [
      /^posttrain demo: teach a tiny model to sort digits \("sort 4 digits: 3817" → "1378"\)$/,
      /^ {2}local CPU worker: torch \S+ \(quick mode/,
      /^ {2}\[\d+ s\] SFT warm-up: 4 steps/,
      /^ {4}step 1\/4 {2}loss /,
      /^ {4}step 4\/4 {2}loss .* eval reward /,
      new RegExp(String.raw`^ {2}\[\d+ s\] held-out reward before training: ${NUM}$`),
      new RegExp(String.raw`^ {2}\[\d+ s\] held-out reward after SFT: +${NUM}$`),
      /^ {2}\[\d+ s\] GRPO: 3 steps of 4 prompts × 8 samples/,
      /^ {4}step 1\/3 {2}reward /,
      /^ {4}step 3\/3 {2}reward .* eval reward /,
      new RegExp(String.raw`^ {2}\[\d+ s\] held-out reward after GRPO: +${NUM}$`),
      new RegExp(String.raw`^held-out reward \(16 prompts, greedy\): before ${NUM} → after SFT ${NUM} → after GRPO ${NUM} \(GRPO [+-]${NUM}\)$`),
      /^report: \/\S+\/grpo\/report\.html \(SFT: \/\S+\/sft\/report\.html\)$/,
      /^done in \d+ s$/,
    ],
    check: (stdout) => {
      for (const label of ["before training", "after SFT", "after GRPO"]) {
        const reward = captured(stdout, new RegExp(String.raw`held-out reward ${label}: +(${NUM})`));
        expect(reward, label).toBeGreaterThanOrEqual(0);
        expect(reward, label).toBeLessThanOrEqual(1);
      }
    },
  },
  "quickstart.ts": {
    lines: [
      /^torch in worker 0: \d+\.\d+/,
      /^batch size: \[ 1, 4 \] responses: 4$/,
      /^scored rows: 4$/,
      /^generate with a 1 ms timeout: TIMEOUT$/,
    ],
  },
  "tool-use.ts": {
    lines: [
      /^tool use: tiny model \(\d+ parameters\) in worker 0 learns a calculator tool, 3 GRPO steps of 64 episodes$/,
      new RegExp(String.raw`^step 1: reward ${NUM}, calculator used ${NUM}, right answers ${NUM}, loss ${NUM}$`),
      new RegExp(String.raw`^step 3: reward ${NUM}, calculator used ${NUM}, right answers ${NUM}, loss ${NUM}$`),
      new RegExp(String.raw`^an episode of step 3 \(return ${NUM}\):$`),
      /^ {2}user +"\d+\+\d+"$/,
      /^ {2}assistant +"/,
      new RegExp(String.raw`^mean reward: ${NUM} \(first 3 steps\) → ${NUM} \(last 3\)$`),
    ],
  },
  "grpo-gsm8k.ts": {
    lines: [
      /^GRPO on GSM8K \(gsm8k_mini\.jsonl\), tiny model: the wiring, not a learning claim$/,
      new RegExp(String.raw`^step 1: reward_mean ${NUM}, kl_to_ref \S+, loss ${NUM}, \d+ tokens/s$`),
      new RegExp(String.raw`^step 2: reward_mean ${NUM}, kl_to_ref \S+, loss ${NUM}, \d+ tokens/s, held-out reward ${NUM}$`),
      /^run directory: \/\S+ \(report\.html \d+ KB, metrics\.jsonl, samples\.jsonl, checkpoints\/\)$/,
    ],
  },
  "grpo-pipeline.ts": {
    args: ["--quick"],
    lines: [
      new RegExp(String.raw`^step 1/3  reward ${NUM}  loss ${NUM}  policy age 0  dropped 0$`),
      // one batch ahead: every later step trains on rows sampled by the weights one version back
      new RegExp(String.raw`^step 2/3  reward ${NUM}  loss ${NUM}  policy age 1  dropped 0$`),
      new RegExp(String.raw`^step 3/3  reward ${NUM}  loss ${NUM}  policy age 1  dropped 0$`),
      new RegExp(String.raw`^collected 3 batches, ${NUM} s of generation$`),
    ],
  },
  "sft.ts": {
    lines: [
      /^SFT on sft_reverse\.jsonl: tiny model, batch 16, AdamW lr 3e-3, 6 steps$/,
      new RegExp(String.raw`^step 1: loss ${NUM}, lr 3\.0e-3, \d+ tokens/s$`),
      new RegExp(String.raw`^step 6: loss ${NUM}, `),
      new RegExp(String.raw`^training loss: ${NUM} → ${NUM} \(down\)$`),
      new RegExp(String.raw`^held-out loss \(16 rows\): ${NUM} → ${NUM}$`),
    ],
    check: (stdout) => {
      const before = captured(stdout, new RegExp(String.raw`held-out loss \(16 rows\): (${NUM})`));
      const after = captured(stdout, new RegExp(String.raw`held-out loss \(16 rows\): ${NUM} → (${NUM})`));
      expect(after).toBeLessThan(before);
    },
  },
  "ppo-cartpole.ts": {
    lines: [
      /^PPO on CartPole-v1: 8 envs in TS, MLP actor and critic in worker 0, 2 steps of 256 frames$/,
      new RegExp(String.raw`^step 1: return ${NUM} \(\d+ episodes\), \d+ frames/s$`),
      new RegExp(String.raw`^step 2: return ${NUM} \(\d+ episodes\), \d+ frames/s$`),
      new RegExp(String.raw`^eval return \(4 episodes, deterministic policy\): ${NUM} → ${NUM}$`),
      /^run directory: \/\S+$/,
    ],
  },
  "custom-reward.ts": {
    lines: [
      /^GRPO with an async TS reward: a judge at http:\/\/127\.0\.0\.1:\d+\/score$/,
      new RegExp(String.raw`^step 1: reward_mean ${NUM}, reward/judge ${NUM}, reward/brevity ${NUM}$`),
      new RegExp(String.raw`^step 2: reward_mean ${NUM}, reward/judge ${NUM}, reward/brevity ${NUM}$`),
      // 2 steps × 2 prompts × 4 completions, each scored by one awaited HTTP call.
      /^judge calls: 16$/,
    ],
  },
  "http-service.ts": {
    lines: [
      /^training service on http:\/\/127\.0\.0\.1:\d+ \(jobs in \S+\)$/,
      /^POST \/jobs \(groupSize 0\) → 400 \{"error":"INVALID_ARGUMENT","message":"job config\.groupSize: .*>=2"\}$/,
      /^POST \/jobs → 201, job 1$/,
      /^GET \/jobs\/1\/metrics → 200 application\/x-ndjson$/,
      new RegExp(String.raw`^ {2}step 1: reward_mean ${NUM}, tokens/s \d+$`),
      /^ {2}step 2: /,
      /^ {2}step 3: /,
      /^POST \/jobs\/1\/stop → 200, status stopped after \d+ steps, report \/\S+\/job-1\/report\.html$/,
      /^GET \/jobs\/1 → stopped$/,
      /^service stopped$/,
    ],
    check: (stdout) => {
      expect(captured(stdout, /status stopped after (\d+) steps/)).toBeGreaterThanOrEqual(3);
    },
  },
};

const examples = readdirSync(join(ROOT, "examples"))
  .filter((f) => f.endsWith(".ts"))
  .sort();

describe("examples/", () => {
  it("has the examples this test knows about", () => {
    expect(examples).toEqual(expect.arrayContaining(Object.keys(EXPECTED)));
  });

  it.each(examples)("%s runs in quick mode and exits 0", { timeout: EXAMPLE_TIMEOUT_MS }, async (name) => {
    const expected = EXPECTED[name];
    const run = await runTsx(join("examples", name), expected?.args ?? [], { POSTTRAIN_QUICK: "1" });
    expect(run.code, `exit code of ${name}; stderr:\n${run.stderr}`).toBe(0);
    const lines = run.stdout.split("\n");
    let from = 0;
    for (const pattern of expected?.lines ?? []) {
      const at = lines.findIndex((line, i) => i >= from && pattern.test(line));
      expect(at, `${name}: no line matching ${String(pattern)} (in order) in stdout:\n${run.stdout}`).toBeGreaterThanOrEqual(0);
      from = at + 1;
    }
    expected?.check?.(run.stdout);
  });
});
