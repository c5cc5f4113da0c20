/**
 * What an asynchronous GRPO run had collected but not trained when it saved a checkpoint: the replay buffer
 * (`replay_buffer.arrow`, its rows and `MCAdvantage`'s held-back groups) and where collection stood
 * (`replay_buffer.json`: the next batch and sampling call, the data position after the last collected batch and after
 * each untrained one, the policy version). Both are written into the checkpoint after the worker's save, the JSON
 * last: a checkpoint without it is unreadable for such a run (`restoreCheckpoint`'s `requiredFiles`). See
 * docs/trainers.md ("Supervision and restarts").
 */
import { randomBytes } from "node:crypto";
import { rename, rm, readFile, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { z } from "zod";
import { JSONValueSchema, type JSONValue } from "../core/json.js";
import { InvalidArgumentError } from "../core/errors.js";
import { parseOptions } from "../core/index.js";
import { MCAdvantage } from "../data/replay-buffer/mc-advantage.js";
import { ReplayBuffer } from "../data/replay-buffer/replay-buffer.js";
import { POLICY_VERSION_KEY } from "../envs/keys.js";
import { Tensor, type TensorDict } from "../tensordict/index.js";

/** The replay buffer's file in a checkpoint directory. */
export const BUFFER_FILE = "replay_buffer.arrow";
/** Where collection stood, in a checkpoint directory (written last: its presence marks a complete snapshot). */
export const SNAPSHOT_FILE = "replay_buffer.json";

/** The JSON of {@link SNAPSHOT_FILE}. */
export const CollectedSnapshotSchema = z.strictObject({
  format: z.literal("posttrain.collected"),
  version: z.literal(1),
  /** The number of the next batch to collect (batches are numbered from 0 over the whole run). */
  nextBatch: z.number().int().min(0),
  /** The number of the collector's next sampling call (its seed is derived from it). */
  nextCall: z.number().int().min(0),
  /** The collector's policy version when the snapshot was taken (the saved rows' versions count on that scale). */
  policyVersion: z.number().int().min(0),
  /** The data position after the last collected batch (where the env continues). */
  position: JSONValueSchema,
  /** The data position after the last trained batch (the checkpoint's). */
  trainedPosition: JSONValueSchema,
  /** The data position after each collected batch not yet trained, by batch number. */
  positions: z.array(z.tuple([z.number().int().min(0), JSONValueSchema])),
  /** Rows in the buffer and trajectories held back (for the log). */
  rows: z.number().int().min(0),
  heldBack: z.number().int().min(0),
});

/** A parsed {@link SNAPSHOT_FILE}. */
export type CollectedSnapshot = z.output<typeof CollectedSnapshotSchema>;

/** A snapshot read back for a resume: the buffer (its rows relabelled to the resumed versions) and its transform. */
export interface RestoredCollection {
  readonly snapshot: CollectedSnapshot;
  readonly replayBuffer: ReplayBuffer;
  readonly advantage: MCAdvantage;
}

/** Writes `snapshot` into `dir` atomically (temporary file + rename), after the buffer file. */
export async function writeSnapshot(dir: string, snapshot: CollectedSnapshot): Promise<void> {
  const path = join(dir, SNAPSHOT_FILE);
  const tmp = `${path}.${randomBytes(4).toString("hex")}.tmp`;
  try {
    await writeFile(tmp, `${JSON.stringify(snapshot)}\n`);
    await rename(tmp, path);
  } catch (err) {
    await rm(tmp, { force: true });
    throw err;
  }
}

/**
 * Reads the snapshot of checkpoint `dir`: the buffer with a fresh `MCAdvantage` (groups of `groupSize` by prompt)
 * holding its held-back groups. The rows' policy versions are shifted by `version − snapshot.policyVersion`: a resume
 * hands the restored weights to the generators as a new version, so a row keeps its age (in optimizer steps).
 */
export async function readSnapshot(dir: string, groupSize: number, version: number): Promise<RestoredCollection> {
  const path = join(dir, SNAPSHOT_FILE);
  let parsed: unknown;
  try {
    parsed = JSON.parse(await readFile(path, "utf8"));
  } catch (err) {
    throw new InvalidArgumentError(`${path}: not readable JSON (${err instanceof Error ? err.message : String(err)})`);
  }
  const snapshot = parseOptions(CollectedSnapshotSchema, parsed, path);
  const advantage = new MCAdvantage({ groupSize, promptKey: ["history", "prompt"] });
  const replayBuffer = await ReplayBuffer.load(join(dir, BUFFER_FILE), { transforms: [advantage] });
  const delta = version - snapshot.policyVersion;
  if (delta !== 0) {
    const { storage } = replayBuffer;
    const rows = Array.from({ length: storage.length }, (_, p) => shiftVersion(storage.row(p), delta));
    storage.set(Int32Array.from(rows, (_, i) => i), rows);
    const held = advantage.heldBack();
    advantage.clearQueues();
    advantage.restoreHeldBack(held.map((t) => shiftVersion(t, delta)));
  }
  return { snapshot, replayBuffer, advantage };
}

/** `td` with its `"policy_version"` leaf (if any) shifted by `delta` (a shallow copy; `td` is left as it is). */
function shiftVersion(td: TensorDict, delta: number): TensorDict {
  const v = td.get(POLICY_VERSION_KEY, undefined);
  if (!(v instanceof Tensor)) return td;
  const shifted = BigInt64Array.from(v.toNumbers(), (x) => BigInt(x + delta));
  return td.exclude().set(POLICY_VERSION_KEY, new Tensor("int64", [...v.shape], shifted));
}

/** The position entries of a snapshot as the run's map (batch number → position). */
export function positionsOf(snapshot: CollectedSnapshot): Map<number, JSONValue> {
  return new Map(snapshot.positions);
}
