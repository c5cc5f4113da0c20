/**
 * `IFEvalEnv`: instruction following (TorchRL's `IFEvalEnv` + `IfEvalScorer`), a `DatasetChatEnv` over an
 * IFEval-format file (`prompt`, `instruction_id_list`, `kwargs`) scored by the implemented IFEval checkers.
 */
import type { z } from "zod";
import { parseOptions } from "../../core/index.js";
import type { DatasetColumns } from "../data/fields.js";
import { DatasetChatEnv } from "../dataset-chat-env.js";
import { ifevalScore, IFEvalRewardOptionsSchema, parseIFEvalInstructions, type IFEvalInstruction } from "./ifeval.js";
import { TaskRewardTransform } from "./task-reward.js";
import { checkRows, columnOf, stepCounterFor, taskEnvOptionsSchema } from "./task-env-options.js";

/** The default system prompt of {@link IFEvalEnv}. */
export const IFEVAL_SYSTEM_PROMPT =
  "Follow every instruction in the user's request exactly. First plan your response inside <think></think> tags, " +
  "then write the complete response inside <answer></answer> tags. Only the text inside <answer></answer> is graded, " +
  "so it must contain everything that was asked for and nothing else.";

/** The accuracies written under `("next", "ifeval_score")`. */
export const IFEVAL_SCORE_KEYS: readonly string[] = ["prompt_level_strict_acc", "inst_level_strict_acc", "prompt_level_loose_acc", "inst_level_loose_acc"];

/** Options of {@link IFEvalEnv}. */
export const IFEvalEnvOptionsSchema = taskEnvOptionsSchema(
  IFEVAL_SYSTEM_PROMPT,
  {
    query: "prompt",
    instruction_id_list: { column: "instruction_id_list", kind: "json" },
    kwargs: { column: "kwargs", kind: "json", optional: true },
  },
  IFEvalRewardOptionsSchema.omit({ eosTokens: true }).shape,
);

/** Options of {@link IFEvalEnv}: `DatasetChatEnv`'s (`dataset.files` required) and the reward's. */
export type IFEvalEnvOptions = z.input<typeof IFEvalEnvOptionsSchema>;

/**
 * IFEval as a chat environment. Step checks the first `<answer>` block of the policy's last message (or the whole
 * message with `scoreWholeResponse`) against the row's instructions, strictly and loosely, and writes
 * `("next", "reward")` (TorchRL's aggregate, see `ifevalReward`) and `("next", "ifeval_score", …)`:
 * `prompt_level_strict_acc` / `prompt_level_loose_acc` (bool, all instructions followed) and
 * `inst_level_strict_acc` / `inst_level_loose_acc` (float32, the fraction followed), all `[...batch, 1]`. Rows
 * with an `<answer>` block end. Every row's instructions are validated when the dataset is loaded.
 */
export class IFEvalEnv extends DatasetChatEnv {
  constructor(options: IFEvalEnvOptions) {
    const o = parseOptions(IFEvalEnvOptionsSchema, options, "IFEvalEnv options");
    const { maxSteps, setDoneIfAnswer, eosTokens, formatWeights, answerBonus, thinkBonus, scoreWholeResponse, ...chat } = o;
    const cache = new Map<string, IFEvalInstruction[]>();
    const instructionsOf = (ids: string, kwargs: string): IFEvalInstruction[] => {
      const cacheKey = `${ids}\u0000${kwargs}`;
      let parsed = cache.get(cacheKey);
      if (parsed === undefined) {
        parsed = parseIFEvalInstructions(parseJson(ids), parseJson(kwargs));
        cache.set(cacheKey, parsed);
      }
      return parsed;
    };
    const reward = new TaskRewardTransform({
      name: "ifeval",
      fieldKeys: ["instruction_id_list", "kwargs"],
      extraKeys: IFEVAL_SCORE_KEYS,
      group: "ifeval_score",
      setDoneIfAnswer,
      score: ({ response, fields }) => {
        const instructions = instructionsOf(fields.instruction_id_list!, fields.kwargs!);
        const s = ifevalScore(response, instructions, { formatWeights, answerBonus, thinkBonus, scoreWholeResponse, ...(eosTokens ? { eosTokens } : {}) });
        const mean = (xs: readonly boolean[]): number => xs.filter(Boolean).length / xs.length;
        return {
          reward: s.reward,
          hasAnswer: s.hasAnswer,
          extras: {
            prompt_level_strict_acc: s.promptLevelStrictAcc,
            inst_level_strict_acc: mean(s.instLevelStrictAcc),
            prompt_level_loose_acc: s.promptLevelLooseAcc,
            inst_level_loose_acc: mean(s.instLevelLooseAcc),
          },
        };
      },
    });
    super(chat, [...stepCounterFor(maxSteps), reward]);
  }

  /**
   * Reads the dataset and validates every row's `instruction_id_list` and `kwargs` (DATASET_FIELD naming the file,
   * row and column for an unsupported instruction or a bad argument).
   */
  override async load(): Promise<DatasetColumns> {
    const columns = await super.load();
    const fields = this.primer.config.fields;
    const ids = columns.values.get("instruction_id_list") ?? [];
    const kwargs = columns.values.get("kwargs");
    const column = (err: unknown): string =>
      columnOf(fields, err instanceof Error && err.message.includes("kwargs") ? "kwargs" : "instruction_id_list");
    checkRows(columns, column, (i) => void parseIFEvalInstructions(parseJson(ids[i]), kwargs === undefined ? undefined : parseJson(kwargs[i]), "instructions"));
    return columns;
  }
}

/** A `"json"` dataset field back to its value. */
function parseJson(text: unknown): unknown {
  return JSON.parse(String(text)) as unknown;
}
