// MCAdvantage (GRPO advantage as a replay-buffer transform) and TopKRewardSelector: the formula, groups held until
// complete, trajectory splitting, trajectory-return mode and dynamic-sampling bounds, counters, typed errors.
// Parity with TorchRL's own classes is in mc-advantage.parity.test.ts.
import { describe, expect, it } from "vitest";
import {
  HistoryBatch,
  IncompleteTrajectoryError,
  InvalidArgumentError,
  LazyStackStorage,
  MCAdvantage,
  RaggedTensor,
  ReplayBuffer,
  SamplerWithoutReplacement,
  Tensor,
  TensorDict,
  TopKRewardSelector,
} from "../../sdk/index.js";
import { expectError } from "./tensordict.helpers.js";

let nextId = 0;

/** One trajectory of `rewards.length` steps for prompt `query`: reward [T, 1], done on the last step, a "traj" id. */
function traj(query: string, rewards: readonly number[], done = true): TensorDict {
  const n = rewards.length;
  const id = nextId++;
  return new TensorDict(
    {
      query: rewards.map(() => query),
      traj: Tensor.full("int32", [n], id),
      next: {
        reward: Tensor.from(rewards.map((r) => [r]), { dtype: "float32" }),
        done: Tensor.from(rewards.map((_, t) => [done && t === n - 1]), { dtype: "bool" }),
      },
    },
    { batchSize: [n] },
  );
}

const write = (...trajectories: TensorDict[]): TensorDict => TensorDict.cat(trajectories);
const advantages = (td: TensorDict): number[] => td.getTensor("advantage").toNumbers();
const trajIds = (td: TensorDict): number[] => td.getTensor("traj").toNumbers();

/** The GRPO formula, spelled out independently: (r − mean) / max(unbiased std, eps). */
function expected(rewards: readonly number[], eps = 1e-6): number[] {
  const mean = rewards.reduce((a, b) => a + b, 0) / rewards.length;
  const variance = rewards.reduce((a, r) => a + (r - mean) * (r - mean), 0) / (rewards.length - 1);
  return rewards.map((r) => (r - mean) / Math.max(Math.sqrt(variance), eps));
}

describe("MCAdvantage on a batch of one-step trajectories (the GRPO pipeline's writes)", () => {
  it("returns groups that neither view nor change what was written (contiguous, split and single groups)", () => {
    for (const queries of [["a", "a", "b", "b"], ["a", "b", "a", "b"], ["a", "a"]]) {
      const written = write(...queries.map((q, i) => traj(q, [i])));
      const out = new MCAdvantage({ groupSize: 2 }).inv(written)!;
      expect(written.has("advantage")).toBe(false);
      const rewards = written.getTensor(["next", "reward"]).toNumbers();
      out.getTensor(["next", "reward"], "float32").data.fill(-1);
      out.getTensor("traj", "int32").data.fill(-1);
      expect(written.getTensor(["next", "reward"]).toNumbers()).toEqual(rewards);
      expect(written.getTensor("traj").toNumbers()).not.toContain(-1);
    }
  });

  it("gives the same groups, in the same order, as writing the trajectories one by one", () => {
    // interleaved prompts, a group split across two writes, and a prompt that never completes its group
    const first = ["a", "b", "a", "c", "b", "a", "b", "a"].map((q, i) => traj(q, [i / 10]));
    const second = ["c", "b", "d", "c", "c"].map((q, i) => traj(q, [1 - i / 7]));
    const batched = new MCAdvantage({ groupSize: 3 });
    const single = new MCAdvantage({ groupSize: 3 });
    const viaBatches = [batched.inv(write(...first)), batched.inv(write(...second))];
    const viaSingles = [first, second].map((part) => {
      const outs = part.map((t) => single.inv(t)).filter((o): o is TensorDict => o !== null);
      return outs.length === 0 ? null : TensorDict.cat(outs);
    });
    viaBatches.forEach((out, i) => {
      const want = viaSingles[i]!;
      expect(trajIds(out!)).toEqual(trajIds(want));
      expect(out!.getStrings("query")).toEqual(want.getStrings("query"));
      advantages(out!).forEach((a, j) => {
        expect(a).toBeCloseTo(advantages(want)[j]!, 6);
      });
    });
    expect(batched.stats).toEqual(single.stats);
    expect(batched.stats).toMatchObject({ completedTrajectories: 13, writtenGroups: 3, queuedGroups: 4, queuedTrajectories: 4 });
  });
});

