/**
 * TorchRL's `MCAdvantage`: the group-relative (GRPO) advantage, computed as a replay-buffer write transform.
 */
import { z } from "zod";
import type { JSONObject } from "../message.js";
import type { NestedKey } from "../../tensordict/keys.js";
import { RaggedTensor } from "../../tensordict/ragged.js";
import { Tensor } from "../../tensordict/tensor.js";
import type { TensorDict } from "../../tensordict/tensordict.js";
import { parseOptions } from "../../core/index.js";
import { lazyCat } from "./collate.js";
import { InvalidArgumentError } from "./errors.js";
import { groupStats, normalizeGroup } from "./group-stats.js";
import { NestedKeySchema } from "./options.js";
import { leafNumbers, reduce } from "./reduce.js";
import { doneRows, groupId, groupIds, likeReward, splitTrajectories } from "./trajectories.js";
import type { ReplayBufferTransform } from "./transform.js";

/* eslint-disable @typescript-eslint/no-deprecated -- the schema maps its own deprecated field onto groupSize */
/** Options of {@link MCAdvantage} (TorchRL's names, camelCased). */
export const MCAdvantageOptionsSchema = z
  .strictObject({
    /** Trajectories per group: the advantage is computed once this many have arrived for one group id (required). */
    groupSize: z.number().int().min(1).optional(),
    /** @deprecated TorchRL's name of `groupSize`; accepted until the next release (see CHANGELOG.md). */
    grpoSize: z.number().int().min(1).optional(),
    /** The group id: the prompt (string or History) or a tensor id, read at a trajectory's first step (default `"query"`, TorchRL's). */
    promptKey: NestedKeySchema.default("query"),
    /** The reward leaf, dense or ragged (default `["next", "reward"]`). */
    rewardsKey: NestedKeySchema.default(["next", "reward"]),
    /** Where the advantage is written, laid out like the reward (default `"advantage"`). */
    advantageKey: NestedKeySchema.default("advantage"),
    /** The done leaf that ends a trajectory (default `["next", "done"]`). */
    doneKey: NestedKeySchema.default(["next", "done"]),
    /**
     * Unset (default): every reward element of the group is normalised over all of them (per-step mode). `"sum"`,
     * `"max"` or `"mean"`: each trajectory is reduced to one return, the returns are normalised across the group and
     * each trajectory's advantage is broadcast over its reward leaf.
     */
    trajectoryReturn: z.enum(["sum", "max", "mean"]).optional(),
    /** Dynamic sampling: drop a group unless `low < mean return < high` (exclusive; needs `trajectoryReturn`). */
    keepReturnBounds: z.tuple([z.number(), z.number()]).optional(),
    /** The floor of the standard deviation in `(r − mean) / max(std, eps)` (default 1e-6, TorchRL's). */
    eps: z.number().positive().default(1e-6),
  })
  .superRefine((o, ctx) => {
    if (o.groupSize !== undefined && o.grpoSize !== undefined) {
      ctx.addIssue({ code: "custom", path: ["grpoSize"], message: "give groupSize only (grpoSize is its deprecated name)" });
    }
    const groupSize = o.groupSize ?? o.grpoSize;
    if (groupSize === undefined) ctx.addIssue({ code: "custom", path: ["groupSize"], message: "is required (a positive integer: trajectories per group)" });
    if (o.trajectoryReturn !== undefined && groupSize !== undefined && groupSize < 2) {
      ctx.addIssue({ code: "custom", path: ["groupSize"], message: "trajectoryReturn needs groupSize >= 2 (the std of a single return is undefined)" });
    }
    if (o.keepReturnBounds !== undefined) {
      if (o.trajectoryReturn === undefined) {
        ctx.addIssue({ code: "custom", path: ["keepReturnBounds"], message: "needs trajectoryReturn ('sum', 'max' or 'mean'): the bounds apply to trajectory returns" });
      } else if (!(o.keepReturnBounds[0] < o.keepReturnBounds[1])) {
        ctx.addIssue({ code: "custom", path: ["keepReturnBounds"], message: `must be an increasing [low, high] pair, got ${JSON.stringify(o.keepReturnBounds)}` });
      }
    }
  })
  .transform(({ grpoSize, groupSize, ...rest }) => ({ ...rest, groupSize: (groupSize ?? grpoSize)! }));
