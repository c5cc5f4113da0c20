/** `posttrain sft --config run.yaml`: supervised fine-tuning (`SFTTrainer`) from a run config. */
import { TRAINING_OPTIONS_HELP, trainingCommand } from "../train-command.js";

const HELP = `Usage: posttrain sft --config FILE [--run-dir DIR] [--steps N] [--set FIELD=VALUE]... [--resume]

Fine-tune a model on examples (SFTLoss) from a run config: model, data, evalData, loss, batchSize,
optimizer, schedule, steps or epochs, eval, checkpoint, seed, runDir (docs/trainers.md; example:
examples/configs/sft-digit-sort.yaml). The run directory gets config.yaml, metrics.jsonl, samples.jsonl,
checkpoints/step-N/ and report.html.

${TRAINING_OPTIONS_HELP}`;

/** The `sft` command. */
export const sftCommand = trainingCommand({
  name: "sft",
  summary: "Supervised fine-tuning from a run config: posttrain sft --config run.yaml",
  help: HELP,
  load: async () => {
    const { SFTTrainer, SFTTrainerConfigSchema } = await import("../../runs/index.js");
    return { schema: SFTTrainerConfigSchema, create: (config, options) => SFTTrainer.create(config, options) };
  },
});
