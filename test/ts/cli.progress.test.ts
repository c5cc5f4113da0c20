// The CLI's progress display (sdk/cli/progress.ts) and run-config file handling (sdk/cli/config-file.ts), in
// process: plain lines and the TTY bar, number and ETA formats, YAML reading, --set overrides, config checks, and
// the example configs in examples/configs checked against the trainers' schemas.
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ConfigFileError, checkConfig, parseAssignment, readConfigFile, setField } from "../../sdk/cli/config-file.js";
import { ProgressDisplay, formatDuration, formatMetric, type ProgressStream } from "../../sdk/cli/progress.js";
import { GRPOTrainerConfigSchema, SFTTrainerConfigSchema } from "../../sdk/runs/index.js";

const ROOT = resolve(import.meta.dirname, "..", "..");

/** A stream that keeps what is written. */
class Captured implements ProgressStream {
  text = "";
  constructor(
    readonly isTTY: boolean,
    readonly columns?: number,
  ) {}
  write(chunk: string): boolean {
    this.text += chunk;
    return true;
  }
}

/** A clock the test moves. */
function clock(): { now: () => number; advance: (ms: number) => void } {
  let t = 1000;
  return { now: () => t, advance: (ms) => (t += ms) };
}

describe("formatMetric / formatDuration", () => {
  it("4 significant digits, exponents for tiny and huge values, - for missing ones", () => {
    expect(formatMetric(0.123456)).toBe("0.1235");
    expect(formatMetric(12.5)).toBe("12.5");
    expect(formatMetric(1234.6)).toBe("1235");
    expect(formatMetric(0)).toBe("0");
    expect(formatMetric(-0.00001234)).toBe("-1.23e-5");
    expect(formatMetric(123456789)).toBe("1.23e+8");
    expect(formatMetric(null)).toBe("-");
    expect(formatMetric(undefined)).toBe("-");
    expect(formatMetric(Number.NaN)).toBe("-");
  });

  it("m:ss below an hour, h:mm:ss above", () => {
    expect(formatDuration(0)).toBe("0:00");
    expect(formatDuration(65.4)).toBe("1:05");
    expect(formatDuration(3600 + 62)).toBe("1:01:02");
    expect(formatDuration(-1)).toBe("-");
  });
});

describe("ProgressDisplay", () => {
  it("prints one key=value line per step when the stream is not a TTY, with the ETA from the mean step time", () => {
    const out = new Captured(false);
    const c = clock();
    const display = new ProgressDisplay(out, { totalSteps: 10, now: c.now });
    c.advance(2000);
    display.step({ step: 1, reward_mean: 0.25, reward_std: 0.1, kl_approx: 0.0012, loss: -0.05, tokens_per_s: 812.4, step_time_s: 1.9 });
    c.advance(2000);
    display.step({ step: 2, reward_mean: 0.5, reward_std: 0.2, kl_to_ref: 0.003, kl_approx: 9, loss: null, tokens_per_s: 790, step_time_s: 2, eval_reward_mean: 0.4 });
    display.message("a note");
    display.finish();
    expect(out.text.split("\n")).toEqual([
      "step 1/10 reward=0.25 reward_std=0.1 kl=0.0012 loss=-0.05 tokens/s=812.4 step_time=1.9s eta=0:18",
      "step 2/10 reward=0.5 reward_std=0.2 eval_reward=0.4 kl=0.003 loss=- tokens/s=790 step_time=2s eta=0:16",
      "a note",
      "",
    ]);
    expect(out.text).not.toContain("\r");
  });

  it("counts the ETA from the first step this process ran (a resumed run)", () => {
    const c = clock();
    const out = new Captured(false);
    const display = new ProgressDisplay(out, { totalSteps: 100, now: c.now });
    c.advance(1000);
    display.step({ step: 51, loss: 1 });
    c.advance(1000);
    display.step({ step: 52, loss: 0.5 });
    expect(out.text).toBe("step 51/100 loss=1 eta=0:49\nstep 52/100 loss=0.5 eta=0:48\n");
    const sft = new ProgressDisplay(new Captured(false), { totalSteps: undefined, now: c.now });
    expect(sft.plainLine({ step: 3, loss: 2.5, eval_loss: 2.25 })).toBe("step 3 eval_loss=2.25 loss=2.5");
  });

  it("redraws one line with \\r on a TTY; messages and evaluations stay above the bar", () => {
    const out = new Captured(true, 200);
    const c = clock();
    const display = new ProgressDisplay(out, { totalSteps: 4, now: c.now });
    c.advance(1000);
    display.step({ step: 1, reward_mean: 0.1, kl_approx: 0.01, tokens_per_s: 500 });
    c.advance(1000);
    display.step({ step: 2, reward_mean: 0.2, kl_approx: 0.02, tokens_per_s: 510, eval_reward_mean: 0.3 });
    display.message("hello");
    display.finish();
    const clear = "\r\u001b[K";
    const bar1 = "[#####---------------] 1/4  reward 0.1  kl 0.01  500 tok/s  ETA 0:03";
    const bar2 = "[##########----------] 2/4  reward 0.2  kl 0.02  510 tok/s  ETA 0:02";
    expect(out.text).toBe(
      `${clear}${bar1}${clear}eval at step 2: reward 0.3\n${bar1}${clear}${bar2}${clear}hello\n${bar2}\n`,
    );
  });

  it("cuts the bar to the terminal width", () => {
    const out = new Captured(true, 30);
    const display = new ProgressDisplay(out, { totalSteps: 4 });
    display.step({ step: 1, reward_mean: 0.1, kl_approx: 0.01, tokens_per_s: 500 });
    const drawn = out.text.split("\r\u001b[K").at(-1) ?? "";
    expect(drawn.length).toBe(29);
    expect(drawn.startsWith("[#####")).toBe(true);
  });
});

