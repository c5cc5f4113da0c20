/**
 * MATH answers (TorchRL's `MATHRewardParser`): the reference answer is the last `\boxed{…}` (or `\fbox{…}`) of the
 * dataset's solution, matched brace by brace; the model's answer is its first `<answer>…</answer>` block. Answers
 * are compared by a {@link MathAnswerVerifier} — `math-verify` when installed (see math-verify.ts), else
 * {@link mathAnswersEqual}, equality after {@link normalizeMathAnswer}.
 */
import { parseOptions } from "../../core/index.js";
import { TieredRewardOptionsSchema, tieredScore, type TaskScore, type TieredRewardOptions } from "./score.js";
import { extractTags, stripEos } from "./tags.js";

const BOX_COMMAND = /\\(?:boxed|fbox)(?![A-Za-z])/g;

/** `text[open]` is `{`: the index just past its matching `}`, or -1 when it is never closed. `\{`, `\}` are skipped. */
function matchBrace(text: string, open: number): number {
  let depth = 0;
  for (let i = open; i < text.length; i++) {
    const c = text[i];
    if (c === "\\") i++;
    else if (c === "{") depth++;
    else if (c === "}" && --depth === 0) return i + 1;
  }
  return -1;
}

/**
 * The content of the last `\boxed{…}` or `\fbox{…}` in `text`, with nested braces (`\boxed{\frac{1}{2}}` →
 * `\frac{1}{2}`) and escaped braces (`\{`, `\}`) handled, trimmed. The brace-less form `\boxed 5` gives the text up
 * to the next `$` or line end. Returns `undefined` when there is no box, or when the last box is never closed
 * (a truncated answer is not replaced by an earlier one).
 */
export function extractBoxed(text: string): string | undefined {
  const starts = [...text.matchAll(BOX_COMMAND)];
  const last = starts[starts.length - 1];
  if (last === undefined) return undefined;
  let i = last.index + last[0].length;
  while (i < text.length && (text[i] === " " || text[i] === "\t")) i++;
  if (text[i] === "{") {
    const end = matchBrace(text, i);
    return end < 0 ? undefined : text.slice(i + 1, end - 1).trim();
  }
  const rest = /^[^$\n]*/.exec(text.slice(i))?.[0].trim() ?? "";
  return rest === "" ? undefined : rest;
}

/** Replaces each `\name{…}` in `s` by its braced content (brace-matched). */
function unwrapCommand(s: string, name: string): string {
  let out = s;
  for (;;) {
    const at = out.search(new RegExp(`\\\\${name}\\{`));
    if (at < 0) return out;
    const open = at + name.length + 1;
    const end = matchBrace(out, open);
    if (end < 0) return out;
    out = out.slice(0, at) + out.slice(open + 1, end - 1) + out.slice(end);
  }
}

/**
 * A canonical string for a LaTeX answer, for comparison when `math-verify` is not available: removes `$`,
 * `\left`/`\right`, spacing (`\!`, `\,`, `\;`, `\:`, `\quad`, `~`, every whitespace), `\displaystyle`, degree marks
 * and `%`; unwraps `\text{…}`, `\mathrm{…}`, `\mbox{…}` and a whole `\boxed{…}`; rewrites `\dfrac`/`\tfrac` as
 * `\frac`, `\frac12` as `\frac{1}{2}`, `\sqrt2` as `\sqrt{2}` and an integer `a/b` as `\frac{a}{b}`; drops a short
 * left-hand side (`x=5` → `5`), trailing periods and thousands separators; writes plain decimals canonically
 * (`.50` → `0.5`, `3.0` → `3`).
 */
