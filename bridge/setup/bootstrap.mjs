#!/usr/bin/env node
// Idempotent setup for a checkout of posttrain: npm packages, then a Python venv in .venv with the worker
// installed editable, with its test extras (TRL, TorchRL, ... for the parity tests) unless `--runtime` is given
// (`npm run demo` needs only the runtime). A stamp of the inputs makes a second run a no-op (well under 5 s).
// Plain Node with no dependencies: it runs before node_modules exists.
// It records how long it took in node_modules/.posttrain-setup.json, so the demo can count setup in its budget.
import { spawnSync } from "node:child_process";
import { createHash } from "node:crypto";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
const STAMP_VERSION = "1";
const CPU_TORCH = "torch==2.13.0";
const isWindows = process.platform === "win32";
const venvPython = join(ROOT, ".venv", isWindows ? "Scripts/python.exe" : "bin/python");
const runtimeOnly = process.argv.slice(2).includes("--runtime");

function log(message) {
  process.stderr.write(`[posttrain setup] ${message}\n`);
}

function fail(message) {
  log(`error: ${message}`);
  process.exit(1);
}

function hashOf(...parts) {
  const h = createHash("sha256");
  for (const p of parts) h.update(existsSync(p) ? readFileSync(p) : `missing:${p}`);
  return h.update(STAMP_VERSION).digest("hex");
}

function readStamp(path) {
  return existsSync(path) ? readFileSync(path, "utf8").trim() : "";
}

function run(command, args, what) {
  const started = Date.now();
  const result = spawnSync(command, args, { cwd: ROOT, stdio: ["ignore", "inherit", "inherit"], shell: isWindows });
  if (result.error) fail(`${what}: could not run ${command} (${result.error.message})`);
  if (result.status !== 0) fail(`${what}: \`${command} ${args.join(" ")}\` exited with ${result.status}`);
  log(`${what}: done in ${((Date.now() - started) / 1000).toFixed(1)} s`);
}

function succeeds(command, args) {
  const result = spawnSync(command, args, { cwd: ROOT, stdio: "ignore", timeout: 20_000 });
  return !result.error && result.status === 0;
}

function ensureNodeModules() {
  const lock = join(ROOT, "package-lock.json");
  const stampPath = join(ROOT, "node_modules", ".posttrain-stamp");
  const want = hashOf(join(ROOT, "package.json"), lock);
  if (existsSync(join(ROOT, "node_modules")) && readStamp(stampPath) === want) return;
  log("installing npm packages");
  const npm = isWindows ? "npm.cmd" : "npm";
  run(npm, existsSync(lock) ? ["ci", "--no-audit", "--no-fund"] : ["install", "--no-audit", "--no-fund"], "npm packages");
  writeFileSync(stampPath, want);
}

function findBasePython() {
  const candidates = process.env.POSTTRAIN_BOOTSTRAP_PYTHON
    ? [process.env.POSTTRAIN_BOOTSTRAP_PYTHON]
    : ["python3.12", "python3.11", "python3.10", "python3", "python"];
  for (const candidate of candidates) {
    if (succeeds(candidate, ["-c", "import sys, venv; sys.exit(0 if sys.version_info >= (3, 10) else 1)"])) {
      return candidate;
    }
  }
  return fail(
    "no Python >= 3.10 with the venv module found (tried " + candidates.join(", ") + "); " +
      "install one or set POSTTRAIN_BOOTSTRAP_PYTHON",
  );
}

function ensureVenv() {
  const stampPath = join(ROOT, ".venv", ".posttrain-stamp");
  const torchSpec = process.env.POSTTRAIN_TORCH_SPEC ?? "";
  const base = hashOf(join(ROOT, "pyproject.toml")) + `:${torchSpec}`;
  const want = `${base}:${runtimeOnly ? "runtime" : "test"}`;
  const have = readStamp(stampPath);
  // An install with the test extras also serves the runtime.
  if (existsSync(venvPython) && (have === want || (runtimeOnly && have === `${base}:test`))) return;
  if (!existsSync(venvPython)) {
    const base = findBasePython();
    log(`creating .venv with ${base} (first run: about 1 to 2 minutes in all)`);
    run(base, ["-m", "venv", join(ROOT, ".venv")], "virtual environment");
  }
  const pip = [venvPython, "-m", "pip"];
  const pipArgs = ["install", "--disable-pip-version-check", "--progress-bar", "off", "-q"];
  // Without CUDA, pin the CPU build of torch: an unpinned `torch` would pull a multi-GB CUDA build.
  // With CUDA present the user's own torch (or the default CUDA build) is kept.
  const hasCuda = succeeds("nvidia-smi", ["-L"]);
  const spec = torchSpec !== "" ? torchSpec : hasCuda ? "" : CPU_TORCH;
  if (spec !== "") {
    log(`installing ${spec}${hasCuda ? "" : " (no CUDA found: CPU build)"}`);
    run(pip[0], [...pip.slice(1), ...pipArgs, spec], "torch");
  }
  log(`installing the worker (python_worker/, editable)${runtimeOnly ? "" : " with its test extras"}`);
  run(pip[0], [...pip.slice(1), ...pipArgs, "-e", runtimeOnly ? ROOT : `${ROOT}[test]`], "posttrain_worker");
  writeFileSync(stampPath, want);
}

const started = Date.now();
ensureNodeModules();
ensureVenv();
const seconds = (Date.now() - started) / 1000;
if (seconds > 1) log(`ready in ${seconds.toFixed(1)} s`);
writeFileSync(join(ROOT, "node_modules", ".posttrain-setup.json"), JSON.stringify({ finishedAt: Date.now(), seconds }));