/* eslint-enable @typescript-eslint/no-deprecated */

/** Options of {@link MCAdvantage}. */
export type MCAdvantageOptions = z.input<typeof MCAdvantageOptionsSchema>;

/** Counters of {@link MCAdvantage} (TorchRL's `get_stats()`, camelCased). */
export interface MCAdvantageStats {
  /** Complete trajectories received. */
  readonly completedTrajectories: number;
  /** Steps of those trajectories. */
  readonly completedDecisions: number;
  /** Sum of the trajectories' summed rewards (`trajectoryReturn` mode only, as TorchRL). */
  readonly trajectoryReturnSum: number;
  /** Largest summed reward of a trajectory (`trajectoryReturn` mode only; -Infinity before any). */
  readonly trajectoryReturnMax: number;
  /** Trajectories whose summed reward is > 0 (`trajectoryReturn` mode only). */
  readonly successfulTrajectories: number;
  /** Groups that reached `groupSize` trajectories. */
  readonly completedGroups: number;
  /** Groups written to the buffer with their advantage. */
  readonly writtenGroups: number;
  /** Groups dropped by `keepReturnBounds`. */
  readonly droppedGroups: number;
  /** Incomplete groups held in memory. */
  readonly queuedGroups: number;
  /** Trajectories held in those groups. */
  readonly queuedTrajectories: number;
  /** The most trajectories held for one group. */
  readonly maxQueuedTrajectoriesPerGroup: number;
}

type Counters = { -readonly [K in Exclude<keyof MCAdvantageStats, `queued${string}` | "maxQueuedTrajectoriesPerGroup">]: number };

const zeroCounters = (): Counters => ({
  completedTrajectories: 0,
  completedDecisions: 0,
  trajectoryReturnSum: 0,
  trajectoryReturnMax: -Infinity,
  successfulTrajectories: 0,
  completedGroups: 0,
  writtenGroups: 0,
  droppedGroups: 0,
});

const CountersStateSchema = z.strictObject({
  completedTrajectories: z.number().int().min(0),
  completedDecisions: z.number().int().min(0),
  trajectoryReturnSum: z.number(),
  trajectoryReturnMax: z.number().nullable(),
  successfulTrajectories: z.number().int().min(0),
  completedGroups: z.number().int().min(0),
  writtenGroups: z.number().int().min(0),
  droppedGroups: z.number().int().min(0),
});

function rewardLeaf(td: TensorDict, key: NestedKey): Tensor | RaggedTensor {
  const value = td.get(key);
  if (value instanceof Tensor || value instanceof RaggedTensor) return value;
  throw new InvalidArgumentError(`MCAdvantage: the reward key ${JSON.stringify(key)} must hold a dense or ragged tensor`);
}

/**
 * The Monte-Carlo (GRPO) advantage as a replay-buffer transform (TorchRL's `MCAdvantage`). Written trajectories are
 * held per group id (the prompt) until `groupSize` of them have arrived; the whole group is then written with
 * `A = (r − mean) / max(std, eps)` under `advantageKey`, `std` being the unbiased standard deviation (as `torch.std`).
 *
 * Writes must hold whole trajectories (the last step done); see docs/replay-buffer.md for the modes and counters.
 */
export class MCAdvantage implements ReplayBufferTransform {
  readonly name = "MCAdvantage";
  readonly #options: z.output<typeof MCAdvantageOptionsSchema>;
  readonly #queues = new Map<string, TensorDict[]>();
  #counters = zeroCounters();

  constructor(options: MCAdvantageOptions) {
    this.#options = parseOptions(MCAdvantageOptionsSchema, options, "MCAdvantage options");
  }