describe("MCAdvantage (per-step mode)", () => {
  it("writes (r − mean) / max(std, eps) over every reward of the group, laid out like the reward", () => {
    const t = new MCAdvantage({ groupSize: 2 });
    const a = traj("q", [0, 0.25, 0]);
    const b = traj("q", [0.5, 1]);
    expect(t.inv(a)).toBeNull();
    const out = t.inv(b)!;
    expect(out.batchSize).toEqual([5]);
    expect(trajIds(out)).toEqual([...trajIds(a), ...trajIds(b)]);
    const adv = out.getTensor("advantage", "float32");
    expect(adv.shape).toEqual([5, 1]);
    const want = expected([0, 0.25, 0, 0.5, 1]);
    adv.toNumbers().forEach((v, i) => { expect(v).toBeCloseTo(want[i]!, 6); });
    expect(out.getTensor(["next", "reward"]).toNumbers()).toEqual([0, 0.25, 0, 0.5, 1]);
  });

  it("holds incomplete groups per prompt until groupSize trajectories arrived, and counts", () => {
    const t = new MCAdvantage({ groupSize: 3 });
    expect(t.inv(write(traj("A", [1]), traj("B", [0, 2])))).toBeNull();
    expect(t.inv(traj("A", [3]))).toBeNull();
    expect(t.stats).toMatchObject({ completedTrajectories: 3, completedDecisions: 4, completedGroups: 0, queuedGroups: 2, queuedTrajectories: 3, maxQueuedTrajectoriesPerGroup: 2 });
    const lastA = traj("A", [5]);
    const out = t.inv(write(traj("B", [1]), lastA))!; // completes A only
    expect(out.getStrings("query")).toEqual(["A", "A", "A"]);
    advantages(out).forEach((v, i) => { expect(v).toBeCloseTo(expected([1, 3, 5])[i]!, 6); });
    expect(t.stats).toMatchObject({ completedGroups: 1, writtenGroups: 1, droppedGroups: 0, queuedGroups: 1, queuedTrajectories: 2 });
    const outB = t.inv(traj("B", [4]))!;
    advantages(outB).forEach((v, i) => { expect(v).toBeCloseTo(expected([0, 2, 1, 4])[i]!, 6); });
    expect(t.stats).toMatchObject({ completedTrajectories: 6, completedDecisions: 7, completedGroups: 2, writtenGroups: 2, queuedGroups: 0 });
    t.resetStats();
    expect(t.stats.completedTrajectories).toBe(0);
  });

  it("reads [B, T] batches as B trajectory rows, and a [T] batch split after each done step", () => {
    const t = new MCAdvantage({ groupSize: 2 });
    const rows = TensorDict.stack([traj("r", [1, 2]), traj("r", [3, 5])]); // [2, 2]
    const out = t.inv(rows)!;
    expect(out.batchSize).toEqual([4]);
    advantages(out).forEach((v, i) => { expect(v).toBeCloseTo(expected([1, 2, 3, 5])[i]!, 6); });
    const split = new MCAdvantage({ groupSize: 2 });
    const both = write(traj("s", [1, 1, 0]), traj("s", [2]));
    expect(split.inv(both)!.batchSize).toEqual([4]);
    expect(split.stats.completedTrajectories).toBe(2);
  });

  it("rejects a write whose last step is not done (INCOMPLETE_TRAJECTORY), queueing nothing", () => {
    const t = new MCAdvantage({ groupSize: 2 });
    const err = expectError(() => t.inv(write(traj("x", [1]), traj("x", [1, 2], false))), IncompleteTrajectoryError, "INCOMPLETE_TRAJECTORY");
    expect(err.message).toContain('["next","done"]');
    expect(t.stats.completedTrajectories).toBe(0);
    expect(t.stats.queuedTrajectories).toBe(0);
  });

  it("groups by a History prompt or a tensor id, and keeps ragged per-token rewards ragged", () => {
    const chat = (content: string, reward: number): TensorDict =>
      new TensorDict(
        {
          history: { prompt: HistoryBatch.from([[{ role: "user", content }]]) },
          next: { reward: Tensor.from([[reward]], { dtype: "float32" }), done: Tensor.ones("bool", [1, 1]) },
        },
        { batchSize: [1] },
      );
    const byHistory = new MCAdvantage({ groupSize: 2, promptKey: ["history", "prompt"] });
    expect(byHistory.inv(chat("2+2?", 1))).toBeNull();
    expect(byHistory.inv(chat("3+3?", 0))).toBeNull(); // another prompt
    expect(advantages(byHistory.inv(chat("2+2?", 0))!)).toHaveLength(2);

    const tokens = (id: number, perToken: number[][]): TensorDict =>
      new TensorDict(
        {
          group: Tensor.full("int64", [perToken.length], BigInt(id)),
          next: {
            reward: RaggedTensor.fromRows(perToken.map((r) => Tensor.from(r.map((v) => [v]), { dtype: "float32" }))),
            done: Tensor.ones("bool", [perToken.length, 1]),
          },
        },
        { batchSize: [perToken.length] },
      );
    const perToken = new MCAdvantage({ groupSize: 2, promptKey: "group" });
    expect(perToken.inv(tokens(7, [[0, 1]]))).toBeNull();
    const out = perToken.inv(tokens(7, [[1, 1, 0]]))!;
    const adv = out.getRagged("advantage", "float32");
    expect(Array.from(adv.lengths())).toEqual([2, 3]);
    expect(adv.tailShape).toEqual([1]);
    adv.toArray().flat(2).forEach((v, i) => { expect(v).toBeCloseTo(expected([0, 1, 1, 1, 0])[i]!, 6); });
  });

  it("floors the standard deviation at eps: a group of equal rewards gets advantage 0", () => {
    const t = new MCAdvantage({ groupSize: 3, eps: 1e-4 });
    t.inv(traj("z", [1]));
    t.inv(traj("z", [1]));
    expect(advantages(t.inv(traj("z", [1]))!)).toEqual([0, 0, 0]);
  });
});

