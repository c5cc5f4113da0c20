/**
 * A documented subset of IFEval's instruction checkers (Google's instruction-following benchmark, as vendored by
 * TorchRL's `IfEvalScorer`), reimplemented in TypeScript. Each checker has IFEval's id, IFEval's keyword-argument
 * names (validated with zod) and a `check(response, args)` with IFEval's rule. What differs, and why:
 *
 * - `keywords:*`: keywords are matched as literal text, case-insensitively (IFEval passes them to `re.search`
 *   as regular expressions; dataset keywords are plain words, so the result is the same).
 * - `change_case:english_lowercase` / `english_capital`: only the letter case is checked; IFEval also runs
 *   `langdetect` to require English, which has no TypeScript equivalent here.
 * - `change_case:capital_word_frequency`: words are split on letters, digits, `_`, `'` and `-` instead of NLTK's
 *   tokenizer.
 * - `keywords:letter_frequency`: the "letter" may be any one character and is counted as given. IFEval's data asks
 *   for `#` and `!` in two prompts ("at least 4 hashtags"), which IFEval itself swaps for a random letter.
 * - Not implemented (they need language detection or NLTK's sentence model, or are disabled in IFEval itself):
 *   `language:response_language`, `length_constraints:number_sentences`, `keywords:key_sentences`,
 *   `detectable_format:rephrase`, `detectable_content:rephrase_paragraph`, `multi-turn:constrained_start`.
 *   An instruction list naming one of them is rejected with an `InvalidArgumentError`.
 */
import { z } from "zod";

const Relation = z.enum(["less than", "at least"]);
const Count = z.number().int().nonnegative();

/** The phrases `detectable_format:constrained_response` accepts (IFEval's options). */
export const CONSTRAINED_RESPONSE_OPTIONS: readonly string[] = ["My answer is yes.", "My answer is no.", "My answer is maybe."];

function compare(actual: number, relation: z.output<typeof Relation>, threshold: number): boolean {
  return relation === "less than" ? actual < threshold : actual >= threshold;
}

function escapeRegExp(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
}

function countOccurrences(text: string, needle: string): number {
  return needle === "" ? 0 : (text.match(new RegExp(escapeRegExp(needle), "giu")) ?? []).length;
}

/** IFEval's word count: runs of letters, digits and `_` (Python's `\w+`). */
export function countWords(text: string): number {
  return (text.match(/[\p{L}\p{N}_]+/gu) ?? []).length;
}

/** Python's `str.islower()` / `str.isupper()`: at least one cased letter, none of the other case. */
function isAllCase(text: string, lower: boolean): boolean {
  const hasLower = /\p{Ll}/u.test(text);
  const hasUpper = /\p{Lu}|\p{Lt}/u.test(text);
  return lower ? hasLower && !hasUpper : hasUpper && !hasLower;
}

interface Checker<S extends z.ZodType> {
  readonly args: S;
  check(response: string, args: z.output<S>): boolean;
}

const define = <S extends z.ZodType>(args: S, check: (response: string, args: z.output<S>) => boolean): Checker<S> => ({ args, check });
const NoArgs = z.strictObject({});

