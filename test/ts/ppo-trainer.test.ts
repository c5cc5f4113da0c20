// PPOTrainer with a real worker (one local CPU pool shared by the file): PPO learns CartPole-v1 (TS envs, the agent
// in the worker) well past a random policy's ~22, the run directory holds what it should, a resume continues the step
// count with the same agent (equal act results after the reload), Pendulum trains a tanh-normal head, bad configs
// name the field, and `posttrain ppo --config` runs a tiny config (envs in worker threads) end to end in a child
// process, which exits once done (no thread left behind). ProbabilisticActor's exploration types are checked here
// too, on the same worker.
import { execFile } from "node:child_process";
import { mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { parse as parseYaml } from "yaml";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  ClipPPOLoss,
  ControlAgent,
  GAE,
  InvalidArgumentError,
  NoCheckpointError,
  PPOTrainer,
  ProbabilisticActor,
  setExplorationType,
  Tensor,
  TensorDict,
  WorkerError,
  WorkerPool,
  type PPOTrainerConfigInput,
  type StepRecord,
} from "../../sdk/index.js";

const ROOT = resolve(import.meta.dirname, "..", "..");
const CLI = join(ROOT, "sdk", "cli", "main.ts");

let dir: string;
let pool: WorkerPool;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "posttrain-ppo-trainer-"));
  pool = await WorkerPool.local({ device: "cpu" });
});

afterAll(async () => {
  await pool.close();
  await rm(dir, { recursive: true, force: true });
});

/** A small CartPole run: 4 copies, 128 frames a step (the eval and checkpoint off unless given). */
function small(runDir: string, extra: Partial<PPOTrainerConfigInput> = {}): PPOTrainerConfigInput {
  return {
    env: { name: "CartPole-v1", numEnvs: 4 },
    framesPerBatch: 128,
    steps: 4,
    epochs: 2,
    miniBatchSize: 64,
    runDir,
    ...extra,
  };
}

async function metrics(runDir: string): Promise<StepRecord[]> {
  const text = await readFile(join(runDir, "metrics.jsonl"), "utf8");
  return text
    .split("\n")
    .filter((l) => l.trim() !== "")
    .map((l) => JSON.parse(l) as StepRecord);
}

/** Three fixed CartPole observations. */
function observations(): TensorDict {
  const obs = Float32Array.from([0.01, -0.02, 0.03, 0.04, 0.1, 0.5, -0.05, -0.6, -0.2, -0.3, 0.12, 0.9]);
  return new TensorDict({ observation: new Tensor("float32", [3, 4], obs) }, { batchSize: [3] });
}

/** What the agent answers on {@link observations}: the greedy actions and log-probs, then a sampled draw. */
async function actOn(ppo: PPOTrainer): Promise<number[][]> {
  const greedy = await ppo.agent.act(observations(), "deterministic");
  const sampled = await ppo.agent.act(observations(), "random");
  return [greedy, sampled].flatMap((td) => [td.getTensor("action").toNumbers(), td.getTensor("action_log_prob").toNumbers()]);
}

