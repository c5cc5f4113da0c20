import { existsSync, readFileSync } from "node:fs";
import { dirname, join, resolve, sep } from "node:path";
import { fileURLToPath } from "node:url";
import { PythonEnvMissingError } from "../errors.js";

// The checkout's venv, made by bridge/setup/bootstrap.mjs.
const venvPython = (root: string): string => venvInterpreter(join(root, ".venv"));

/** The root of the posttrain package (the folder holding its package.json), found from this module's location. */
export function packageRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (;;) {
    const manifest = join(dir, "package.json");
    if (existsSync(manifest)) {
      try {
        const name = (JSON.parse(readFileSync(manifest, "utf8")) as { name?: unknown }).name;
        if (name === "posttrain") return dir;
      } catch {
        // not ours; keep walking up
      }
    }
    const parent = dirname(dir);
    if (parent === dir) return process.cwd();
    dir = parent;
  }
}

/** Where {@link resolvePython} looks: the environment, the posttrain package folder and the working directory. */
export interface PythonSearchContext {
  readonly env: Readonly<Record<string, string | undefined>>;
  readonly packageRoot: string;
  readonly cwd: string;
}

const currentContext = (): PythonSearchContext => ({ env: process.env, packageRoot: packageRoot(), cwd: process.cwd() });

/**
 * The folders npm installs global packages in: `<prefix>/lib/node_modules` (POSIX) or `<prefix>/node_modules`
 * (Windows), for `$npm_config_global_prefix` and `$npm_config_prefix` (npm and npx set them) and for the prefix of
 * this Node (npm's default).
 */
function globalModuleRoots(env: PythonSearchContext["env"]): string[] {
  const windows = process.platform === "win32";
  const nodePrefix = windows ? dirname(process.execPath) : dirname(dirname(process.execPath));
  const prefixes = [env.npm_config_global_prefix, env.npm_config_prefix, nodePrefix].filter((p): p is string => p !== undefined && p !== "");
  return prefixes.map((prefix) => (windows ? join(resolve(prefix), "node_modules") : join(resolve(prefix), "lib", "node_modules")));
}

/** Whether `dir` is `root` or inside it. */
const isWithin = (dir: string, root: string): boolean => dir === root || dir.startsWith(root.endsWith(sep) ? root : root + sep);

/**
 * The venv that `posttrain setup` creates and workers use: `$POSTTRAIN_VENV` when set, else `.posttrain/venv` in the
 * project, the folder holding the first `node_modules` above posttrain (so pnpm's `node_modules/.pnpm/...` nesting
 * resolves to the project too). Outside a `node_modules` (a checkout, a linked package), for a global install and in
 * npx's cache (`_npx` in the path), it is the working directory's `.posttrain/venv`.
 *
 * ```ts
 * const venv = setupVenvDir(); // e.g. /home/me/app/.posttrain/venv
 * ```
 */
export function setupVenvDir(context: PythonSearchContext = currentContext()): string {
  const fromEnv = context.env.POSTTRAIN_VENV;
  if (fromEnv !== undefined && fromEnv !== "") return resolve(context.cwd, fromEnv);
  const root = resolve(context.packageRoot);
  const parts = root.split(sep);
  const nodeModules = parts.indexOf("node_modules");
  const shared = parts.includes("_npx") || globalModuleRoots(context.env).some((global) => isWithin(root, global));
  const project = nodeModules > 0 && !shared ? parts.slice(0, nodeModules).join(sep) || sep : resolve(context.cwd);
  return join(project, ".posttrain", "venv");
}

/** The interpreter inside a venv folder (`bin/python`, or `Scripts\python.exe` on Windows). */
export function venvInterpreter(venvDir: string): string {
  return process.platform === "win32" ? join(venvDir, "Scripts", "python.exe") : join(venvDir, "bin", "python");
}

/**
 * The Python interpreter that runs workers, in order of preference: the explicit option, `$POSTTRAIN_PYTHON`, the
 * venv of `posttrain setup` ({@link setupVenvDir}: `$POSTTRAIN_VENV`, else `<project>/.posttrain/venv`), the `.venv`
 * that `npm run bootstrap` creates in a checkout of posttrain, then a `.venv` in the working directory. Throws
 * `PythonEnvMissingError` (code `PYTHON_ENV_MISSING`, saying to run `npx posttrain setup`) when `$POSTTRAIN_VENV`
 * has no interpreter or none of these exists.
 *
 * ```ts
 * const python = resolvePython(); // the interpreter `launchLocalWorkers` starts by default
 * ```
 */
export function resolvePython(explicit?: string, context: PythonSearchContext = currentContext()): string {
  if (explicit !== undefined && explicit !== "") return explicit;
  const fromEnv = context.env.POSTTRAIN_PYTHON;
  if (fromEnv !== undefined && fromEnv !== "") return fromEnv;
  const setupPython = venvInterpreter(setupVenvDir(context));
  const venvFromEnv = context.env.POSTTRAIN_VENV;
  if (venvFromEnv !== undefined && venvFromEnv !== "") {
    if (existsSync(setupPython)) return setupPython;
    throw new PythonEnvMissingError(
      `POSTTRAIN_VENV=${venvFromEnv}: expected a Python venv with the posttrain worker, but ${setupPython} does not ` +
        "exist; run `npx posttrain setup` to create it there",
      [setupPython],
    );
  }
  const searched = [setupPython, venvPython(context.packageRoot), venvPython(resolve(context.cwd))];
  const found = searched.find((candidate) => existsSync(candidate));
  if (found !== undefined) return found;
  throw new PythonEnvMissingError(
    `no Python environment for the posttrain workers: looked for ${searched.join(", ")}; run \`npx posttrain setup\` ` +
      "in your project (or set POSTTRAIN_PYTHON to an interpreter that has posttrain_worker)",
    searched,
  );
}
