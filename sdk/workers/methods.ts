/**
 * The worker methods, in one typed table: name → argument schema → result schema (and the payloads each takes and
 * answers). Every TS caller goes through it (`WorkerClient.invoke`), and test/ts/worker-methods.test.ts checks it
 * against the Python registry (`python -m posttrain_worker --describe-methods`): the same names and argument fields.
 * Arguments cross the wire in camelCase, as written here. The protocol itself (`handshake`, `shutdown`) belongs to
 * the bridge and is not listed. See docs/protocol.md, "Methods".
 */
import { z } from "zod";
import { JSONValueSchema } from "../core/json.js";
import {
  ControlActArgsSchema,
  ControlCheckpointArgsSchema,
  ControlCreateArgsSchema,
  ControlCreateResultSchema,
  ControlLoadResultSchema,
  ControlSaveResultSchema,
  ControlUpdateArgsSchema,
  ControlUpdateResultSchema,
} from "./control.js";
import { ChatTemplateOptionsSchema, GenerateOptionsSchema, ScoreOptionsSchema } from "./generation.js";
import { LoadModelOptionsSchema, ModelInfoSchema, ModelListSchema } from "./models.js";
import {
  CheckpointInfoSchema,
  CreatedSchema,
  LossResultSchema,
  RestoredSchema,
  TrainerStateSchema,
  TrainStepResultSchema,
} from "./trainer-results.js";
import { DistCloseReplySchema, WeightsDigestSchema, WeightsGetReplySchema, WeightsListenReplySchema, WeightSyncReplySchema } from "./weight-results.js";

/** What a method takes or answers besides its JSON: nothing, one TensorDict, raw tensors, or any payloads. */
export type PayloadShape = "none" | "tensordict" | "tensors" | "any";

/** One row of the table. */
export interface WorkerMethod<A extends z.ZodType = z.ZodType, R extends z.ZodType = z.ZodType> {
  /** The `args` object, as it crosses the wire (strict: the worker rejects unknown fields too). */
  readonly args: A;
  /** The reply's `result` object. */
  readonly result: R;
  /** The payloads the request carries. */
  readonly takes: PayloadShape;
  /** The payloads the reply carries. */
  readonly answers: PayloadShape;
}

function method<A extends z.ZodType, R extends z.ZodType>(args: A, result: R, takes: PayloadShape = "none", answers: PayloadShape = "none"): WorkerMethod<A, R> {
  return { args, result, takes, answers };
}

const Name = z.string().min(1);
const NoArgs = z.strictObject({});
const Empty = z.object({});
const OnModel = z.strictObject({ model: Name });
const TimeoutMs = z.number().int().min(1);
const BucketBytes = z.number().int().min(1);
/** A nested config the worker validates itself (a loss's `toWire()`, an optimizer, a schedule, LoRA). */
const Config = z.custom<object>((v) => typeof v === "object" && v !== null && !Array.isArray(v), { message: "expected an object" });

/** What `info` answers: the handshake's facts, refreshed (memory, loaded models). */
const InfoSchema = z.record(z.string(), z.unknown());

