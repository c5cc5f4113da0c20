/**
 * The arguments and results of the control-agent worker methods (`control_create`, `control_act`, `control_update`,
 * `control_save`, `control_load`, `control_close`): an MLP actor and critic with Adam, TorchRL's `ClipPPOLoss` and
 * `GAE` options, held by a worker under a name. The worker checks the same fields strictly (python_worker/
 * posttrain_worker/methods/control.py) and has no defaults: every field is required here too, and the TS configs
 * (`ClipPPOLoss`, `GAE`, `PPOTrainer`) fill TorchRL's. See docs/classic-rl.md.
 */
import { z } from "zod";

const Name = z.string().min(1);
const Count = z.number().int().min(1);

/** The activations an MLP may use between its layers. */
export const CONTROL_ACTIVATIONS = ["tanh", "relu", "elu"] as const;

/**
 * An MLP's layout, as TorchRL's `MLP(num_cells, activation_class)`: the hidden widths (may be empty: one linear layer)
 * and the activation after each hidden layer.
 *
 * ```ts
 * ControlMLPSchema.parse({ hidden: [64, 64], activation: "tanh" });
 * ```
 */
export const ControlMLPSchema = z.strictObject({
  /** Hidden layer widths, each >= 1. */
  hidden: z.array(Count),
  /** `"tanh"`, `"relu"` or `"elu"`. */
  activation: z.enum(CONTROL_ACTIVATIONS),
});

/** An MLP's layout: {@link ControlMLPSchema}. */
export type ControlMLP = z.infer<typeof ControlMLPSchema>;

/**
 * The action a control agent's policy emits: `categorical` (int64 indices `[N]` in `[0, n)`, TorchRL's `Categorical`)
 * or `tanh_normal` (float32 `[N, size]` in `[low, high]`, TorchRL's `TanhNormal` over `NormalParamExtractor`).
 *
 * ```ts
 * ControlActionSchema.parse({ type: "tanh_normal", size: 1, low: -2, high: 2 });
 * ```
 */
export const ControlActionSchema = z
  .discriminatedUnion("type", [
    z.strictObject({ type: z.literal("categorical"), n: z.number().int().min(2) }),
    z.strictObject({ type: z.literal("tanh_normal"), size: Count, low: z.number(), high: z.number() }),
  ])
  .refine((action) => action.type !== "tanh_normal" || action.high > action.low, { message: "high must be > low", path: ["high"] });

/** A control agent's action: {@link ControlActionSchema}. */
export type ControlAction = z.infer<typeof ControlActionSchema>;

/**
 * The agent's optimizer: Adam over actor and critic together (torch's `Adam`).
 *
 * ```ts
 * ControlOptimizerSchema.parse({ type: "adam", lr: 3e-4, eps: 1e-8, weightDecay: 0 });
 * ```
 */
export const ControlOptimizerSchema = z.strictObject({
  type: z.literal("adam"),
  /** Learning rate, > 0. */
  lr: z.number().gt(0),
  /** Adam's epsilon, > 0. */
  eps: z.number().gt(0),
  /** L2 penalty added to the gradient (torch `Adam`'s `weight_decay`), >= 0. */
  weightDecay: z.number().min(0),
});

/** The agent's optimizer: {@link ControlOptimizerSchema}. */
export type ControlOptimizer = z.infer<typeof ControlOptimizerSchema>;

/** The critic losses of `ClipPPOLoss` (TorchRL's `loss_critic_type`), e.g. `LOSS_CRITIC_TYPES.includes("l2")`. */
export const LOSS_CRITIC_TYPES = ["smooth_l1", "l2", "l1"] as const;

/**
 * The exploration types of a control agent's `control_act` (TorchRL's `ExplorationType`): `"random"` samples the action,
 * `"deterministic"` takes the distribution's mode, e.g. `actor.forward(td, { exploration: EXPLORATION_TYPES[1] })`.
 */
export const EXPLORATION_TYPES = ["random", "deterministic"] as const;

/** How an actor picks an action: `"random"` (sampled) or `"deterministic"` (the mode), e.g. `const e: ExplorationType = "random"`. */
export type ExplorationType = (typeof EXPLORATION_TYPES)[number];

