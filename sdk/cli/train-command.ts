/**
 * What `posttrain grpo` and `posttrain sft` share: read the run config, apply the flags, check it, create the
 * trainer, show progress, handle SIGINT (Ctrl-C) and SIGTERM (first: finish the step, checkpoint, report, exit 130 or
 * 143; second: exit at once), and on a failure print the exact command that resumes the run.
 */
import { join } from "node:path";
import type { z } from "zod";
import type { RunOptions, TrainingRun } from "../runs/index.js";
import {
  CONFIG_ERROR_CODES,
  EXIT,
  UsageError,
  integerFlag,
  parseCommandArgs,
  say,
  setErrorHint,
  shellCommand,
  signalExitCode,
  stringFlag,
  stringList,
  type Command,
} from "./args.js";
import { checkConfig, parseAssignment, readConfigFile, setField } from "./config-file.js";
import { ProgressDisplay } from "./progress.js";

/** The trainer behind a training command, loaded when the command runs. */
export interface TrainerFactory<C> {
  /** The trainer's run-config schema. */
  readonly schema: z.ZodType<C>;
  /** `GRPOTrainer.create` or `SFTTrainer.create` (the command passes `signal`, `resume` and `log`). */
  create(config: C, options: RunOptions): Promise<TrainingRun>;
}

/** How to build one training command. */
export interface TrainingCommandSpec<C> {
  readonly name: string;
  readonly summary: string;
  readonly help: string;
  /**
   * The command's own flags that override one config field each, by flag name (without `--`) to the field's dotted
   * path, e.g. `{ "generator-backend": "generator.backend" }`; the value is a string, checked by the config schema.
   */
  readonly fieldFlags?: Readonly<Record<string, string>>;
  /** Imports the trainer (the SDK loads only when a command runs, not for `--help`). */
  load(): Promise<TrainerFactory<C>>;
}

/** The options every training command accepts (its help lists them). */
export const TRAINING_OPTIONS_HELP = `Options:
  --config FILE       The run config, YAML or JSON (required, except with --resume --run-dir, which
                      reads the run's own config.yaml).
  --run-dir DIR       Overrides runDir.
  --steps N           Overrides steps: the step the run ends at (with --resume: the new end).
  --loggers LIST      Overrides loggers: where the metrics go besides metrics.jsonl (always written),
                      comma-separated: tensorboard, wandb, mlflow, trackio (jsonl alone: none).
  --set FIELD=VALUE   Overrides any field, e.g. --set optimizer.lr=3e-4 or --set loss.clipEpsilon=[0.2,0.28]
                      (VALUE is read as YAML; repeatable).
  --resume            Continue the run in runDir from its latest checkpoint: metrics.jsonl and the
                      data position carry on from the next step. Fields that change the training
                      (model, loss, optimizer, ...) must match the saved config.yaml.
  -h, --help          Show this help.

Progress: a bar on a terminal (step, reward, KL, tokens/s, ETA), one plain line per step otherwise.
Ctrl-C (SIGINT) or SIGTERM (docker stop, Kubernetes) finishes the current step, saves a checkpoint and
report.html, prints where they are and exits with code 130 (SIGINT) or 143 (SIGTERM); a second signal
exits at once. A failed run prints the command that resumes it on stderr. Exit codes: 0 done, 1 failed,
2 bad usage or config, 130 interrupted, 143 terminated.
`;

/** Lines the trainers log for each step; the progress display shows those steps itself. */
const STEP_LOG_LINE = /^step \d+\/\d+ /;

interface Flags {
  readonly configPath: string | undefined;
  readonly runDir: string | undefined;
  readonly steps: number | undefined;
  /** `--loggers a,b`: the names, unchecked (the config schema checks them). */
  readonly loggers: readonly string[] | undefined;
  readonly sets: readonly string[];
  readonly resume: boolean;
  /** The command's field flags that were given: the field's dotted path and the value. */
  readonly fields: readonly { readonly path: string; readonly value: string }[];
}

