/**
 * Options of {@link Trainer} (optimizer, schedule, LoRA, gradient clipping, micro-batching), checked with zod
 * before anything is sent to the worker. Names and defaults: docs/training.md.
 */
import { z } from "zod";
import type { LossConfigLike } from "../objectives/losses.js";
import { ReferenceModel } from "./reference.js";

const Beta = z.number().min(0).lt(1);

/** AdamW (default `weightDecay` 0.01) or Adam (default 0): torch's defaults where a field is left out. */
const AdamSchema = {
  /** Learning rate (≥ 0). */
  lr: z.number().min(0),
  /** Decoupled (AdamW) or L2 (Adam) weight decay. */
  weightDecay: z.number().min(0).optional(),
  /** `[beta1, beta2]`, default `[0.9, 0.999]`. */
  betas: z.tuple([Beta, Beta]).optional(),
  /** Default 1e-8. */
  eps: z.number().gt(0).optional(),
};

/** The optimizer, by `type`: `"adamw"`, `"adam"` or `"sgd"`. */
export const OptimizerSchema = z.discriminatedUnion("type", [
  z.strictObject({ type: z.literal("adamw"), ...AdamSchema }),
  z.strictObject({ type: z.literal("adam"), ...AdamSchema }),
  z.strictObject({
    type: z.literal("sgd"),
    lr: z.number().min(0),
    weightDecay: z.number().min(0).optional(),
    /** Default 0. */
    momentum: z.number().min(0).max(1).optional(),
    /** Nesterov momentum (needs `momentum` > 0). Default false. */
    nesterov: z.boolean().optional(),
  }),
]);

/** The optimizer config (input form). */
export type OptimizerConfig = z.input<typeof OptimizerSchema>;

const warmupSteps = z.number().int().min(0).optional();

/**
 * The learning-rate schedule, by `type`: `"constant"`, `"linear"` or `"cosine"`, each after an optional linear
 * warmup of `warmupSteps` (the factor at step s < warmupSteps is s / warmupSteps, as in Hugging Face's
 * schedules); linear and cosine decay to `minLrRatio × lr` at `totalSteps`.
 */
export const ScheduleSchema = z.discriminatedUnion("type", [
  z.strictObject({ type: z.literal("constant"), warmupSteps }),
  ...(["linear", "cosine"] as const).map((type) =>
    z
      .strictObject({
        type: z.literal(type),
        warmupSteps,
        totalSteps: z.number().int().min(1),
        /** The floor of the decay, as a fraction of `lr`. Default 0. */
        minLrRatio: z.number().min(0).max(1).optional(),
      })
      .refine((s) => (s.warmupSteps ?? 0) < s.totalSteps, { message: "warmupSteps must be less than totalSteps", path: ["warmupSteps"] }),
  ),
]);

/** The schedule config (input form). */
export type ScheduleConfig = z.input<typeof ScheduleSchema>;

/** LoRA adapters through peft in the worker (`LORA_UNAVAILABLE` there without peft). */
export const LoraSchema = z.strictObject({
  /** Rank of the adapters. */
  r: z.number().int().min(1),
  /** Scaling numerator; default `2 × r`. */
  alpha: z.number().min(0).optional(),
  /** Dropout on the adapters' input. Default 0. */
  dropout: z.number().min(0).max(1).optional(),
  /** Module names to adapt (`"q_proj"`, ...); default: peft's choice for the architecture. */
  targetModules: z.array(z.string().min(1)).min(1).optional(),
});

/** The LoRA config (input form). */
export type LoraConfig = z.input<typeof LoraSchema>;

const LossSchema = z.custom<LossConfigLike>(
  (value) => typeof value === "object" && value !== null && typeof (value as { toWire?: unknown }).toWire === "function",
  { message: "expected a loss object with toWire() (GRPOLoss, DAPOLoss, CISPOLoss, GSPOLoss, SAPOLoss, SFTLoss)" },
);

