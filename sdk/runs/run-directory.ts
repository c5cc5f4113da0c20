/**
 * `RunDirectory`: the files of one training run — `config.yaml` (the resolved config), `metrics.jsonl` (one
 * line per step, fsynced before each checkpoint), `samples.jsonl`, `events.jsonl` (worker failures and restarts),
 * `checkpoints/step-<N>/` (pruned to the last few) and `report.html`.
 * See docs/trainers.md ("Run directory").
 */
import { mkdir, open, readdir, readFile, rename, rm, stat } from "node:fs/promises";
import { join, resolve } from "node:path";
import { parse as parseYaml, stringify as stringifyYaml } from "yaml";
import type { z } from "zod";
import { parseJSONLines, readOptional, writeReport, type MetricRecord, type RunEvent, type SampleRecord } from "../reports/index.js";
import { writeFileAtomic } from "../core/atomic-file.js";
import { NoCheckpointError, RunConfigMismatchError, RunDirectoryError, type SetAsideCheckpoint } from "./errors.js";

/** The file a trainer writes last into a checkpoint: JSON with at least its `step`. */
export const TRAINER_STATE_FILE = "trainer_state.json";

/**
 * The parsed `trainer_state.json` of the checkpoint directory `dir` (an object with an integer `step` >= 0), or a
 * problem saying why it is missing, does not parse or has no step.
 *
 * @example const state = await readTrainerState(checkpoint.path); if (typeof state === "string") console.log(state);
 */
export async function readTrainerState(dir: string): Promise<{ readonly step: number; readonly [key: string]: unknown } | string> {
  let state: unknown;
  try {
    state = JSON.parse(await readFile(join(dir, TRAINER_STATE_FILE), "utf8")) as unknown;
  } catch (err) {
    const why = (err as NodeJS.ErrnoException).code === "ENOENT" ? "is missing" : `does not parse (${err instanceof Error ? err.message : String(err)})`;
    return `${TRAINER_STATE_FILE} ${why}`;
  }
  const step = typeof state === "object" && state !== null ? (state as { step?: unknown }).step : undefined;
  if (typeof step !== "number" || !Number.isInteger(step) || step < 0) return `${TRAINER_STATE_FILE} has no step`;
  return state as { readonly step: number };
}

/** A checkpoint of the run: its step and directory. */
export interface RunCheckpoint {
  readonly step: number;
  readonly path: string;
}

const CHECKPOINT_NAME = /^step-(\d+)$/;
/** The weight files `save_pretrained` writes: whole or sharded, a full model or a LoRA adapter. */
const WEIGHT_FILE = /^(?:model|adapter_model)(?:-\d+-of-\d+)?\.safetensors$/;
/** A file staged beside the checkpoint of its step until that checkpoint is in place ({@link RunDirectory.stagingPath}). */
const STAGED_NAME = /^\.step-\d+\.[^/]+\.tmp$/;
/** The suffix of a checkpoint set aside as unreadable (it no longer matches {@link CHECKPOINT_NAME}). */
const SET_ASIDE_SUFFIX = ".corrupt";

/**
 * Appends `lines` to `path`. No fsync here (it costs milliseconds a step on some disks): the lines are with the OS
 * once this resolves, so a crash of the process loses nothing, and {@link syncFile} makes them durable before a
 * checkpoint is written.
 */
async function appendLines(path: string, lines: readonly string[]): Promise<void> {
  if (lines.length === 0) return;
  const handle = await open(path, "a");
  try {
    await handle.appendFile(lines.map((l) => `${l}\n`).join(""), "utf8");
  } finally {
    await handle.close();
  }
}

