/**
 * `trajectoryBatch`: collected multi-turn trajectories (tool episodes) as one trainer batch whose loss mask holds the
 * assistant's tokens only. See docs/collectors.md ("Training on multi-turn trajectories").
 */
import { z } from "zod";
import type { RequestOptions } from "../../bridge/index.js";
import { parseOptions } from "../core/index.js";
import { HistoryBatch, type History } from "../data/index.js";
import { lazyCat } from "../data/replay-buffer/collate.js";
import { NestedKeySchema } from "../data/replay-buffer/options.js";
import { leafNumbers } from "../data/replay-buffer/reduce.js";
import { splitTrajectories } from "../data/replay-buffer/trajectories.js";
import { ASSISTANT_MASK_KEY, ATTENTION_MASK_KEY, LOG_PROBS_FULL_KEY, TOKENS_FULL_KEY } from "../envs/keys.js";
import { Tensor, TensorDict } from "../tensordict/index.js";
import type { NestedKey } from "../tensordict/keys.js";
import { WorkerClient } from "../workers/client.js";
import { InvalidArgumentError } from "./errors.js";

/** A key as the docs write it: `"advantage"`, `("tokens", "full")`. */
function formatKey(key: NestedKey): string {
  return typeof key === "string" ? JSON.stringify(key) : `(${key.map((k) => JSON.stringify(k)).join(", ")})`;
}

/** Options of {@link trajectoryBatch}. */
export const TrajectoryBatchOptionsSchema = z.strictObject({
  /**
   * `"conversation"` (default): one row per trajectory, its whole conversation rendered and scored in the worker.
   * `"turns"`: one row per step, the tokens and log-probs the policy generated at that step.
   */
  layout: z.enum(["conversation", "turns"]).default("conversation"),
  /** The worker holding the scoring model (`"conversation"` layout: required). */
  worker: z.instanceof(WorkerClient).optional(),
  /** The model's name in the worker: its chat template renders the conversations, its log-probs are the behaviour log-probs. */
  model: z.string().min(1).optional(),
  /** Where each trajectory's advantage is read, at its last step (default `"advantage"`: what `MCAdvantage` writes). */
  advantageKey: NestedKeySchema.default("advantage"),
  /** One advantage per trajectory, in order, instead of reading `advantageKey`. */
  advantages: z.array(z.number().refine(Number.isFinite, "expected a finite number")).optional(),
  /** The conversation of a trajectory, read at its last step (default `("history", "full")`: every turn, tool messages included). */
  historyKey: NestedKeySchema.default(["history", "full"]),
  /** The done leaf that ends a trajectory (default `("next", "done")`). */
  doneKey: NestedKeySchema.default(["next", "done"]),
  /** The reward leaf summed into `"return"` when present (default `("next", "reward")`). */
  rewardKey: NestedKeySchema.default(["next", "reward"]),
  /** Rows per scoring forward pass in the worker; default all at once. */
  microBatchSize: z.number().int().min(1).optional(),
});

/** Options of {@link trajectoryBatch}. */
export type TrajectoryBatchOptions = z.input<typeof TrajectoryBatchOptionsSchema>;
type Resolved = z.output<typeof TrajectoryBatchOptionsSchema>;

/** What is read of each trajectory, whatever the layout. */
interface TrajectoryInfo {
  readonly steps: TensorDict;
  readonly last: TensorDict;
  readonly advantage: number;
  readonly return: number | undefined;
  readonly query: string | undefined;
}