/** Options of `Trainer.create`. */
export const TrainerOptionsSchema = z.strictObject({
  /** The model to train, already loaded in the worker (`worker.loadModel`). */
  model: z.string().min(1),
  /** The loss: `new GRPOLoss({...})`, `new SFTLoss()`, ... (anything with `toWire()`). */
  loss: LossSchema,
  /** Default `{ type: "adamw", lr: 1e-5 }`. */
  optimizer: OptimizerSchema.default({ type: "adamw", lr: 1e-5 }),
  /** Default `{ type: "constant" }`. */
  schedule: ScheduleSchema.default({ type: "constant" }),
  /** Clip the global gradient norm to this value; `null` = no clipping (the norm is still reported). Default 1. */
  gradClip: z.number().gt(0).nullable().default(1),
  /**
   * Largest padded micro-batch, in tokens (rows × longest row); the step accumulates gradients over
   * micro-batches and equals the full-batch step. `null` (default) = the whole batch at once.
   */
  microBatchTokens: z.number().int().min(1).nullable().default(null),
  /**
   * The frozen reference model for a KL term: in the trainer's worker it scores there; in another worker the
   * trainer asks it for `("ref_log_probs","full")` before each step. Default none.
   */
  reference: z.instanceof(ReferenceModel).nullable().default(null),
  /** `"bfloat16"`: bf16 autocast around the forward on CUDA (nothing on CPU). Default `null`. */
  autocast: z.enum(["bfloat16"]).nullable().default(null),
  /** Train LoRA adapters instead of every weight. Default `null`. */
  lora: LoraSchema.nullable().default(null),
  /**
   * Recompute each layer's activations during the backward instead of keeping them (Hugging Face gradient
   * checkpointing, non-reentrant): less memory for longer sequences, about one more forward of compute. Default false.
   */
  gradientCheckpointing: z.boolean().default(false),
  /** Replace a trainer already bound to `model` in that worker (default false: `TRAINER_EXISTS`). */
  replace: z.boolean().default(false),
  /**
   * Per-call watchdog of every call the trainer makes, in ms (`RequestOptions.watchdogMs`): a step, save or load
   * still unanswered after this long means the worker's compute thread is hung, so the connection fails with
   * `WorkerHungError` and the worker is killed (a supervisor restarts it). Set it well above the slowest step,
   * checkpoint save and load. `0` turns it off; left out, the connection's `watchdogMs` applies (default off).
   * A call's own `watchdogMs` wins over it.
   */
  callWatchdogMs: z.number().int().min(0).optional(),
});

/** Options of `Trainer.create` (input form: defaults may be left out). */
export type TrainerOptions = z.input<typeof TrainerOptionsSchema>;

/** Options of `Trainer.create` with the defaults filled in. */
export type ResolvedTrainerOptions = z.output<typeof TrainerOptionsSchema>;

/** Data-parallel strategies of a trainer group: `"ddp"` (DistributedDataParallel) or `"fsdp"` (FSDP2). */
export const PARALLEL_STRATEGIES = ["ddp", "fsdp"] as const;

/** One of {@link PARALLEL_STRATEGIES}. */
export type ParallelStrategy = (typeof PARALLEL_STRATEGIES)[number];

/**
 * How the ranks of a trainer group (`Trainer.createGroup`) train together: one torch.distributed process group of
 * their workers, the model wrapped with DDP (every rank holds all the weights) or sharded with FSDP2 (parameters,
 * gradients and optimizer state split over the ranks; rank 0 keeps a full CPU copy for weight sync and saving).
 */
export const ParallelOptionsSchema = z.strictObject({
  /** `"ddp"` or `"fsdp"`. */
  strategy: z.enum(PARALLEL_STRATEGIES),
  /** The torch.distributed backend; default `"nccl"` when the model is on a CUDA device, else `"gloo"`. */
  backend: z.enum(["gloo", "nccl"]).optional(),
  /** The group's TCP store, `tcp://host:port`, hosted by rank 0's worker; default a free loopback port. */
  initMethod: z.string().regex(/^tcp:\/\/.+:\d+$/, "expected tcp://host:port").optional(),
  /** Timeout of the group's setup and of every collective, in ms. Default 120 000. */
  timeoutMs: z.number().int().min(1).default(120_000),
});

/** Options of a trainer group (input form). */
export type ParallelOptions = z.input<typeof ParallelOptionsSchema>;

/** A trainer group's `parallel` options as it runs: the defaults filled in, the backend and the store chosen. */
export type ResolvedParallelOptions = Required<z.output<typeof ParallelOptionsSchema>>;

/**
 * Options of `Trainer.createGroup`: those of `Trainer.create`, `parallel`, and `reference` either in a worker outside
 * the group (it scores the whole batch before it is split) or one per rank, each in that rank's worker
 * (`ReferenceModel.copyOf` on every rank), scored there.
 */
export const TrainerGroupOptionsSchema = TrainerOptionsSchema.extend({
  /** How the ranks train together. */
  parallel: ParallelOptionsSchema,
  /** A reference model outside the group, or one per rank in rank order (each in its rank's worker). Default none. */
  reference: z.union([z.instanceof(ReferenceModel), z.array(z.instanceof(ReferenceModel)).min(1).readonly()]).nullable().default(null),
});

/** Options of `Trainer.createGroup` (input form: defaults may be left out). */
export type TrainerGroupOptions = z.input<typeof TrainerGroupOptionsSchema>;
