/**
 * The Countdown numbers game (TorchRL's `CountdownEnv` / `CountdownRewardParser`): given source numbers and a
 * target, write an arithmetic expression that uses each source number at most once and equals the target.
 * Puzzles are generated procedurally from a seed; answers are checked by exact rational evaluation.
 */
import { z } from "zod";
import { InvalidArgumentError } from "../../core/errors.js";
import { parseOptions } from "../../core/index.js";
import { evaluateArithmetic, rationalToNumber, type ArithmeticErrorReason } from "./arithmetic.js";
import { SeededRandom } from "./random.js";
import { TieredRewardOptionsSchema, tieredScore, type TaskScore, type TieredRewardOptions } from "./score.js";
import { extractTags, stripEos } from "./tags.js";

/** One Countdown puzzle. */
export interface CountdownProblem {
  /** The source numbers, in the order shown to the model. */
  readonly numbers: readonly number[];
  /** The target (a positive integer). */
  readonly target: number;
  /** One expression that reaches the target (the generator's witness; other solutions may exist). */
  readonly solution: string;
  /** The user prompt. */
  readonly query: string;
  /** The ground truth in TorchRL's format, `"target=T, numbers=a,b,c,d"`. */
  readonly answer: string;
}

/** Why a Countdown expression is rejected. */
export type CountdownRejection = ArithmeticErrorReason | "number_not_available" | "wrong_value";

/** The outcome of {@link validateCountdownExpression}. */
export interface CountdownValidation {
  /** Whether the expression is valid and equals the target. */
  readonly valid: boolean;
  /** Why it is not, when it is not. */
  readonly reason?: CountdownRejection;
  /** A human-readable explanation, when it is not valid. */
  readonly message?: string;
  /** The value of the expression, when it could be evaluated. */
  readonly value?: number;
}

/**
 * Checks a Countdown answer: only digits, whitespace, `+ - * /` and parentheses; every integer literal taken from
 * the multiset `numbers` (each source number at most once, so `[5, 5]` allows two 5s); and a value exactly equal to
 * `target` (rational arithmetic, where TorchRL compares floats within 1e-9). Division by zero and malformed
 * expressions are rejected, never thrown.
 */
export function validateCountdownExpression(expression: string, numbers: readonly number[], target: number): CountdownValidation {
  const result = evaluateArithmetic(expression);
  if (!result.ok) return { valid: false, reason: result.reason, message: result.message };
  const available = [...numbers];
  for (const literal of result.literals) {
    const at = available.indexOf(literal);
    if (at < 0) {
      const used = numbers.includes(literal) ? "is used more often than given" : "is not one of the given numbers";
      return { valid: false, reason: "number_not_available", message: `${literal} ${used}` };
    }
    available.splice(at, 1);
  }
  const value = rationalToNumber(result.value);
  if (result.value.den !== 1n || result.value.num !== BigInt(target)) {
    return { valid: false, reason: "wrong_value", message: `the expression equals ${value}, not ${target}`, value };
  }
  return { valid: true, value };
}

/** The ground truth `"target=T, numbers=a,b,c,d"` of a puzzle. */
export function formatCountdownAnswer(target: number, numbers: readonly number[]): string {
  return `target=${target}, numbers=${numbers.join(",")}`;
}

/**
 * Parses a ground truth written by {@link formatCountdownAnswer} (or TorchRL's `CountdownEnv`).
 * Throws {@link InvalidArgumentError} when it has no `target=` or `numbers=` part.
 */
export function parseCountdownAnswer(answer: string): { readonly target: number; readonly numbers: number[] } {
  const target = /target\s*=\s*(\d+)/.exec(answer)?.[1];
  const numbers = /numbers\s*=\s*(\d+(?:\s*,\s*\d+)*)/.exec(answer)?.[1];
  if (target === undefined || numbers === undefined) {
    throw new InvalidArgumentError(`Countdown answer: expected "target=T, numbers=a,b,...", got ${JSON.stringify(answer.slice(0, 80))}`);
  }
  return { target: Number(target), numbers: numbers.split(",").map((n) => Number(n.trim())) };
}

/** Options of {@link countdownScore}. */
export interface CountdownScoreOptions extends TieredRewardOptions {
  /** End-of-sequence markers stripped from the response first (default `<|im_end|>`, `<|endoftext|>`). */
  readonly eosTokens?: readonly string[];
}

/**
 * Scores one response against a puzzle's ground truth (`"target=T, numbers=…"`): `correctReward` (1.0) when the
 * `<answer>` block is a valid expression equal to the target, `formatReward` (0.1) when the block is there but the
 * expression is invalid or wrong, 0 without a non-empty `<answer>` block.
 */
export function countdownScore(response: string, answer: string, options: CountdownScoreOptions = {}): TaskScore {
  const { eosTokens, ...levels } = options;
  const resolved = parseOptions(TieredRewardOptionsSchema, levels, "countdownScore options");
  const { target, numbers } = parseCountdownAnswer(answer);
  const parts = extractTags(stripEos(response, eosTokens));
  return tieredScore(parts, parts.answer !== "" && validateCountdownExpression(parts.answer, numbers, target).valid, resolved);
}

