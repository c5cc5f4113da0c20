/**
 * `restoreCheckpoint`: what a resume loads. The newest checkpoint that is readable, falling back to the one before
 * it when it is not, and saying so; an unreadable one is renamed aside (`step-<N>.corrupt`), never deleted. Both
 * `GRPOTrainer.create` and `SFTTrainer.create` call it. See docs/trainers.md ("Checkpoints, signals and resume").
 */
import { access } from "node:fs/promises";
import { join } from "node:path";
import { WorkerError } from "../../bridge/index.js";
import type { RestoredState } from "../trainers/index.js";
import type { SetAsideCheckpoint } from "./errors.js";
import type { RunCheckpoint, RunDirectory } from "./run-directory.js";

/**
 * Worker error codes of a load that failed because of the checkpoint's files (missing, truncated, unreadable); any
 * other failure is thrown as is: a dead worker or a timeout is the run's, and `CHECKPOINT_MISMATCH` (a whole
 * checkpoint of another setup: optimizer, LoRA, parameter shapes) would fail the same way for every older one.
 */
const UNREADABLE_CODES: ReadonlySet<string> = new Set(["CHECKPOINT_INVALID", "CHECKPOINT_NOT_FOUND"]);

/** A restored checkpoint: which one, and the state the trainer restored from it. */
export interface RestoredCheckpoint<R = RestoredState> extends RunCheckpoint {
  readonly restored: R;
}

/**
 * Loads the newest readable checkpoint of `runDir` into `trainer`. A checkpoint is unreadable when
 * `runDir.checkpointProblem` finds a problem in its files or the load fails with `CHECKPOINT_INVALID` /
 * `CHECKPOINT_NOT_FOUND`; it is then renamed aside, a line naming it and why goes to `log`, and the one before it is
 * tried. With none left: a `NoCheckpointError` listing those set aside. `options.checkFiles` replaces the file check
 * (a PPO run's checkpoint holds an agent, not model weights); `options.requiredFiles` names files the run writes into
 * a checkpoint after the worker's save (an asynchronous GRPO run's replay-buffer snapshot): a checkpoint without one
 * of them (a crash between the two writes) is unreadable too.
 *
 * @example const latest = await restoreCheckpoint(runDir, trainer, console.log); // { step, path, restored }
 */
export async function restoreCheckpoint<R = RestoredState>(
  runDir: RunDirectory,
  trainer: { loadCheckpoint(dir: string): Promise<R> },
  log: (line: string) => void,
  options: {
    readonly requiredFiles?: readonly string[];
    /** What makes a checkpoint's files unreadable (default `runDir.checkpointProblem`: an LLM trainer's files). */
    readonly checkFiles?: (checkpoint: RunCheckpoint) => Promise<string | undefined>;
  } = {},
): Promise<RestoredCheckpoint<R>> {
  const setAside: SetAsideCheckpoint[] = [];
  for (const checkpoint of (await runDir.checkpoints()).reverse()) {
    const checkFiles = options.checkFiles ?? ((c: RunCheckpoint) => runDir.checkpointProblem(c));
    let problem = (await checkFiles(checkpoint)) ?? (await missingFile(checkpoint.path, options.requiredFiles ?? []));
    if (problem === undefined) {
      try {
        return { ...checkpoint, restored: await trainer.loadCheckpoint(checkpoint.path) };
      } catch (err) {
        if (!(err instanceof WorkerError && UNREADABLE_CODES.has(err.code))) throw err;
        problem = `the load failed: ${err.code}: ${err.message}`;
      }
    }
    const aside = await runDir.setAside(checkpoint, problem);
    setAside.push(aside);
    log(`checkpoint ${checkpoint.path} is unreadable (${problem}); renamed it to ${aside.path} and falling back to the one before it`);
  }
  const names = setAside.map((c) => `step-${String(c.step)} (${c.reason})`).join(", ");
  throw await runDir.noCheckpointError(`no readable checkpoint: set aside as *.corrupt: ${names}`, setAside);
}

/** A problem naming the first of `files` missing from `dir`, or `undefined` when all are there. */
async function missingFile(dir: string, files: readonly string[]): Promise<string | undefined> {
  for (const file of files) {
    try {
      await access(join(dir, file));
    } catch {
      return `${file} is missing (written after the worker's save: the run stopped between the two)`;
    }
  }
  return undefined;
}