function readTrajectories(trajectories: readonly TensorDict[], o: Resolved): TrajectoryInfo[] {
  if (o.advantages !== undefined && o.advantages.length !== trajectories.length) {
    throw new InvalidArgumentError(`trajectoryBatch options.advantages: expected one per trajectory (${trajectories.length}), got ${o.advantages.length}`);
  }
  return trajectories.map((steps, i) => {
    const n = steps.numel();
    const last = steps.index({ start: n - 1, stop: n });
    let advantage = o.advantages?.[i];
    if (advantage === undefined) {
      if (!last.has(o.advantageKey)) {
        throw new InvalidArgumentError(
          `trajectoryBatch: trajectory ${i} has no ${formatKey(o.advantageKey)}; write the steps through MCAdvantage (e.g. trajectoryReturn: "sum") or pass options.advantages`,
        );
      }
      advantage = leafNumbers(last, o.advantageKey, "trajectoryBatch")[0] ?? 0;
    }
    const ret = steps.has(o.rewardKey) ? leafNumbers(steps, o.rewardKey, "trajectoryBatch").reduce((a, b) => a + b, 0) : undefined;
    const query = steps.get("query", undefined);
    return { steps, last, advantage, return: ret, query: Array.isArray(query) && typeof query[0] === "string" ? query[0] : undefined };
  });
}

/** `"advantage"`, `"return"`, `"num_turns"` and `"query"` of each row, `rowsOf[i]` rows for trajectory `i`. */
function setTrajectoryColumns(batch: TensorDict, infos: readonly TrajectoryInfo[], rowsOf: (info: TrajectoryInfo) => number): void {
  const repeat = <T>(pick: (info: TrajectoryInfo) => T): T[] => infos.flatMap((info) => new Array<T>(rowsOf(info)).fill(pick(info)));
  const rows = batch.numel();
  batch.set("advantage", new Tensor("float32", [rows], Float32Array.from(repeat((t) => t.advantage))));
  batch.set("num_turns", new Tensor("int64", [rows], BigInt64Array.from(repeat((t) => BigInt(t.steps.numel())))));
  if (infos.every((t) => t.return !== undefined)) batch.set("return", new Tensor("float32", [rows], Float32Array.from(repeat((t) => t.return!))));
  if (infos.every((t) => t.query !== undefined)) batch.set("query", repeat((t) => t.query!));
}

async function conversationRows(infos: readonly TrajectoryInfo[], o: Resolved, requestOptions: RequestOptions): Promise<TensorDict> {
  if (o.worker === undefined) throw new InvalidArgumentError('trajectoryBatch options.worker: required with layout "conversation" (the worker that scores the conversations)');
  if (o.model === undefined) throw new InvalidArgumentError('trajectoryBatch options.model: required with layout "conversation" (the model that scores the conversations)');
  const histories: History[] = infos.map((t, i) => {
    if (!t.last.has(o.historyKey)) {
      throw new InvalidArgumentError(`trajectoryBatch: trajectory ${i} has no ${formatKey(o.historyKey)} at its last step (run the env in history mode)`);
    }
    return t.last.getHistory(o.historyKey).row(0);
  });
  const batch = new TensorDict({ history: { full: HistoryBatch.from(histories) } }, { batchSize: [infos.length] });
  const rendered = await o.worker.applyChatTemplate(o.model, batch, { key: "full" }, requestOptions);
  const scoreOptions = o.microBatchSize === undefined ? {} : { microBatchSize: o.microBatchSize };
  const scored = await o.worker.score(o.model, rendered.select(TOKENS_FULL_KEY), scoreOptions, requestOptions);
  for (const source of [rendered, scored]) {
    for (const [key, value] of source.entries({ nested: true, leavesOnly: true })) batch.set(key, value);
  }
  setTrajectoryColumns(batch, infos, () => 1);
  return batch;
}

function turnRows(infos: readonly TrajectoryInfo[]): TensorDict {
  const needed = [TOKENS_FULL_KEY, ASSISTANT_MASK_KEY, LOG_PROBS_FULL_KEY];
  const parts = infos.map((t, i) => {
    for (const key of needed) {
      if (!t.steps.has(key)) {
        throw new InvalidArgumentError(`trajectoryBatch: the steps of trajectory ${i} have no ${formatKey(key)} (layout "turns" trains on what the policy generated: use TransformersWrapper's output)`);
      }
    }
    const keys = t.steps.has(ATTENTION_MASK_KEY) ? [...needed, ATTENTION_MASK_KEY] : needed;
    return t.steps.select(...keys);
  });
  const batch = lazyCat(parts);
  setTrajectoryColumns(batch, infos, (t) => t.steps.numel());
  return batch;
}

