// The classic-control envs (sdk/envs/control) against Gymnasium's own CartPole-v1 and Pendulum-v1 (run by
// test/python/peers/gymnasium_control.py in the project's .venv): from the same chosen states, under the same
// actions, the observations, rewards, terminated and truncated flags agree. Then what the envs promise on their own:
// reset ranges, seeds, spec refusals, and the batched envs (SerialEnv's auto-reset, ParallelEnv ≡ SerialEnv, close).
import { afterEach, beforeAll, describe, expect, it } from "vitest";
import {
  Bounded,
  CartPoleEnv,
  Categorical,
  Composite,
  EnvStateError,
  ParallelEnv,
  PendulumEnv,
  SerialEnv,
  SpecMismatchError,
  SubEnvError,
  Unbounded,
  type EnvBase,
} from "../../sdk/envs/index.js";
import { controlEnvShape } from "../../sdk/runs/ppo-env.js";
import { Tensor, TensorDict } from "../../sdk/tensordict/index.js";
import { runPeer, skipUnlessPeer } from "./peers.helpers.js";

type EnvId = "CartPole-v1" | "Pendulum-v1";

interface Scenario {
  readonly env: EnvId;
  readonly state: readonly number[];
  readonly actions: readonly number[] | null;
  readonly gains: readonly number[] | null;
  readonly max_episode_steps: number | null;
  /** How the episode must end (checked on both sides, so the scenarios cover termination and both time limits). */
  readonly end: "terminated" | "truncated";
  /** Steps played after the end (without a reset): CartPole's reward is 0 there. */
  readonly steps_after_end?: number;
}

interface Played {
  readonly observations: number[][];
  readonly actions: number[];
  readonly rewards: number[];
  readonly terminated: boolean[];
  readonly truncated: boolean[];
}

interface PeerAnswer {
  readonly gymnasium: string;
  readonly max_episode_steps: Record<EnvId, number>;
  readonly results: Played[];
}

/** Deterministic pseudo-random numbers in [0, 1) (an LCG), so the action sequences are varied but fixed. */
function lcg(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}

function pushes(seed: number, length: number): number[] {
  const rand = lcg(seed);
  return Array.from({ length }, () => (rand() < 0.5 ? 0 : 1));
}

function torques(seed: number, length: number): number[] {
  const rand = lcg(seed);
  // float32 values, so JSON carries them exactly to the float32 action Gymnasium gets.
  return Array.from({ length }, () => Math.fround(rand() * 4 - 2));
}

// A closed-loop rule that balances the pole: open-loop replays of 500 steps would amplify 1-ulp differences between
// libm's and V8's sin/cos (the upright pole is unstable), while a stable loop keeps both sides together.
const BALANCE = [0.1, 0.5, 10, 1];

const SCENARIOS: readonly Scenario[] = [
  { env: "CartPole-v1", state: [0, 0, 0.1, 0], actions: Array<number>(100).fill(1), gains: null, max_episode_steps: null, end: "terminated", steps_after_end: 2 },
  { env: "CartPole-v1", state: [0.01, -0.02, 0.03, 0.04], actions: pushes(1, 300), gains: null, max_episode_steps: null, end: "terminated" },
  { env: "CartPole-v1", state: [-2.3, -0.5, 0.0, 0.0], actions: Array<number>(100).fill(0), gains: null, max_episode_steps: null, end: "terminated" },
  { env: "CartPole-v1", state: [0.02, 0.01, -0.03, 0.02], actions: null, gains: BALANCE, max_episode_steps: null, end: "truncated" },
  { env: "CartPole-v1", state: [-0.04, 0.03, 0.01, -0.02], actions: null, gains: BALANCE, max_episode_steps: 40, end: "truncated" },
  { env: "Pendulum-v1", state: [0.9 * Math.PI, 0.5], actions: torques(2, 200), gains: null, max_episode_steps: null, end: "truncated" },
  { env: "Pendulum-v1", state: [-2.5, -1], actions: Array<number>(200).fill(2), gains: null, max_episode_steps: null, end: "truncated" },
  { env: "Pendulum-v1", state: [0.3, 7.5], actions: Array<number>(30).fill(-2), gains: null, max_episode_steps: 30, end: "truncated" },
];

