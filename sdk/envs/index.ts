/**
 * Environments (TorchRL's `EnvBase`, `TransformedEnv`, `ChatEnv`, `DatasetChatEnv`), their transforms, dataset
 * loading and rewards. See docs/envs.md.
 *
 * @module posttrain/envs
 */
export * from "./keys.js";
export {
  DatasetExhaustedError,
  DatasetFieldError,
  DatasetFormatError,
  DatasetNotCachedError,
  DatasetNotFoundError,
  DatasetsNotInstalledError,
  EnvStateError,
  RewardError,
  SpecMismatchError,
  SubEnvError,
} from "./errors.js";
export {
  callPolicy,
  EnvBase,
  EnvBaseOptionsSchema,
  RolloutOptionsSchema,
  throwIfAborted,
  type EnvBaseOptions,
  type EnvCallOptions,
  type MaybePromise,
  type Policy,
  type RolloutOptions,
} from "./env-base.js";
export { appendTransform, Compose, Transform, TransformedEnv } from "./transform.js";
export { clearDone, completeDoneKeys, flagColumn, markDone, mergeRows, readColumn, readFlags, rewardColumn, selectRows } from "./rows.js";
export { StepCounter, StepCounterOptionsSchema, type StepCounterOptions } from "./transforms/step-counter.js";
export { Bounded, Categorical, Composite, doneSpecOf, TensorSpec, Unbounded, type EnvSpecs, type RandomSource, type Spec } from "./specs.js";
export { ClassicControlEnv, type ControlTransition } from "./control/classic-control-env.js";
export { CartPoleEnv, CartPoleOptionsSchema, type CartPoleOptions } from "./control/cart-pole.js";
export { PendulumEnv, PendulumOptionsSchema, type PendulumOptions } from "./control/pendulum.js";
export { BatchedEnvBase, type SpecifiedEnv } from "./batched-env.js";
export { SerialEnv } from "./serial-env.js";
export { ParallelEnv, ParallelEnvOptionsSchema, type ParallelEnvOptions } from "./parallel-env.js";
export { BUILT_IN_ENV_IDS, EnvFactorySchema, type BuiltInEnvId, type EnvFactory } from "./env-factory.js";
export * from "./tools/index.js";
export * from "./tasks/index.js";
export { ChatEnv, ChatEnvOptionsSchema, WorkerTokenizerSchema, type ChatEnvOptions, type WorkerTokenizer } from "./chat-env.js";
export { DatasetChatEnv, DatasetChatEnvOptionsSchema, type DatasetChatEnvOptions } from "./dataset-chat-env.js";
export {
  DataLoadingPrimer,
  DataLoadingPrimerOptionsSchema,
  DataPositionSchema,
  type DataLoadingPrimerOptions,
  type DataPosition,
  type PrepareColumns,
} from "./data/primer.js";
export {
  GeneratorPrimer,
  GeneratorPrimerOptionsSchema,
  PrimerBase,
  type PrimedProblem,
  type ProblemGenerator,
} from "./data/primer-base.js";
export { FieldSpecSchema, FieldsSchema, type DatasetColumns, type FieldKind, type FieldSpec, type Fields } from "./data/fields.js";
export { DATASET_EXTENSIONS, readDatasetFile, type DatasetFile } from "./data/read.js";
export { readHubDataset, type HubDatasetSource } from "./data/hub.js";
export type { DatasetRow } from "./data/plain.js";
export { seededPermutation } from "./data/shuffle.js";
export {
  RewardSpecSchema,
  RewardTransform,
  RewardTransformOptionsSchema,
  type FieldValue,
  type RewardFn,
  type RewardSample,
  type RewardSpec,
  type RewardTransformOptions,
} from "./rewards.js";
export { PolicyVersion, PolicyVersionOptionsSchema, type PolicyVersionOptions, type VersionChange } from "./transforms/policy-version.js";
export {
  AddThinkingPrompt,
  AddThinkingPromptOptionsSchema,
  replaceLastAnswer,
  THINKING_PROMPTS_OTHER,
  THINKING_PROMPTS_SELF,
  type AddThinkingPromptOptions,
  type ThinkingCondition,
} from "./transforms/thinking.js";
export { maskLogProbs, RetrieveLogProb, RetrieveLogProbOptionsSchema, type RetrieveLogProbOptions } from "./transforms/log-probs.js";
export {
  KLComputation,
  KLComputationOptionsSchema,
  KLRewardTransform,
  KLRewardTransformOptionsSchema,
  RetrieveKL,
  RetrieveKLOptionsSchema,
  sequenceKl,
  type KLComputationOptions,
  type KLRewardTransformOptions,
  type RetrieveKLOptions,
} from "./transforms/kl.js";
export * from "./deprecated.js";