/** Options of the puzzle generator (TorchRL's `CountdownEnv` names). */
export const CountdownGeneratorOptionsSchema = z
  .strictObject({
    /** How many source numbers per puzzle. Default 4. */
    numCount: z.number().int().min(2).max(8).default(4),
    /** The largest source number (they are drawn from 1..maxNumber). Default 100. */
    maxNumber: z.number().int().min(1).max(10_000).default(100),
    /** The largest target. Default 1000. */
    maxTarget: z.number().int().min(1).max(1_000_000).default(1000),
    /** Seed of the generator; the same seed gives the same puzzles. Default 0. */
    seed: z.number().int().default(0),
  });

/** Options of {@link CountdownGenerator}. */
export type CountdownGeneratorOptions = z.input<typeof CountdownGeneratorOptionsSchema>;

interface Term {
  readonly value: number;
  readonly text: string;
  readonly atomic: boolean;
}

const wrap = (t: Term): string => (t.atomic ? t.text : `(${t.text})`);

/**
 * An endless, seeded stream of solvable Countdown puzzles. Each puzzle draws `numCount` numbers from
 * 1..`maxNumber`, then combines all of them in random order and random tree shape with `+`, `-` (larger minus
 * smaller), `*` and exact `/`, and keeps the result as the target when it lies in 1..`maxTarget` and is not
 * itself one of the numbers; after 64 failed tries the target is the sum (or, above `maxTarget`, the largest
 * number). The expression that built the target is kept as `solution`, so every puzzle is solvable by construction.
 */
export class CountdownGenerator implements Iterator<CountdownProblem>, Iterable<CountdownProblem> {
  readonly #options: z.output<typeof CountdownGeneratorOptionsSchema>;
  readonly #rng: SeededRandom;

  constructor(options: CountdownGeneratorOptions = {}) {
    this.#options = parseOptions(CountdownGeneratorOptionsSchema, options, "CountdownGenerator options");
    this.#rng = new SeededRandom(this.#options.seed);
  }

  /** The resolved options (defaults filled in). */
  get config(): Readonly<z.output<typeof CountdownGeneratorOptionsSchema>> {
    return this.#options;
  }

  /** The next puzzle. */
  next(): IteratorResult<CountdownProblem> {
    return { done: false, value: this.problem() };
  }

  /** The generator itself: an endless iterator of puzzles. */
  [Symbol.iterator](): this {
    return this;
  }

  /** The next puzzle (same as `next().value`). */
  problem(): CountdownProblem {
    const { numCount, maxNumber, maxTarget } = this.#options;
    const rng = this.#rng;
    const numbers = Array.from({ length: numCount }, () => rng.int(1, maxNumber));
    let found: Term | undefined;
    for (let attempt = 0; attempt < 64 && found === undefined; attempt++) {
      const term = this.combine(numbers);
      if (term !== undefined && term.value >= 1 && term.value <= maxTarget && !numbers.includes(term.value)) found = term;
    }
    if (found === undefined) {
      const sum = numbers.reduce((a, b) => a + b, 0);
      found = sum <= maxTarget ? { value: sum, text: numbers.join(" + "), atomic: false } : { value: Math.max(...numbers), text: String(Math.max(...numbers)), atomic: true };
    }
    const target = found.value;
    return {
      numbers,
      target,
      solution: found.text,
      query:
        `Reach the target number ${target} using the numbers ${numbers.join(", ")}. ` +
        "Combine them with +, -, * and / and parentheses; each number may be used at most once, and you do not have to use all of them.",
      answer: formatCountdownAnswer(target, numbers),
    };
  }

  private combine(numbers: readonly number[]): Term | undefined {
    const rng = this.#rng;
    let terms: Term[] = rng.shuffled(numbers).map((n) => ({ value: n, text: String(n), atomic: true }));
    while (terms.length > 1) {
      const i = rng.int(0, terms.length - 1);
      let j = rng.int(0, terms.length - 2);
      if (j >= i) j++;
      const a = terms[i]!;
      const b = terms[j]!;
      const op = rng.pick(["+", "-", "*", "/"] as const);
      let next: Term;
      if (op === "+") next = { value: a.value + b.value, text: `${a.text} + ${b.text}`, atomic: false };
      else if (op === "*") next = { value: a.value * b.value, text: `${wrap(a)} * ${wrap(b)}`, atomic: false };
      else if (op === "-") {
        const [hi, lo] = a.value >= b.value ? [a, b] : [b, a];
        next = { value: hi.value - lo.value, text: `${hi.text} - ${wrap(lo)}`, atomic: false };
      } else {
        const [num, den] = a.value >= b.value ? [a, b] : [b, a];
        if (den.value === 0 || num.value % den.value !== 0) return undefined;
        next = { value: num.value / den.value, text: `${wrap(num)} / ${wrap(den)}`, atomic: false };
      }
      if (!Number.isSafeInteger(next.value)) return undefined;
      terms = terms.filter((_, k) => k !== i && k !== j);
      terms.push(next);
    }
    return terms[0];
  }
}