/** The implemented checkers, by IFEval instruction id. */
export const IFEVAL_CHECKERS = {
  "keywords:existence": define(z.strictObject({ keywords: z.array(z.string().min(1)).min(1) }), (r, a) =>
    a.keywords.every((k) => countOccurrences(r, k) > 0),
  ),
  "keywords:frequency": define(z.strictObject({ keyword: z.string().trim().min(1), frequency: Count, relation: Relation }), (r, a) =>
    compare(countOccurrences(r, a.keyword), a.relation, a.frequency),
  ),
  "keywords:forbidden_words": define(z.strictObject({ forbidden_words: z.array(z.string().min(1)).min(1) }), (r, a) =>
    a.forbidden_words.every((w) => !new RegExp(`\\b${escapeRegExp(w)}\\b`, "iu").test(r)),
  ),
  "keywords:letter_frequency": define(
    z.strictObject({ letter: z.string().regex(/^.$/u, "must be one character"), let_frequency: Count, let_relation: Relation }),
    (r, a) => compare(countOccurrences(r, a.letter), a.let_relation, a.let_frequency),
  ),
  "length_constraints:number_words": define(z.strictObject({ num_words: Count, relation: Relation }), (r, a) =>
    compare(countWords(r), a.relation, a.num_words),
  ),
  "length_constraints:number_paragraphs": define(z.strictObject({ num_paragraphs: z.number().int().positive() }), (r, a) => {
    // Paragraphs are separated by the markdown divider `***`; an empty paragraph is allowed only at either end.
    const parts = r.split(/\s?\*\*\*\s?/);
    let count = parts.length;
    for (const [i, p] of parts.entries()) {
      if (p.trim() !== "") continue;
      if (i === 0 || i === parts.length - 1) count--;
      else return false;
    }
    return count === a.num_paragraphs;
  }),
  "length_constraints:nth_paragraph_first_word": define(
    z.strictObject({ num_paragraphs: z.number().int().positive(), nth_paragraph: z.number().int().positive(), first_word: z.string().trim().min(1) }),
    (r, a) => {
      // Paragraphs are separated by a blank line ("\n\n").
      const parts = r.split("\n\n");
      const count = parts.filter((p) => p.trim() !== "").length;
      if (a.nth_paragraph > count) return false;
      const paragraph = (parts[a.nth_paragraph - 1] ?? "").trim();
      if (paragraph === "") return false;
      const word = (paragraph.split(/\s+/)[0] ?? "").replace(/^['"]+/, "");
      const first = (/^[^.,?!'"]*/.exec(word)?.[0] ?? "").toLowerCase();
      return count === a.num_paragraphs && first === a.first_word.toLowerCase();
    },
  ),
  "detectable_content:number_placeholders": define(z.strictObject({ num_placeholders: Count }), (r, a) =>
    (r.match(/\[.*?\]/g) ?? []).length >= a.num_placeholders,
  ),
  "detectable_content:postscript": define(z.strictObject({ postscript_marker: z.string().trim().min(1) }), (r, a) => {
    const marker = a.postscript_marker;
    const pattern =
      marker === "P.P.S" ? /\s*p\.\s?p\.\s?s.*$/m : marker === "P.S." ? /\s*p\.\s?s\..*$/m : new RegExp(`\\s*${escapeRegExp(marker.toLowerCase())}.*$`, "m");
    return pattern.test(r.toLowerCase());
  }),
  "detectable_format:number_bullet_lists": define(z.strictObject({ num_bullets: Count }), (r, a) => {
    // Markdown bullets: lines starting with `* ` (not `**`) or `-`.
    const stars = (r.match(/^\s*\*[^*].*$/gm) ?? []).length;
    const dashes = (r.match(/^\s*-.*$/gm) ?? []).length;
    return stars + dashes === a.num_bullets;
  }),
  "detectable_format:constrained_response": define(NoArgs, (r) => CONSTRAINED_RESPONSE_OPTIONS.some((o) => r.trim().includes(o))),
  "detectable_format:number_highlighted_sections": define(z.strictObject({ num_highlights: Count }), (r, a) => {
    // `*highlighted*` and `**highlighted**` spans with non-blank content, on one line.
    const single = (r.match(/\*[^\n*]*\*/g) ?? []).filter((h) => h.replace(/^\*+|\*+$/g, "").trim() !== "").length;
    const double = (r.match(/\*\*[^\n*]*\*\*/g) ?? []).filter((h) => h.slice(2, -2).trim() !== "").length;
    return single + double >= a.num_highlights;
  }),
  "detectable_format:multiple_sections": define(
    z.strictObject({ section_spliter: z.string().trim().min(1), num_sections: z.number().int().positive() }),
    (r, a) => r.split(new RegExp(`\\s?${escapeRegExp(a.section_spliter)}\\s?\\d+\\s?`)).length - 1 >= a.num_sections,
  ),
  "detectable_format:json_format": define(NoArgs, (r) => {
    const body = r
      .trim()
      .replace(/^```(?:json|Json|JSON)?/, "")
      .replace(/```$/, "")
      .trim();
    try {
      JSON.parse(body);
      return true;
    } catch {
      return false;
    }
  }),
  "detectable_format:title": define(NoArgs, (r) => (r.match(/<<[^\n]+>>/g) ?? []).some((t) => t.replace(/^<+/, "").replace(/>+$/, "").trim() !== "")),
  "combination:two_responses": define(NoArgs, (r) => {
    // Exactly two different non-empty responses separated by `******`.
    const parts = r.split("******");
    const valid: string[] = [];
    for (const [i, p] of parts.entries()) {
      if (p.trim() !== "") valid.push(p.trim());
      else if (i !== 0 && i !== parts.length - 1) return false;
    }
    return valid.length === 2 && valid[0] !== valid[1];
  }),
  "combination:repeat_prompt": define(z.strictObject({ prompt_to_repeat: z.string().min(1) }), (r, a) =>
    r.trim().toLowerCase().startsWith(a.prompt_to_repeat.trim().toLowerCase()),
  ),
  "startend:end_checker": define(z.strictObject({ end_phrase: z.string().trim().min(1) }), (r, a) =>
    r.trim().replace(/^"+|"+$/g, "").toLowerCase().endsWith(a.end_phrase.toLowerCase()),
  ),
  "startend:quotation": define(NoArgs, (r) => {
    const s = r.trim();
    return s.length > 1 && s.startsWith('"') && s.endsWith('"');
  }),
  "change_case:english_lowercase": define(NoArgs, (r) => isAllCase(r, true)),
  "change_case:english_capital": define(NoArgs, (r) => isAllCase(r, false)),
  "change_case:capital_word_frequency": define(z.strictObject({ capital_frequency: Count, capital_relation: Relation }), (r, a) => {
    const words = r.match(/[\p{L}\p{N}_'-]+/gu) ?? [];
    return compare(words.filter((w) => isAllCase(w, false)).length, a.capital_relation, a.capital_frequency);
  }),
  "punctuation:no_comma": define(NoArgs, (r) => !r.includes(",")),
} as const;

/** The id of an implemented IFEval instruction, e.g. `"punctuation:no_comma"`. */
export type IFEvalInstructionId = keyof typeof IFEVAL_CHECKERS;

/** The ids of the implemented IFEval instructions. */
export const IFEVAL_INSTRUCTION_IDS = Object.keys(IFEVAL_CHECKERS) as IFEvalInstructionId[];

/** Whether `id` names an implemented IFEval instruction. */
export function isIFEvalInstructionId(id: string): id is IFEvalInstructionId {
  return Object.hasOwn(IFEVAL_CHECKERS, id);
}