describe("MCAdvantage (trajectory-return mode and bounds)", () => {
  it("normalises trajectory returns across the group and broadcasts them over the steps", () => {
    for (const mode of ["sum", "max", "mean"] as const) {
      const t = new MCAdvantage({ groupSize: 3, trajectoryReturn: mode });
      const rewards = [[0, 1, 0.5], [2], [0.25, 0.25]];
      const outs = rewards.map((r) => t.inv(traj("g", r)));
      const out = outs[2]!;
      const reduce = (r: number[]): number => (mode === "sum" ? r.reduce((a, b) => a + b) : mode === "max" ? Math.max(...r) : r.reduce((a, b) => a + b) / r.length);
      const perTraj = expected(rewards.map(reduce));
      const want = rewards.flatMap((r, i) => r.map(() => perTraj[i]!));
      advantages(out).forEach((v, i) => { expect(v).toBeCloseTo(want[i]!, 6); });
      expect(out.getTensor("advantage").shape).toEqual([6, 1]);
    }
  });

  it("drops groups whose mean return is outside keepReturnBounds, with counters", () => {
    const t = new MCAdvantage({ groupSize: 2, trajectoryReturn: "sum", keepReturnBounds: [0.1, 0.9] });
    t.inv(traj("fail", [0, 0]));
    expect(t.inv(traj("fail", [0]))).toBeNull(); // mean return 0: no learning signal
    t.inv(traj("ok", [1]));
    const kept = t.inv(traj("ok", [0, 0]))!;
    advantages(kept).forEach((v, i) => { expect(v).toBeCloseTo([Math.SQRT1_2, -Math.SQRT1_2, -Math.SQRT1_2][i]!, 6); });
    t.inv(traj("all", [1]));
    expect(t.inv(traj("all", [0, 1]))).toBeNull(); // mean return 1 is not < 0.9
    expect(t.stats).toMatchObject({
      completedTrajectories: 6,
      completedGroups: 3,
      writtenGroups: 1,
      droppedGroups: 2,
      trajectoryReturnSum: 3,
      trajectoryReturnMax: 1,
      successfulTrajectories: 3,
      queuedGroups: 0,
    });
  });
});

describe("MCAdvantage in a ReplayBuffer", () => {
  it("writes only complete groups, with their advantage", () => {
    const advantage = new MCAdvantage({ groupSize: 2 });
    const rb = new ReplayBuffer({ storage: new LazyStackStorage(), sampler: new SamplerWithoutReplacement({ shuffle: false }), transforms: [advantage], batchSize: 8 });
    expect(rb.extend(traj("p", [1, 0]))).toHaveLength(0);
    expect(rb.length).toBe(0);
    expect(Array.from(rb.extend(write(traj("p", [0]), traj("other", [1]))))).toEqual([0, 1, 2]);
    expect(rb.writeCount).toBe(3);
    const batch = rb.sample();
    advantages(batch).forEach((v, i) => { expect(v).toBeCloseTo(expected([1, 0, 0])[i]!, 6); });
    expect(advantage.stats.queuedGroups).toBe(1);
  });
});

