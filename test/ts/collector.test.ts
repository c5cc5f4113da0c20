// LLMCollector with real envs (DatasetChatEnv over a JSONL file), the real tiny policy in a worker and TS rewards:
// a full run into a ReplayBuffer with MCAdvantage, policy-version tracking and the weight-update hook, the
// yieldCompletedTrajectories / yieldOnlyLastSteps modes, batches in the default mode, cancellation and bad options.
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  CollectorStateError,
  InvalidArgumentError,
  LazyStackStorage,
  LLMCollector,
  MCAdvantage,
  markDone,
  ReplayBuffer,
  RequestAbortedError,
  SamplerWithoutReplacement,
  StepCounter,
  TensorDict,
  Transform,
  TransformersWrapper,
  type WorkerClient,
} from "../../sdk/index.js";
import { DatasetChatEnv, type DatasetChatEnvOptions } from "../../sdk/envs/dataset-chat-env.js";
import { expectError } from "./tensordict.helpers.js";
import { startTinyPolicy, type TinyPolicy } from "./tiny-policy.js";

/** Ends row `i` after `i % 3 + 1` steps (reads StepCounter's count): trajectories of known, different lengths. */
class RowTurnLimit extends Transform {
  override step(_td: TensorDict, next: TensorDict): TensorDict {
    const counts = next.getTensor("step_count").toNumbers();
    return markDone(next, counts.map((c, i) => c >= (i % 3) + 1), "truncated");
  }
}

/** A simple TS reward: the number of distinct characters in the response, over 10. */
const variety = (s: { response: string }): number => new Set(s.response).size / 10;

const numbers = (td: TensorDict, key: string | string[]): number[] => td.getTensor(key).toNumbers();