describe("config files", () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "posttrain-cli-config-"));
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it("reads YAML and JSON mappings; anything else is a ConfigFileError", async () => {
    const yaml = join(dir, "a.yaml");
    await writeFile(yaml, "optimizer:\n  lr: 3e-4\nsteps: 5\n");
    expect(await readConfigFile(yaml)).toEqual({ optimizer: { lr: 3e-4 }, steps: 5 });
    const json = join(dir, "a.json");
    await writeFile(json, JSON.stringify({ steps: 2, model: { path: "tiny" } }));
    expect(await readConfigFile(json)).toEqual({ steps: 2, model: { path: "tiny" } });
    const empty = join(dir, "empty.yaml");
    await writeFile(empty, "# nothing\n");
    await expect(readConfigFile(empty)).rejects.toThrow(/got an empty file/);
    await expect(readConfigFile(dir)).rejects.toThrow(ConfigFileError);
    await expect(readConfigFile(dir)).rejects.toThrow(/cannot read it \(is a directory\)/);
  });

  it("setField sets dotted paths in a copy, creating mappings", () => {
    const base = { optimizer: { lr: 1 }, steps: 3 };
    const next = setField(base, "optimizer.lr", 0.5);
    expect(next).toEqual({ optimizer: { lr: 0.5 }, steps: 3 });
    expect(base.optimizer.lr).toBe(1);
    expect(setField(base, "eval.every", 10)).toEqual({ optimizer: { lr: 1 }, steps: 3, eval: { every: 10 } });
    expect(() => setField(base, "steps.x", 1)).toThrow(/steps is not a mapping/);
    expect(() => setField(base, "a..b", 1)).toThrow(/not a field path/);
  });

  it("parseAssignment reads the value as YAML", () => {
    expect(parseAssignment("optimizer.lr=3e-4")).toEqual({ path: "optimizer.lr", value: 3e-4 });
    expect(parseAssignment("loss.clipEpsilon=[0.2, 0.28]")).toEqual({ path: "loss.clipEpsilon", value: [0.2, 0.28] });
    expect(parseAssignment("eval.greedy=false")).toEqual({ path: "eval.greedy", value: false });
    expect(parseAssignment("model.path=runs/a=b")).toEqual({ path: "model.path", value: "runs/a=b" });
    expect(() => parseAssignment("=3")).toThrow(/expected FIELD=VALUE/);
    expect(() => parseAssignment("x=[1")).toThrow(/cannot read the value/);
  });

  it("checkConfig names the field, the value and what is allowed", () => {
    const bad = { model: { path: "tiny", device: "tpu" }, task: { type: "digit-sort", numDigits: 12 }, runDir: "r", steps: 1.5 };
    let message = "";
    try {
      checkConfig(GRPOTrainerConfigSchema, bad, "run.yaml");
    } catch (err) {
      expect(err).toBeInstanceOf(ConfigFileError);
      expect((err as ConfigFileError).code).toBe("INVALID_CONFIG");
      message = (err as Error).message;
    }
    expect(message).toMatch(/^run\.yaml: invalid config\n/);
    expect(message).toMatch(/model\.device: got "tpu": .*"auto"\|"cpu"\|"cuda"/);
    expect(message).toMatch(/task\.numDigits: got 12: .*<=9/);
    expect(message).toMatch(/steps: got 1\.5: .*int/);
    const missing = (() => {
      try {
        checkConfig(SFTTrainerConfigSchema, { data: { type: "digit-sort" }, steps: 1 }, "sft.yaml");
        return "";
      } catch (err) {
        return (err as Error).message;
      }
    })();
    expect(missing).toMatch(/model: missing: /);
    expect(missing).toMatch(/runDir: missing: /);
  });

  it("the example configs are valid run configs", async () => {
    const grpo = await readConfigFile(join(ROOT, "examples", "configs", "grpo-digit-sort.yaml"));
    const g = checkConfig(GRPOTrainerConfigSchema, grpo, "grpo-digit-sort.yaml");
    expect(g.task.type).toBe("digit-sort");
    expect(g.steps).toBeGreaterThan(0);
    const sft = await readConfigFile(join(ROOT, "examples", "configs", "sft-digit-sort.yaml"));
    const s = checkConfig(SFTTrainerConfigSchema, sft, "sft-digit-sort.yaml");
    expect(s.data.type).toBe("digit-sort");
    // The GRPO recipe starts from the SFT recipe's last checkpoint.
    expect(g.model.path).toBe(join(s.runDir, "checkpoints", `step-${String(s.steps)}`));
    const ddp = checkConfig(GRPOTrainerConfigSchema, await readConfigFile(join(ROOT, "examples", "configs", "grpo-ddp.yaml")), "grpo-ddp.yaml");
    expect(ddp.workers).toEqual({ trainer: { count: 2, strategy: "ddp", gradientCheckpointing: false }, generator: { count: 2 }, reference: { count: 0 } });
  });
});
