/**
 * TorchRL's `TopKRewardSelector`: a replay-buffer write transform that keeps the best trajectories of each prompt.
 */
import { z } from "zod";
import type { TensorDict } from "../../tensordict/tensordict.js";
import { parseOptions } from "../../core/index.js";
import { lazyCat } from "./collate.js";
import { NestedKeySchema } from "./options.js";
import { leafNumbers, reduce } from "./reduce.js";
import { groupId, splitTrajectories } from "./trajectories.js";
import type { ReplayBufferTransform } from "./transform.js";

/** Options of {@link TopKRewardSelector} (TorchRL's names, camelCased). */
export const TopKRewardSelectorOptionsSchema = z
  .strictObject({
    /** Trajectories gathered per prompt before selecting. */
    totalDialogTurns: z.number().int().min(1),
    /** The most trajectories kept per prompt (at most `totalDialogTurns`). */
    topkSize: z.number().int().min(1),
    /** The prompt (string or History) or a tensor id, read at a trajectory's first step (default `["text", "prompt"]`, TorchRL's). */
    promptKey: NestedKeySchema.default(["text", "prompt"]),
    /** The reward leaf, dense or ragged (default `["next", "reward"]`). */
    rewardsKey: NestedKeySchema.default(["next", "reward"]),
    /** The done leaf that ends a trajectory (default `["next", "done"]`). */
    doneKey: NestedKeySchema.default(["next", "done"]),
  })
  .superRefine((o, ctx) => {
    if (o.topkSize > o.totalDialogTurns) {
      ctx.addIssue({ code: "custom", path: ["topkSize"], message: `must be at most totalDialogTurns (${o.totalDialogTurns}), got ${o.topkSize}` });
    }
  });

/** Options of {@link TopKRewardSelector}. */
export type TopKRewardSelectorOptions = z.input<typeof TopKRewardSelectorOptionsSchema>;

/**
 * Gathers `totalDialogTurns` trajectories per prompt; each trajectory's reward is the mean of its reward elements.
 * When the rewards all tie the group is dropped; otherwise the trajectories strictly above the group's median reward
 * (the lower median, as `torch.median`) are kept, at most `topkSize` of them, best first.
 */
export class TopKRewardSelector implements ReplayBufferTransform {
  readonly name = "TopKRewardSelector";
  readonly #options: z.output<typeof TopKRewardSelectorOptionsSchema>;
  readonly #queues = new Map<string, TensorDict[]>();

  constructor(options: TopKRewardSelectorOptions) {
    this.#options = parseOptions(TopKRewardSelectorOptionsSchema, options, "TopKRewardSelector options");
  }

  /** The resolved options (defaults filled in). */
  get config(): Readonly<z.output<typeof TopKRewardSelectorOptionsSchema>> {
    return this.#options;
  }

  /** Prompts whose trajectories are held, waiting for `totalDialogTurns`. */
  get queuedGroups(): number {
    return this.#queues.size;
  }

  /**
   * The write path: queues the trajectories of `td` and returns the selected trajectories of the groups they
   * complete (concatenated), or `null`. Throws INCOMPLETE_TRAJECTORY when `td` ends with a step that is not done.
   */
  inv(td: TensorDict): TensorDict | null {
    const o = this.#options;
    const trajectories = splitTrajectories(td, o.doneKey, "TopKRewardSelector");
    const ids = trajectories.map((t) => groupId(t, o.promptKey, "TopKRewardSelector"));
    const out: TensorDict[] = [];
    trajectories.forEach((trajectory, i) => {
      const id = ids[i]!;
      const queue = this.#queues.get(id) ?? [];
      queue.push(trajectory.clone());
      this.#queues.set(id, queue);
      if (queue.length < o.totalDialogTurns) return;
      this.#queues.delete(id);
      const selected = this.#select(queue);
      if (selected !== null) out.push(selected);
    });
    return out.length === 0 ? null : lazyCat(out);
  }

  /** The read path: unchanged. */
  forward(td: TensorDict): TensorDict {
    return td;
  }

  #select(group: readonly TensorDict[]): TensorDict | null {
    const rewards = group.map((t) => reduce(leafNumbers(t, this.#options.rewardsKey, "TopKRewardSelector"), "mean"));
    if (rewards.every((r) => r === rewards[0])) return null;
    const median = reduce(rewards, "median");
    const order = rewards
      .map((r, i) => ({ r, i }))
      .filter(({ r }) => r > median)
      .sort((a, b) => b.r - a.r || a.i - b.i)
      .slice(0, this.#options.topkSize);
    return order.length === 0 ? null : lazyCat(order.map(({ i }) => group[i]!));
  }
}
