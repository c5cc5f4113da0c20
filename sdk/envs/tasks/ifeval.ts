/**
 * IFEval scoring (TorchRL's `IfEvalScorer`): each instruction of a prompt is checked on the response strictly (the
 * text as it is) and loosely (IFEval's eight variants: the text, without its first line, without its last line,
 * without both, and each of these with every `*` removed — an instruction passes loosely if any variant passes).
 * An empty response follows nothing. The reward is TorchRL's default aggregate (see {@link ifevalReward}).
 */
import { z } from "zod";
import { InvalidArgumentError } from "../../core/errors.js";
import { parseOptions } from "../../core/index.js";
import { IFEVAL_CHECKERS, IFEVAL_INSTRUCTION_IDS, isIFEvalInstructionId, type IFEvalInstructionId } from "./ifeval-checkers.js";
import { findAllTagBlocks, stripEos } from "./tags.js";

/** One instruction of a prompt, with its validated keyword arguments. */
export interface IFEvalInstruction {
  /** The IFEval instruction id. */
  readonly id: IFEvalInstructionId;
  /** Its keyword arguments (IFEval's names), validated. */
  readonly args: Readonly<Record<string, unknown>>;
}

/**
 * Validates a dataset row's `instruction_id_list` and `kwargs` (one object per instruction; `null` values, which
 * IFEval's data uses for unused arguments, are dropped; a missing `kwargs` means none). Throws
 * {@link InvalidArgumentError} naming the field, e.g. `IFEval row: kwargs[1].num_words: …` or
 * `IFEval row: instruction_id_list[0]: unknown or unsupported instruction "language:response_language"`.
 */
export function parseIFEvalInstructions(instructionIdList: unknown, kwargs: unknown, where = "IFEval row"): IFEvalInstruction[] {
  if (!Array.isArray(instructionIdList) || instructionIdList.length === 0) {
    throw new InvalidArgumentError(`${where}: instruction_id_list: expected a non-empty array of instruction ids`);
  }
  if (kwargs !== undefined && kwargs !== null && (!Array.isArray(kwargs) || kwargs.length !== instructionIdList.length)) {
    throw new InvalidArgumentError(`${where}: kwargs: expected an array of ${instructionIdList.length} objects (one per instruction)`);
  }
  const kwargsList: readonly unknown[] = Array.isArray(kwargs) ? kwargs : [];
  return instructionIdList.map((id: unknown, i) => {
    if (typeof id !== "string" || !isIFEvalInstructionId(id)) {
      throw new InvalidArgumentError(
        `${where}: instruction_id_list[${i}]: unknown or unsupported instruction ${JSON.stringify(id)} (supported: ${IFEVAL_INSTRUCTION_IDS.join(", ")})`,
      );
    }
    const raw = kwargsList[i] ?? {};
    if (typeof raw !== "object" || raw === null || Array.isArray(raw)) throw new InvalidArgumentError(`${where}: kwargs[${i}]: expected an object`);
    const present = Object.fromEntries(Object.entries(raw).filter(([, v]) => v !== null && v !== undefined));
    const schema: z.ZodType<Record<string, unknown>> = IFEVAL_CHECKERS[id].args;
    return { id, args: parseOptions(schema, present, `${where}: kwargs[${i}]`) };
  });
}

/** The entries of an `instruction_id_list` that are strings naming no implemented checker, in order. */
export function unsupportedInstructionIds(instructionIdList: unknown): string[] {
  if (!Array.isArray(instructionIdList)) return [];
  return instructionIdList.filter((id): id is string => typeof id === "string" && !isIFEvalInstructionId(id));
}

function checkOne(instruction: IFEvalInstruction, response: string): boolean {
  const checker = IFEVAL_CHECKERS[instruction.id] as { check(response: string, args: unknown): boolean };
  return response.trim() !== "" && checker.check(response, instruction.args);
}

/** IFEval's eight loose variants of a response (the response itself first). */
export function looseVariants(response: string): string[] {
  const lines = response.split("\n");
  const noFirst = lines.slice(1).join("\n").trim();
  const noLast = lines.slice(0, -1).join("\n").trim();
  const noBoth = lines.slice(1, -1).join("\n").trim();
  const base = [response, noFirst, noLast, noBoth];
  return [...base, ...base.map((v) => v.replaceAll("*", ""))];
}

/** Which instructions `response` follows: `"strict"` checks it as it is, `"loose"` passes if any variant passes. */
export function followsInstructions(response: string, instructions: readonly IFEvalInstruction[], mode: "strict" | "loose"): boolean[] {
  const variants = mode === "strict" ? [response] : looseVariants(response);
  return instructions.map((inst) => variants.some((v) => checkOne(inst, v)));
}

