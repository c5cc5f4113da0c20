/**
 * Task environments and their rewards, with TorchRL's semantics: GSM8K, MATH, Countdown and IFEval; and the built-in
 * tasks for the tiny model, digit sorting and arithmetic with a calculator tool (multi-turn). The parsers
 * and reward functions are pure and usable on their own; see docs/envs.md ("Task environments").
 */
export { evaluateArithmetic, MAX_EXPRESSION_LENGTH, rationalToNumber, type ArithmeticErrorReason, type ArithmeticResult, type Rational } from "./arithmetic.js";
export {
  ARITHMETIC_TOOL_NAME,
  ARITHMETIC_TOOL_SYSTEM_PROMPT,
  ArithmeticToolEnv,
  ArithmeticToolEnvOptionsSchema,
  ArithmeticToolGenerator,
  arithmeticToolAnswer,
  ArithmeticToolOptionsSchema,
  ArithmeticToolPrimer,
  arithmeticToolReward,
  runCalculator,
  parseCalculatorCalls,
  type ArithmeticToolEnvOptions,
  type ArithmeticToolOperation,
  type ArithmeticToolOptions,
  type ArithmeticToolProblem,
  type ArithmeticToolRewardLevels,
} from "./arithmetic-tool.js";
export {
  countdownScore,
  CountdownGenerator,
  CountdownGeneratorOptionsSchema,
  formatCountdownAnswer,
  parseCountdownAnswer,
  validateCountdownExpression,
  type CountdownGeneratorOptions,
  type CountdownProblem,
  type CountdownRejection,
  type CountdownScoreOptions,
  type CountdownValidation,
} from "./countdown.js";
export { CountdownEnv, CountdownEnvOptionsSchema, COUNTDOWN_SYSTEM_PROMPT, type CountdownEnvOptions } from "./countdown-env.js";
export { CountdownPrimer, CountdownPrimerOptionsSchema, type CountdownPrimerOptions } from "./countdown-primer.js";
export { MathVerifyUnavailableError } from "./errors.js";
export { DIGIT_SORT_REWARDS, DigitSortEnv, DigitSortEnvOptionsSchema, DigitSortExamplesOptionsSchema, DigitSortGenerator, DigitSortOptionsSchema, DigitSortPrimer, digitSortExamples, digitSortProblem, digitSortReward, digitSortSplitOf, digitSortSplitSize, type DigitSortEnvOptions, type DigitSortOptions, type DigitSortProblem, type DigitSortSplit } from "./digit-sort.js";
export { GSM8K_SYSTEM_PROMPT, GSM8KEnv, GSM8KEnvOptionsSchema, type GSM8KEnvOptions } from "./gsm8k-env.js";
export { IFEVAL_SCORE_KEYS, IFEVAL_SYSTEM_PROMPT, IFEvalEnv, IFEvalEnvOptionsSchema, type IFEvalEnvOptions, type IFEvalSkippedRow } from "./ifeval-env.js";
export { MATH_SYSTEM_PROMPT, MATHEnv, MATHEnvOptionsSchema, type MATHEnvOptions } from "./math-env.js";
export { extractGSM8KAnswer, gsm8kScore, normalizeGSM8KAnswer, type GSM8KScoreOptions } from "./gsm8k.js";
export {
  followsInstructions,
  ifevalAccuracy,
  ifevalReward,
  IFEvalRewardOptionsSchema,
  ifevalScore,
  looseVariants,
  parseIFEvalInstructions,
  unsupportedInstructionIds,
  type IFEvalAccuracy,
  type IFEvalInstruction,
  type IFEvalRewardOptions,
  type IFEvalScore,
} from "./ifeval.js";
export { CONSTRAINED_RESPONSE_OPTIONS, countWords, IFEVAL_CHECKERS, IFEVAL_INSTRUCTION_IDS, isIFEvalInstructionId, type IFEvalInstructionId } from "./ifeval-checkers.js";
export {
  extractBoxed,
  extractMathAnswer,
  mathAnswersEqual,
  mathScore,
  normalizeMathAnswer,
  STRING_MATH_VERIFIER,
  type MathAnswerVerifier,
  type MathScoreOptions,
} from "./math.js";
export { MathVerifierOptionsSchema, openMathVerifier, type MathVerifierOptions, type OpenMathVerifier } from "./math-verify.js";
export { SeededRandom } from "./random.js";
export { TieredRewardOptionsSchema, tieredScore, type ResolvedTieredRewardOptions, type TaskScore, type TieredRewardOptions } from "./score.js";
export {
  responsesOf,
  TaskRewardTransform,
  TIERED_EXTRA_KEYS,
  tieredResult,
  type TaskRewardResult,
  type TaskRewardTransformOptions,
  type TaskSample,
  type TaskScorer,
} from "./task-reward.js";
export { TaskSwitchesSchema, TieredLevelsSchema } from "./task-env-options.js";
export { DEFAULT_EOS_TOKENS, extractTags, findAllTagBlocks, stripEos, type TaggedResponse } from "./tags.js";
