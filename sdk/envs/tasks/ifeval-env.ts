/**
 * `IFEvalEnv`: instruction following (TorchRL's `IFEvalEnv` + `IfEvalScorer`), a `DatasetChatEnv` over an
 * IFEval-format file (`prompt`, `instruction_id_list`, `kwargs`) scored by the implemented IFEval checkers.
 */
import { z } from "zod";
import { parseOptions } from "../../core/index.js";
import { keepRows, type DatasetColumns } from "../data/fields.js";
import type { DatasetFile } from "../data/read.js";
import { DatasetChatEnv } from "../dataset-chat-env.js";
import { DatasetFormatError } from "../errors.js";
import { ifevalScore, IFEvalRewardOptionsSchema, parseIFEvalInstructions, unsupportedInstructionIds, type IFEvalInstruction } from "./ifeval.js";
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
  {
    ...IFEvalRewardOptionsSchema.omit({ eosTokens: true }).shape,
    /**
     * A row naming an instruction that has no checker here (`language:response_language`, ...): `"skip"` (default)
     * drops it at load, warns once with the count and each row's key and ids, and lists it in `skippedRows`;
     * `"error"` fails the load (DATASET_FIELD naming the row).
     */
    unsupportedInstructions: z.enum(["skip", "error"]).default("skip"),
  },
);

/** A dataset row {@link IFEvalEnv} skipped because it names instructions that have no checker here. */
export interface IFEvalSkippedRow {
  /** The dataset (file path, or the Hub id with config and split). */
  readonly file: string;
  /** The 0-based row in it. */
  readonly row: number;
  /** The row's `key` column (IFEval's prompt id), when it has one. */
  readonly key: unknown;
  /** The instruction ids that have no checker. */
  readonly instructionIds: readonly string[];
}

/** Skipped rows named in the warning (the rest are counted). */
const WARN_ROWS = 10;

/** The rows of `columns` whose instructions all have checkers; the others are pushed to `skipped` and warned of. */
function dropUnsupported(columns: DatasetColumns, files: readonly DatasetFile[], skipped: IFEvalSkippedRow[]): DatasetColumns {
  const ids = columns.values.get("instruction_id_list") ?? [];
  const rowsOf = new Map(files.map((f) => [f.file, f.rows]));
  const keep: number[] = [];
  skipped.length = 0;
  for (let i = 0; i < columns.size; i++) {
    let unsupported: string[];
    try {
      unsupported = unsupportedInstructionIds(parseJson(ids[i]));
    } catch {
      unsupported = []; // not JSON: the load's validation names the row
    }
    if (unsupported.length === 0) {
      keep.push(i);
      continue;
    }
    const { file, row } = columns.sources[i]!;
    skipped.push({ file, row, key: rowsOf.get(file)?.[row]?.key, instructionIds: unsupported });
  }
  if (skipped.length === 0) return columns;
  const named = skipped
    .slice(0, WARN_ROWS)
    .map((s) => `${s.key === undefined ? `row ${s.row}` : `key ${JSON.stringify(s.key)}`} (${s.instructionIds.join(", ")})`);
  const more = skipped.length > WARN_ROWS ? ` and ${skipped.length - WARN_ROWS} more` : "";
  const where = [...new Set(skipped.map((s) => JSON.stringify(s.file)))].join(", ");
  if (keep.length === 0) {
    throw new DatasetFormatError(skipped[0]!.file, `every row names an instruction that has no checker here: ${named.join("; ")}${more}`);
  }
  process.emitWarning(
    `IFEvalEnv: skipped ${skipped.length} of ${columns.size} rows of ${where} whose instructions have no checker here ` +
      `(IFEvalEnv.skippedRows lists them): ${named.join("; ")}${more}`,
    "PosttrainDatasetWarning",
  );
  return keepRows(columns, keep);
}

/** Options of {@link IFEvalEnv}: `DatasetChatEnv`'s (`dataset.files` required) and the reward's. */
export type IFEvalEnvOptions = z.input<typeof IFEvalEnvOptionsSchema>;

/**
 * IFEval as a chat environment. Step checks the first `<answer>` block of the policy's last message (or the whole
 * message with `scoreWholeResponse`) against the row's instructions, strictly and loosely, and writes
 * `("next", "reward")` (TorchRL's aggregate, see `ifevalReward`) and `("next", "ifeval_score", …)`:
 * `prompt_level_strict_acc` / `prompt_level_loose_acc` (bool, all instructions followed) and
 * `inst_level_strict_acc` / `inst_level_loose_acc` (float32, the fraction followed), all `[...batch, 1]`. Rows
 * with an `<answer>` block end. Every row's instructions are validated when the dataset is loaded; rows naming an
 * instruction that has no checker here are skipped and reported (see `unsupportedInstructions`, `skippedRows`).
 */
export class IFEvalEnv extends DatasetChatEnv {
  constructor(options: IFEvalEnvOptions) {
    const o = parseOptions(IFEvalEnvOptionsSchema, options, "IFEvalEnv options");
    const { maxSteps, setDoneIfAnswer, eosTokens, formatWeights, answerBonus, thinkBonus, scoreWholeResponse, unsupportedInstructions, ...chat } = o;
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
    const skipped: IFEvalSkippedRow[] = [];
    const prepare = unsupportedInstructions === "skip" ? (columns: DatasetColumns, files: readonly DatasetFile[]) => dropUnsupported(columns, files, skipped) : undefined;
    super(chat, [...stepCounterFor(maxSteps), reward], prepare);
    this.#skipped = skipped;
  }

  readonly #skipped: readonly IFEvalSkippedRow[];

  /**
   * The rows the last load skipped (with `unsupportedInstructions: "skip"`): each names the dataset, row, the
   * row's `key` and the instruction ids that have no checker. Empty before the load.
   */
  get skippedRows(): readonly IFEvalSkippedRow[] {
    return [...this.#skipped];
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
