/**
 * Run config files for `posttrain grpo` / `posttrain sft`: read YAML (or JSON, which is YAML), apply the command
 * line's overrides, and check the result against the trainer's schema with messages that name the field, the value
 * and what is allowed.
 */
import { readFile } from "node:fs/promises";
import { parse as parseYaml, YAMLParseError } from "yaml";
import type { z } from "zod";
import { PosttrainError } from "../core/errors.js";
import { fieldProblems } from "../core/validation.js";

/** A config file that cannot be read, is not valid YAML, or does not fit the trainer's schema (exit code 2). */
export class ConfigFileError extends PosttrainError {
  constructor(message: string, options?: { cause?: unknown }) {
    super("INVALID_CONFIG", message, options);
  }
}

/** A plain (non-array) object. */
function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** Reads `path` as a YAML mapping (the run config). */
export async function readConfigFile(path: string): Promise<Record<string, unknown>> {
  let text: string;
  try {
    text = await readFile(path, "utf8");
  } catch (cause) {
    const code = (cause as NodeJS.ErrnoException).code;
    const why = code === "ENOENT" ? "no such file" : code === "EISDIR" ? "is a directory" : String(cause);
    throw new ConfigFileError(`--config ${path}: cannot read it (${why})`, { cause });
  }
  let value: unknown;
  try {
    value = parseYaml(text);
  } catch (cause) {
    if (cause instanceof YAMLParseError) {
      const at = cause.linePos?.[0];
      const where = at === undefined ? "" : ` at line ${String(at.line)}, column ${String(at.col)}`;
      const first = cause.message.split("\n")[0] ?? cause.message;
      throw new ConfigFileError(`${path}: not valid YAML${where}: ${first.replace(/ at line \d+, column \d+:?$/, "")}`, { cause });
    }
    throw cause;
  }
  if (!isRecord(value)) {
    const got = value === null || value === undefined ? "an empty file" : Array.isArray(value) ? "a list" : `a ${typeof value}`;
    throw new ConfigFileError(`${path}: expected a mapping of config fields (model:, task:, ...), got ${got}`);
  }
  return value;
}

/**
 * Sets `dotted` (`optimizer.lr`) to `value` in a copy of `config`, creating the intermediate mappings. Used for
 * `--set`, `--steps` and `--run-dir`.
 */
export function setField(config: Readonly<Record<string, unknown>>, dotted: string, value: unknown): Record<string, unknown> {
  const keys = dotted.split(".");
  if (keys.some((k) => k === "")) throw new ConfigFileError(`--set ${dotted}: not a field path (expected names joined by dots)`);
  const root: Record<string, unknown> = { ...config };
  let node = root;
  keys.forEach((key, i) => {
    if (i === keys.length - 1) {
      node[key] = value;
      return;
    }
    const child = node[key];
    if (child !== undefined && !isRecord(child)) {
      throw new ConfigFileError(`--set ${dotted}: ${keys.slice(0, i + 1).join(".")} is not a mapping`);
    }
    const copy = { ...(child ?? {}) };
    node[key] = copy;
    node = copy;
  });
  return root;
}

/** Parses `--set key.path=value`: the value is read as YAML (`3e-4` → number, `true` → boolean, `[0.2, 0.28]` → list). */
export function parseAssignment(text: string): { path: string; value: unknown } {
  const eq = text.indexOf("=");
  if (eq <= 0) throw new ConfigFileError(`--set ${JSON.stringify(text)}: expected FIELD=VALUE, e.g. optimizer.lr=3e-4`);
  const path = text.slice(0, eq).trim();
  const raw = text.slice(eq + 1);
  try {
    return { path, value: raw.trim() === "" ? "" : (parseYaml(raw) as unknown) };
  } catch (cause) {
    throw new ConfigFileError(`--set ${path}: cannot read the value ${JSON.stringify(raw)} as YAML`, { cause });
  }
}

/**
 * Checks `config` against `schema`; returns the parsed config or throws a {@link ConfigFileError} with one line per
 * problem: `source: field.path: got <value>: <what is allowed>`.
 */
export function checkConfig<T>(schema: z.ZodType<T>, config: unknown, source: string): T {
  const parsed = schema.safeParse(config);
  if (parsed.success) return parsed.data;
  const lines = fieldProblems(schema, config, parsed.error).map((p) => {
    const field = p.path.length > 0 ? p.path.map(String).join(".") : "(top level)";
    if (p.unknownKey !== undefined) return `  ${field}: not a config field here${p.unknownKey.hint}`;
    const value = p.given === undefined ? (p.code === "invalid_type" && p.path.length > 0 ? "missing" : undefined) : `got ${p.given}`;
    return `  ${field}: ${value === undefined ? "" : `${value}: `}${p.message}`;
  });
  throw new ConfigFileError(`${source}: invalid config\n${lines.join("\n")}`);
}