function makeEnv(id: EnvId, maxEpisodeSteps: number | null): CartPoleEnv | PendulumEnv {
  const options = maxEpisodeSteps === null ? {} : { maxEpisodeSteps };
  return id === "CartPole-v1" ? new CartPoleEnv(options) : new PendulumEnv(options);
}

function actionTensor(id: EnvId, action: number): Tensor {
  return id === "CartPole-v1" ? Tensor.from(BigInt(action), { dtype: "int64" }) : Tensor.from([action], { dtype: "float32" });
}

/** Plays a scenario on posttrain's env, as the peer plays it on Gymnasium's. */
async function playTs(s: Scenario): Promise<Played> {
  const env = makeEnv(s.env, s.max_episode_steps);
  env.setSeed(0);
  await env.reset();
  let td: TensorDict = env.setState(s.state);
  let afterEnd = s.steps_after_end ?? 0;
  const out: Played = { observations: [td.getTensor("observation").toNumbers()], actions: [], rewards: [], terminated: [], truncated: [] };
  for (let t = 0; ; t++) {
    const obs = td.getTensor("observation").toNumbers();
    const action = s.gains !== null ? (s.gains.reduce((sum, g, i) => sum + g * obs[i]!, 0) > 0 ? 1 : 0) : s.actions![t]!;
    const stepped = await env.step(td.set("action", actionTensor(s.env, action)));
    const next = stepped.getTensorDict("next");
    out.actions.push(action);
    out.observations.push(next.getTensor("observation").toNumbers());
    out.rewards.push(next.getTensor("reward").item() as number);
    out.terminated.push(next.getTensor("terminated").item() as boolean);
    out.truncated.push(next.getTensor("truncated").item() as boolean);
    if (next.getTensor("done").item() === true && afterEnd-- === 0) return out;
    td = env.stepMdp(stepped);
  }
}

describe("CartPoleEnv / PendulumEnv parity with Gymnasium", () => {
  let peer: PeerAnswer & { unavailable?: string };

  beforeAll(async () => {
    peer = await runPeer<PeerAnswer>("gymnasium_control.py", SCENARIOS);
  }, 150_000);

  it("uses Gymnasium's registered time limits by default", (ctx) => {
    skipUnlessPeer(peer, "gymnasium", (note) => ctx.skip(note));
    expect(new CartPoleEnv().maxEpisodeSteps).toBe(peer.max_episode_steps["CartPole-v1"]);
    expect(new PendulumEnv().maxEpisodeSteps).toBe(peer.max_episode_steps["Pendulum-v1"]);
  });

  SCENARIOS.forEach((scenario, index) => {
    const label = `${scenario.env} from [${scenario.state.map((v) => v.toFixed(3)).join(", ")}]${scenario.gains !== null ? " (balanced)" : ""}${scenario.max_episode_steps !== null ? `, limit ${scenario.max_episode_steps}` : ""}`;
    it(`plays as Gymnasium does: ${label}`, async (ctx) => {
      skipUnlessPeer(peer, "gymnasium", (note) => ctx.skip(note));
      const ref = peer.results[index]!;
      const ours = await playTs(scenario);
      expect(ref[scenario.end].at(-1 - (scenario.steps_after_end ?? 0)), `Gymnasium's episode is ${scenario.end}`).toBe(true);
      if (scenario.steps_after_end !== undefined) expect(ref.rewards.slice(-scenario.steps_after_end - 1)).toEqual([1, 0, 0]);
      if (scenario.end === "truncated") expect(ref.actions.length).toBe(scenario.max_episode_steps ?? peer.max_episode_steps[scenario.env]);
      expect(ours.actions).toEqual(ref.actions);
      expect(ours.terminated).toEqual(ref.terminated);
      expect(ours.truncated).toEqual(ref.truncated);
      expect(ours.rewards).toEqual(ref.rewards.map((r) => Math.fround(r))); // float32 of the same float64
      // Both sides run the same float64 arithmetic and round to float32: the observations agree exactly.
      expect(ours.observations).toEqual(ref.observations);
    });
  });
});

