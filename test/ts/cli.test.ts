// The `posttrain` command line (sdk/cli/main.ts), run from source in a child process (`node --import tsx`): help, usage and
// config errors (exit 2 naming the field and value), `info`, `make-tiny-model`, `report`. The training commands'
// real runs are in cli.train.test.ts.
import { execFile } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { resolvePython } from "../../bridge/index.js";
import { TinyModelConfigSchema } from "../../sdk/index.js";

const ROOT = resolve(import.meta.dirname, "..", "..");
const CLI = join(ROOT, "sdk", "cli", "main.ts");
const COMMANDS = ["setup", "grpo", "sft", "ppo", "report", "make-tiny-model", "info"] as const;

interface Run {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

function posttrain(...args: string[]): Promise<Run> {
  return new Promise((done) => {
    execFile(process.execPath, ["--import", "tsx", CLI, ...args], { cwd: ROOT, timeout: 50_000 }, (err, stdout, stderr) => {
      const code = err === null ? 0 : typeof err.code === "number" ? err.code : null;
      done({ code, stdout, stderr });
    });
  });
}

let dir: string;
beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), "posttrain-cli-"));
});
afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
});

/** Writes `text` to a file in the test's directory and returns its path. */
function file(name: string, text: string): string {
  const path = join(dir, name);
  writeFileSync(path, text);
  return path;
}

describe("posttrain CLI: help and usage", () => {
  it("--help lists every command", async () => {
    const run = await posttrain("--help");
    expect(run.code).toBe(0);
    expect(run.stdout).toMatch(/^Usage: posttrain <command> \[options\]/);
    for (const name of COMMANDS) expect(run.stdout).toMatch(new RegExp(`^ {2}${name} +\\S`, "m"));
    expect(run.stderr).toBe("");
  });

  it("no command prints the usage too", async () => {
    const run = await posttrain();
    expect(run.code).toBe(0);
    expect(run.stdout).toMatch(/^Usage: posttrain/);
  });

  it.each(COMMANDS)("%s --help prints that command's usage", async (name) => {
    const run = await posttrain(name, "--help");
    expect(run.code, run.stderr).toBe(0);
    expect(run.stdout).toMatch(new RegExp(`^Usage: posttrain ${name}( |$)`, "m"));
    expect(run.stdout).toContain("-h, --help");
    expect(run.stderr).toBe("");
    const short = await posttrain(name, "-h");
    expect(short.stdout).toBe(run.stdout);
  });

  it("setup refuses an unknown extra with exit 2, naming the extras there are", async () => {
    const run = await posttrain("setup", "--venv", join(dir, "never-made"), "--extras", "math,nonsense");
    expect(run.code).toBe(2);
    expect(run.stderr).toMatch(/^posttrain setup: extras: expected some of .*\bmath\b.*, got "nonsense"/);
    expect(existsSync(join(dir, "never-made"))).toBe(false);
  });

  it("the training commands' help names their flags, Ctrl-C and the exit codes", async () => {
    for (const name of ["grpo", "sft"]) {
      const run = await posttrain(name, "--help");
      for (const flag of ["--config FILE", "--run-dir DIR", "--steps N", "--set FIELD=VALUE", "--resume"]) expect(run.stdout).toContain(flag);
      expect(run.stdout).toContain("Ctrl-C");
      expect(run.stdout).toContain("130 interrupted");
      expect(run.stdout).toContain(`examples/configs/${name}-digit-sort.yaml`);
    }
  });

  it("--version prints the version in package.json", async () => {
    const { version } = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")) as { version: string };
    const run = await posttrain("--version");
    expect(run.code).toBe(0);
    expect(run.stdout).toBe(`${version}\n`);
  });

  it("an unknown command exits 2 with a message and the usage", async () => {
    const run = await posttrain("frobnicate");
    expect(run.code).toBe(2);
    expect(run.stderr).toContain('posttrain: unknown command "frobnicate"');
    expect(run.stderr).toContain("Usage: posttrain");
    expect(run.stdout).toBe("");
  });

  it("an unknown option exits 2 with a message and that command's usage", async () => {
    const run = await posttrain("info", "--bogus");
    expect(run.code).toBe(2);
    expect(run.stderr).toContain("posttrain info:");
    expect(run.stderr).toContain("--bogus");
    expect(run.stderr).toContain("Usage: posttrain info");
  });

  it("info --device gpu exits 2 naming the flag, the value and the choices", async () => {
    const run = await posttrain("info", "--device", "gpu");
    expect(run.code).toBe(2);
    expect(run.stderr).toContain('--device: expected cpu, cuda or auto, got "gpu"');
    expect(run.stdout).toBe("");
  });
});