describe("LLMCollector", () => {
  let setup: TinyPolicy;
  let worker: WorkerClient;
  let dir: string;
  let dataset: string;

  beforeAll(async () => {
    [setup, dir] = await Promise.all([startTinyPolicy(21), mkdtemp(join(tmpdir(), "posttrain-collector-"))]);
    worker = setup.worker;
    dataset = join(dir, "train.jsonl");
    const rows = ["What is 2+2?", "Name a colour.", "Say hello.", "Count to three."].map((q, i) => JSON.stringify({ id: `q${i}`, question: q }));
    await writeFile(dataset, rows.join("\n") + "\n");
  });

  afterAll(async () => {
    await setup.close();
    await rm(dir, { recursive: true, force: true });
  });

  const policy = (): TransformersWrapper => new TransformersWrapper(worker, { model: "policy", generateKwargs: { max_new_tokens: 5 } });
  const env = (options: Partial<DatasetChatEnvOptions> = {}, extra: Transform[] = []): DatasetChatEnv =>
    new DatasetChatEnv(
      {
        dataset: { files: dataset, fields: { query: "question", id: "id" }, repeats: 4, shuffle: false },
        batchSize: [4],
        rewards: [{ name: "variety", fn: variety }],
        rewardOptions: { done: true },
        ...options,
      },
      extra,
    );

  it("runs a DatasetChatEnv with the tiny policy into a ReplayBuffer with MCAdvantage, tracking the policy version", async () => {
    const advantage = new MCAdvantage({ groupSize: 4 });
    const rb = new ReplayBuffer({ storage: new LazyStackStorage({ maxSize: 64 }), sampler: new SamplerWithoutReplacement(), transforms: [advantage], batchSize: 4, seed: 0 });
    const updates: unknown[] = [];
    const collector = new LLMCollector({
      env: env(),
      policy: policy(),
      dialogTurnsPerBatch: 4,
      totalDialogTurns: 12,
      replayBuffer: rb,
      trackPolicyVersion: true,
      weightUpdater: (weights, c) => {
        expect(c).toBe(collector);
        updates.push(weights);
      },
    });
    expect(collector.policyVersion).toBe(0);
    const batches: TensorDict[] = [];
    for await (const batch of collector) {
      batches.push(batch);
      await collector.updatePolicyWeights({ step: batches.length });
    }
    expect(batches.map((b) => b.batchSize)).toEqual([[4], [4], [4]]); // flattened: a replay buffer is given
    // the rows carry the version the worker sampled with, which this hook (pushing no weights) leaves at 0; the
    // collector's own counter (written for policies that report none) counts the updates
    expect(batches.map((b) => numbers(b, "policy_version"))).toEqual([[0, 0, 0, 0], [0, 0, 0, 0], [0, 0, 0, 0]]);
    expect(updates).toEqual([{ step: 1 }, { step: 2 }, { step: 3 }]);
    expect(collector.policyVersion).toBe(3);
    expect(collector.dialogTurns).toBe(12);
    // Each batch is one group of 4 answers to one question (repeats: 4), written with its advantage.
    expect(batches.map((b) => new Set(b.getStrings("query")).size)).toEqual([1, 1, 1]);
    expect(batches.map((b) => b.getStrings("query")[0])).toEqual(["What is 2+2?", "Name a colour.", "Say hello."]);
    expect(rb.length).toBe(12);
    expect(advantage.stats).toMatchObject({ completedTrajectories: 12, writtenGroups: 3, queuedGroups: 0 });
    const stored = [...rb];
    expect(stored.map((b) => b.batchSize[0])).toEqual([4, 4, 4]);
    const all = TensorDict.cat(stored.map((b) => b.select("query", ["next", "reward"], "advantage", ["history", "full"], ["tokens", "full"])));
    const byQuery = new Map<string, { r: number; a: number }[]>();
    const queries = all.getStrings("query");
    const rewards = numbers(all, ["next", "reward"]);
    const advantages = numbers(all, "advantage");
    queries.forEach((q, i) => byQuery.set(q, [...(byQuery.get(q) ?? []), { r: rewards[i]!, a: advantages[i]! }]));
    expect(byQuery.size).toBe(3);
    expect(advantages.some((a) => Math.abs(a) > 0.1)).toBe(true); // sampled answers differ
    for (const group of byQuery.values()) {
      const mean = group.reduce((s, x) => s + x.r, 0) / group.length;
      const std = Math.sqrt(group.reduce((s, x) => s + (x.r - mean) ** 2, 0) / (group.length - 1));
      for (const { r, a } of group) expect(a).toBeCloseTo((r - mean) / Math.max(std, 1e-6), 4);
    }
    // The stored rows carry what a trainer needs: the conversation and its tokens.
    expect(all.getHistory(["history", "full"]).row(0).last?.role).toBe("assistant");
    expect(all.getRagged(["tokens", "full"]).rows).toBe(12);
    // The budget is spent: iterating again yields nothing.
    const more: TensorDict[] = [];
    for await (const batch of collector) more.push(batch);
    expect(more).toEqual([]);
    await collector.close();
  });

  it("yields whole trajectories (yieldCompletedTrajectories) and only their last steps (yieldOnlyLastSteps)", async () => {
    const limits = new LLMCollector({
      env: env({ rewardOptions: { done: false }, dataset: { files: dataset, fields: { query: "question" }, repeats: 1, shuffle: false }, batchSize: [3] }, [new StepCounter(), new RowTurnLimit()]),
      policy: policy(),
      yieldCompletedTrajectories: true,
      totalDialogTurns: 6,
    });
    const trajectories: TensorDict[] = [];
    for await (const t of limits) trajectories.push(t);
    // Row 0 ends after 1 step, row 1 after 2, row 2 after 3: finished in the order 0, 0, 1, 0, 2 ...
    expect(trajectories.map((t) => t.batchSize[0])).toEqual([1, 1, 2, 1, 3]);
    for (const t of trajectories) {
      const steps = numbers(t, ["next", "step_count"]);
      expect(steps).toEqual(steps.map((_, i) => i + 1));
      const done = numbers(t, ["next", "done"]);
      expect(done).toEqual(done.map((_, i) => (i === done.length - 1 ? 1 : 0)));
      expect(new Set(t.getStrings("query")).size).toBe(1);
    }
    // Later turns continue the same conversation: the prompt of turn 2 is the full history of turn 1.
    const longest = trajectories[4]!;
    const prompts = longest.getHistory(["history", "prompt"]);
    expect(prompts.row(1).toJSON()).toEqual(longest.getHistory(["history", "full"]).row(0).toJSON());
    expect(limits.dialogTurns).toBe(8);

    const lastOnly = new LLMCollector({
      env: env({ rewardOptions: { done: false }, dataset: { files: dataset, fields: { query: "question" }, repeats: 1, shuffle: false }, batchSize: [3] }, [new StepCounter(), new RowTurnLimit()]),
      policy: policy(),
      yieldOnlyLastSteps: true,
      totalDialogTurns: 6,
    });
    const last: TensorDict[] = [];
    for await (const t of lastOnly) last.push(t);
    expect(last.map((t) => t.batchSize)).toEqual([[1], [1], [1], [1]]);
    expect(last.map((t) => numbers(t, ["next", "step_count"])[0])).toEqual([1, 1, 2, 1]);
    expect(last.every((t) => numbers(t, ["next", "done"])[0] === 1)).toBe(true);
    // Dropped intermediate turns count toward totalDialogTurns: the 5 turns of the yielded trajectories, plus the 2
    // first turns of row 2's, whose last step is still queued.
    expect(lastOnly.dialogTurns).toBe(1 + 1 + 2 + 1 + 2);
  });

  it("in the default mode yields [B, T] batches that continue the running dialogs, or [B * T] with flattenData", async () => {
    const make = (flattenData: boolean, resetAtEachIter = false): LLMCollector =>
      new LLMCollector({
        env: env({ rewardOptions: { done: false }, dataset: { files: dataset, fields: { query: "question" }, repeats: 1, shuffle: false }, batchSize: [3] }, [new StepCounter({ maxSteps: 3 })]),
        policy: policy(),
        dialogTurnsPerBatch: 6,
        totalDialogTurns: 12,
        flattenData,
        resetAtEachIter,
      });
    const batches: TensorDict[] = [];
    for await (const b of make(false)) batches.push(b);
    expect(batches.map((b) => b.batchSize)).toEqual([[3, 2], [3, 2]]);
    // Dialogs run across batches: step counts 1, 2 | 3 (done, reset), 1.
    expect(batches.map((b) => numbers(b, ["next", "step_count"]))).toEqual([[1, 2, 1, 2, 1, 2], [3, 1, 3, 1, 3, 1]]);
    const flat: TensorDict[] = [];
    for await (const b of make(true, true)) flat.push(b);
    expect(flat.map((b) => b.batchSize)).toEqual([[6], [6]]);
    expect(flat.map((b) => numbers(b, ["next", "step_count"]))).toEqual([[1, 2, 1, 2, 1, 2], [1, 2, 1, 2, 1, 2]]); // reset at each batch
  });

  it("stops on abort with ABORTED, refuses a second concurrent iteration and iteration after close()", async () => {
    const ac = new AbortController();
    const collector = new LLMCollector({ env: env(), policy: policy(), dialogTurnsPerBatch: 4, signal: ac.signal });
    const seen: TensorDict[] = [];
    const err = await (async () => {
      for await (const batch of collector) {
        seen.push(batch);
        const second = collector[Symbol.asyncIterator]();
        await expect(second.next()).rejects.toBeInstanceOf(CollectorStateError);
        ac.abort();
      }
    })().catch((e: unknown) => e);
    expect(seen).toHaveLength(1);
    expect(err).toBeInstanceOf(RequestAbortedError);
    expect((err as RequestAbortedError).code).toBe("ABORTED");
    await collector.close();
    const after = await collector[Symbol.asyncIterator]().next().catch((e: unknown) => e);
    expect(after).toBeInstanceOf(CollectorStateError);
    expect((after as CollectorStateError).code).toBe("COLLECTOR_STATE");
  });

  it("validates its options, naming the field", () => {
    const e = env();
    const p = policy();
    const cases: [Record<string, unknown>, string][] = [
      [{ env: e, policy: p }, "LLMCollector options.dialogTurnsPerBatch"],
      [{ env: {}, policy: p, dialogTurnsPerBatch: 1 }, "LLMCollector options.env"],
      [{ env: e, policy: 42, dialogTurnsPerBatch: 1 }, "LLMCollector options.policy"],
      [{ env: e, policy: p, dialogTurnsPerBatch: 0 }, "LLMCollector options.dialogTurnsPerBatch"],
      [{ env: e, policy: p, dialogTurnsPerBatch: 1, totalDialogTurns: 0 }, "LLMCollector options.totalDialogTurns"],
      [{ env: e, policy: p, yieldOnlyLastSteps: true, yieldCompletedTrajectories: false }, "LLMCollector options.yieldCompletedTrajectories"],
      [{ env: e, policy: p, yieldOnlyLastSteps: true, flattenData: true }, "LLMCollector options.flattenData"],
      [{ env: e, policy: p, yieldOnlyLastSteps: true, resetAtEachIter: true }, "LLMCollector options.resetAtEachIter"],
      [{ env: e, policy: p, dialogTurnsPerBatch: 1, replayBuffer: {} }, "LLMCollector options.replayBuffer"],
      [{ env: e, policy: p, dialogTurnsPerBatch: 1, weightUpdater: "push" }, "LLMCollector options.weightUpdater"],
      [{ env: e, policy: p, dialogTurnsPerBatch: 1, frames: 3 }, "frames"],
    ];
    for (const [options, field] of cases) {
      expect(expectError(() => new LLMCollector(options as never), InvalidArgumentError, "INVALID_ARGUMENT").message).toContain(field);
    }
  });
});
