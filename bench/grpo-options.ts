// The flags of bench/grpo.ts and the configuration they resolve to (issue 18: model presets, completion length,
// quick mode). Defaults depend on the model: the tiny model keeps the digit-sort headline (16 prompts x 8, six new
// tokens, after an SFT warm-up); small and medium models have random weights (their rewards do not move, so no
// warm-up) and generate longer completions on fewer rows, so that one step stays within a CPU's reach.
import { parseArgs } from "node:util";
import { z } from "zod";
import { parseOptions } from "../sdk/core/index.js";
import { MODEL_PRESET_NAMES, MODEL_PRESETS, type ModelPresetName } from "./model-presets.js";

/** Per-model defaults of the flags the user did not give. */
const MODEL_DEFAULTS: Readonly<
  Record<ModelPresetName, { promptsPerStep: number; groupSize: number; maxNewTokens: number; sftSteps: number; steps: number; warmup: number }>
> = {
  tiny: { promptsPerStep: 16, groupSize: 8, maxNewTokens: 6, sftSteps: 100, steps: 50, warmup: 3 },
  small: { promptsPerStep: 4, groupSize: 8, maxNewTokens: 64, sftSteps: 0, steps: 10, warmup: 2 },
  medium: { promptsPerStep: 2, groupSize: 4, maxNewTokens: 64, sftSteps: 0, steps: 4, warmup: 1 },
};

/** `--quick`: a crash check for `npm run bench` (a few steps, no SFT warm-up, no TRL); explicit flags still win. */
const QUICK = { steps: 3, warmup: 1, sftSteps: 0, skipTrl: true } as const;

const FlagsSchema = z.strictObject({
  /** Model preset (bench/model-presets.ts). */
  model: z.enum(MODEL_PRESET_NAMES),
  /** A few steps, no SFT warm-up, no TRL (the regression guard of `npm run bench`). */
  quick: z.boolean(),
  /** Timed steps per system. */
  steps: z.coerce.number().int().min(1).max(10_000).optional(),
  /** Untimed steps per system before them. */
  warmup: z.coerce.number().int().min(0).max(1000).optional(),
  /** Steps at the end whose rewards are averaged. */
  last: z.coerce.number().int().min(1),
  /** SFT warm-up steps of the shared starting model (0: start from the random model). */
  sftSteps: z.coerce.number().int().min(0).optional(),
  /** Completion length: the most new tokens per row. */
  maxNewTokens: z.coerce.number().int().min(1).max(1024).optional(),
  /** Prompts per GRPO step. */
  promptsPerStep: z.coerce.number().int().min(1).max(1024).optional(),
  /** Completions per prompt (the group size, at least 2 for the group advantages). */
  groupSize: z.coerce.number().int().min(2).max(256).optional(),
  /** Leave TRL out. */
  skipTrl: z.boolean(),
  /** Torch threads of every Python process (OMP_NUM_THREADS); default: torch's own choice. */
  threads: z.coerce.number().int().min(1).max(256).optional(),
  /** Time the worker-side parts of the SDK's step too (bench/grpo_timed_worker.py). */
  workerTiming: z.boolean(),
});

/** The parsed flags of bench/grpo.ts. */
export type GrpoBenchFlags = z.output<typeof FlagsSchema>;

/** Reads the command line (`argv`, default `process.argv.slice(2)`); a bad flag is an `InvalidArgumentError` naming it. */
export function parseGrpoFlags(argv: readonly string[] = process.argv.slice(2)): GrpoBenchFlags {
  const { values: raw } = parseArgs({
    args: [...argv],
    options: {
      model: { type: "string", default: "tiny" },
      quick: { type: "boolean", default: false },
      steps: { type: "string" },
      warmup: { type: "string" },
      last: { type: "string", default: "10" },
      "sft-steps": { type: "string" },
      "max-new-tokens": { type: "string" },
      "prompts-per-step": { type: "string" },
      "group-size": { type: "string" },
      "skip-trl": { type: "boolean", default: false },
      threads: { type: "string" },
      "worker-timing": { type: "boolean", default: false },
    },
  });
  const given: Record<string, unknown> = {
    model: raw.model,
    quick: raw.quick,
    last: raw.last,
    skipTrl: raw["skip-trl"],
    steps: raw.steps,
    warmup: raw.warmup,
    sftSteps: raw["sft-steps"],
    maxNewTokens: raw["max-new-tokens"],
    promptsPerStep: raw["prompts-per-step"],
    groupSize: raw["group-size"],
    threads: raw.threads,
    workerTiming: raw["worker-timing"],
  };
  const defined = Object.fromEntries(Object.entries(given).filter(([, v]) => v !== undefined));
  return parseOptions(FlagsSchema, defined, "bench:grpo flags");
}

/** The benchmark's configuration: the same for the SDK and every baseline. */
export function grpoBenchConfig(flags: GrpoBenchFlags) {
  const defaults = MODEL_DEFAULTS[flags.model];
  const quick = flags.quick ? QUICK : undefined;
  const steps = flags.steps ?? quick?.steps ?? defaults.steps;
  const sftSteps = flags.sftSteps ?? quick?.sftSteps ?? defaults.sftSteps;
  return {
    model: { preset: flags.model, seed: 0, ...MODEL_PRESETS[flags.model] },
    sftWarmup: {
      steps: sftSteps,
      batch: 16,
      lr: 3e-3,
      seed: 1,
      ...(sftSteps === 0
        ? { skipped: flags.model === "tiny" ? "--sft-steps 0 (or --quick)" : "random weights: the rewards do not move, so no warm-up (speed only)" }
        : {}),
    },
    task: { type: "digit-sort" as const, numDigits: 4, split: "train", seed: 0 },
    groupSize: flags.groupSize ?? defaults.groupSize,
    promptsPerStep: flags.promptsPerStep ?? defaults.promptsPerStep,
    maxNewTokens: flags.maxNewTokens ?? defaults.maxNewTokens,
    sampling: { temperature: 1, topP: 1, topK: 0 },
    loss: { variant: "grpo" as const, clipEpsilon: 0.2, entropyCoeff: 0.01, aggregation: "token_mean" },
    klToRefCoeff: 0,
    optimizer: { type: "adamw" as const, lr: 3e-4, weightDecay: 0.01 },
    gradClip: 1,
    seed: 0,
    device: "cpu" as const,
    quick: flags.quick,
    workerTiming: flags.workerTiming,
    skipTrl: flags.skipTrl || quick?.skipTrl === true,
    steps,
    warmup: flags.warmup ?? quick?.warmup ?? defaults.warmup,
    lastK: Math.min(flags.last, steps),
  };
}

/** The resolved configuration of one bench:grpo run. */
export type GrpoBenchConfig = ReturnType<typeof grpoBenchConfig>;