describe("posttrain grpo / sft: config errors exit 2 before any worker starts", () => {
  it("a missing --config exits 2 with the command's usage", async () => {
    for (const name of ["grpo", "sft"]) {
      const run = await posttrain(name);
      expect(run.code).toBe(2);
      expect(run.stderr).toContain(`posttrain ${name}: --config FILE is required`);
      expect(run.stderr).toContain(`Usage: posttrain ${name} --config FILE`);
      expect(run.stdout).toBe("");
    }
  });

  it("--resume without --config needs --run-dir", async () => {
    const run = await posttrain("grpo", "--resume");
    expect(run.code).toBe(2);
    expect(run.stderr).toContain("--config FILE is required");
  });

  it("a config file that does not exist exits 2 naming it", async () => {
    const missing = join(dir, "nope.yaml");
    const run = await posttrain("grpo", "--config", missing);
    expect(run.code).toBe(2);
    expect(run.stderr).toContain(`--config ${missing}: cannot read it (no such file)`);
  });

  it("a YAML syntax error exits 2 with the line", async () => {
    const path = file("broken.yaml", "model: { path: tiny }\ntask: [digit-sort\nsteps: 3\n");
    const run = await posttrain("grpo", "--config", path);
    expect(run.code).toBe(2);
    expect(run.stderr).toMatch(new RegExp(`${path.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}: not valid YAML at line 3`));
  });

  it("a config that is not a mapping exits 2", async () => {
    const path = file("list.yaml", "- model\n- task\n");
    const run = await posttrain("sft", "--config", path);
    expect(run.code).toBe(2);
    expect(run.stderr).toContain("expected a mapping of config fields (model:, task:, ...), got a list");
  });

  it("bad GRPO fields exit 2 naming each field, its value and what is allowed", async () => {
    const path = file(
      "bad-grpo.yaml",
      [
        "model: { path: tiny, dtype: float64 }",
        "task: { type: digit-sorting }",
        "groupSize: 1",
        "loss: { variant: ppo }",
        "steps: 3",
        "runDir: /tmp/never",
        "learningRate: 0.1",
      ].join("\n"),
    );
    const run = await posttrain("grpo", "--config", path);
    expect(run.code).toBe(2);
    expect(run.stdout).toBe("");
    const err = run.stderr;
    expect(err).toContain(`${path}: invalid config`);
    expect(err).toMatch(/model\.dtype: got "float64": .*float32/);
    expect(err).toMatch(/task\.type: got "digit-sorting": .*digit-sort/);
    expect(err).toMatch(/groupSize: got 1: .*>=2/);
    expect(err).toMatch(/loss\.variant: got "ppo": .*"grpo"\|"dapo"\|"cispo"\|"gspo"\|"sapo"/);
    expect(err).toMatch(/learningRate: not a config field here; allowed: .*optimizer/);
  });

  it("a loss field of another variant exits 2 naming the variant", async () => {
    const path = file("bad-loss.yaml", "model: { path: tiny }\ntask: { type: digit-sort }\nloss: { variant: grpo, tauPos: 1 }\nsteps: 2\nrunDir: /tmp/never\n");
    const run = await posttrain("grpo", "--config", path);
    expect(run.code).toBe(2);
    expect(run.stderr).toContain('not a field of loss variant "grpo": tauPos');
  });

  it("bad SFT fields exit 2 too; a missing steps is named", async () => {
    const path = file("bad-sft.yaml", "model: { path: tiny }\ndata: { type: digit-sort }\nbatchSize: two\nrunDir: /tmp/never\n");
    const run = await posttrain("sft", "--config", path);
    expect(run.code).toBe(2);
    expect(run.stderr).toMatch(/batchSize: got "two": .*expected number/);
    const noSteps = file("no-steps.yaml", "model: { path: tiny }\ndata: { type: digit-sort }\nrunDir: /tmp/never\n");
    const run2 = await posttrain("sft", "--config", noSteps);
    expect(run2.code).toBe(2);
    expect(run2.stderr).toMatch(/steps: .*required/);
  });

  it("flags override fields and are checked like them", async () => {
    const config = resolve(ROOT, "examples", "configs", "grpo-digit-sort.yaml");
    const badSteps = await posttrain("grpo", "--config", config, "--steps", "0");
    expect(badSteps.code).toBe(2);
    expect(badSteps.stderr).toContain('--steps: expected an integer >= 1, got "0"');
    const badSet = await posttrain("grpo", "--config", config, "--set", "groupSize=one");
    expect(badSet.code).toBe(2);
    expect(badSet.stderr).toMatch(/groupSize: got "one": .*expected number/);
    const noEquals = await posttrain("grpo", "--config", config, "--set", "groupSize");
    expect(noEquals.code).toBe(2);
    expect(noEquals.stderr).toContain("expected FIELD=VALUE");
    const notMapping = await posttrain("grpo", "--config", config, "--set", "groupSize.x=1");
    expect(notMapping.code).toBe(2);
    expect(notMapping.stderr).toContain("--set groupSize.x: groupSize is not a mapping");
  });
});