function readFlags(name: string, args: readonly string[], fieldFlags: Readonly<Record<string, string>> = {}): Flags | "help" {
  const own = Object.fromEntries(Object.keys(fieldFlags).map((flag) => [flag, { type: "string" as const }]));
  const { values, help } = parseCommandArgs(name, args, {
    config: { type: "string" },
    "run-dir": { type: "string" },
    steps: { type: "string" },
    loggers: { type: "string" },
    set: { type: "string", multiple: true },
    resume: { type: "boolean" },
    ...own,
  });
  if (help) return "help";
  const steps = stringFlag(values, "steps");
  const loggers = stringFlag(values, "loggers");
  const flags: Flags = {
    configPath: stringFlag(values, "config"),
    runDir: stringFlag(values, "run-dir"),
    steps: steps === undefined ? undefined : integerFlag(name, "steps", steps, 1),
    loggers: loggers === undefined ? undefined : loggerList(name, loggers),
    sets: stringList(values, "set"),
    resume: values.resume === true,
    fields: Object.entries(fieldFlags).flatMap(([flag, path]) => {
      const value = stringFlag(values, flag);
      return value === undefined ? [] : [{ path, value }];
    }),
  };
  if (flags.configPath === undefined && !(flags.resume && flags.runDir !== undefined)) {
    throw new UsageError("--config FILE is required (or --resume --run-dir DIR to continue a run with its saved config)", name);
  }
  return flags;
}

/** The names of `--loggers a,b` (a `UsageError` for an empty one). */
function loggerList(command: string, text: string): string[] {
  const names = text.split(",").map((n) => n.trim());
  if (names.some((n) => n === "")) throw new UsageError(`--loggers: expected comma-separated names (e.g. tensorboard,wandb), got ${JSON.stringify(text)}`, command);
  return names;
}

/** The run config: the file (or the run's saved `config.yaml`), then `--set`, the command's field flags, `--steps`, `--loggers` and `--run-dir`. */
async function loadConfig(flags: Flags): Promise<{ config: Record<string, unknown>; source: string }> {
  const source = flags.configPath ?? join(flags.runDir ?? ".", "config.yaml");
  let config = await readConfigFile(source);
  for (const text of flags.sets) {
    const { path, value } = parseAssignment(text);
    config = setField(config, path, value);
  }
  for (const { path, value } of flags.fields) config = setField(config, path, value);
  if (flags.steps !== undefined) config = setField(config, "steps", flags.steps);
  if (flags.loggers !== undefined) config = setField(config, "loggers", flags.loggers);
  if (flags.runDir !== undefined) config = setField(config, "runDir", flags.runDir);
  return { config, source };
}

/** The signals that stop a run gracefully. */
const STOP_SIGNALS = ["SIGINT", "SIGTERM"] as const;
type StopSignal = (typeof STOP_SIGNALS)[number];

/**
 * Installs the SIGINT and SIGTERM handlers: the first signal aborts `controller` (a graceful stop) and is kept in
 * `stop.signal` for the exit code; a second one, of either kind, exits at once with its own code.
 */
function onStopSignals(controller: AbortController, notice: (line: string) => void): { signal: StopSignal | undefined; detach: () => void } {
  const stop: { signal: StopSignal | undefined; detach: () => void } = { signal: undefined, detach: () => undefined };
  const handlers = STOP_SIGNALS.map((signal) => {
    const handler = (): void => {
      const name = signal === "SIGINT" ? "Ctrl-C" : signal;
      if (controller.signal.aborted) {
        process.stderr.write(`\nposttrain: second ${name}, exiting now without waiting for the step\n`);
        process.exit(signalExitCode(signal));
      }
      stop.signal = signal;
      const again = signal === "SIGINT" ? "Ctrl-C again" : "a second signal";
      notice(`${name}: finishing the current step, then saving a checkpoint and the report (${again} to quit at once)`);
      controller.abort(new Error(`interrupted (${signal})`));
    };
    process.on(signal, handler);
    return [signal, handler] as const;
  });
  stop.detach = () => {
    for (const [signal, handler] of handlers) process.off(signal, handler);
  };
  return stop;
}

/**
 * The line that tells how to resume a run that failed with `err`: this command line with `--resume` (quoted for a
 * POSIX shell) when the run directory holds a checkpoint, else why there is nothing to resume; none for a config
 * mistake (the run never started, and resuming would fail the same way).
 */