  /** The resolved options (defaults filled in). */
  get config(): Readonly<z.output<typeof MCAdvantageOptionsSchema>> {
    return this.#options;
  }

  /** The counters and the queue sizes. */
  get stats(): MCAdvantageStats {
    let queued = 0;
    let most = 0;
    for (const queue of this.#queues.values()) {
      queued += queue.length;
      most = Math.max(most, queue.length);
    }
    return { ...this.#counters, queuedGroups: this.#queues.size, queuedTrajectories: queued, maxQueuedTrajectoriesPerGroup: most };
  }

  /** Resets the counters (the held trajectories stay). */
  resetStats(): void {
    this.#counters = zeroCounters();
  }

  /** Forgets the held (incomplete) groups. */
  clearQueues(): void {
    this.#queues.clear();
  }

  /**
   * The write path: queues the trajectories of `td` and returns the groups they complete (concatenated, with the
   * advantage), or `null` when none is complete. Throws INCOMPLETE_TRAJECTORY (nothing queued) when `td` ends with
   * a step that is not done.
   */
  inv(td: TensorDict): TensorDict | null {
    if (this.#options.trajectoryReturn === undefined && td.batchDims === 1 && td.numel() > 0) {
      const fast = this.#oneStepTrajectories(td);
      if (fast !== undefined) return fast;
    }
    const trajectories = splitTrajectories(td, this.#options.doneKey, "MCAdvantage");
    const ids = trajectories.map((t) => groupId(t, this.#options.promptKey, "MCAdvantage"));
    const out: TensorDict[] = [];
    trajectories.forEach((trajectory, i) => {
      const group = this.#push(ids[i]!, trajectory);
      if (group !== null) out.push(group);
    });
    return out.length === 0 ? null : lazyCat(out);
  }

  /**
   * `inv` when every row of a 1-D `td` is a whole one-step trajectory (single-turn data, the GRPO pipeline's): the
   * same groups in the same order, but each group copied out of `td` once instead of row by row. `undefined` when
   * the data is not of that kind (the general path handles it).
   */
  #oneStepTrajectories(td: TensorDict): TensorDict | null | undefined {
    const o = this.#options;
    if (!doneRows(td, o.doneKey, "MCAdvantage").every(Boolean)) return undefined;
    const ids = groupIds(td, o.promptKey, "MCAdvantage");
    if (ids === undefined) return undefined;
    const c = this.#counters;
    const pending = new Map<string, number[]>();
    const out: TensorDict[] = [];
    ids.forEach((id, row) => {
      c.completedTrajectories += 1;
      c.completedDecisions += 1;
      const held = this.#queues.get(id) ?? [];
      const rows = pending.get(id) ?? [];
      rows.push(row);
      pending.set(id, rows);
      if (held.length + rows.length < o.groupSize) return;
      this.#queues.delete(id);
      pending.delete(id);
      c.completedGroups += 1;
      c.writtenGroups += 1;
      const fresh = td.index(Int32Array.from(rows)); // a copy: not a view of the caller's data
      out.push(this.#perStep(held.length === 0 ? [fresh] : [...held, fresh]));
    });
    for (const [id, rows] of pending) {
      const queue = this.#queues.get(id) ?? [];
      for (const row of rows) queue.push(td.index({ start: row, stop: row + 1 }).clone());
      this.#queues.set(id, queue);
    }
    return out.length === 0 ? null : lazyCat(out);
  }

  /** The read path: unchanged. */
  forward(td: TensorDict): TensorDict {
    return td;
  }

  #push(id: string, trajectory: TensorDict): TensorDict | null {
    const o = this.#options;
    const c = this.#counters;
    c.completedTrajectories += 1;
    c.completedDecisions += trajectory.numel();
    if (o.trajectoryReturn !== undefined) {
      const total = reduce(leafNumbers(trajectory, o.rewardsKey, "MCAdvantage"), "sum");
      c.trajectoryReturnSum += total;
      c.trajectoryReturnMax = Math.max(c.trajectoryReturnMax, total);
      if (total > 0) c.successfulTrajectories += 1;
    }
    const queue = this.#queues.get(id) ?? [];
    queue.push(trajectory.clone()); // held past this call: not a view of the caller's data
    this.#queues.set(id, queue);
    if (queue.length < o.groupSize) return null;
    this.#queues.delete(id);
    c.completedGroups += 1;
    const group = o.trajectoryReturn === undefined ? this.#perStep(queue) : this.#perTrajectory(queue, o.trajectoryReturn);
    if (group === null) c.droppedGroups += 1;
    else c.writtenGroups += 1;
    return group;
  }

  #perStep(trajectories: readonly TensorDict[]): TensorDict {
    // Both callers copy the groups they return (lazyCat in inv), so a group of one piece is not copied here too:
    // a shallow copy keeps the advantage key off the caller's TensorDict.
    const group = trajectories.length === 1 ? trajectories[0]!.exclude() : lazyCat(trajectories);
    const reward = rewardLeaf(group, this.#options.rewardsKey);
    const values = leafNumbers(group, this.#options.rewardsKey, "MCAdvantage");
    return group.set(this.#options.advantageKey, likeReward(reward, normalizeGroup(values, this.#options.eps)));
  }

  #perTrajectory(trajectories: readonly TensorDict[], mode: "sum" | "max" | "mean"): TensorDict | null {
    const o = this.#options;
    const returns = trajectories.map((t) => reduce(leafNumbers(t, o.rewardsKey, "MCAdvantage"), mode));
    const stats = groupStats(returns);
    if (o.keepReturnBounds !== undefined && !(o.keepReturnBounds[0] < stats.mean && stats.mean < o.keepReturnBounds[1])) return null;
    const advantages = normalizeGroup(returns, o.eps, stats);
    const withAdvantage = trajectories.map((t, i) => {
      const reward = rewardLeaf(t, o.rewardsKey);
      const advantage = advantages[i]!;
      return t.exclude().set(o.advantageKey, likeReward(reward, new Float64Array(reward.numel()).fill(advantage)));
    });
    return lazyCat(withAdvantage);
  }

  /** The trajectories of the incomplete groups, group by group in arrival order (saved by `ReplayBuffer.save`). */
  heldBack(): TensorDict[] {
    return [...this.#queues.values()].flat();
  }

  /**
   * Holds back again trajectories returned by {@link heldBack} (`ReplayBuffer.load`), without counting them a second
   * time. INVALID_ARGUMENT when they would complete a group (held-back groups are incomplete by definition).
   */
  restoreHeldBack(trajectories: readonly TensorDict[]): void {
    for (const trajectory of trajectories) {
      const id = groupId(trajectory, this.#options.promptKey, "MCAdvantage.restoreHeldBack");
      const queue = this.#queues.get(id) ?? [];
      if (queue.length + 1 >= this.#options.groupSize) {
        throw new InvalidArgumentError(`MCAdvantage.restoreHeldBack: trajectories: ${queue.length + 1} for one group complete it (groupSize ${this.#options.groupSize}); expected held-back (incomplete) groups`);
      }
      queue.push(trajectory.clone());
      this.#queues.set(id, queue);
    }
  }

  /** The counters, for `ReplayBuffer.save` (the held trajectories are saved from {@link heldBack}). */
  state(): JSONObject {
    const c = this.#counters;
    return { ...c, trajectoryReturnMax: Number.isFinite(c.trajectoryReturnMax) ? c.trajectoryReturnMax : null };
  }

  /** Restores counters saved by `state()`. */
  loadState(state: JSONObject): void {
    const parsed = parseOptions(CountersStateSchema, state, "MCAdvantage state");
    this.#counters = { ...parsed, trajectoryReturnMax: parsed.trajectoryReturnMax ?? -Infinity };
  }
}
