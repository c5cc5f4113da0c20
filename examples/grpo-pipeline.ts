// The GRPO loop assembled by hand from the pieces GRPOTrainer is made of: `npx tsx examples/grpo-pipeline.ts`.
//
// env (digit-sort prompts, each `groupSize` times in a row, and its reward) → TransformersWrapper on a generator
// worker → LLMCollector collecting in the background, up to `maxPolicyAge` versions ahead → ReplayBuffer whose
// MCAdvantage transform writes each complete group with its advantages → Trainer (the optimizer in the trainer
// worker) → ZMQWeightSyncScheme (the new weights to the generator) through the collector's updatePolicyWeights.
// With maxPolicyAge 0 this is the synchronous, on-policy algorithm; with 1 the generator samples the next batch
// while the trainer trains on this one. docs/trainers.md ("One pipeline") walks through it.
// `--quick` (or POSTTRAIN_QUICK=1): a few steps, for CI.
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  DigitSortEnv,
  GRPOLoss,
  LazyStackStorage,
  LLMCollector,
  makeTinyModel,
  MCAdvantage,
  ReplayBuffer,
  Trainer,
  TransformersWrapper,
  WorkerPool,
  ZMQWeightSyncScheme,
} from "../sdk/index.js";

const quick = process.argv.slice(2).includes("--quick") || process.env.POSTTRAIN_QUICK === "1";
const STEPS = quick ? 3 : 40;
const PROMPTS = 8; // distinct prompts per step
const GROUP = 8; // completions per prompt
const MAX_POLICY_AGE = 1;

const dir = await mkdtemp(join(tmpdir(), "posttrain-grpo-pipeline-"));
try {
  const tiny = await makeTinyModel(join(dir, "tiny"), { seed: 0 });
  await using pool = await WorkerPool.local({ workers: 2, device: "cpu" });
  const [learner, actor] = [pool.worker(0), pool.worker(1)];
  await Promise.all([learner, actor].map((w) => w.loadModel({ name: "policy", path: tiny.path })));

  const trainer = await Trainer.create(learner, { model: "policy", loss: new GRPOLoss(), optimizer: { type: "adamw", lr: 3e-4 } });
  const weights = new ZMQWeightSyncScheme(trainer, [{ worker: actor, model: "policy" }]);
  const policy = new TransformersWrapper(actor, { model: "policy", generateKwargs: { max_new_tokens: 6, temperature: 1 } });

  // Room for the batches collected ahead: a full buffer pauses the collector.
  const replayBuffer = new ReplayBuffer({
    storage: new LazyStackStorage({ maxSize: (MAX_POLICY_AGE + 1) * PROMPTS * GROUP }),
    transforms: [new MCAdvantage({ groupSize: GROUP, promptKey: ["history", "prompt"] })],
  });
  await using collector = new LLMCollector({
    env: new DigitSortEnv({ batchSize: [PROMPTS * GROUP], repeats: GROUP, seed: 0, split: "train" }),
    policy,
    dialogTurnsPerBatch: PROMPTS * GROUP,
    totalDialogTurns: STEPS * PROMPTS * GROUP,
    replayBuffer,
    resetAtEachIter: true,
    trackPolicyVersion: true, // each row carries the version of the weights that sampled it
    weightUpdater: async () => {
      await weights.updateWeights();
    },
  });

  collector.start({ maxPolicyAge: MAX_POLICY_AGE });
  for (let step = 1; step <= STEPS; step++) {
    const version = collector.policyVersion ?? 0;
    const { batch, dropped } = await collector.takeBatch(PROMPTS * GROUP, { maxPolicyAge: MAX_POLICY_AGE });
    const { metrics } = await trainer.step(batch.select(["tokens", "full"], ["tokens", "prompt"], ["log_probs", "full"], "advantage"));
    await collector.updatePolicyWeights(); // weights to the generator; the version moves on
    const rewards = batch.getTensor(["next", "reward"]).toNumbers();
    const ages = batch.getTensor("policy_version").toNumbers().map((v) => version - v);
    const mean = rewards.reduce((a, b) => a + b, 0) / rewards.length;
    console.log(
      `step ${step}/${STEPS}  reward ${mean.toFixed(3)}  loss ${metrics.loss?.toFixed(4) ?? "-"}  policy age ${Math.max(...ages)}  dropped ${dropped}`,
    );
  }
  await weights.close();
  console.log(`collected ${collector.stats.batches} batches, ${(collector.stats.busyMs / 1000).toFixed(1)} s of generation`);
} finally {
  await rm(dir, { recursive: true, force: true });
}