describe("posttrain report", () => {
  it("writes report.html for a run directory and prints its path", async () => {
    const runDir = join(dir, "run");
    mkdirSync(runDir);
    const lines = Array.from({ length: 12 }, (_, i) => JSON.stringify({ step: i + 1, reward_mean: Math.sqrt(i) / 4, kl_approx: i / 1000, loss: 1 / (i + 1) }));
    writeFileSync(join(runDir, "metrics.jsonl"), `${lines.join("\n")}\n`);
    writeFileSync(join(runDir, "samples.jsonl"), `${JSON.stringify({ step: 1, prompt: "sort 4 digits: 3817", completion: "1378", reward: 1 })}\n`);
    writeFileSync(join(runDir, "config.yaml"), "groupSize: 8\n");
    const run = await posttrain("report", runDir, "--title", "CLI report");
    expect(run.code, run.stderr).toBe(0);
    const path = join(runDir, "report.html");
    expect(run.stdout).toBe(`${path}\n`);
    const html = readFileSync(path, "utf8");
    expect(html).toContain("<title>CLI report</title>");
    expect(html).toContain("12 logged steps, last step 12");
    expect(html.match(/<svg/g)?.length).toBe(3); // reward, KL, loss
    expect(html).toContain("sort 4 digits: 3817");
    expect(html).toContain("groupSize: 8");
  });

  it("a directory without metrics.jsonl exits 1 saying it is not a run directory", async () => {
    const empty = join(dir, "empty");
    mkdirSync(empty);
    const run = await posttrain("report", empty);
    expect(run.code).toBe(1);
    expect(run.stderr).toContain(`REPORT_FAILED: ${empty}: no metrics.jsonl (is this a run directory?)`);
    expect(existsSync(join(empty, "report.html"))).toBe(false);
  });

  it("without a directory it exits 2 with the usage", async () => {
    const run = await posttrain("report");
    expect(run.code).toBe(2);
    expect(run.stderr).toContain("posttrain report: expected one run directory, got 0");
    expect(run.stderr).toContain("Usage: posttrain report RUN_DIR");
  });
});

describe("posttrain info and make-tiny-model", () => {
  it("info --device cpu starts a worker and prints its handshake as JSON", { timeout: 60_000 }, async () => {
    const run = await posttrain("info", "--device", "cpu");
    expect(run.code, run.stderr).toBe(0);
    const info = JSON.parse(run.stdout) as {
      protocolVersion: unknown;
      torch: unknown;
      devices: { type: string }[];
      capabilities: { methods: string[] };
    };
    expect(info.protocolVersion).toBe(1);
    expect(info.torch).toMatch(/^\d+\.\d+/);
    expect(info.devices.some((d) => d.type === "cpu")).toBe(true);
    expect(info.capabilities.methods).toEqual(expect.arrayContaining(["ping", "echo", "generate", "train_step"]));
  });

  it("make-tiny-model writes a loadable model directory; a bad size exits 2", { timeout: 60_000 }, async () => {
    const run = await posttrain("make-tiny-model", join(dir, "m"), "--seed", "7");
    expect(run.code, run.stderr).toBe(0);
    expect(run.stdout).toMatch(/\d+ parameters, vocabulary \d+/);
    for (const name of ["config.json", "model.safetensors", "tokenizer.json"]) {
      expect(existsSync(join(dir, "m", name))).toBe(true);
    }
    const bad = await posttrain("make-tiny-model", join(dir, "n"), "--num-layers", "two");
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain('--num-layers: expected an integer >= 1, got "two"');
    expect(existsSync(join(dir, "n"))).toBe(false);
    const none = await posttrain("make-tiny-model");
    expect(none.code).toBe(2);
    expect(none.stderr).toContain("expected one directory, got 0");
  });

  it("make-tiny-model --family builds another architecture with the given chat template; an unknown family exits 2", { timeout: 60_000 }, async () => {
    const template = join(ROOT, "test", "fixtures", "chat_templates", "llama3.jinja");
    const run = await posttrain("make-tiny-model", join(dir, "llama"), "--family", "llama3", "--chat-template", template, "--head-dim", "32");
    expect(run.code, run.stderr).toBe(0);
    const config = JSON.parse(readFileSync(join(dir, "llama", "config.json"), "utf8")) as { model_type: string; head_dim: number };
    expect(config).toMatchObject({ model_type: "llama", head_dim: 32 });
    expect(readFileSync(join(dir, "llama", "chat_template.jinja"), "utf8")).toBe(readFileSync(template, "utf8"));
    const bad = await posttrain("make-tiny-model", join(dir, "gpt"), "--family", "gpt9");
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/family.*gpt9|gpt9.*family/);
    expect(existsSync(join(dir, "gpt"))).toBe(false);
  });

  it("offers exactly the families the Python builder knows", async () => {
    const python = resolvePython();
    const code = "from posttrain_worker.models.tiny.families import FAMILY_NAMES; print(','.join(FAMILY_NAMES))";
    const names = await new Promise<string>((done, fail) => {
      execFile(python, ["-c", code], (err, stdout) => {
        if (err) fail(new Error(err.message));
        else done(stdout.trim());
      });
    });
    expect([...TinyModelConfigSchema.shape.family.unwrap().options].sort()).toEqual(names.split(",").sort());
  });
});
