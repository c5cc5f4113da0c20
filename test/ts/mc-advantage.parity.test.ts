// Parity with TorchRL: the same trajectories go through TorchRL's own MCAdvantage / TopKRewardSelector (run by
// test/python/peers/torchrl_replay_transforms.py in the project's .venv) and through posttrain's; the written rows,
// their order, the advantages (within 1e-6) and the counters must agree. If TorchRL cannot be imported, the test is
// skipped with the reason, except where peers are required (CI set to a truthy value, as CI=true, or
// POSTTRAIN_REQUIRE_PEERS=1): there it fails, so parity is never skipped silently in CI (as test/python/peers/require.py).
import { beforeAll, describe, expect, it } from "vitest";
import { MCAdvantage, RaggedTensor, Tensor, TensorDict, TopKRewardSelector, type MCAdvantageOptions } from "../../sdk/index.js";
import { runPeer, skipUnlessPeer } from "./peers.helpers.js";

/** A trajectory: its id, its group (prompt) and the reward of each step (a nested list: [k] or [L, k]). */
interface Trajectory {
  readonly id: number;
  readonly group: string;
  readonly rewards: readonly (readonly number[] | readonly (readonly number[])[])[];
}

interface Scenario {
  readonly transform: "MCAdvantage" | "TopKRewardSelector";
  readonly options: Record<string, unknown>;
  readonly writes: readonly (readonly Trajectory[])[];
}

interface PeerOutput {
  readonly traj: number[];
  readonly step: number[];
  readonly advantage?: number[][];
}

interface PeerResult {
  readonly outputs: (PeerOutput | null)[];
  readonly stats: Record<string, number | null>;
}

/** Deterministic pseudo-random inputs (an LCG), so the scenarios are varied but reproducible. */
function lcg(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}

/** Writes of `count` trajectories over `groups` prompts (`perGroup` each), several per write, in a shuffled order. */
function scenarioWrites(seed: number, groups: number, perGroup: number, step: (rand: () => number) => number[] | number[][], maxSteps: number, perWrite: number): Trajectory[][] {
  const rand = lcg(seed);
  const trajectories: Trajectory[] = [];
  let id = 0;
  for (let g = 0; g < groups; g++) {
    for (let k = 0; k < perGroup; k++) {
      const steps = 1 + Math.floor(rand() * maxSteps);
      trajectories.push({ id: id++, group: `prompt-${g}`, rewards: Array.from({ length: steps }, () => step(rand)) });
    }
  }
  for (let i = trajectories.length - 1; i > 0; i--) {
    const j = Math.floor(rand() * (i + 1));
    [trajectories[i], trajectories[j]] = [trajectories[j]!, trajectories[i]!];
  }
  const writes: Trajectory[][] = [];
  for (let i = 0; i < trajectories.length; i += perWrite) writes.push(trajectories.slice(i, i + perWrite));
  return writes;
}

const scalar = (rand: () => number): number[] => [Math.round(rand() * 2000) / 1000 - 0.5];
const binary = (rand: () => number): number[] => [rand() < 0.35 ? 1 : 0];
const perToken = (rand: () => number): number[][] => Array.from({ length: 1 + Math.floor(rand() * 5) }, () => [Math.round(rand() * 1000) / 100]);

const SCENARIOS: readonly Scenario[] = [
  { transform: "MCAdvantage", options: { grpo_size: 4 }, writes: scenarioWrites(1, 3, 4, scalar, 3, 3) },
  { transform: "MCAdvantage", options: { grpo_size: 3 }, writes: scenarioWrites(2, 2, 3, perToken, 1, 2) },
  { transform: "MCAdvantage", options: { grpo_size: 3, trajectory_return: "sum" }, writes: scenarioWrites(3, 3, 3, scalar, 4, 2) },
  { transform: "MCAdvantage", options: { grpo_size: 2, trajectory_return: "max" }, writes: scenarioWrites(4, 3, 2, scalar, 3, 1) },
  {
    transform: "MCAdvantage",
    options: { grpo_size: 4, trajectory_return: "mean", keep_return_bounds: [0.1, 0.9] },
    writes: scenarioWrites(5, 6, 4, binary, 2, 3),
  },
  // TorchRL's TopKRewardSelector reads one single-step trajectory with per-token rewards per write.
  { transform: "TopKRewardSelector", options: { total_dialog_turns: 5, topk_size: 3, prompt_key: "query" }, writes: scenarioWrites(6, 3, 5, perToken, 1, 1) },
];

