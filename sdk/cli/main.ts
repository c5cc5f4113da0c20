#!/usr/bin/env node
/**
 * The `posttrain` command line: dispatches to one command per file in `commands/`, maps errors to exit codes
 * (1: failure, 2: usage or config mistake, 130: interrupted, 143: terminated by SIGTERM). Commands load the SDK
 * (workers, trainers) only when they run, so help and usage errors answer at once.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { PosttrainError } from "../core/errors.js";
import { packageRoot } from "../../bridge/worker/python.js";
import { CONFIG_ERROR_CODES, EXIT, UsageError, errorHint, type Command } from "./args.js";
import { grpoCommand } from "./commands/grpo.js";
import { infoCommand } from "./commands/info.js";
import { makeTinyModelCommand } from "./commands/make-tiny-model.js";
import { ppoCommand } from "./commands/ppo.js";
import { reportCommand } from "./commands/report.js";
import { setupCommand } from "./commands/setup.js";
import { sftCommand } from "./commands/sft.js";

const COMMANDS: readonly Command[] = [setupCommand, grpoCommand, sftCommand, ppoCommand, reportCommand, makeTinyModelCommand, infoCommand];

function usage(): string {
  const width = Math.max(...COMMANDS.map((c) => c.name.length)) + 2;
  const lines = COMMANDS.map((c) => `  ${c.name.padEnd(width)}${c.summary}`);
  return `Usage: posttrain <command> [options]

Commands:
${lines.join("\n")}

Run \`posttrain <command> --help\` for a command's options.

Options:
  -h, --help       Show this help.
  -v, --version    Show the version.
`;
}

/** The version in posttrain's package.json (found from this module, in the source tree or in dist/). */
function version(): string {
  try {
    const manifest = JSON.parse(readFileSync(join(packageRoot(), "package.json"), "utf8")) as { name?: unknown; version?: unknown };
    if (manifest.name === "posttrain" && typeof manifest.version === "string") return manifest.version;
  } catch {
    // fall through
  }
  return "unknown";
}

async function main(argv: readonly string[]): Promise<number> {
  const [name, ...rest] = argv;
  switch (name) {
    case undefined:
    case "-h":
    case "--help":
    case "help":
      process.stdout.write(usage());
      return EXIT.ok;
    case "-v":
    case "--version":
      process.stdout.write(`${version()}\n`);
      return EXIT.ok;
  }
  const command = COMMANDS.find((c) => c.name === name);
  if (command === undefined) {
    process.stderr.write(`posttrain: unknown command ${JSON.stringify(name)}\n\n${usage()}`);
    return EXIT.usage;
  }
  return await command.run(rest);
}

/**
 * Prints `err` (and its hint, such as the command that resumes a failed run) and returns the exit code: 2 for usage
 * and config mistakes, 1 for everything else.
 */
function report(err: unknown): number {
  if (err instanceof UsageError) {
    const command = COMMANDS.find((c) => c.name === err.command);
    const where = command === undefined ? "posttrain" : `posttrain ${command.name}`;
    process.stderr.write(`${where}: ${err.message}\n\n${command?.help ?? usage()}`);
    return EXIT.usage;
  }
  if (err instanceof PosttrainError && CONFIG_ERROR_CODES.has(err.code)) {
    process.stderr.write(`posttrain: ${err.message}\n`);
    return EXIT.usage;
  }
  const message = err instanceof PosttrainError ? `${err.code}: ${err.message}` : String(err);
  const hint = errorHint(err);
  process.stderr.write(`posttrain: ${message}\n${hint === undefined ? "" : `${hint}\n`}`);
  return EXIT.failure;
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (err: unknown) => {
    process.exitCode = report(err);
  },
);