/**
 * TorchRL's `ClipPPOLoss` options, camelCased, as the worker computes the loss (every field required on the wire: the
 * TS configs fill TorchRL's defaults, shown here).
 *
 * ```ts
 * ControlLossSchema.parse({ clipEpsilon: 0.2, entropyBonus: true, entropyCoeff: 0.01, criticCoeff: 1, lossCriticType: "smooth_l1", normalizeAdvantage: false, clipValue: null });
 * ```
 */
export const ControlLossSchema = z.strictObject({
  /** The ratio's clip range `[1 - ε, 1 + ε]`, ε in (0, 1) (0.2). */
  clipEpsilon: z.number().gt(0).lt(1),
  /** Add `-entropyCoeff · entropy` to the loss (true). */
  entropyBonus: z.boolean(),
  /** The entropy bonus' weight, >= 0 (0.01). */
  entropyCoeff: z.number().min(0),
  /** The critic loss' weight, >= 0; 0 drops the critic loss as TorchRL does (1.0). */
  criticCoeff: z.number().min(0),
  /** The critic's distance: `"smooth_l1"` (default), `"l2"` or `"l1"`. */
  lossCriticType: z.enum(LOSS_CRITIC_TYPES),
  /** Standardise the advantage over each mini-batch (false). */
  normalizeAdvantage: z.boolean(),
  /** Clip the value to `V_old ± clipValue` and keep the larger loss, or null for none (null). */
  clipValue: z.number().gt(0).nullable(),
});

/** `ClipPPOLoss` options on the wire: {@link ControlLossSchema}. */
export type ControlLoss = z.infer<typeof ControlLossSchema>;

/**
 * TorchRL's `GAE` options, camelCased (the worker computes the advantage in `control_update`).
 *
 * ```ts
 * ControlAdvantageSchema.parse({ gamma: 0.99, lmbda: 0.95, averageGae: false });
 * ```
 */
export const ControlAdvantageSchema = z.strictObject({
  /** Discount, in [0, 1] (0.99). */
  gamma: z.number().min(0).max(1),
  /** The GAE trace decay λ, in [0, 1] (0.95). */
  lmbda: z.number().min(0).max(1),
  /** Standardise the advantage over the whole batch (false). */
  averageGae: z.boolean(),
});

/** `GAE` options on the wire: {@link ControlAdvantageSchema}. */
export type ControlAdvantage = z.infer<typeof ControlAdvantageSchema>;

/**
 * The arguments of `control_create`: the agent's name and its whole resolved config.
 *
 * ```ts
 * await worker.invoke("control_create", ControlCreateArgsSchema.parse({ name: "ppo", observationSize: 4, action: { type: "categorical", n: 2 }, ...rest }));
 * ```
 */
export const ControlCreateArgsSchema = z.strictObject({
  /** The agent's name in its worker. */
  name: Name,
  /** The observation's width (`observation` is float32 `[N, observationSize]`). */
  observationSize: Count,
  action: ControlActionSchema,
  /** The policy network: observation → logits, or → loc and scale. */
  actor: ControlMLPSchema,
  /** The value network: observation → one state value. */
  critic: ControlMLPSchema,
  optimizer: ControlOptimizerSchema,
  loss: ControlLossSchema,
  advantage: ControlAdvantageSchema,
  /** Clip the gradients' total norm to this before each step, or null for no clipping. */
  maxGradNorm: z.number().gt(0).nullable(),
  /** Seeds the weights' initialisation and the agent's own sampling generator. */
  seed: z.number().int().min(0).max(Number.MAX_SAFE_INTEGER),
  /** Replace an agent of the same name (else that is an `AGENT_EXISTS` error). */
  replace: z.boolean(),
});

/** The arguments of `control_create`: {@link ControlCreateArgsSchema}. */
export type ControlCreateArgs = z.infer<typeof ControlCreateArgsSchema>;

/**
 * What `control_create` answers: the name and the parameter counts.
 *
 * ```ts
 * const { actorParameters } = ControlCreateResultSchema.parse(reply.result);
 * ```
 */
export const ControlCreateResultSchema = z.object({
  name: z.string(),
  actorParameters: z.number().int().nonnegative(),
  criticParameters: z.number().int().nonnegative(),
});