/** Every worker method a posttrain worker serves, by wire name. */
export const WORKER_METHODS = {
  info: method(NoArgs, InfoSchema),
  ping: method(NoArgs, Empty),
  echo: method(NoArgs, Empty, "any", "any"),

  load_model: method(LoadModelOptionsSchema, ModelInfoSchema),
  unload_model: method(z.strictObject({ name: Name }), Empty),
  list_models: method(NoArgs, ModelListSchema),

  generate: method(GenerateOptionsSchema.extend({ model: Name }), Empty, "tensordict", "tensordict"),
  score: method(ScoreOptionsSchema.extend({ model: Name }), Empty, "tensordict", "tensordict"),
  apply_chat_template: method(ChatTemplateOptionsSchema.extend({ model: Name }), Empty, "tensordict", "tensordict"),

  trainer_create: method(
    z.strictObject({
      model: Name,
      loss: Config,
      optimizer: Config,
      schedule: Config,
      gradClip: z.number().gt(0).nullable(),
      microBatchTokens: z.number().int().min(1).nullable(),
      refModel: Name.nullable(),
      autocast: z.enum(["bfloat16"]).nullable(),
      lora: Config.nullable(),
      replace: z.boolean(),
      /** Data-parallel training in this worker's process group (`dist_init` first); every rank calls it together. */
      parallel: z.strictObject({ strategy: z.enum(["ddp", "fsdp"]) }).nullable().default(null),
      gradientCheckpointing: z.boolean().default(false),
    }),
    CreatedSchema,
  ),
  train_step: method(OnModel, TrainStepResultSchema, "tensordict"),
  compute_loss: method(OnModel, LossResultSchema, "tensordict"),
  trainer_state: method(OnModel, TrainerStateSchema),
  trainer_close: method(OnModel, Empty),
  save_checkpoint: method(z.strictObject({ model: Name, dir: Name, dataPosition: JSONValueSchema }), CheckpointInfoSchema),
  load_checkpoint: method(z.strictObject({ model: Name, dir: Name }), RestoredSchema),

  clone_model: method(z.strictObject({ source: Name, name: Name, shareParameters: z.boolean().optional(), replace: z.boolean().optional() }), ModelInfoSchema),
  sync_weights: method(z.strictObject({ source: Name, target: Name }), WeightSyncReplySchema),
  weights_listen: method(z.strictObject({ model: Name, transport: z.enum(["ipc", "tcp"]), host: Name }), WeightsListenReplySchema),
  weights_receive: method(z.strictObject({ token: Name, timeoutMs: TimeoutMs }), WeightSyncReplySchema),
  weights_send: method(
    z.strictObject({ model: Name, endpoints: z.array(Name).min(1), bucketBytes: BucketBytes, timeoutMs: TimeoutMs, background: z.boolean().optional() }),
    WeightSyncReplySchema,
  ),
  dist_init: method(
    z.strictObject({ backend: z.enum(["gloo", "nccl"]), initMethod: Name, rank: z.number().int().min(0), worldSize: z.number().int().min(1), timeoutMs: TimeoutMs }),
    z.object({ rank: z.number().int(), worldSize: z.number().int(), backend: z.string() }),
  ),
  dist_close: method(NoArgs, DistCloseReplySchema),
  weights_broadcast: method(z.strictObject({ model: Name, src: z.number().int().min(0), bucketBytes: BucketBytes }), WeightSyncReplySchema),
  weights_get: method(OnModel, WeightsGetReplySchema, "none", "tensors"),
  weights_digest: method(OnModel, WeightsDigestSchema),
  /** A tcp port free now on the worker's node (for a torch.distributed store there), bound on `host` when given. */
  free_port: method(z.strictObject({ host: Name.optional() }), z.object({ port: z.number().int().min(1).max(65535) })),

  /** Control agents (MLP actor/critic, GAE, ClipPPOLoss; sdk/workers/control.ts, docs/classic-rl.md). */
  control_create: method(ControlCreateArgsSchema, ControlCreateResultSchema),
  control_act: method(ControlActArgsSchema, Empty, "tensordict", "tensordict"),
  control_update: method(ControlUpdateArgsSchema, ControlUpdateResultSchema, "tensordict"),
  control_save: method(ControlCheckpointArgsSchema, ControlSaveResultSchema),
  control_load: method(ControlCheckpointArgsSchema, ControlLoadResultSchema),
  control_close: method(z.strictObject({ name: Name }), Empty),
} as const satisfies Record<string, WorkerMethod>;

/** A worker method's wire name. */
export type WorkerMethodName = keyof typeof WORKER_METHODS;

/** The arguments of `method` as a caller writes them (defaults may be left out). */
export type MethodArgs<M extends WorkerMethodName> = z.input<(typeof WORKER_METHODS)[M]["args"]>;

/** The result of `method`, checked. */
export type MethodResult<M extends WorkerMethodName> = z.output<(typeof WORKER_METHODS)[M]["result"]>;