/** fsyncs `path` when it exists. */
async function syncFile(path: string): Promise<void> {
  let handle;
  try {
    handle = await open(path, "r+");
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return;
    throw err;
  }
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

/** JSON without non-finite numbers (they become `null`). */
function jsonLine(value: unknown): string {
  return JSON.stringify(value, (_key, v: unknown) => (typeof v === "number" && !Number.isFinite(v) ? null : v));
}

/** The files of one run (see the module notes). Paths are absolute. */
export class RunDirectory {
  /** The run directory (absolute). */
  readonly path: string;

  constructor(path: string) {
    this.path = resolve(path);
  }

  /** `config.yaml`. */
  get configPath(): string {
    return join(this.path, "config.yaml");
  }

  /** `metrics.jsonl`. */
  get metricsPath(): string {
    return join(this.path, "metrics.jsonl");
  }

  /** `samples.jsonl`. */
  get samplesPath(): string {
    return join(this.path, "samples.jsonl");
  }

  /** `events.jsonl`: worker failures and restarts (docs/trainers.md, "Supervision and restarts"). */
  get eventsPath(): string {
    return join(this.path, "events.jsonl");
  }

  /** `checkpoints/`. */
  get checkpointsPath(): string {
    return join(this.path, "checkpoints");
  }

  /** `report.html`. */
  get reportPath(): string {
    return join(this.path, "report.html");
  }

  /** `model/`: where `model.path: "tiny"` builds the tiny model. */
  get modelPath(): string {
    return join(this.path, "model");
  }

  /** The directory of the checkpoint after `step` steps: `checkpoints/step-<step>`. */
  checkpointPath(step: number): string {
    return join(this.checkpointsPath, `step-${String(step)}`);
  }

  /**
   * Where the run stages `file` of the checkpoint of `step` (`checkpoints/.step-<N>.<file>.tmp`) until the checkpoint
   * is in place; a resume deletes any left over.
   */
  stagingPath(step: number, file: string): string {
    return join(this.checkpointsPath, `.step-${String(step)}.${file}.tmp`);
  }

  /**
   * Prepares the directory for a run and tells whether there is a run to resume (`resume` itself: a resume never
   * silently starts over). A fresh run (`resume` false) needs a directory without `metrics.jsonl` (a
   * `RunDirectoryError` otherwise: resume it or pick another directory). A resume needs `config.yaml` and at least one
   * checkpoint, else a {@link NoCheckpointError} before any worker starts; whether a checkpoint is readable is
   * decided when it is loaded (`restoreCheckpoint`).
   */
  async prepare(resume: boolean): Promise<boolean> {
    await mkdir(this.path, { recursive: true });
    const hasMetrics = (await readOptional(this.metricsPath)) !== undefined;
    if (!resume && hasMetrics) {
      throw new RunDirectoryError(this.path, "already holds a run (metrics.jsonl); resume it or choose another runDir");
    }
    if (!resume) return false;
    if ((await readOptional(this.configPath)) === undefined) {
      throw new NoCheckpointError(this.path, "it holds no run (no config.yaml)", "run without resume (--resume), or check the runDir");
    }
    if ((await this.checkpoints()).length === 0) throw this.#noCheckpoint("it holds no checkpoint (the run stopped before its first save)", [], hasMetrics);
    await this.#sweepStaged();
    return true;
  }

  /** Deletes the files a killed run left staged ({@link stagingPath}); nothing else in `checkpoints/`. */
  async #sweepStaged(): Promise<void> {
    const entries = await readdir(this.checkpointsPath, { withFileTypes: true });
    for (const e of entries) if (e.isFile() && STAGED_NAME.test(e.name)) await rm(join(this.checkpointsPath, e.name), { force: true });
  }

  /**
   * The {@link NoCheckpointError} of this directory, its advice on starting over depending on whether it already
   * holds metrics (then only a fresh runDir will do).
   */
  async noCheckpointError(problem: string, setAside: readonly SetAsideCheckpoint[]): Promise<NoCheckpointError> {
    return this.#noCheckpoint(problem, setAside, (await readOptional(this.metricsPath)) !== undefined);
  }

  #noCheckpoint(problem: string, setAside: readonly SetAsideCheckpoint[], hasMetrics: boolean): NoCheckpointError {
    const startOver = hasMetrics
      ? "choose a fresh runDir (--run-dir): this one already holds metrics.jsonl"
      : "run without resume (--resume), or choose a fresh runDir (--run-dir)";
    return new NoCheckpointError(this.path, problem, startOver, setAside);
  }

  /** Writes `config.yaml` (atomically). */
  async writeConfig(config: unknown): Promise<void> {
    await writeFileAtomic(this.configPath, stringifyYaml(config));
  }

  /** The parsed `config.yaml`, or `undefined` when there is none. */
  async readConfig(): Promise<unknown> {
    const text = await readOptional(this.configPath);
    return text === undefined ? undefined : (parseYaml(text) as unknown);
  }

  /** Appends one line to `metrics.jsonl` and syncs it to disk. */
  async appendMetrics(record: MetricRecord): Promise<void> {
    await appendLines(this.metricsPath, [jsonLine(record)]);
  }

  /** Makes `metrics.jsonl` and `samples.jsonl` durable (fsync): called before each checkpoint. */
  async sync(): Promise<void> {
    await syncFile(this.metricsPath);
    await syncFile(this.samplesPath);
  }

  /** Appends lines to `samples.jsonl`. */
  async appendSamples(samples: readonly SampleRecord[]): Promise<void> {
    await appendLines(this.samplesPath, samples.map(jsonLine));
  }

  /** Appends one event to `events.jsonl` and syncs it (a restart is rare, and its record should outlive a crash). */
  async appendEvent(event: RunEvent): Promise<void> {
    await appendLines(this.eventsPath, [jsonLine(event)]);
    await syncFile(this.eventsPath);
  }

  /** The records of `metrics.jsonl` (a torn last line is skipped). */
  async readMetrics(): Promise<MetricRecord[]> {
    const text = (await readOptional(this.metricsPath)) ?? "";
    return parseJSONLines(text, "metrics.jsonl").filter(
      (r): r is MetricRecord => typeof r === "object" && r !== null && typeof (r as { step?: unknown }).step === "number",
    );
  }

  /**
   * Drops the lines of `metrics.jsonl` and `samples.jsonl` after `step` (steps a crashed run logged after its last
   * checkpoint), so that a resumed run's curve continues without duplicates.
   */
  async truncateAfter(step: number): Promise<void> {
    for (const path of [this.metricsPath, this.samplesPath]) {
      const text = await readOptional(path);
      if (text === undefined) continue;
      const kept = parseJSONLines(text, path).filter((r) => (r as { step?: unknown }).step === undefined || Number((r as { step: unknown }).step) <= step);
      await writeFileAtomic(path, kept.map((r) => `${JSON.stringify(r)}\n`).join(""));
    }
  }

  /** The checkpoints, oldest first. */
  async checkpoints(): Promise<RunCheckpoint[]> {
    let names: string[];
    try {
      names = await readdir(this.checkpointsPath);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === "ENOENT") return [];
      throw err;
    }
    const out: RunCheckpoint[] = [];
    for (const name of names) {
      const m = CHECKPOINT_NAME.exec(name);
      if (m !== null) out.push({ step: Number(m[1]), path: join(this.checkpointsPath, name) });
    }
    return out.sort((a, b) => a.step - b.step);
  }

  /** The newest checkpoint, or `undefined` (readable or not: see {@link checkpointProblem}). */
  async latestCheckpoint(): Promise<RunCheckpoint | undefined> {
    return (await this.checkpoints()).at(-1);
  }

  /**
   * Why `checkpoint` cannot be resumed from, as far as the files tell (`undefined`: it looks whole): its
   * `trainer_state.json` (written last) must parse with a step, and its weight files (`model.safetensors`, shards,
   * or a LoRA adapter) must exist and be non-empty. The load itself is the final judge of the rest.
   */
  async checkpointProblem(checkpoint: RunCheckpoint): Promise<string | undefined> {
    let names: string[];
    try {
      names = await readdir(checkpoint.path);
    } catch (err) {
      return `cannot list its directory (${(err as NodeJS.ErrnoException).code ?? String(err)})`;
    }
    if (!names.includes(TRAINER_STATE_FILE)) return `${TRAINER_STATE_FILE} is missing (a half-written checkpoint)`;
    const state = await readTrainerState(checkpoint.path);
    if (typeof state === "string") return state;
    const weights = names.filter((n) => WEIGHT_FILE.test(n)).sort();
    if (weights.length === 0) return "its weight file (model.safetensors) is missing";
    for (const name of weights) {
      if ((await stat(join(checkpoint.path, name))).size === 0) return `its weight file ${name} is empty (0 bytes)`;
    }
    return undefined;
  }

  /**
   * Renames an unreadable checkpoint aside to `checkpoints/step-<N>.corrupt` (`.corrupt-2`, ... when taken), so that
   * no resume picks it again and no pruning removes it: nothing saved is ever deleted.
   */
  async setAside(checkpoint: RunCheckpoint, reason: string): Promise<SetAsideCheckpoint> {
    for (let n = 1; ; n++) {
      const path = `${checkpoint.path}${SET_ASIDE_SUFFIX}${n === 1 ? "" : `-${String(n)}`}`;
      if ((await stat(path).catch(() => undefined)) !== undefined) continue;
      await rename(checkpoint.path, path);
      return { path, step: checkpoint.step, reason };
    }
  }

  /** Removes all but the newest `keepLast` checkpoints. */
  async pruneCheckpoints(keepLast: number): Promise<void> {
    const all = await this.checkpoints();
    for (const c of all.slice(0, Math.max(0, all.length - keepLast))) await rm(c.path, { recursive: true, force: true });
  }

  /** Writes `report.html` from the run's files; returns its path. */
  async writeReport(title?: string): Promise<string> {
    return writeReport(this.path, title === undefined ? {} : { title });
  }

  /**
   * Checks that `current` (a resolved config) matches the saved `config.yaml` in every field except those under
   * `free` (top-level keys such as `steps`); a difference is a {@link RunConfigMismatchError} naming the field. The
   * saved config is first resolved with `schema` when it parses, so a field added later with a default does not
   * count as a difference.
   */
  async checkResumable(current: unknown, free: readonly string[], schema?: z.ZodType): Promise<void> {
    const raw = await this.readConfig();
    const resolved = schema?.safeParse(raw);
    const saved = resolved?.success === true ? resolved.data : raw;
    const field = firstDifference(normalise(saved), normalise(current), [], new Set(free));
    if (field !== undefined) throw new RunConfigMismatchError(this.path, field.path, field.saved, field.current);
  }
}

/** A value as it round-trips through YAML (undefined fields dropped). */
function normalise(value: unknown): unknown {
  return JSON.parse(JSON.stringify(value ?? null)) as unknown;
}

interface Difference {
  readonly path: string;
  readonly saved: unknown;
  readonly current: unknown;
}

function firstDifference(a: unknown, b: unknown, path: readonly string[], free: ReadonlySet<string>): Difference | undefined {
  if (path.length === 1 && free.has(path[0]!)) return undefined;
  const isObject = (v: unknown): v is Record<string, unknown> => typeof v === "object" && v !== null && !Array.isArray(v);
  if (isObject(a) && isObject(b)) {
    const keys = [...new Set([...Object.keys(a), ...Object.keys(b)])].sort();
    for (const key of keys) {
      const d = firstDifference(a[key], b[key], [...path, key], free);
      if (d !== undefined) return d;
    }
    return undefined;
  }
  if (JSON.stringify(a) === JSON.stringify(b)) return undefined;
  return { path: path.join("."), saved: a, current: b };
}
