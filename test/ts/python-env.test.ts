// Where workers' Python comes from (bridge/worker/python.ts: resolvePython, setupVenvDir) and the extras that
// `posttrain setup` offers (bridge/setup/worker-env.ts), on folders made here: no Python is started. The real setup
// of an installed package runs in packed-install.test.ts.
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { PythonEnvMissingError } from "../../bridge/errors.js";
import { CPU_TORCH, CPU_TORCH_LOCAL, torchRequirement } from "../../bridge/setup/python-env.mjs";
import { availableExtras, setupWorkerEnv } from "../../bridge/setup/worker-env.js";
import { resolvePython, setupVenvDir, venvInterpreter, type PythonSearchContext } from "../../bridge/worker/python.js";

const ROOT = resolve(import.meta.dirname, "..", "..");
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

  it("rejects an unknown extra before touching anything, naming the ones there are", async () => {
    const venv = join(dir, "never-made");
    await expect(setupWorkerEnv({ venv, extras: ["maths"] })).rejects.toThrow(/extras: expected some of .*math.*, got "maths"/);
    await expect(setupWorkerEnv({ venv, extras: [""] })).rejects.toMatchObject({ code: "INVALID_ARGUMENT" });
    expect(() => readFileSync(venvInterpreter(venv))).toThrow();
  });
});
