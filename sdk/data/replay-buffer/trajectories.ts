/**
 * Whole trajectories for the replay-buffer transforms that group them (internal): splitting written data at its done
 * steps, the group identifier of a trajectory, and advantage leaves laid out like the reward leaf.
 */
import { HistoryBatch } from "../history.js";
import { formatKey, type NestedKey } from "../../tensordict/keys.js";
import { RaggedTensor } from "../../tensordict/ragged.js";
import { Tensor } from "../../tensordict/tensor.js";
import type { TensorDict } from "../../tensordict/tensordict.js";
import { IncompleteTrajectoryError, InvalidArgumentError } from "./errors.js";

/** Per-row done flags: a row is done when every element of its done leaf is true (non-zero). */
export function doneRows(td: TensorDict, doneKey: NestedKey, where: string): boolean[] {
  const done = td.get(doneKey);
  if (!(done instanceof Tensor)) throw new InvalidArgumentError(`${where}: done key ${formatKey(doneKey)} must hold a dense tensor`);
  const values = done.toNumbers();
  const rows = td.numel();
  const per = rows === 0 ? 0 : values.length / rows;
  return Array.from({ length: rows }, (_, r) => {
    for (let k = 0; k < per; k++) if (values[r * per + k] === 0) return false;
    return per > 0;
  });
}

/** One trajectory (1-D), split at its done steps. */
function splitOne(td: TensorDict, doneKey: NestedKey, where: string): TensorDict[] {
  const done = doneRows(td, doneKey, where);
  const out: TensorDict[] = [];
  let start = 0;
  done.forEach((d, r) => {
    if (d) {
      out.push(td.index({ start, stop: r + 1 }));
      start = r + 1;
    }
  });
  if (start < done.length || done.length === 0) {
    throw new IncompleteTrajectoryError(
      `${where}: expected whole trajectories, but the last step (row ${done.length - 1} of ${done.length}) is not done under ${formatKey(doneKey)}`,
      doneKey,
    );
  }
  return out;
}

/**
 * The complete trajectories in `td`, as TorchRL's transforms read written data: batch size `[]` is one step, `[T]` one
 * or more trajectories one after the other (split after each done step), `[B, T]` (or more dimensions, flattened to
 * `[B', T]`) B rows of trajectories. Throws INCOMPLETE_TRAJECTORY when a trajectory does not end with a done step;
 * nothing is consumed then.
 */
export function splitTrajectories(td: TensorDict, doneKey: NestedKey, where: string): TensorDict[] {
  if (td.batchDims === 0) return splitOne(td.unsqueeze(0), doneKey, where);
  if (td.batchDims === 1) return splitOne(td, doneKey, where);
  return td.flatten(0, -2).unbind(0).flatMap((row) => splitOne(row, doneKey, where));
}

/** The group identifier of a trajectory: its first step's value under `key` (a string, History or tensor), as a Map key. */
export function groupId(trajectory: TensorDict, key: NestedKey, where: string): string {
  const value = trajectory.index(0).get(key);
  if (value instanceof Tensor) return `tensor:${JSON.stringify(value.toNumbers())}`;
  if (value instanceof RaggedTensor) return `tensor:${JSON.stringify(value.row(0).toNumbers())}`;
  if (value instanceof HistoryBatch) return `history:${JSON.stringify(value.row(0).toJSON())}`;
  if (Array.isArray(value)) return `string:${(value as readonly string[])[0]!}`;
  throw new InvalidArgumentError(`${where}: the group key ${formatKey(key)} must hold strings, Histories or a tensor, not a nested TensorDict`);
}

/**
 * The group identifier of every row of a 1-D `td` whose rows are one-step trajectories, as {@link groupId} gives them
 * one by one, read in one pass; `undefined` for a key kind read only row by row (a ragged tensor).
 */
export function groupIds(td: TensorDict, key: NestedKey, where: string): string[] | undefined {
  const value = td.get(key);
  const rows = td.numel();
  if (value instanceof HistoryBatch) return value.rows.map((h) => `history:${JSON.stringify(h.toJSON())}`);
  if (Array.isArray(value)) return (value as readonly string[]).map((s) => `string:${s}`);
  if (value instanceof Tensor) {
    const numbers = value.toNumbers();
    const per = rows === 0 ? 0 : numbers.length / rows;
    return Array.from({ length: rows }, (_, r) => `tensor:${JSON.stringify(numbers.slice(r * per, (r + 1) * per))}`);
  }
  if (value instanceof RaggedTensor) return undefined;
  throw new InvalidArgumentError(`${where}: the group key ${formatKey(key)} must hold strings, Histories or a tensor, not a nested TensorDict`);
}

/** A leaf laid out like `reward` (dense shape or ragged rows) holding `values`, in the reward's float dtype (float32 otherwise). */
export function likeReward(reward: Tensor | RaggedTensor, values: ArrayLike<number>): Tensor | RaggedTensor {
  const float = reward.dtype === "float32" || reward.dtype === "float64" || reward.dtype === "float16" || reward.dtype === "bfloat16";
  const dtype = float ? reward.dtype : "float32";
  const flat = Tensor.from(Float64Array.from(values), { dtype });
  if (reward instanceof Tensor) return flat.reshape(reward.shape);
  const base = reward.offsets[0]!;
  return new RaggedTensor(dtype, flat.data, reward.offsets.map((o) => o - base), reward.tailShape);
}
