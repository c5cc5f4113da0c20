import { existsSync, readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const venvPython = (root: string): string =>
  process.platform === "win32" ? join(root, ".venv", "Scripts", "python.exe") : join(root, ".venv", "bin", "python");

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

/**
 * The Python interpreter that runs workers, in order of preference: the explicit option, `$POSTTRAIN_PYTHON`,
 * the `.venv` that `npm run bootstrap` creates in the posttrain package, a `.venv` in the working directory,
 * then `python3` from the PATH.
 */
export function resolvePython(explicit?: string): string {
  if (explicit !== undefined && explicit !== "") return explicit;
  const fromEnv = process.env.POSTTRAIN_PYTHON;
  if (fromEnv !== undefined && fromEnv !== "") return fromEnv;
  for (const root of [packageRoot(), resolve(process.cwd())]) {
    const candidate = venvPython(root);
    if (existsSync(candidate)) return candidate;
  }
  return process.platform === "win32" ? "python" : "python3";
}