export function normalizeMathAnswer(answer: string): string {
  let s = answer.trim();
  if (/^\\(?:boxed|fbox)(?![A-Za-z])/.test(s)) s = extractBoxed(s) ?? s;
  s = s.replace(/\$/g, "");
  s = s.replace(/\\(?:left|right)(?![A-Za-z])/g, "");
  s = s.replace(/\\(?:displaystyle|qquad|quad)(?![A-Za-z])/g, "").replace(/\\[!,;: ]/g, "").replace(/~/g, "");
  for (const name of ["text", "textbf", "mathrm", "mbox"]) s = unwrapCommand(s, name);
  s = s.replace(/\\[dt]frac(?![A-Za-z])/g, "\\frac");
  s = s.replace(/\^\s*\{?\s*\\circ\s*\}?/g, "").replace(/\\?%/g, "");
  s = s.replace(/\s+/g, "");
  s = s.replace(/\\frac(\d)(\d)/g, "\\frac{$1}{$2}").replace(/\\frac(\d)\{/g, "\\frac{$1}{").replace(/\\frac\{([^{}]*)\}(\d)/g, "\\frac{$1}{$2}");
  s = s.replace(/\\sqrt(\d+)/g, "\\sqrt{$1}");
  s = s.replace(/\.+$/, "");
  const eq = /^([A-Za-z]\w?)=(.+)$/.exec(s);
  if (eq !== null) s = eq[2]!;
  while (/\d,\d{3}(?!\d)/.test(s)) s = s.replace(/(\d),(\d{3})(?!\d)/, "$1$2");
  const frac = /^(-?\d+)\/(\d+)$/.exec(s);
  if (frac !== null) s = `\\frac{${frac[1]!}}{${frac[2]!}}`;
  if (/^-?\d*\.\d+$|^-?\d+$/.test(s)) s = canonicalDecimal(s);
  return s;
}

function canonicalDecimal(s: string): string {
  const negative = s.startsWith("-");
  let body = negative ? s.slice(1) : s;
  if (body.startsWith(".")) body = `0${body}`;
  if (body.includes(".")) body = body.replace(/0+$/, "").replace(/\.$/, "");
  body = body.replace(/^0+(?=\d)/, "");
  return negative && body !== "0" ? `-${body}` : body;
}

/** Whether two answers are equal after {@link normalizeMathAnswer} (the fallback when `math-verify` is absent). */
export function mathAnswersEqual(predicted: string, reference: string): boolean {
  return normalizeMathAnswer(predicted) === normalizeMathAnswer(reference);
}

/** Decides whether a predicted answer is mathematically equivalent to the reference. */
export interface MathAnswerVerifier {
  /** `"math-verify"` (symbolic equivalence in Python) or `"string"` (normalised string equality). */
  readonly backend: "math-verify" | "string";
  /** Whether `predicted` is equivalent to `reference` (LaTeX strings, without `$` delimiters). */
  equivalent(predicted: string, reference: string): Promise<boolean>;
}

/** The verifier that compares answers with {@link mathAnswersEqual}. */
export const STRING_MATH_VERIFIER: MathAnswerVerifier = {
  backend: "string",
  equivalent: (predicted, reference) => Promise.resolve(mathAnswersEqual(predicted, reference)),
};

/** The reference answer of a MATH solution: its last `\boxed{…}`, or the whole trimmed text when it has none. */
export function extractMathAnswer(solution: string): string {
  return extractBoxed(solution) ?? solution.trim();
}

/** Options of {@link mathScore}. */
export interface MathScoreOptions extends TieredRewardOptions {
  /** How answers are compared. Default {@link STRING_MATH_VERIFIER}. */
  readonly verifier?: MathAnswerVerifier;
  /** End-of-sequence markers stripped from the response first (default `<|im_end|>`, `<|endoftext|>`). */
  readonly eosTokens?: readonly string[];
}

/**
 * Scores one response against a MATH solution: `correctReward` (1.0) when the `<answer>` block (or the last
 * `\boxed{}` inside it) is equivalent to the solution's last `\boxed{}`, `formatReward` (0.1) when the block is there
 * but not equivalent, 0 without a non-empty `<answer>` block.
 */
export async function mathScore(response: string, solution: string, options: MathScoreOptions = {}): Promise<TaskScore> {
  const { verifier = STRING_MATH_VERIFIER, eosTokens, ...levels } = options;
  const resolved = parseOptions(TieredRewardOptionsSchema, levels, "mathScore options");
  const parts = extractTags(stripEos(response, eosTokens));
  if (parts.answer === "") return tieredScore(parts, false, resolved);
  const predicted = extractBoxed(parts.answer) ?? parts.answer;
  return tieredScore(parts, await verifier.equivalent(predicted, extractMathAnswer(solution)), resolved);
}