describe("PPOTrainer", { timeout: 120_000 }, () => {
  it("learns CartPole-v1 and writes the run directory", async () => {
    const runDir = join(dir, "learn");
    const started = performance.now();
    await using ppo = await PPOTrainer.create(
      {
        env: { name: "CartPole-v1", numEnvs: 8 },
        loss: { entropyCoeff: 0, criticCoeff: 0.5, lossCriticType: "l2", normalizeAdvantage: true },
        optimizer: { lr: 1e-3 },
        maxGradNorm: 0.5,
        framesPerBatch: 1024,
        totalFrames: 12 * 1024,
        epochs: 8,
        miniBatchSize: 256,
        eval: { every: 6, episodes: 10 },
        checkpoint: { every: 6, keepLast: 2 },
        runDir,
      },
      { pool },
    );
    expect(ppo.totalSteps).toBe(12);
    const summary = await ppo.train();
    const seconds = (performance.now() - started) / 1000;
    expect(summary.steps).toBe(12);
    // a random policy balances ~22 steps; seeds 0-5 end at 214-462 (seed 0: 343), so 150 leaves room for float noise
    const first = summary.firstEval!;
    const last = summary.lastEval!;
    expect(first.rewardMean!).toBeLessThan(60);
    expect(last.rewardMean!, `eval return after 12 steps (${seconds.toFixed(0)} s)`).toBeGreaterThanOrEqual(150);
    expect(last.count).toBe(10);

    const records = await metrics(runDir);
    expect(records.map((r) => r.step)).toEqual([0, ...Array.from({ length: 12 }, (_, i) => i + 1)]);
    expect(records.filter((r) => "eval_return_mean" in r).map((r) => r.step)).toEqual([0, 6, 12]);
    const steps = records.filter((r) => r.step > 0);
    for (const r of steps) {
      for (const key of ["frames", "episodes", "loss_objective", "loss_critic", "entropy", "clip_fraction", "kl_approx", "grad_norm", "explained_variance", "fps", "updates"]) {
        expect(r, `${key} at step ${String(r.step)}`).toHaveProperty(key);
      }
      expect(r.frames).toBe(r.step * 1024);
      expect(r.updates).toBe(r.step * 8 * 4); // 8 epochs of 1024 / 256 mini-batches
    }
    // the sampling policy's episodes get longer too
    const early = steps.slice(0, 2).map((r) => r.episode_return_mean ?? 0);
    const late = steps.slice(-2).map((r) => r.episode_return_mean ?? 0);
    expect(Math.max(...late)).toBeGreaterThan(Math.max(...early));

    expect((await readdir(runDir)).sort()).toEqual(expect.arrayContaining(["checkpoints", "config.yaml", "metrics.jsonl", "report.html"]));
    expect(await readdir(join(runDir, "checkpoints"))).toEqual(["step-12", "step-6"]);
    const state = JSON.parse(await readFile(join(runDir, "checkpoints", "step-12", "trainer_state.json"), "utf8")) as Record<string, number>;
    expect(state).toEqual({ step: 12, frames: 12 * 1024, updates: 12 * 32 });
    expect((await readdir(join(runDir, "checkpoints", "step-12", "agent"))).length).toBeGreaterThan(0);
    const saved = parseYaml(await readFile(join(runDir, "config.yaml"), "utf8")) as Record<string, unknown>;
    expect(saved).toMatchObject({ env: { name: "CartPole-v1", numEnvs: 8, parallel: false }, loss: { clipEpsilon: 0.2, entropyCoeff: 0, normalizeAdvantage: true } });
    expect(await readFile(join(runDir, "report.html"), "utf8")).toContain("eval_return_mean");
  });

  it("resumes from a checkpoint: the step count goes on and the agent is the one saved", async () => {
    const runDir = join(dir, "resume");
    const controller = new AbortController();
    const first = await PPOTrainer.create(small(runDir), { pool, signal: controller.signal });
    for await (const r of first.run()) if (r.step === 2) controller.abort();
    expect(first.step).toBe(2);
    const before = await actOn(first);
    await first.close();
    expect(await readdir(join(runDir, "checkpoints"))).toEqual(["step-2"]);

    await using second = await PPOTrainer.create(small(runDir), { pool, resume: true });
    expect(second.step).toBe(2);
    expect(await actOn(second)).toEqual(before);
    const taken: number[] = [];
    for await (const r of second.run()) taken.push(r.step);
    expect(taken).toEqual([3, 4]);
    const records = await metrics(runDir);
    expect(records.map((r) => r.step)).toEqual([1, 2, 3, 4]);
    expect(records.at(-1)!.updates).toBe(4 * 2 * 2);
    // a field that changes the training must match the saved config
    await expect(PPOTrainer.create(small(runDir, { epochs: 3 }), { pool, resume: true })).rejects.toThrow(/config field epochs is 3 but the run was started with 2/);
    await second.close();

    // a damaged newest checkpoint (no trainer_state.json: a save cut short) is set aside; the one before it resumes
    expect(await readdir(join(runDir, "checkpoints"))).toEqual(["step-2", "step-4"]);
    await rm(join(runDir, "checkpoints", "step-4", "trainer_state.json"));
    const lines: string[] = [];
    const third = await PPOTrainer.create(small(runDir), { pool, resume: true, log: (l) => lines.push(l) });
    expect(third.step).toBe(2);
    expect(await actOn(third)).toEqual(before);
    await third.close();
    expect((await readdir(join(runDir, "checkpoints"))).sort()).toEqual(["step-2", "step-4.corrupt"]);
    expect(lines.join("\n")).toMatch(/step-4 is unreadable \(trainer_state\.json is missing\)/);
    // an agent the worker cannot read (CHECKPOINT_INVALID) is set aside too: none is left
    await writeFile(join(runDir, "checkpoints", "step-2", "agent", "agent.json"), "not json");
    await expect(PPOTrainer.create(small(runDir), { pool, resume: true, log: () => undefined })).rejects.toBeInstanceOf(NoCheckpointError);
    expect((await readdir(join(runDir, "checkpoints"))).sort()).toEqual(["step-2.corrupt", "step-4.corrupt"]);
  });

  it("trains Pendulum-v1 with a tanh-normal head whose actions stay in the action bounds", async () => {
    const runDir = join(dir, "pendulum");
    await using ppo = await PPOTrainer.create({ ...small(runDir), env: { name: "Pendulum-v1", numEnvs: 2 }, steps: 2, eval: { every: 2, episodes: 2, maxSteps: 20 } }, { pool });
    const summary = await ppo.train();
    expect(summary.steps).toBe(2);
    expect(summary.lastEval!.count).toBe(2);
    expect(summary.lastEval!.rewardMean!).toBeLessThan(0); // Pendulum's rewards are costs, <= 0
    const obs = new TensorDict({ observation: new Tensor("float32", [2, 3], Float32Array.from([1, 0, 0.5, -1, 0, -8])) }, { batchSize: [2] });
    const acted = await ppo.agent.act(obs, "random");
    expect(acted.getTensor("action").shape).toEqual([2, 1]);
    for (const a of acted.getTensor("action").toNumbers()) expect(Math.abs(a)).toBeLessThanOrEqual(2);
    expect((await metrics(runDir)).filter((r) => r.step > 0).every((r) => typeof r.loss_critic === "number")).toBe(true);
  });

  it("rejects bad configs naming the field", async () => {
    const runDir = join(dir, "bad");
    const bad = async (config: Record<string, unknown>, pattern: RegExp): Promise<void> => {
      const attempt = PPOTrainer.create({ ...small(runDir), ...config }, { pool });
      await expect(attempt).rejects.toThrow(InvalidArgumentError);
      await expect(attempt).rejects.toThrow(pattern);
    };
    await bad({ env: { name: "MountainCar-v0" } }, /PPOTrainer config\.env\.name: .*"CartPole-v1".*\(got "MountainCar-v0"\)/);
    await bad({ framesPerBatch: 130 }, /PPOTrainer config\.framesPerBatch: must be a multiple of env\.numEnvs \(4\)/);
    await bad({ miniBatchSize: 256 }, /PPOTrainer config\.miniBatchSize: must be at most framesPerBatch \(128\)/);
    await bad({ steps: undefined }, /PPOTrainer config\.totalFrames: is required/);
    await bad({ steps: undefined, totalFrames: 200 }, /PPOTrainer config\.totalFrames: must be a multiple of framesPerBatch \(128\)/);
    await bad({ loss: { clipEpsilon: 1.5 } }, /PPOTrainer config\.loss\.clipEpsilon: .*\(got 1\.5\)/);
    await bad({ advantage: { lambda: 0.9 } }, /PPOTrainer config\.advantage\.lambda: unknown field/);
    await bad({ actor: { hidden: [64], activation: "gelu" } }, /PPOTrainer config\.actor\.activation: .*\(got "gelu"\)/);
    expect(await readdir(dir)).not.toContain("bad"); // refused before the run directory is made
  });

  it("posttrain ppo --config runs a tiny config; a bad one exits 2 naming the field", { timeout: 90_000 }, async () => {
    const runDir = join(dir, "cli-run");
    const config = join(dir, "tiny-ppo.yaml");
    await writeFile(
      config,
      [
        "env: { name: CartPole-v1, numEnvs: 2, parallel: true }",
        "framesPerBatch: 64",
        "totalFrames: 128",
        "epochs: 1",
        "miniBatchSize: 32",
        "eval: { every: 2, episodes: 2, maxSteps: 30 }",
        `runDir: ${runDir}`,
        "",
      ].join("\n"),
    );
    const run = await posttrain("ppo", "--config", config);
    expect(run.code, run.stderr).toBe(0);
    expect(run.stdout).toMatch(/^ppo: run directory .*cli-run, 2 steps$/m);
    expect(run.stdout).toMatch(/^done: step 2\/2 \(2 this run, [\d.]+ s\); checkpoint .*step-2; report .*report\.html$/m);
    const records = await metrics(runDir);
    expect(records.map((r) => r.step)).toEqual([0, 1, 2]);
    expect(records.filter((r) => typeof r.eval_return_mean === "number").map((r) => r.step)).toEqual([0, 2]);

    const bad = await posttrain("ppo", "--config", config, "--set", "env.numEnvs=3", "--run-dir", join(dir, "cli-bad"));
    expect(bad.code, bad.stderr).toBe(2);
    expect(bad.stderr).toMatch(/^ {2}framesPerBatch: got 64: must be a multiple of env\.numEnvs \(3\)/m);
  });
});

