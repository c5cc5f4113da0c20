// PPO on CartPole through `PPOTrainer`: `npx tsx examples/ppo-cartpole.ts`.
//
// Eight copies of CartPole-v1 step in TypeScript (`SerialEnv`); the MLP actor and critic live in a worker, which
// answers every env step of all eight copies with one call and runs GAE and ClipPPOLoss on each collected batch.
// The full run (examples/configs/ppo-cartpole.yaml's settings) balances the pole for the whole 500 steps in about a
// minute on two CPU cores. `--quick` (or POSTTRAIN_QUICK=1): two small steps in a temporary directory, for CI.
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { PPOTrainer } from "../sdk/index.js";

const quick = process.argv.slice(2).includes("--quick") || process.env.POSTTRAIN_QUICK === "1";
const say = (line: string): void => {
  process.stdout.write(`${line}\n`);
};
const runDir = quick ? await mkdtemp(join(tmpdir(), "posttrain-ppo-")) : join(process.cwd(), "runs", "ppo-cartpole-sdk");
if (!quick) await rm(runDir, { recursive: true, force: true }); // a fresh run each time (runs/ is git-ignored)
const framesPerBatch = quick ? 256 : 2048;
const steps = quick ? 2 : 30;

try {
  await using ppo = await PPOTrainer.create({
    env: { name: "CartPole-v1", numEnvs: 8 },
    loss: { entropyCoeff: 0, criticCoeff: 0.5, lossCriticType: "l2", normalizeAdvantage: true },
    optimizer: { lr: 1e-3 },
    maxGradNorm: 0.5,
    framesPerBatch,
    totalFrames: steps * framesPerBatch,
    epochs: quick ? 2 : 10,
    miniBatchSize: quick ? 128 : 256,
    eval: { every: quick ? 0 : 5, episodes: quick ? 4 : 20 },
    runDir,
  });
  say(`PPO on CartPole-v1: 8 envs in TS, MLP actor and critic in ${ppo.agent.worker.name}, ${String(steps)} steps of ${String(framesPerBatch)} frames`);
  const before = await ppo.evaluate();
  for await (const record of ppo.run()) {
    if (quick || record.step % 5 === 0) {
      const ret = record.episode_return_mean;
      const evalReturn = record.eval_return_mean;
      say(
        `step ${String(record.step)}: return ${ret === null || ret === undefined ? "-" : ret.toFixed(1)} (${String(record.episodes)} episodes), ` +
          `${(record.fps ?? 0).toFixed(0)} frames/s${typeof evalReturn === "number" ? `, eval return ${evalReturn.toFixed(1)}` : ""}`,
      );
    }
  }
  const after = await ppo.evaluate();
  say(`eval return (${String(after.count)} episodes, deterministic policy): ${before.rewardMean?.toFixed(1) ?? "-"} → ${after.rewardMean?.toFixed(1) ?? "-"}`);
  say(`run directory: ${ppo.runDir}`);
} finally {
  if (quick) await rm(runDir, { recursive: true, force: true });
}
