// posttrain as a user gets it from npm: `npm pack` of this checkout, `npm install <tarball>` into an empty project in
// a temp folder (its dependencies from the npm registry), `npx posttrain setup --extras math` (the workers' venv in the
// project's .posttrain/venv, the worker built from the tarball's own sources), then a script in the README's style
// that imports "posttrain", builds the tiny model, runs GRPO steps and checks math-verify through pythonia. The
// project never sees the checkout: it lies outside it, and the environment names neither the checkout's .venv
// (POSTTRAIN_PYTHON, VIRTUAL_ENV, PATH entries) nor npm's variables of the run that started vitest.
import { execFile } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { delimiter, join, resolve } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";

const ROOT = resolve(import.meta.dirname, "..", "..");
const MINUTE = 60_000;

interface Ran {
  readonly stdout: string;
  readonly stderr: string;
  readonly seconds: number;
}

/** The environment of a user's shell: nothing that points into the checkout or its npm run. */
function userEnv(): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [key, value] of Object.entries(process.env)) {
    const lower = key.toLowerCase();
    if (lower.startsWith("npm_") || ["INIT_CWD", "NODE_OPTIONS", "VIRTUAL_ENV", "VITEST", "TEST"].includes(key)) continue;
    if (key.startsWith("POSTTRAIN_") || key.startsWith("VITEST_")) continue;
    env[key] = value;
  }
  env.PATH = (process.env.PATH ?? "")
    .split(delimiter)
    .filter((entry) => entry !== "" && !resolve(entry).startsWith(ROOT))
    .join(delimiter);
  env.HF_HUB_OFFLINE = "1";
  return env;
}

function sh(command: string, args: readonly string[], cwd: string, timeoutMs: number): Promise<Ran> {
  const started = Date.now();
  return new Promise((done, fail) => {
    execFile(command, args, { cwd, env: userEnv(), timeout: timeoutMs, maxBuffer: 64 * 1024 * 1024 }, (err, stdout, stderr) => {
      const seconds = (Date.now() - started) / 1000;
      if (err !== null) fail(new Error(`${command} ${args.join(" ")} failed after ${seconds.toFixed(1)} s: ${err.message}\n${stderr.slice(-4000)}`));
      else done({ stdout, stderr, seconds });
    });
  });
}

// The user's script: the README's GRPO example on the tiny model and the built-in digit-sort task, a few steps.
const SCRIPT = `import { GRPOTrainer, makeTinyModel, openMathVerifier } from "posttrain";
import { resolvePython } from "posttrain/bridge";

const seconds = {};
let t = Date.now();
const lap = (name) => { seconds[name] = (Date.now() - t) / 1000; t = Date.now(); };
const model = await makeTinyModel("tiny-model");
lap("makeTinyModel");
const trainer = await GRPOTrainer.create({
  model: { path: model.path },
  task: { type: "digit-sort" },
  groupSize: 4, promptsPerStep: 4, maxNewTokens: 6,
  optimizer: { lr: 1e-3 }, steps: 3, runDir: "runs/grpo",
});
lap("create");
let summary;
try {
  summary = await trainer.train();
} finally {
  await trainer.close();
}
lap("train");
const verifier = await openMathVerifier({ backend: "math-verify" });
const equivalent = await verifier.equivalent("0.5", "\\\\frac{1}{2}");
await verifier.close();
lap("mathVerify");
console.log(JSON.stringify({ python: resolvePython(), steps: summary.steps, equivalent, seconds }));
`;

describe("npm pack → npm install → posttrain setup → GRPO", () => {
  let dir: string;
  let project: string;
  let tarball: string;
  const timings: Record<string, number> = {};

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), "posttrain-packed-"));
    project = join(dir, "app");
    mkdirSync(project);
    const packed = await sh("npm", ["pack", "--pack-destination", dir, "--silent"], ROOT, 5 * MINUTE);
    timings.pack = packed.seconds;
    tarball = join(dir, readdirSync(dir).find((name) => name.endsWith(".tgz"))!);
    await sh("npm", ["init", "-y"], project, MINUTE);
    const installed = await sh("npm", ["install", "--no-audit", "--no-fund", tarball], project, 5 * MINUTE);
    timings.npmInstall = installed.seconds;
  }, 12 * MINUTE);

  afterAll(() => {
    console.log(`packed install timings (s): ${JSON.stringify(timings)}`);
    if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
  });

  it("the tarball holds the built SDK and the worker's sources, not the checkout's venv or tests", async () => {
    const pkg = join(project, "node_modules", "posttrain");
    for (const path of ["dist/sdk/index.js", "dist/sdk/cli/main.js", "pyproject.toml", "bridge/setup/python-env.mjs", "python_worker/posttrain_worker/__init__.py"]) {
      expect(existsSync(join(pkg, path)), path).toBe(true);
    }
    for (const path of [".venv", "test", "node_modules/.bin"]) expect(existsSync(join(pkg, path)), path).toBe(false);
    // Without a venv, workers cannot start: the error says what to run.
    const run = sh("node", ["-e", 'import("posttrain/bridge").then((p) => p.resolvePython())'], project, MINUTE);
    await expect(run).rejects.toThrow(/PYTHON_ENV_MISSING|npx posttrain setup/);
  });

  it("`npx posttrain setup` builds the venv in the project, and a second run is a no-op", async () => {
    const first = await sh("npx", ["posttrain", "setup", "--extras", "math"], project, 10 * MINUTE);
    timings.setup = first.seconds;
    const python = join(project, ".posttrain", "venv", "bin", "python");
    expect(first.stdout.trim()).toBe(python);
    expect(first.stderr).toMatch(/installing the worker from .*node_modules[/\\]posttrain with extras math/);
    const worker = await sh(python, ["-c", "import posttrain_worker, math_verify, torch; print(posttrain_worker.__file__)"], project, MINUTE);
    expect(worker.stdout).toContain(join(".posttrain", "venv")); // installed into the venv, not linked to sources
    const again = await sh("npx", ["posttrain", "setup", "--extras", "math"], project, 2 * MINUTE);
    timings.setupAgain = again.seconds;
    expect(again.stderr).toMatch(/already set up/);
    expect(again.stdout.trim()).toBe(python);
  }, 12 * MINUTE);

  it("a GRPO script importing \"posttrain\" runs on the tiny model and writes its metrics", async () => {
    writeFileSync(join(project, "train.mjs"), SCRIPT);
    const ran = await sh("node", ["train.mjs"], project, 5 * MINUTE);
    timings.grpo = ran.seconds;
    const result = JSON.parse(ran.stdout.trim().split("\n").at(-1)!) as { python: string; steps: number; equivalent: boolean; seconds: Record<string, number> };
    for (const [phase, s] of Object.entries(result.seconds)) timings[`grpo.${phase}`] = s;
    expect(result.python).toBe(join(project, ".posttrain", "venv", "bin", "python"));
    expect(result.steps).toBe(3);
    expect(result.equivalent).toBe(true); // math-verify through pythonia, a dependency of the installed package
    const records = readFileSync(join(project, "runs", "grpo", "metrics.jsonl"), "utf8")
      .split("\n")
      .filter((line) => line.trim() !== "")
      .map((line) => JSON.parse(line) as Record<string, unknown>);
    const steps = records.filter((r) => typeof r.step === "number" && typeof r.loss === "number");
    expect(steps.map((r) => r.step)).toEqual([1, 2, 3]);
    for (const r of steps) expect(Number.isFinite(r.loss)).toBe(true);
    expect(existsSync(join(project, "runs", "grpo", "report.html"))).toBe(true);
  }, 6 * MINUTE);
});