/** The leaves of a TensorDict as plain arrays, by key, for exact comparisons. */
function leaves(td: TensorDict): Record<string, number[]> {
  return Object.fromEntries(td.keys({ nested: true, leavesOnly: true }).map((k) => [String(k), td.getTensor(k).toNumbers()]));
}

async function resets(env: CartPoleEnv | PendulumEnv, count: number): Promise<number[][]> {
  const out: number[][] = [];
  for (let i = 0; i < count; i++) out.push((await env.reset()).getTensor("observation").toNumbers());
  return out;
}

describe("classic-control envs", () => {
  it("reset CartPole uniformly in [-0.05, 0.05] per state variable", async () => {
    const env = new CartPoleEnv();
    env.setSeed(1);
    const obs = await resets(env, 400);
    for (let i = 0; i < 4; i++) {
      const column = obs.map((o) => o[i]!);
      expect(Math.min(...column)).toBeGreaterThanOrEqual(Math.fround(-0.05));
      expect(Math.max(...column)).toBeLessThanOrEqual(Math.fround(0.05));
      expect(Math.min(...column)).toBeLessThan(-0.045); // the whole range is used
      expect(Math.max(...column)).toBeGreaterThan(0.045);
    }
  });

  it("reset Pendulum with θ uniform in [-π, π] and θ̇ in [-1, 1]", async () => {
    const env = new PendulumEnv();
    env.setSeed(2);
    const obs = await resets(env, 400);
    const theta = obs.map(([c, s]) => Math.atan2(s!, c!));
    const speed = obs.map((o) => o[2]!);
    for (const [c, s] of obs) expect(Math.abs(c! * c! + s! * s! - 1)).toBeLessThan(1e-6);
    expect(Math.min(...theta)).toBeLessThan(-2.9);
    expect(Math.max(...theta)).toBeGreaterThan(2.9);
    expect(Math.min(...speed)).toBeGreaterThanOrEqual(-1);
    expect(Math.max(...speed)).toBeLessThanOrEqual(1);
    expect(Math.min(...speed)).toBeLessThan(-0.9);
    expect(Math.max(...speed)).toBeGreaterThan(0.9);
  });

  it("gives the same resets for the same seed and others for another seed", async () => {
    const play = async (seed: number | undefined): Promise<number[][]> => {
      const env = new CartPoleEnv();
      if (seed !== undefined) env.setSeed(seed);
      return resets(env, 5);
    };
    expect(await play(7)).toEqual(await play(7));
    expect(await play(7)).not.toEqual(await play(8));
    expect(await play(undefined)).not.toEqual(await play(undefined)); // unseeded envs draw their own seed
  });

  it("refuses an action outside actionSpec with SPEC_MISMATCH naming action", async () => {
    const cart = new CartPoleEnv();
    const pendulum = new PendulumEnv();
    const refused = async (env: CartPoleEnv | PendulumEnv, action: Tensor | undefined, got: RegExp): Promise<void> => {
      const td = await env.reset();
      if (action !== undefined) td.set("action", action);
      const err = await env.step(td).then(() => undefined, (e: unknown) => e);
      expect(err).toBeInstanceOf(SpecMismatchError);
      const mismatch = err as SpecMismatchError;
      expect(mismatch.code).toBe("SPEC_MISMATCH");
      expect(mismatch.key).toBe("action");
      expect(mismatch.message).toContain(`"action": expected ${env.actionSpec.toString()}`);
      expect(mismatch.got).toMatch(got);
    };
    await refused(cart, Tensor.from(1, { dtype: "float32" }), /^dtype float32$/);
    await refused(cart, Tensor.from([1n], { dtype: "int64" }), /^shape \[1\]$/);
    await refused(cart, Tensor.from(2n, { dtype: "int64" }), /element 0 = 2, outside \[0, 1\]/);
    await refused(cart, undefined, /missing/);
    await refused(pendulum, Tensor.from([2.5], { dtype: "float32" }), /element 0 = 2.5, outside \[-2, 2\]/);
    await refused(pendulum, Tensor.from([0.5], { dtype: "float64" }), /^dtype float64$/);
    await refused(pendulum, Tensor.from(0.5, { dtype: "float32" }), /^shape \[\]$/);
    // In the spec, the action is taken.
    const td = await pendulum.reset();
    await expect(pendulum.step(td.set("action", Tensor.from([-2], { dtype: "float32" })))).resolves.toBe(td);
  });

  it("describes shape, dtype and bounds with TorchRL's specs", () => {
    const bounded = new Bounded({ low: [-1, -2], high: [1, 2], shape: [2] });
    expect(bounded.isIn(Tensor.from([0.5, -2], { dtype: "float32" }))).toBe(true);
    expect(bounded.isIn(Tensor.from([1.5, 0], { dtype: "float32" }))).toBe(false);
    expect(bounded.zero().toNumbers()).toEqual([0, 0]);
    const batched = bounded.expand([3]);
    expect(batched.shape).toEqual([3, 2]);
    expect(Array.from(batched.high)).toEqual([1, 2, 1, 2, 1, 2]);
    for (let i = 0; i < 20; i++) expect(batched.isIn(batched.rand())).toBe(true);
    const categorical = new Categorical({ n: 3, shape: [4] });
    expect(categorical.rand().toNumbers().every((v) => v >= 0 && v < 3)).toBe(true);
    expect(categorical.isIn(Tensor.from([0n, 1n, 2n, 3n], { dtype: "int64" }))).toBe(false);
    const composite = new Composite({ observation: bounded, ["next"]: new Composite({ reward: new Unbounded({ shape: [1] }) }) });
    expect(composite.keys()).toEqual(["observation", ["next", "reward"]]);
    expect(composite.isIn(composite.rand())).toBe(true);
    const td = composite.zero().set("observation", Tensor.from([0, 5], { dtype: "float32" }));
    expect(() => {
      composite.assertIsIn(td, "check");
    }).toThrow(/check "observation": expected Bounded\(low=\[-1, -2\], high=\[1, 2\], shape=\[2\], dtype=float32\), got element 1 = 5, outside \[-2, 2\]/);
    expect(composite.expand([5]).get(["next", "reward"])?.shape).toEqual([5, 1]);
  });
});

