// Training a model to use a tool, multi-turn: `npx tsx examples/tool-use.ts` (about a minute on a laptop CPU).
//
// The task is the built-in ArithmeticToolEnv: the user asks "3+4"; the policy may press the calculator (a message
// holding "=", answered by a SimpleToolTransform tool in a `tool` message) and then answers with the number. An
// episode ends on an answer or at the turn limit (maxTurns, required). The reward is the correctness of the final
// answer (0.1 for a wrong number), plus 0.2 for an episode that used the calculator and then answered: shaping that
// a random model can find by sampling.
//
// The policy is the tiny random model in a local CPU worker. LLMCollector runs whole episodes
// (yieldCompletedTrajectories), MCAdvantage gives each episode its group-relative advantage (trajectoryReturn "sum"),
// trajectoryBatch turns the episodes into a trainer batch whose loss mask holds the assistant's tokens only, and the
// Trainer steps GRPOLoss({ maskingStrategy: "rlhf" }) on it. The model learns to call the calculator, then to answer.
// `--quick` (or POSTTRAIN_QUICK=1): a few steps, for CI (no learning claim).
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  ArithmeticToolEnv,
  GRPOLoss,
  LLMCollector,
  makeTinyModel,
  MCAdvantage,
  Trainer,
  trajectoryBatch,
  TransformersWrapper,
  WorkerPool,
  type TensorDict,
} from "../sdk/index.js";

const quick = process.argv.slice(2).includes("--quick") || process.env.POSTTRAIN_QUICK === "1";
const say = (line: string): void => {
  process.stdout.write(`${line}\n`);
};
const STEPS = quick ? 3 : 120;
const EPISODES_PER_STEP = 64; // 8 problems × 8 episodes (the GRPO groups)
const mean = (xs: readonly number[]): number => xs.reduce((a, b) => a + b, 0) / Math.max(xs.length, 1);

const dir = await mkdtemp(join(tmpdir(), "posttrain-tool-use-"));
// One torch thread: as fast for a model this small, and the run does not depend on the machine's core count.
const workerEnv = { OMP_NUM_THREADS: "1", MKL_NUM_THREADS: "1" };
const [tiny, pool] = await Promise.all([makeTinyModel(join(dir, "tiny"), { seed: 0 }), WorkerPool.local({ device: "cpu", env: workerEnv })]);
try {
  const worker = pool.worker(0);
  await worker.loadModel({ name: "policy", path: tiny.path });
  say(`tool use: tiny model (${tiny.parameters} parameters) in ${worker.name} learns a calculator tool, ${STEPS} GRPO steps of ${EPISODES_PER_STEP} episodes`);

  const env = new ArithmeticToolEnv({
    maxTurns: 2, // an episode: press "=", read the result, answer
    operations: ["+"],
    minOperand: 1,
    maxOperand: 4,
    repeats: 8, // GRPO groups: each problem 8 times
    batchSize: [EPISODES_PER_STEP],
    seed: 0,
    systemPrompt: null, // the tiny model cannot read it; shorter sequences
    toolReward: 0.2,
  });
  const model = new TransformersWrapper(worker, { model: "policy", generateKwargs: { max_new_tokens: 2 } });
  let calls = 0;
  const policy = (td: TensorDict): Promise<TensorDict> => model.forward(td, { seed: 1000 + calls++ }); // reproducible
  await using collector = new LLMCollector({ env, policy, yieldCompletedTrajectories: true, dialogTurnsPerBatch: EPISODES_PER_STEP });
  // The generator and the trainer share the model in one worker: a step updates the weights the next episodes use.
  const trainer = await Trainer.create(worker, {
    model: "policy",
    loss: new GRPOLoss({ maskingStrategy: "rlhf", entropyCoeff: 0 }),
    optimizer: { type: "adamw", lr: 4e-3, weightDecay: 0 },
  });
  const advantage = new MCAdvantage({ groupSize: 8, trajectoryReturn: "sum" });

  const rewards: number[] = [];
  let groups: TensorDict[] = [];
  let episodes = 0;
  for await (const trajectories of collector) {
    const done = advantage.inv(trajectories); // the groups these episodes complete, with "advantage"
    if (done === null) continue;
    groups.push(done);
    episodes += done.getTensor(["next", "done"]).toNumbers().filter((d) => d !== 0).length;
    if (episodes < EPISODES_PER_STEP) continue;

    // The episodes of this step: rewards come at the step that ends each one.
    const column = (key: string): number[] => groups.flatMap((g) => g.getTensor(["next", key]).toNumbers());
    const ended = column("done");
    const endedWith = (key: string): number => column(key).filter((v, i) => v !== 0 && ended[i] !== 0).length / episodes;
    const reward = column("reward").reduce((a, b) => a + b, 0) / episodes;
    rewards.push(reward);
    // One row per turn: the tokens the policy generated, its sampling log-probs, its response as the loss mask.
    const batch = await trajectoryBatch(groups, { layout: "turns" });
    const { metrics } = await trainer.step(batch);
    await collector.updatePolicyWeights();
    const step = rewards.length;
    if (quick || step % 10 === 0) {
      say(
        `step ${step}: reward ${reward.toFixed(3)}, calculator used ${endedWith("used_tool").toFixed(2)}, ` +
          `right answers ${endedWith("success").toFixed(2)}, loss ${(metrics.loss ?? Number.NaN).toFixed(4)}`,
      );
    }
    if (step === STEPS) {
      // One episode of this step, as a conversation: its trainer row in the "conversation" layout (scored by the
      // worker) masks the assistant's words and end-of-turn tokens, never the user's or the tool's.
      const rows = await trajectoryBatch(groups, { worker, model: "policy" });
      const longest = rows.getTensor("num_turns").toNumbers().indexOf(Math.max(...rows.getTensor("num_turns").toNumbers()));
      say(`an episode of step ${step} (return ${rows.getTensor("return").toNumbers()[longest]!.toFixed(1)}):`);
      for (const message of rows.getHistory(["history", "full"]).row(longest).messages) say(`  ${message.role.padEnd(9)} ${JSON.stringify(message.content)}`);
      break;
    }
    groups = [];
    episodes = 0;
  }
  const k = Math.min(5, rewards.length);
  say(`mean reward: ${mean(rewards.slice(0, k)).toFixed(3)} (first ${k} steps) → ${mean(rewards.slice(-k)).toFixed(3)} (last ${k})`);
} finally {
  await pool.close();
  await rm(dir, { recursive: true, force: true });
}
