/** `posttrain ppo --config run.yaml`: PPO on a classic control env (`PPOTrainer`) from a run config. */
import { TRAINING_OPTIONS_HELP, trainingCommand } from "../train-command.js";

const HELP = `Usage: posttrain ppo --config FILE [--run-dir DIR] [--steps N] [--set FIELD=VALUE]... [--resume]

Train a control policy with PPO (ClipPPOLoss, GAE) from a run config: env (CartPole-v1 or Pendulum-v1,
numEnvs, parallel), actor, critic, loss, advantage, optimizer, maxGradNorm, framesPerBatch, totalFrames
(or steps), epochs, miniBatchSize, eval, checkpoint, seed, runDir (docs/classic-rl.md; example:
examples/configs/ppo-cartpole.yaml). The envs step in TS; the actor and critic live in a worker. The run
directory gets config.yaml, metrics.jsonl (eval_return_mean on evaluation steps), checkpoints/step-N/
and report.html.

${TRAINING_OPTIONS_HELP}`;

/** The `ppo` command. */
export const ppoCommand = trainingCommand({
  name: "ppo",
  summary: "Train a control policy with PPO from a run config: posttrain ppo --config run.yaml",
  help: HELP,
  load: async () => {
    const { PPOTrainer, PPOTrainerConfigSchema } = await import("../../runs/index.js");
    return { schema: PPOTrainerConfigSchema, create: (config, options) => PPOTrainer.create(config, options) };
  },
});
