#!/usr/bin/env node
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { makeTinyModel } from "../models/index.js";
import { WorkerPool } from "../workers/index.js";
import { PosttrainError, packageRoot } from "../../bridge/index.js";

const USAGE = `Usage: posttrain <command> [options]

Commands:
  info [--device cpu|cuda|auto] [--transport ipc|tcp]
        Start one worker, print its handshake (versions, devices, capabilities) as JSON, stop it.
  make-tiny-model DIR [--seed N] [--hidden-size N] [--num-layers N] [--num-heads N] [--num-kv-heads N]
                      [--intermediate-size N] [--max-position-embeddings N]
        Write a random tiny Qwen2-style model with a character-level tokenizer and a ChatML chat
        template into DIR (offline, deterministic given --seed) for tests and examples.

Options:
  -h, --help       Show this help.
  -v, --version    Show the version.
`;

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

async function info(args: string[]): Promise<void> {
  const { values } = parseArgs({
    args,
    options: {
      device: { type: "string", default: "auto" },
      transport: { type: "string", default: "ipc" },
      help: { type: "boolean", short: "h" },
    },
  });
  if (values.help === true) {
    process.stdout.write(USAGE);
    return;
  }
  const device = values.device;
  const transport = values.transport;
  if (device !== "cpu" && device !== "cuda" && device !== "auto") {
    throw new PosttrainError("INVALID_ARGUMENT", `--device: expected cpu, cuda or auto, got ${device}`);
  }
  if (transport !== "ipc" && transport !== "tcp") {
    throw new PosttrainError("INVALID_ARGUMENT", `--transport: expected ipc or tcp, got ${transport}`);
  }
  const pool = await WorkerPool.local({ workers: 1, device, transport });
  try {
    process.stdout.write(`${JSON.stringify(pool.worker(0).info, null, 2)}\n`);
  } finally {
    await pool.close();
  }
}

const TINY_FLAGS = {
  seed: "seed",
  "hidden-size": "hiddenSize",
  "num-layers": "numLayers",
  "num-heads": "numHeads",
  "num-kv-heads": "numKvHeads",
  "intermediate-size": "intermediateSize",
  "max-position-embeddings": "maxPositionEmbeddings",
} as const;

async function makeTinyModelCommand(args: string[]): Promise<void> {
  const { values, positionals } = parseArgs({
    args,
    allowPositionals: true,
    options: {
      ...Object.fromEntries(Object.keys(TINY_FLAGS).map((flag) => [flag, { type: "string" as const }])),
      help: { type: "boolean", short: "h" },
    },
  });
  if (values.help === true) {
    process.stdout.write(USAGE);
    return;
  }
  const [dir, ...extra] = positionals;
  if (dir === undefined || extra.length > 0) {
    throw new PosttrainError("INVALID_ARGUMENT", `make-tiny-model: expected one directory, got ${positionals.length}`);
  }
  const options: Record<string, number> = {};
  for (const [flag, key] of Object.entries(TINY_FLAGS)) {
    const raw = (values as Record<string, unknown>)[flag];
    if (typeof raw !== "string") continue;
    const value = Number(raw);
    if (!Number.isInteger(value)) {
      throw new PosttrainError("INVALID_ARGUMENT", `--${flag}: expected an integer, got ${JSON.stringify(raw)}`);
    }
    options[key] = value;
  }
  const model = await makeTinyModel(dir, options);
  process.stdout.write(
    `${model.path}: ${model.parameters} parameters, vocabulary ${model.vocabSize}, ${model.bytes} bytes (${model.seconds.toFixed(1)} s)\n`,
  );
}

async function main(argv: string[]): Promise<void> {
  const [command, ...rest] = argv;
  switch (command) {
    case undefined:
    case "-h":
    case "--help":
    case "help":
      process.stdout.write(USAGE);
      return;
    case "-v":
    case "--version":
      process.stdout.write(`${version()}\n`);
      return;
    case "info":
      await info(rest);
      return;
    case "make-tiny-model":
      await makeTinyModelCommand(rest);
      return;
    default:
      process.stderr.write(`posttrain: unknown command ${JSON.stringify(command)}\n\n${USAGE}`);
      process.exitCode = 2;
  }
}

/** Errors of `parseArgs` (unknown option, missing value, stray positional): usage errors, exit code 2. */
function isUsageError(err: unknown): err is Error {
  return err instanceof Error && "code" in err && typeof err.code === "string" && err.code.startsWith("ERR_PARSE_ARGS_");
}

main(process.argv.slice(2)).catch((err: unknown) => {
  if (isUsageError(err)) {
    process.stderr.write(`posttrain: ${err.message}\n\n${USAGE}`);
    process.exitCode = 2;
    return;
  }
  const message = err instanceof PosttrainError ? `${err.code}: ${err.message}` : String(err);
  process.stderr.write(`posttrain: ${message}\n`);
  process.exitCode = 1;
});