describe("TopKRewardSelector", () => {
  it("keeps the trajectories above the group's median reward, at most topkSize, best first", () => {
    const t = new TopKRewardSelector({ totalDialogTurns: 5, topkSize: 2, promptKey: "query" });
    const rewards = [[0.5], [3, 1], [2], [0, 0, 9], [1]]; // means 0.5, 2, 2, 3, 1: median 2
    const trajectories = rewards.map((r) => traj("q", r));
    const outs = trajectories.map((tr) => t.inv(tr));
    expect(outs.slice(0, 4).every((o) => o === null)).toBe(true);
    const out = outs[4]!;
    expect(trajIds(out)).toEqual(trajIds(trajectories[3]!)); // only mean 3 is strictly above the median 2
    expect(t.queuedGroups).toBe(0);
    const t2 = new TopKRewardSelector({ totalDialogTurns: 4, topkSize: 1, promptKey: "query" });
    const four = [[1], [4], [3], [2]].map((r) => traj("w", r));
    const last = four.map((tr) => t2.inv(tr))[3]!;
    expect(trajIds(last)).toEqual(trajIds(four[1]!)); // above the lower median 2: 4 and 3; top-1 is 4
  });

  it("drops a group whose rewards all tie", () => {
    const t = new TopKRewardSelector({ totalDialogTurns: 3, topkSize: 3, promptKey: "query" });
    const outs = [[1], [1], [1]].map((r) => t.inv(traj("tie", r)));
    expect(outs).toEqual([null, null, null]);
  });

  it("validates its options naming the field", () => {
    expect(expectError(() => new TopKRewardSelector({ totalDialogTurns: 2, topkSize: 3 }), InvalidArgumentError, "INVALID_ARGUMENT").message).toContain(
      "TopKRewardSelector options.topkSize",
    );
    expect(expectError(() => new TopKRewardSelector({ totalDialogTurns: 0, topkSize: 1 }), InvalidArgumentError, "INVALID_ARGUMENT").message).toContain(
      "TopKRewardSelector options.totalDialogTurns",
    );
  });
});

describe("MCAdvantage options", () => {
  it("rejects bad options naming the field", () => {
    const cases: [unknown, string][] = [
      [{ groupSize: 0 }, "MCAdvantage options.groupSize"],
      [{ groupSize: 1, trajectoryReturn: "sum" }, "MCAdvantage options.groupSize"],
      [{ groupSize: 2, keepReturnBounds: [0, 1] }, "MCAdvantage options.keepReturnBounds"],
      [{ groupSize: 2, trajectoryReturn: "mean", keepReturnBounds: [1, 0] }, "MCAdvantage options.keepReturnBounds"],
      [{ groupSize: 2, trajectoryReturn: "median" }, "MCAdvantage options.trajectoryReturn"],
      [{ groupSize: 2, eps: 0 }, "MCAdvantage options.eps"],
      [{ groupSize: 2, promptKey: "" }, "MCAdvantage options.promptKey"],
      [{ groupSize: 2, grpoSize: 4 }, "MCAdvantage options.grpoSize: give groupSize only"],
      [{}, "MCAdvantage options.groupSize: is required"],
      [{ grpoSize: 1, trajectoryReturn: "sum" }, "MCAdvantage options.groupSize"],
    ];
    for (const [options, field] of cases) {
      expect(expectError(() => new MCAdvantage(options as never), InvalidArgumentError, "INVALID_ARGUMENT").message).toContain(field);
    }
  });

  it("still takes the deprecated grpoSize, as groupSize", () => {
    // eslint-disable-next-line @typescript-eslint/no-deprecated -- the deprecated name is what this test checks
    const t = new MCAdvantage({ grpoSize: 3 });
    expect(t.config.groupSize).toBe(3);
    expect(t.config).not.toHaveProperty("grpoSize");
  });

  it("names a missing group or reward key", () => {
    const t = new MCAdvantage({ groupSize: 2, promptKey: "prompt_id" });
    expect(() => t.inv(traj("q", [1]))).toThrow(/"prompt_id" not found/);
    const r = new MCAdvantage({ groupSize: 1, rewardsKey: "score" });
    expect(() => r.inv(traj("q", [1]))).toThrow(/"score" not found/);
  });
});