function posttrain(...args: string[]): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((done) => {
    execFile(process.execPath, ["--import", "tsx", CLI, ...args], { cwd: ROOT, timeout: 80_000 }, (err, stdout, stderr) => {
      const code = err === null ? 0 : typeof err.code === "number" ? err.code : null;
      done({ code, stdout, stderr });
    });
  });
}

/** A small CartPole agent on the file's worker. */
async function cartPoleAgent(name: string): Promise<ControlAgent> {
  const { agent } = await ControlAgent.create(pool.worker(0), {
    name,
    observationSize: 4,
    action: { type: "categorical", n: 2 },
    actor: { hidden: [16], activation: "tanh" },
    critic: { hidden: [16], activation: "tanh" },
    optimizer: { type: "adam", lr: 1e-3, eps: 1e-8, weightDecay: 0 },
    loss: new ClipPPOLoss().toWire(),
    advantage: new GAE().toWire(),
    maxGradNorm: null,
    seed: 3,
    replace: true,
  });
  return agent;
}

describe("ControlAgent", () => {
  it("an update batch that does not fit is a typed worker error naming what is wrong", async () => {
    const agent = await cartPoleAgent("bad-batch");
    try {
      const rows = 6;
      const f32 = (shape: number[]): Tensor => new Tensor("float32", shape, new Float32Array(shape.reduce((a, b) => a * b, 1)));
      const flags = (): Tensor => Tensor.from(new Array<boolean>(rows).fill(false), { dtype: "bool" }).reshape([rows, 1]);
      const batch = (): TensorDict =>
        new TensorDict(
          {
            observation: f32([rows, 4]),
            action: Tensor.from(new Array<number>(rows).fill(0), { dtype: "int64" }),
            action_log_prob: f32([rows]),
            next: new TensorDict({ observation: f32([rows, 4]), reward: f32([rows, 1]), done: flags(), terminated: flags() }, { batchSize: [rows] }),
          },
          { batchSize: [rows] },
        );
      const layout = { numEnvs: 4, epochs: 1, miniBatchSize: 2 };
      const failure = (p: Promise<unknown>): Promise<WorkerError> =>
        p.then(
          () => {
            throw new Error("expected the update to fail");
          },
          (err: unknown) => {
            expect(err).toBeInstanceOf(WorkerError);
            return err as WorkerError;
          },
        );
      const wrongEnvs = await failure(agent.update(batch(), layout));
      expect(wrongEnvs.code).toBe("BAD_ARGUMENTS");
      expect(wrongEnvs.message).toMatch(/"numEnvs" \(4\) must divide the batch's rows \(6\)/);
      const noReward = batch();
      noReward.getTensorDict("next").del("reward");
      const missing = await failure(agent.update(noReward, { ...layout, numEnvs: 2 }));
      expect(missing.code).toBe("BAD_PAYLOAD");
      expect(missing.message).toMatch(/reward/);
      expect((await agent.update(batch(), { ...layout, numEnvs: 2 })).updates).toBe(3); // the worker serves on
    } finally {
      await agent.close();
    }
  });
});

describe("ProbabilisticActor", () => {
  it("writes action and action_log_prob; the call's exploration wins over setExplorationType, which wins over the actor's", async () => {
    const agent = await cartPoleAgent("actor-test");
    try {
      // 64 copies of one observation: sampling draws both actions, the mode draws one
      const same = (): TensorDict =>
        new TensorDict({ observation: new Tensor("float32", [64, 4], new Float32Array(64 * 4).fill(0.01)) }, { batchSize: [64] });
      const actor = new ProbabilisticActor(agent);
      expect(actor.exploration).toBe("random");
      const td = same();
      expect(await actor.forward(td)).toBe(td);
      expect(td.getTensor("action").dtype).toBe("int64");
      expect(td.getTensor("action_log_prob").shape).toEqual([64]);
      expect(new Set(td.getTensor("action").toNumbers()).size).toBe(2);
      const distinct = async (f: () => Promise<TensorDict>): Promise<number> => new Set((await f()).getTensor("action").toNumbers()).size;
      expect(await setExplorationType("deterministic", () => distinct(() => actor.forward(same())))).toBe(1);
      expect(await setExplorationType("deterministic", async () => {
        await new Promise((r) => setTimeout(r, 1)); // the scope survives awaits
        return distinct(() => actor.forward(same(), { exploration: "random" }));
      })).toBe(2);
      actor.exploration = "deterministic";
      expect(await distinct(() => actor.forward(same()))).toBe(1);
      expect(await setExplorationType("random", () => distinct(() => actor.forward(same())))).toBe(2);
      expect(() => new ProbabilisticActor(agent, { exploration: "greedy" as never })).toThrow(/ProbabilisticActor options\.exploration: .*\(got "greedy"\)/);
    } finally {
      await agent.close();
    }
  });
});
