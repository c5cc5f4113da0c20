/**
 * Exact evaluation of small arithmetic expressions (non-negative integer literals, `+ - * /`, unary `+`/`-`,
 * parentheses) with a recursive-descent parser over BigInt fractions — never `eval`. Used by the Countdown reward.
 */

/** An exact rational number `num / den` in lowest terms, `den > 0`. */
export interface Rational {
  readonly num: bigint;
  readonly den: bigint;
}

/** Why an expression could not be evaluated. */
export type ArithmeticErrorReason = "empty" | "too_long" | "invalid_characters" | "syntax" | "division_by_zero";

/** The outcome of {@link evaluateArithmetic}. */
export type ArithmeticResult =
  | { readonly ok: true; readonly value: Rational; readonly literals: readonly number[] }
  | { readonly ok: false; readonly reason: ArithmeticErrorReason; readonly message: string };

/** The longest expression evaluated (keeps recursion depth and BigInt sizes bounded). */
export const MAX_EXPRESSION_LENGTH = 1000;

const ALLOWED = /^[0-9+\-*/() \t\n\r]*$/;

class EvalError extends Error {
  constructor(
    readonly reason: "syntax" | "division_by_zero",
    message: string,
  ) {
    super(message);
  }
}

function gcd(a: bigint, b: bigint): bigint {
  let x = a < 0n ? -a : a;
  let y = b < 0n ? -b : b;
  while (y !== 0n) [x, y] = [y, x % y];
  return x;
}

function make(num: bigint, den: bigint): Rational {
  if (den < 0n) [num, den] = [-num, -den];
  const g = gcd(num, den);
  return g > 1n ? { num: num / g, den: den / g } : { num, den };
}

type Token = { readonly kind: "num"; readonly text: string; readonly at: number } | { readonly kind: "op"; readonly text: string; readonly at: number };

function tokenize(text: string): Token[] {
  const tokens: Token[] = [];
  let i = 0;
  while (i < text.length) {
    const c = text[i]!;
    if (c === " " || c === "\t" || c === "\n" || c === "\r") {
      i++;
    } else if (c >= "0" && c <= "9") {
      let j = i + 1;
      while (j < text.length && text[j]! >= "0" && text[j]! <= "9") j++;
      tokens.push({ kind: "num", text: text.slice(i, j), at: i });
      i = j;
    } else {
      tokens.push({ kind: "op", text: c, at: i });
      i++;
    }
  }
  return tokens;
}

class Parser {
  #pos = 0;
  readonly literals: number[] = [];

  constructor(private readonly tokens: readonly Token[]) {}

  parse(): Rational {
    const value = this.expr();
    const rest = this.tokens[this.#pos];
    if (rest !== undefined) throw new EvalError("syntax", `unexpected ${JSON.stringify(rest.text)} at offset ${rest.at}`);
    return value;
  }

  private peek(): Token | undefined {
    return this.tokens[this.#pos];
  }

  private isOp(text: string): boolean {
    const t = this.peek();
    return t !== undefined && t.kind === "op" && t.text === text;
  }

  // expr := term (("+" | "-") term)*
  private expr(): Rational {
    let left = this.term();
    for (;;) {
      if (this.isOp("+")) {
        this.#pos++;
        const r = this.term();
        left = make(left.num * r.den + r.num * left.den, left.den * r.den);
      } else if (this.isOp("-")) {
        this.#pos++;
        const r = this.term();
        left = make(left.num * r.den - r.num * left.den, left.den * r.den);
      } else {
        return left;
      }
    }
  }

  // term := unary (("*" | "/") unary)*
  private term(): Rational {
    let left = this.unary();
    for (;;) {
      if (this.isOp("*")) {
        this.#pos++;
        const r = this.unary();
        left = make(left.num * r.num, left.den * r.den);
      } else if (this.isOp("/")) {
        const at = this.peek()!.at;
        this.#pos++;
        const r = this.unary();
        if (r.num === 0n) throw new EvalError("division_by_zero", `division by zero at offset ${at}`);
        left = make(left.num * r.den, left.den * r.num);
      } else {
        return left;
      }
    }
  }

  // unary := ("+" | "-") unary | primary
  private unary(): Rational {
    if (this.isOp("+")) {
      this.#pos++;
      return this.unary();
    }
    if (this.isOp("-")) {
      this.#pos++;
      const v = this.unary();
      return { num: -v.num, den: v.den };
    }
    return this.primary();
  }

  // primary := NUMBER | "(" expr ")"
  private primary(): Rational {
    const t = this.peek();
    if (t === undefined) throw new EvalError("syntax", "unexpected end of expression");
    if (t.kind === "num") {
      if (t.text.length > 1 && t.text.startsWith("0")) throw new EvalError("syntax", `number with a leading zero at offset ${t.at}`);
      this.#pos++;
      this.literals.push(Number(t.text));
      return { num: BigInt(t.text), den: 1n };
    }
    if (t.text === "(") {
      this.#pos++;
      const inner = this.expr();
      if (!this.isOp(")")) {
        const next = this.peek();
        throw new EvalError("syntax", next === undefined ? "missing \")\"" : `expected ")" at offset ${next.at}`);
      }
      this.#pos++;
      return inner;
    }
    throw new EvalError("syntax", `unexpected ${JSON.stringify(t.text)} at offset ${t.at}`);
  }
}

/**
 * Evaluates `expression` exactly. Only digits, whitespace, `+ - * /` and parentheses are allowed; `**`, `//`,
 * decimal points, implicit multiplication (`2(3)`) and leading zeros (`07`) are syntax errors, as is an empty
 * pair of parentheses. Returns the value as a reduced fraction and the integer literals in order of appearance.
 */
export function evaluateArithmetic(expression: string): ArithmeticResult {
  if (expression.trim() === "") return { ok: false, reason: "empty", message: "the expression is empty" };
  if (expression.length > MAX_EXPRESSION_LENGTH) {
    return { ok: false, reason: "too_long", message: `the expression is longer than ${MAX_EXPRESSION_LENGTH} characters` };
  }
  if (!ALLOWED.test(expression)) {
    const bad = Array.from(expression).find((c) => !ALLOWED.test(c)) ?? "";
    return { ok: false, reason: "invalid_characters", message: `character ${JSON.stringify(bad)} is not allowed` };
  }
  const parser = new Parser(tokenize(expression));
  try {
    const value = parser.parse();
    return { ok: true, value, literals: parser.literals };
  } catch (err) {
    if (err instanceof EvalError) return { ok: false, reason: err.reason, message: err.message };
    throw err;
  }
}

/** `value` as a JS number (nearest double). */
export function rationalToNumber(value: Rational): number {
  return Number(value.num) / Number(value.den);
}