function resumeHint(command: string, args: readonly string[], runDir: string, hasCheckpoint: boolean, err: unknown): string | undefined {
  const code = (err as { code?: unknown } | null)?.code;
  if (typeof code === "string" && CONFIG_ERROR_CODES.has(code)) return undefined;
  if (!hasCheckpoint) return `nothing to resume: ${runDir} holds no checkpoint yet (the run failed before its first save)`;
  const argv = args.includes("--resume") ? args : [...args, "--resume"];
  return `resume with: ${shellCommand(["posttrain", command, ...argv])}`;
}

async function train<C>(spec: TrainingCommandSpec<C>, flags: Flags, args: readonly string[]): Promise<number> {
  const { config: raw, source } = await loadConfig(flags);
  const [factory, { RunDirectory }] = await Promise.all([spec.load(), import("../runs/run-directory.js")]);
  const config = checkConfig(factory.schema, raw, source);
  const controller = new AbortController();
  let display: ProgressDisplay | undefined;
  const print = (line: string): void => {
    if (display !== undefined) display.message(line);
    else say(line);
  };
  const stop = onStopSignals(controller, print);
  const stoppedCode = (): number => signalExitCode(stop.signal ?? "SIGINT");
  let trainer: TrainingRun | undefined;
  try {
    try {
      trainer = await factory.create(config, {
        signal: controller.signal,
        resume: flags.resume,
        log: (line) => {
          if (!STEP_LOG_LINE.test(line)) print(line);
        },
      });
    } catch (err) {
      if (!controller.signal.aborted) throw err;
      say("interrupted while starting: nothing was trained or saved");
      return stoppedCode();
    }
    const runDir = new RunDirectory(trainer.runDir);
    say(`${spec.name}: run directory ${runDir.path}, ${String(trainer.totalSteps)} steps`);
    const started = performance.now();
    display = new ProgressDisplay(process.stdout, { totalSteps: trainer.totalSteps });
    let last: number | undefined;
    let first: number | undefined;
    for await (const record of trainer.run()) {
      first ??= record.step;
      last = record.step;
      display.step(record);
    }
    display.finish();
    display = undefined;
    const checkpoint = await runDir.latestCheckpoint();
    const where = `checkpoint ${checkpoint?.path ?? "(none)"}; report ${runDir.reportPath}`;
    if (controller.signal.aborted) {
      if (checkpoint === undefined) {
        say("interrupted before the first step: no checkpoint to resume from");
        return stoppedCode();
      }
      say(`interrupted at step ${String(last ?? checkpoint.step)}: ${where}`);
      say(`resume with: ${shellCommand(["posttrain", spec.name, "--resume", "--run-dir", runDir.path])}`);
      return stoppedCode();
    }
    const ran = first === undefined || last === undefined ? 0 : last - first + 1;
    const seconds = (performance.now() - started) / 1000;
    say(`done: step ${String(last ?? checkpoint?.step ?? 0)}/${String(trainer.totalSteps)} (${String(ran)} this run, ${seconds.toFixed(1)} s); ${where}`);
    return EXIT.ok;
  } catch (err) {
    const path = trainer?.runDir ?? (config as { runDir?: unknown }).runDir;
    if (typeof path === "string") {
      const runDir = new RunDirectory(path);
      const latest = await runDir.latestCheckpoint().catch(() => undefined);
      const hint = resumeHint(spec.name, args, runDir.path, latest !== undefined, err);
      if (hint !== undefined) setErrorHint(err, hint);
    }
    throw err;
  } finally {
    display?.finish();
    await trainer?.close();
    stop.detach();
  }
}

/** Builds a training command (`grpo`, `sft`) from its spec. */
export function trainingCommand<C>(spec: TrainingCommandSpec<C>): Command {
  return {
    name: spec.name,
    summary: spec.summary,
    help: spec.help,
    async run(args) {
      const flags = readFlags(spec.name, args, spec.fieldFlags);
      if (flags === "help") {
        process.stdout.write(spec.help);
        return EXIT.ok;
      }
      return train(spec, flags, args);
    },
  };
}