/**
 * Turns collected trajectories into a trainer batch whose loss mask (`("masks", "all_assistant_mask")`) holds the
 * assistant's tokens only: a loss with `maskingStrategy: "rlhf"` trains on every assistant turn and never on system,
 * user or tool tokens. `steps` (one TensorDict or several, in order) holds whole trajectories one after the other, each
 * ending with a done step, as `LLMCollector` yields them with `yieldCompletedTrajectories` and `MCAdvantage` returns
 * them (or `[B, T]` rows of them); a `[N]` batch of last steps (`yieldOnlyLastSteps`) is N one-step trajectories.
 *
 * **`layout: "conversation"`** (default, needs `worker` and `model`): one row per trajectory. Its last step's
 * `("history", "full")` — the whole conversation, every assistant turn and every tool message — is rendered by the
 * model's chat template in the worker and scored there: `("history", "full")`, `("tokens", "full")`,
 * `("text", "full")`, `("masks", "all_assistant_mask")` (the template's `{% generation %}` blocks: each turn's words and
 * its end-of-turn token), `("masks", "all_attention_mask")` and `("log_probs", "full")`. Call it before the trainer
 * steps on the weights that sampled the trajectories, so the log-probs are the behaviour policy's. The tokens are those
 * of the text: a response whose sampled tokens do not survive decoding and encoding again (a byte-level model's stray
 * bytes that are not UTF-8) is trained on other tokens than it sampled.
 *
 * **`layout: "turns"`**: one row per step, what the policy generated there (`TransformersWrapper`'s output):
 * `("tokens", "full")` (the prompt as the policy saw it, earlier turns and tool messages included, then the response),
 * `("masks", "all_assistant_mask")` (the response), the sampling log-probs `("log_probs", "full")` and
 * `("masks", "all_attention_mask")`. Exact tokens and behaviour log-probs even for stale steps; each turn's context is
 * run once per turn. No worker call.
 *
 * Both add `"advantage"` (`[rows]` float32): the trajectory's, read at its last step under `advantageKey`
 * (`MCAdvantage({ trajectoryReturn: "sum" })` writes it on every step) or taken from `options.advantages`; and, per
 * row, the trajectory's `"return"` (the sum of its rewards, when `rewardKey` is there), `"num_turns"` (int64) and
 * `"query"` (its first step's, when it is a string field).
 *
 * ```ts
 * const mc = new MCAdvantage({ groupSize: 8, trajectoryReturn: "sum" });
 * for await (const trajectories of collector) {          // LLMCollector({ yieldCompletedTrajectories: true, ... })
 *   const groups = mc.inv(trajectories);                 // whole groups, with "advantage"
 *   if (groups === null) continue;
 *   await trainer.step(await trajectoryBatch(groups, { worker, model: "policy" })); // GRPOLoss({ maskingStrategy: "rlhf" })
 *   await collector.updatePolicyWeights();
 * }
 * ```
 */
export async function trajectoryBatch(
  steps: TensorDict | readonly TensorDict[],
  options: TrajectoryBatchOptions = {},
  requestOptions: RequestOptions = {},
): Promise<TensorDict> {
  const o = parseOptions(TrajectoryBatchOptionsSchema, options, "trajectoryBatch options");
  const parts = steps instanceof TensorDict ? [steps] : steps;
  const trajectories = parts.flatMap((part) => splitTrajectories(part, o.doneKey, "trajectoryBatch"));
  if (trajectories.length === 0) throw new InvalidArgumentError("trajectoryBatch: no trajectories given");
  const infos = readTrajectories(trajectories, o);
  return o.layout === "conversation" ? conversationRows(infos, o, requestOptions) : turnRows(infos);
}