/** IFEval's four accuracies for one response (TorchRL's `IFEvalScoreData`). */
export interface IFEvalAccuracy {
  /** All instructions followed, strict. */
  readonly promptLevelStrictAcc: boolean;
  /** Each instruction followed, strict. */
  readonly instLevelStrictAcc: readonly boolean[];
  /** All instructions followed, loose. */
  readonly promptLevelLooseAcc: boolean;
  /** Each instruction followed, loose. */
  readonly instLevelLooseAcc: readonly boolean[];
}

/** Strict and loose accuracies of `response` on `instructions`. */
export function ifevalAccuracy(response: string, instructions: readonly IFEvalInstruction[]): IFEvalAccuracy {
  const strict = followsInstructions(response, instructions, "strict");
  const loose = followsInstructions(response, instructions, "loose");
  return {
    promptLevelStrictAcc: strict.every(Boolean),
    instLevelStrictAcc: strict,
    promptLevelLooseAcc: loose.every(Boolean),
    instLevelLooseAcc: loose,
  };
}

/** Options of {@link ifevalReward} and {@link ifevalScore} (TorchRL's `IfEvalScorer` defaults). */
export const IFEvalRewardOptionsSchema = z.strictObject({
  /**
   * Weights of [prompt-level strict, instruction-level strict (mean), prompt-level loose, instruction-level loose
   * (mean)]. Default [0.4, 0.3, 0.2, 0.1]. `[1, 0, 0, 0]` gives an all-pass reward, `[0, 1, 0, 0]` the fraction
   * of instructions followed.
   */
  formatWeights: z.tuple([z.number(), z.number(), z.number(), z.number()]).default([0.4, 0.3, 0.2, 0.1]),
  /** Added when the response has exactly one `<answer>` block. Default 0.1. */
  answerBonus: z.number().default(0.1),
  /** Added when the response has exactly one `<think>` block. Default 0.05. */
  thinkBonus: z.number().default(0.05),
  /** Score the whole response instead of its first `<answer>` block (TorchRL scores the block). Default false. */
  scoreWholeResponse: z.boolean().default(false),
  /** End-of-sequence markers stripped from the response first. Default `<|im_end|>`, `<|endoftext|>`. */
  eosTokens: z.array(z.string()).optional(),
});

/** Options of {@link ifevalReward} and {@link ifevalScore}. */
export type IFEvalRewardOptions = z.input<typeof IFEvalRewardOptionsSchema>;

const mean = (xs: readonly boolean[]): number => (xs.length === 0 ? 0 : xs.filter(Boolean).length / xs.length);

/**
 * TorchRL's default IFEval reward: `w · [promptStrict, mean(instStrict), promptLoose, mean(instLoose)]` plus
 * `answerBonus` for exactly one `<answer>` block and `thinkBonus` for exactly one `<think>` block; with the
 * defaults it lies in [0, 1.15].
 */
export function ifevalReward(accuracy: IFEvalAccuracy, blocks: { readonly answers: number; readonly thinks: number }, options: IFEvalRewardOptions = {}): number {
  const o = parseOptions(IFEvalRewardOptionsSchema, options, "ifevalReward options");
  const components = [+accuracy.promptLevelStrictAcc, mean(accuracy.instLevelStrictAcc), +accuracy.promptLevelLooseAcc, mean(accuracy.instLevelLooseAcc)];
  const weighted = components.reduce((sum, c, i) => sum + c * o.formatWeights[i]!, 0);
  return weighted + (blocks.answers === 1 ? o.answerBonus : 0) + (blocks.thinks === 1 ? o.thinkBonus : 0);
}

/** The IFEval score of one response. */
export interface IFEvalScore extends IFEvalAccuracy {
  /** The aggregate reward ({@link ifevalReward}). */
  readonly reward: number;
  /** The text that was checked (the first `<answer>` block, or the whole response). */
  readonly scored: string;
  /** Whether the response has an `<answer>` block. */
  readonly hasAnswer: boolean;
}

/**
 * Scores `response` on the instructions of a dataset row. By default only the first `<answer>…</answer>` block is
 * checked (no block: nothing is followed, as in TorchRL); `scoreWholeResponse` checks the whole text instead.
 */
export function ifevalScore(response: string, instructions: readonly IFEvalInstruction[], options: IFEvalRewardOptions = {}): IFEvalScore {
  const o = parseOptions(IFEvalRewardOptionsSchema, options, "ifevalScore options");
  const text = stripEos(response, o.eosTokens);
  const answers = findAllTagBlocks(text, "answer");
  const thinks = findAllTagBlocks(text, "think");
  const scored = o.scoreWholeResponse ? text : (answers[0] ?? "");
  const accuracy = ifevalAccuracy(scored, instructions);
  return { ...accuracy, reward: ifevalReward(accuracy, { answers: answers.length, thinks: thinks.length }, o), scored, hasAnswer: answers.length > 0 };
}