/** Random actions for `steps` steps of `n` CartPole copies, fixed by `seed`. */
function cartActions(seed: number, steps: number, n: number): Tensor[] {
  const rand = lcg(seed);
  return Array.from({ length: steps }, () => Tensor.from(BigInt64Array.from({ length: n }, () => (rand() < 0.5 ? 0n : 1n)), { dtype: "int64" }));
}

/** A policy replaying `actions`, one tensor per call. */
function replay(actions: readonly Tensor[]): (td: TensorDict) => TensorDict {
  let t = 0;
  return (td) => td.set("action", actions[t++]!);
}

describe("SerialEnv / ParallelEnv", () => {
  const open: EnvBase[] = [];
  afterEach(async () => {
    for (const env of open.splice(0)) await env.close();
  });
  function track<E extends EnvBase>(env: E): E {
    open.push(env);
    return env;
  }

  it("SerialEnv stacks the copies, resets the done ones, and plays each copy as its own env would", async () => {
    const n = 4;
    const steps = 120;
    const env = track(new SerialEnv(n, () => new CartPoleEnv()));
    expect(env.batchSize).toEqual([n]);
    expect(env.observationSpec.get("observation")?.shape).toEqual([n, 4]);
    expect(env.actionSpec.shape).toEqual([n]);
    expect(env.doneSpec.get("done")?.shape).toEqual([n, 1]);
    env.setSeed(10);
    const actions = cartActions(3, steps, n);
    const rollout = await env.rollout(steps, replay(actions), { breakWhenAnyDone: false });
    expect(rollout.batchSize).toEqual([n, steps]);
    const obs = rollout.getTensor("observation").toNumbers();
    const nextObs = rollout.getTensor(["next", "observation"]).toNumbers();
    const done = rollout.getTensor(["next", "done"]).toNumbers();
    expect(done.filter((d) => d === 1).length).toBeGreaterThan(n); // episodes end and restart within the rollout
    // Copy i is a CartPoleEnv seeded 10 + i, reset whenever it is done.
    for (let i = 0; i < n; i++) {
      const single = new CartPoleEnv();
      single.setSeed(10 + i);
      let td = await single.reset();
      for (let t = 0; t < steps; t++) {
        const at = (i * steps + t) * 4;
        expect(obs.slice(at, at + 4), `copy ${i} step ${t}`).toEqual(td.getTensor("observation").toNumbers());
        const [stepped, next] = await single.stepAndMaybeReset(td.set("action", Tensor.from(actions[t]!.data[i]!, { dtype: "int64" })));
        expect(nextObs.slice(at, at + 4)).toEqual(stepped.getTensor(["next", "observation"]).toNumbers());
        expect(done[i * steps + t]).toBe(stepped.getTensor(["next", "done"]).toNumbers()[0]);
        td = next;
      }
    }
  });

  it("SerialEnv refuses a bad stacked action naming action, and names the copy that fails", async () => {
    const env = track(new SerialEnv(3, () => new CartPoleEnv()));
    const td = await env.reset();
    await expect(env.step(td.set("action", Tensor.from([0, 1, 1], { dtype: "float32" })))).rejects.toMatchObject({ code: "SPEC_MISMATCH", key: "action" });
    await expect(env.step(td.set("action", Tensor.from([[0n], [1n], [1n]], { dtype: "int64" })))).rejects.toMatchObject({ code: "SPEC_MISMATCH", got: "shape [3, 1]" });
    const { default: failing } = await import("./control-envs.factory.js");
    const broken = track(new SerialEnv(3, () => failing({ failSeed: 12 })));
    broken.setSeed(10);
    const first = await broken.reset();
    const err = await broken.step(first.set("action", Tensor.from([0n, 1n, 1n], { dtype: "int64" }))).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SubEnvError);
    expect(err).toMatchObject({ code: "SUB_ENV_FAILED", copyIndex: 2, message: "SerialEnv copy 2: the simulator of seed 12 crashed" });
  });

  it("SerialEnv refuses copies with other specs, closing the copies it made; a run's agent needs one action bound", async () => {
    const closed: string[] = [];
    class Tracked extends PendulumEnv {
      constructor(readonly id: string, options: { maxEpisodeSteps?: number } = {}) {
        super(options);
      }
      override close(): Promise<void> {
        closed.push(this.id);
        return super.close();
      }
    }
    let made = 0;
    expect(() => new SerialEnv(3, () => (made++ === 2 ? new CartPoleEnv() : new Tracked(`p${String(made)}`)))).toThrow(
      /SerialEnv createEnv: copy 2's observationSpec \(.*\) differs from copy 0's/,
    );
    made = 0;
    expect(
      () =>
        new SerialEnv(3, () => {
          if (made++ === 2) throw new Error("no simulator left");
          return new Tracked(`q${String(made)}`);
        }),
    ).toThrow(SubEnvError);
    await new Promise((r) => setTimeout(r, 0)); // the constructor closes them in the background
    expect(closed.sort()).toEqual(["p1", "p2", "q1", "q2"]);

    // per-dimension action bounds cannot be one tanh-normal [low, high]: refused, not silently cut to the first
    class Wide extends PendulumEnv {
      override readonly actionSpec = new Bounded({ low: [-2, -1], high: [2, 1], shape: [2] });
    }
    const wide = track(new SerialEnv(2, () => new Wide()));
    expect(() => controlEnvShape(wide)).toThrow(/has per-dimension bounds; a tanh_normal agent needs the same low and high/);
    expect(controlEnvShape(track(new SerialEnv(2, () => new PendulumEnv())))).toEqual({ observationSize: 3, action: { type: "tanh_normal", size: 1, low: -2, high: 2 } });
  });

  it("ParallelEnv gives exactly SerialEnv's trajectories for the same seeds (CartPole, uneven shares), and close() ends its threads", async () => {
    const n = 7;
    const steps = 150;
    const actions = cartActions(5, steps, n);
    const serial = track(new SerialEnv(n, () => new CartPoleEnv()));
    const parallel = track(new ParallelEnv(n, { env: "CartPole-v1" }, { numThreads: 3 }));
    expect(parallel.numThreads).toBe(3);
    expect(parallel.observationSpec.toString()).toBe(serial.observationSpec.toString());
    expect(parallel.actionSpec.toString()).toBe(serial.actionSpec.toString());
    serial.setSeed(42);
    parallel.setSeed(42);
    const a = await serial.rollout(steps, replay(actions), { breakWhenAnyDone: false });
    const b = await parallel.rollout(steps, replay(actions), { breakWhenAnyDone: false });
    expect(b.batchSize).toEqual([n, steps]);
    expect(leaves(b)).toEqual(leaves(a));
    expect(a.getTensor(["next", "done"]).toNumbers().filter((d) => d === 1).length).toBeGreaterThan(n);
    // close() ends every thread (counted from their exit events), once.
    expect(parallel.threadCount).toBe(3);
    await parallel.close();
    expect(parallel.threadCount).toBe(0);
    await parallel.close();
    await expect(parallel.reset()).rejects.toBeInstanceOf(EnvStateError);
  });

  it("ParallelEnv builds copies from a module factory and matches SerialEnv (Pendulum)", async () => {
    const factory = { module: new URL("./control-envs.factory.ts", import.meta.url), export: "pendulum", options: { maxEpisodeSteps: 25 } };
    const parallel = track(new ParallelEnv(4, factory, { numThreads: 2 }));
    expect(() => parallel.observationSpec).toThrow(EnvStateError); // known once the threads start
    await parallel.start();
    expect(parallel.threadCount).toBe(2);
    expect(parallel.actionSpec.toString()).toBe("Bounded(low=-2, high=2, shape=[4, 1], dtype=float32)");
    const serial = track(new SerialEnv(4, () => new PendulumEnv({ maxEpisodeSteps: 25 })));
    serial.setSeed(3);
    parallel.setSeed(3);
    const rand = lcg(9);
    const torque = Array.from({ length: 60 }, () => Tensor.from(Float32Array.from({ length: 4 }, () => rand() * 4 - 2), { dtype: "float32", shape: [4, 1] }));
    const a = await serial.rollout(60, replay(torque), { breakWhenAnyDone: false });
    const b = await parallel.rollout(60, replay(torque), { breakWhenAnyDone: false });
    expect(leaves(b)).toEqual(leaves(a));
    expect(b.getTensor(["next", "truncated"]).toNumbers().filter((d) => d === 1).length).toBe(4 * 2); // steps 25 and 50
  });

  it("ParallelEnv names the copy whose thread fails, and refuses a bad action before any thread steps", async () => {
    const env = track(new ParallelEnv(6, { module: new URL("./control-envs.factory.ts", import.meta.url), options: { failSeed: 104 } }, { numThreads: 2 }));
    env.setSeed(100);
    const td = await env.reset();
    await expect(env.step(td.set("action", Tensor.from([0n, 1n, 2n, 0n, 1n, 0n], { dtype: "int64" })))).rejects.toMatchObject({ code: "SPEC_MISMATCH", key: "action" });
    const err = await env.step(td.set("action", Tensor.zeros("int64", [6]))).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SubEnvError);
    expect(err).toMatchObject({ copyIndex: 4, message: "ParallelEnv copy 4: the simulator of seed 104 crashed" });
    const missing = track(new ParallelEnv(2, { module: new URL("./control-envs.factory.ts", import.meta.url), export: "nothing" }));
    await expect(missing.start()).rejects.toThrow(/no function export "nothing"/);
  });
});
