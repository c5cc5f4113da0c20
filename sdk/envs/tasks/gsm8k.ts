/**
 * GSM8K answers and reward, with the semantics of TorchRL's `GSM8KRewardParser`: the reference answer is the text
 * after `####` in the dataset's solution, the model's answer is the first `<answer>…</answer>` block, both are
 * normalised as numbers written by people (`"$1,000.00"` → `"1000"`) and compared exactly.
 */
import { InvalidArgumentError } from "../../core/errors.js";
import { parseOptions } from "../../core/index.js";
import { TieredRewardOptionsSchema, tieredScore, type TaskScore, type TieredRewardOptions } from "./score.js";
import { extractTags, stripEos } from "./tags.js";

/**
 * The reference answer of a GSM8K solution: the trimmed text after the last `####` marker.
 * Throws {@link InvalidArgumentError} when there is no marker or nothing after it.
 */
export function extractGSM8KAnswer(solution: string): string {
  const at = solution.lastIndexOf("####");
  const answer = at < 0 ? "" : solution.slice(at + 4).trim();
  if (at < 0) throw new InvalidArgumentError(`GSM8K answer: no "####" marker in ${JSON.stringify(solution.slice(0, 80))}`);
  if (answer === "") throw new InvalidArgumentError(`GSM8K answer: nothing after "####" in ${JSON.stringify(solution.slice(0, 80))}`);
  return answer;
}

/**
 * A numeric answer in canonical form, as TorchRL normalises it: trimmed; `,`, `$` and `%` removed; trailing dots
 * dropped; and, when a decimal point remains, trailing zeros and then the point dropped (`"120.0"` → `"120"`,
 * `"0.50"` → `"0.5"`). Text that is not a number is kept as it is (and so only matches itself).
 */
export function normalizeGSM8KAnswer(answer: string): string {
  let s = answer.trim().replace(/[,$%]/g, "");
  s = s.replace(/\.+$/, "");
  if (s.includes(".")) s = s.replace(/0+$/, "").replace(/\.+$/, "");
  return s;
}

/** Options of {@link gsm8kScore}. */
export interface GSM8KScoreOptions extends TieredRewardOptions {
  /** End-of-sequence markers stripped from the response first (default `<|im_end|>`, `<|endoftext|>`). */
  readonly eosTokens?: readonly string[];
}

/**
 * Scores one response against a GSM8K solution (`"…#### 42"`): `correctReward` (1.0) when the `<answer>` block
 * normalises to the reference, `formatReward` (0.1) when the block is there but wrong, 0 when there is no non-empty
 * `<answer>` block — even when the right number appears elsewhere in the text, as in TorchRL.
 */
export function gsm8kScore(response: string, solution: string, options: GSM8KScoreOptions = {}): TaskScore {
  const { eosTokens, ...levels } = options;
  const resolved = parseOptions(TieredRewardOptionsSchema, levels, "gsm8kScore options");
  const truth = normalizeGSM8KAnswer(extractGSM8KAnswer(solution));
  const parts = extractTags(stripEos(response, eosTokens));
  return tieredScore(parts, parts.answer !== "" && normalizeGSM8KAnswer(parts.answer) === truth, resolved);
}