/**
 * The arguments of `control_act` (its payload: a TensorDict with `observation` float32 `[N, observationSize]`; its
 * reply's: `action` — int64 `[N]` for a `categorical` agent, float32 `[N, size]` in `[low, high]` for a `tanh_normal`
 * one — and `action_log_prob` float32 `[N]`).
 *
 * ```ts
 * ControlActArgsSchema.parse({ name: "ppo", exploration: "deterministic" });
 * ```
 */
export const ControlActArgsSchema = z.strictObject({
  name: Name,
  /** `"random"`: sampled from the agent's generator; `"deterministic"`: argmax, or `low..high`-scaled `tanh(loc)`. */
  exploration: z.enum(EXPLORATION_TYPES).default("random"),
});

/**
 * The arguments of `control_update` (its payload: the collected batch, `numEnvs × T` rows env-major, with
 * `observation`, `action`, `action_log_prob` and `("next", "observation" | "reward" | "done" | "terminated")`).
 *
 * ```ts
 * ControlUpdateArgsSchema.parse({ name: "ppo", numEnvs: 8, epochs: 4, miniBatchSize: 256 });
 * ```
 */
export const ControlUpdateArgsSchema = z.strictObject({
  name: Name,
  /** The envs the batch was collected from: rows are `numEnvs × T`, row `env * T + t`. */
  numEnvs: Count,
  /** Passes over the batch. */
  epochs: Count,
  /** Rows per optimizer step (the last, partial mini-batch of each pass is kept). */
  miniBatchSize: Count,
});

/**
 * The metrics of one `control_update`: means over its optimizer steps of TorchRL's `ClipPPOLoss` outputs
 * (`loss_objective`, `loss_critic`, `loss_entropy`, `entropy`, `clip_fraction`, `kl_approx`, `explained_variance`,
 * `value_clip_fraction`) and of `grad_norm` (before clipping); the batch's `advantage_mean` (before
 * any standardisation) and `value_target_mean`. A loss term that is switched off reads 0.
 *
 * ```ts
 * const { loss_objective, kl_approx } = ControlUpdateMetricsSchema.parse(result.metrics);
 * ```
 */
export const ControlUpdateMetricsSchema = z.object({
  loss_objective: z.number(),
  loss_critic: z.number(),
  loss_entropy: z.number(),
  entropy: z.number(),
  clip_fraction: z.number(),
  kl_approx: z.number(),
  grad_norm: z.number(),
  advantage_mean: z.number(),
  value_target_mean: z.number(),
  explained_variance: z.number(),
  /** 0 without `clipValue`. */
  value_clip_fraction: z.number(),
});

/** The metrics of one `control_update`: {@link ControlUpdateMetricsSchema}. */
export type ControlUpdateMetrics = z.infer<typeof ControlUpdateMetricsSchema>;

/**
 * What `control_update` answers: its metrics and the optimizer steps taken so far (a NaN or infinite loss or gradient
 * is an error instead: `NON_FINITE_LOSS`, `NON_FINITE_GRADIENT`).
 *
 * ```ts
 * const { metrics, updates } = ControlUpdateResultSchema.parse(reply.result);
 * ```
 */
export const ControlUpdateResultSchema = z.object({
  metrics: ControlUpdateMetricsSchema,
  updates: z.number().int().nonnegative(),
});

/**
 * The arguments of `control_save` and `control_load`: the agent's name and a checkpoint directory.
 *
 * ```ts
 * ControlCheckpointArgsSchema.parse({ name: "ppo", dir: "runs/ppo/checkpoints/step-10" });
 * ```
 */
export const ControlCheckpointArgsSchema = z.strictObject({ name: Name, dir: Name });

/**
 * What `control_save` answers: the checkpoint's absolute directory and its size.
 *
 * ```ts
 * const { dir, bytes } = ControlSaveResultSchema.parse(reply.result);
 * ```
 */
export const ControlSaveResultSchema = z.object({ dir: z.string(), bytes: z.number().int().nonnegative() });

/**
 * What `control_load` answers: the agent's name and its optimizer steps (restored into the agent of that name when the
 * worker holds one of the same config, else created from the saved config).
 *
 * ```ts
 * const { updates } = ControlLoadResultSchema.parse(reply.result);
 * ```
 */
export const ControlLoadResultSchema = z.object({ name: z.string(), updates: z.number().int().nonnegative() });
