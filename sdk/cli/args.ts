/**
 * Command-line plumbing shared by the `posttrain` commands: the command shape, exit codes, usage errors and
 * flag parsing on top of `node:util` `parseArgs`.
 */
import { parseArgs, type ParseArgsConfig } from "node:util";
import { PosttrainError } from "../core/errors.js";

/** Process exit codes of the `posttrain` command line. */
export const EXIT = {
  /** Success. */
  ok: 0,
  /** The command failed (a worker error, a run directory that cannot be read, ...). */
  failure: 1,
  /** A usage or config mistake: unknown option, bad flag value, missing or invalid config file. */
  usage: 2,
  /** Stopped by Ctrl-C (SIGINT) after saving a checkpoint, or at once on a second signal (128 + SIGINT). */
  interrupted: 130,
  /** Stopped by SIGTERM (`docker stop`, Kubernetes) after saving a checkpoint, or at once on a second signal (128 + SIGTERM). */
  terminated: 143,
} as const;

/**
 * Error codes of config mistakes (exit 2): a bad config file or field (`INVALID_CONFIG`, `INVALID_ARGUMENT`), a run
 * directory that cannot be used as asked (`RUN_DIRECTORY`), a resume whose config differs (`RUN_CONFIG_MISMATCH`), a
 * resume with no checkpoint (`NO_CHECKPOINT`), a config that asks for what this environment lacks (a tracker or
 * `datasets` not installed, a Hub dataset not in the offline cache).
 */
export const CONFIG_ERROR_CODES: ReadonlySet<string> = new Set([
  "INVALID_CONFIG",
  "INVALID_ARGUMENT",
  "RUN_DIRECTORY",
  "RUN_CONFIG_MISMATCH",
  "NO_CHECKPOINT",
  "TRACKER_UNAVAILABLE",
  "DATASETS_NOT_INSTALLED",
  "DATASET_NOT_CACHED",
]);

/** The exit code of a run stopped by `signal`. */
export function signalExitCode(signal: "SIGINT" | "SIGTERM"): number {
  return signal === "SIGTERM" ? EXIT.terminated : EXIT.interrupted;
}

/** Lines the CLI prints on stderr after an error's message (e.g. how to resume a failed run). */
const errorHints = new WeakMap<object, string>();

/** Attaches `hint` to `err`; `posttrain` prints it on stderr after the error's message. */
export function setErrorHint(err: unknown, hint: string): void {
  if (typeof err === "object" && err !== null) errorHints.set(err, hint);
}

/** The hint attached to `err` by {@link setErrorHint}, if any. */
export function errorHint(err: unknown): string | undefined {
  return typeof err === "object" && err !== null ? errorHints.get(err) : undefined;
}

/** Characters a POSIX shell takes literally in a word: anything else gets single quotes. */
const SHELL_SAFE = /^[\w@%+=:,./-]+$/;

/** `args` as one POSIX shell command line, each word quoted where the shell would otherwise change it. */
export function shellCommand(args: readonly string[]): string {
  return args.map((a) => (SHELL_SAFE.test(a) ? a : `'${a.replaceAll("'", `'\\''`)}'`)).join(" ");
}

/** One `posttrain <command>`. */
export interface Command {
  /** The word after `posttrain`. */
  readonly name: string;
  /** One line for the top-level help. */
  readonly summary: string;
  /** The full `posttrain <command> --help` text. */
  readonly help: string;
  /** Runs the command on the arguments after its name; resolves to the exit code. */
  run(args: readonly string[]): Promise<number>;
}

/** A command-line mistake (unknown option, missing argument, malformed value); the CLI exits with code 2. */
export class UsageError extends PosttrainError {
  /** The command whose usage to print with the message (`undefined`: the top-level usage). */
  readonly command: string | undefined;

  constructor(message: string, command?: string) {
    super("USAGE", message);
    this.command = command;
  }
}

type Options = NonNullable<ParseArgsConfig["options"]>;

/** Parsed flag values: a string or boolean, or a list for options declared `multiple`. */
export type FlagValues = Readonly<Record<string, string | boolean | (string | boolean)[] | undefined>>;

/** Errors of `parseArgs` (unknown option, missing value, stray positional). */
function isParseArgsError(err: unknown): err is Error {
  return err instanceof Error && "code" in err && typeof err.code === "string" && err.code.startsWith("ERR_PARSE_ARGS_");
}

/**
 * `parseArgs` in strict mode with `--help`/`-h` added; its errors become {@link UsageError}s naming `command`.
 * Returns the flag values (strings and booleans) and the positionals.
 */
export function parseCommandArgs(
  command: string,
  args: readonly string[],
  options: Options,
  allowPositionals = false,
): { values: FlagValues; positionals: string[]; help: boolean } {
  try {
    const { values, positionals } = parseArgs({
      args: [...args],
      allowPositionals,
      strict: true,
      options: { ...options, help: { type: "boolean", short: "h" } },
    });
    return { values, positionals, help: values.help === true };
  } catch (err) {
    if (isParseArgsError(err)) throw new UsageError(err.message, command);
    throw err;
  }
}

/** A string flag's value (`undefined` when absent; the last one when repeated). */
export function stringFlag(values: FlagValues, name: string): string | undefined {
  const value = values[name];
  const last = Array.isArray(value) ? value.at(-1) : value;
  return typeof last === "string" ? last : undefined;
}

/** Every value of a repeatable string flag, in order. */
export function stringList(values: FlagValues, name: string): string[] {
  const value = values[name];
  const all = Array.isArray(value) ? value : value === undefined ? [] : [value];
  return all.filter((v): v is string => typeof v === "string");
}

/**
 * Parses an integer flag value: `--name: expected an integer >= min, got "raw"` as a {@link UsageError} when it is
 * not one.
 */
export function integerFlag(command: string, name: string, raw: string, min = Number.MIN_SAFE_INTEGER): number {
  const value = Number(raw);
  if (raw.trim() === "" || !Number.isSafeInteger(value) || value < min) {
    const bound = min === Number.MIN_SAFE_INTEGER ? "" : ` >= ${String(min)}`;
    throw new UsageError(`--${name}: expected an integer${bound}, got ${JSON.stringify(raw)}`, command);
  }
  return value;
}

/** Checks a flag value against a list of choices: `--name: expected a, b or c, got "x"` otherwise. */
export function choiceFlag<T extends string>(command: string, name: string, raw: string, choices: readonly T[]): T {
  const found = choices.find((c) => c === raw);
  if (found === undefined) {
    const list = choices.length > 1 ? `${choices.slice(0, -1).join(", ")} or ${String(choices.at(-1))}` : String(choices[0]);
    throw new UsageError(`--${name}: expected ${list}, got ${JSON.stringify(raw)}`, command);
  }
  return found;
}

/** Writes `text` to stdout (a newline is added when missing). */
export function say(text: string): void {
  process.stdout.write(text.endsWith("\n") ? text : `${text}\n`);
}