/** The posttrain TensorDict of one write: the steps of its trajectories one after the other. */
function writeTd(write: readonly Trajectory[]): TensorDict {
  const steps = write.flatMap((t) => t.rewards.map((reward, s) => ({ t, reward, s })));
  const perTokenRewards = steps.some(({ reward }) => Array.isArray(reward[0]));
  const reward = perTokenRewards
    ? RaggedTensor.fromRows(steps.map(({ reward: r }) => Tensor.from(r as number[][], { dtype: "float32" })))
    : Tensor.from(steps.map(({ reward: r }) => r as number[]), { dtype: "float32" });
  return new TensorDict(
    {
      query: steps.map(({ t }) => t.group),
      traj: Tensor.from(steps.map(({ t }) => BigInt(t.id)), { dtype: "int64" }),
      step: Tensor.from(steps.map(({ s }) => BigInt(s)), { dtype: "int64" }),
      next: { reward, done: Tensor.from(steps.map(({ t, s }) => [s === t.rewards.length - 1]), { dtype: "bool" }) },
    },
    { batchSize: [steps.length] },
  );
}

function rowsOf(value: Tensor | RaggedTensor): number[][] {
  if (value instanceof RaggedTensor) return value.toArray().map((row) => row.flat(4) as number[]);
  const n = value.shape[0]!;
  const all = value.toNumbers();
  const per = all.length / n;
  return Array.from({ length: n }, (_, i) => all.slice(i * per, (i + 1) * per));
}

function camel(options: Record<string, unknown>): MCAdvantageOptions {
  return {
    groupSize: options.grpo_size as number,
    ...(options.trajectory_return !== undefined ? { trajectoryReturn: options.trajectory_return as "sum" | "max" | "mean" } : {}),
    ...(options.keep_return_bounds !== undefined ? { keepReturnBounds: options.keep_return_bounds as [number, number] } : {}),
  };
}

/** What the peer answers: TorchRL's version and one result per scenario, or why it cannot run. */
type PeerAnswer = { torchrl?: string; results?: PeerResult[] } & { unavailable?: string };

describe("MCAdvantage / TopKRewardSelector parity with TorchRL", () => {
  let peer: PeerAnswer;

  beforeAll(async () => {
    peer = await runPeer<PeerAnswer>("torchrl_replay_transforms.py", SCENARIOS);
  }, 150_000);

  SCENARIOS.forEach((scenario, index) => {
    const label = `${scenario.transform} ${JSON.stringify(scenario.options)}`;
    it(`agrees with TorchRL: ${label}`, (ctx) => {
      skipUnlessPeer(peer, `torchrl + tensordict (TorchRL's ${scenario.transform})`, (note) => {
        ctx.skip(note);
      });
      const reference = peer.results![index]!;
      const transform =
        scenario.transform === "MCAdvantage"
          ? new MCAdvantage(camel(scenario.options))
          : new TopKRewardSelector({ totalDialogTurns: scenario.options.total_dialog_turns as number, topkSize: scenario.options.topk_size as number, promptKey: "query" });
      let written = 0;
      scenario.writes.forEach((write, w) => {
        const out = transform.inv(writeTd(write));
        const ref = reference.outputs[w]!;
        if (ref === null) {
          expect(out, `write ${w}`).toBeNull();
          return;
        }
        expect(out, `write ${w}`).not.toBeNull();
        written += 1;
        expect(out!.getTensor("traj").toNumbers(), `write ${w} trajectories`).toEqual(ref.traj);
        expect(out!.getTensor("step").toNumbers(), `write ${w} steps`).toEqual(ref.step);
        if (ref.advantage !== undefined) {
          const adv = rowsOf(out!.get("advantage") as Tensor | RaggedTensor);
          expect(adv.map((r) => r.length)).toEqual(ref.advantage.map((r) => r.length));
          adv.flat().forEach((v, i) => { expect(Math.abs(v - ref.advantage!.flat()[i]!), `write ${w} advantage ${i}`).toBeLessThan(1e-6); });
        }
      });
      expect(written).toBeGreaterThan(0);
      if (transform instanceof MCAdvantage) {
        const s = transform.stats;
        const r = reference.stats;
        expect({
          completedTrajectories: s.completedTrajectories,
          completedDecisions: s.completedDecisions,
          successfulTrajectories: s.successfulTrajectories,
          completedGroups: s.completedGroups,
          writtenGroups: s.writtenGroups,
          droppedGroups: s.droppedGroups,
          queuedGroups: s.queuedGroups,
          queuedTrajectories: s.queuedTrajectories,
        }).toEqual({
          completedTrajectories: r.completed_trajectories,
          completedDecisions: r.completed_decisions,
          successfulTrajectories: r.successful_trajectories,
          completedGroups: r.completed_groups,
          writtenGroups: r.written_groups,
          droppedGroups: r.dropped_groups,
          queuedGroups: r.queued_groups,
          queuedTrajectories: r.queued_trajectories,
        });
        if (scenario.options.keep_return_bounds !== undefined) expect(s.droppedGroups).toBeGreaterThan(0);
        // Sums of float32 rewards: TorchRL adds them in float32, posttrain in float64.
        expect(s.trajectoryReturnSum).toBeCloseTo(r.trajectory_return_sum!, 4);
        if (r.trajectory_return_max === null) expect(s.trajectoryReturnMax).toBe(-Infinity);
        else expect(s.trajectoryReturnMax).toBeCloseTo(r.trajectory_return_max!, 5);
      }
    });
  });
});
