/** `posttrain grpo --config run.yaml`: a GRPO-family run (`GRPOTrainer`) from a run config. */
import { TRAINING_OPTIONS_HELP, trainingCommand } from "../train-command.js";

const HELP = `Usage: posttrain grpo --config FILE [--run-dir DIR] [--steps N] [--generator-backend NAME] [--set FIELD=VALUE]... [--resume]

Train a policy with GRPO (or the DAPO, CISPO, GSPO, SAPO variants) from a run config: model, task,
groupSize, promptsPerStep, maxNewTokens, sampling, loss, klToRefCoeff, optimizer, schedule, steps, eval,
checkpoint, seed, runDir (docs/trainers.md; example: examples/configs/grpo-digit-sort.yaml). The run
directory gets config.yaml, metrics.jsonl, samples.jsonl, checkpoints/step-N/ and report.html.

GRPO options:
  --generator-backend NAME
                      Overrides generator.backend: the engine that samples the completions,
                      transformers (default) or vllm (needs \`npx posttrain setup --extras vllm\`;
                      docs/trainers.md, "vLLM generation").

${TRAINING_OPTIONS_HELP}`;

/** The `grpo` command. */
export const grpoCommand = trainingCommand({
  name: "grpo",
  summary: "Train with GRPO (DAPO, CISPO, GSPO, SAPO) from a run config: posttrain grpo --config run.yaml",
  help: HELP,
  fieldFlags: { "generator-backend": "generator.backend" },
  load: async () => {
    const { GRPOTrainer, GRPOTrainerConfigSchema } = await import("../../runs/index.js");
    return { schema: GRPOTrainerConfigSchema, create: (config, options) => GRPOTrainer.create(config, options) };
  },
});
