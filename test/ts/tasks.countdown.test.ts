// Countdown: the exact expression evaluator, the validator (characters, reuse, division by zero, target), the reward,
// and the seeded generator, whose puzzles an independent brute-force solver must always solve.
import { describe, expect, it } from "vitest";
import {
  CountdownGenerator,
  countdownScore,
  evaluateArithmetic,
  formatCountdownAnswer,
  parseCountdownAnswer,
  validateCountdownExpression,
} from "../../sdk/envs/tasks/index.js";

/** Whether `target` is reachable from `numbers` (each at most once) with + - * /, by exhaustive search over floats. */
function solvable(numbers: readonly number[], target: number): boolean {
  const search = (values: readonly number[]): boolean => {
    if (values.some((v) => Math.abs(v - target) < 1e-9)) return true;
    for (let i = 0; i < values.length; i++) {
      for (let j = 0; j < values.length; j++) {
        if (i === j) continue;
        const a = values[i]!;
        const b = values[j]!;
        const rest = values.filter((_, k) => k !== i && k !== j);
        const results = [a + b, a - b, a * b, ...(b !== 0 ? [a / b] : [])];
        if (results.some((r) => search([...rest, r]))) return true;
      }
    }
    return false;
  };
  return search(numbers);
}

describe("evaluateArithmetic", () => {
  it.each([
    ["1 + 2 * 3", 7n, 1n],
    ["(1 + 2) * 3", 9n, 1n],
    ["10 / 4", 5n, 2n],
    ["8 / (3 - 8 / 3)", 24n, 1n],
    ["-3 + 5", 2n, 1n],
    ["2 - -3", 5n, 1n],
    [" ( ( 7 ) ) ", 7n, 1n],
  ])("%s = %d/%d exactly", (expr, num, den) => {
    const r = evaluateArithmetic(expr);
    expect(r.ok && r.value).toEqual({ num, den });
  });

  it("reports the literals in order", () => {
    const r = evaluateArithmetic("(25 + 3) * 4 - 25");
    expect(r.ok && r.literals).toEqual([25, 3, 4, 25]);
  });

  it.each([
    ["", "empty"],
    ["   ", "empty"],
    ["2 ** 3", "syntax"],
    ["7 // 2", "syntax"],
    ["2(3)", "syntax"],
    ["(1 + 2", "syntax"],
    ["1 + 2)", "syntax"],
    ["()", "syntax"],
    ["07 + 1", "syntax"],
    ["1 +", "syntax"],
    ["2.5 * 2", "invalid_characters"],
    ["x + 1", "invalid_characters"],
    ["3 ^ 2", "invalid_characters"],
    ["1 = 1", "invalid_characters"],
    ["5 / (2 - 2)", "division_by_zero"],
    ["1 + ".repeat(300) + "1", "too_long"],
  ])("rejects %j (%s)", (expr, reason) => {
    const r = evaluateArithmetic(expr);
    expect(r.ok).toBe(false);
    if (!r.ok) expect(r.reason).toBe(reason);
  });
});

describe("validateCountdownExpression", () => {
  const numbers = [25, 3, 4, 7];

  it("accepts a correct expression, which need not use every number", () => {
    expect(validateCountdownExpression("(25 + 3) * 4", numbers, 112)).toEqual({ valid: true, value: 112 });
    expect(validateCountdownExpression("25 - 7 + 4 * 3", numbers, 30).valid).toBe(true);
  });

  it("rejects reusing a number, or one not given", () => {
    const reuse = validateCountdownExpression("25 + 25 + 3", numbers, 53);
    expect(reuse).toMatchObject({ valid: false, reason: "number_not_available" });
    expect(reuse.message).toMatch(/25 is used more often than given/);
    expect(validateCountdownExpression("100 + 12", numbers, 112)).toMatchObject({ valid: false, reason: "number_not_available" });
    // A number given twice may be used twice.
    expect(validateCountdownExpression("5 * 5", [5, 5, 1], 25).valid).toBe(true);
  });

  it("rejects invalid characters and division by zero without throwing", () => {
    expect(validateCountdownExpression("25 * 4 + x", numbers, 100)).toMatchObject({ valid: false, reason: "invalid_characters" });
    expect(validateCountdownExpression("(25 + 3) * 4 = 112", numbers, 112)).toMatchObject({ valid: false, reason: "invalid_characters" });
    expect(validateCountdownExpression("25 / (7 - 7)", [25, 7, 7], 1)).toMatchObject({ valid: false, reason: "division_by_zero" });
  });

  it("rejects a wrong value, exactly (no float rounding)", () => {
    expect(validateCountdownExpression("25 * 4", numbers, 101)).toMatchObject({ valid: false, reason: "wrong_value", value: 100 });
    expect(validateCountdownExpression("(3 / 7) * 7", [3, 7, 7], 3).valid).toBe(true);
    expect(validateCountdownExpression("25 / 4", numbers, 6)).toMatchObject({ valid: false, value: 6.25 });
  });
});

describe("countdownScore", () => {
  const truth = formatCountdownAnswer(24, [8, 3, 8, 3]);

  it("parses the ground truth format", () => {
    expect(truth).toBe("target=24, numbers=8,3,8,3");
    expect(parseCountdownAnswer(truth)).toEqual({ target: 24, numbers: [8, 3, 8, 3] });
    expect(() => parseCountdownAnswer("24 from 8 3 8 3")).toThrow(expect.objectContaining({ code: "INVALID_ARGUMENT" }));
  });

  it("gives 1.0 / 0.1 / 0", () => {
    expect(countdownScore("<think>8/(3-8/3)</think><answer>8 / (3 - 8 / 3)</answer>", truth)).toMatchObject({ reward: 1, success: true, rewardThink: 1 });
    expect(countdownScore("<answer>8 * 3 * 3</answer>", truth)).toMatchObject({ reward: 0.1, success: false });
    expect(countdownScore("<answer>8 + 8 + 8</answer>", truth).reward).toBe(0.1);
    expect(countdownScore("8 / (3 - 8 / 3)", truth).reward).toBe(0);
  });
});

describe("CountdownGenerator", () => {
  it("is deterministic for a seed and differs across seeds", () => {
    const take = (seed: number): string[] => {
      const gen = new CountdownGenerator({ seed });
      return Array.from({ length: 5 }, () => gen.problem().answer);
    };
    expect(take(7)).toEqual(take(7));
    expect(take(7)).not.toEqual(take(8));
  });

  it.each([
    { seed: 1 },
    { seed: 2, numCount: 3, maxNumber: 10, maxTarget: 50 },
    { seed: 3, numCount: 5, maxNumber: 25, maxTarget: 200 },
    { seed: 4, numCount: 2, maxNumber: 9, maxTarget: 20 },
  ])("always produces solvable puzzles within bounds (%o)", (options) => {
    const gen = new CountdownGenerator(options);
    const { numCount, maxNumber, maxTarget } = gen.config;
    for (let i = 0; i < 60; i++) {
      const p = gen.problem();
      expect(p.numbers).toHaveLength(numCount);
      expect(p.numbers.every((n) => Number.isInteger(n) && n >= 1 && n <= maxNumber)).toBe(true);
      expect(Number.isInteger(p.target) && p.target >= 1 && p.target <= maxTarget).toBe(true);
      expect(solvable(p.numbers, p.target)).toBe(true);
      expect(validateCountdownExpression(p.solution, p.numbers, p.target).valid).toBe(true);
      expect(p.query).toContain(String(p.target));
      expect(parseCountdownAnswer(p.answer)).toEqual({ target: p.target, numbers: p.numbers });
    }
  });

  it("is an iterator", () => {
    const [a, b] = new CountdownGenerator({ seed: 5 });
    const it2 = new CountdownGenerator({ seed: 5 });
    expect(a).toEqual(it2.next().value);
    expect(b).toEqual(it2.next().value);
  });

  it("rejects bad options naming the field", () => {
    expect(() => new CountdownGenerator({ numCount: 1 })).toThrow(/CountdownGenerator options\.numCount/);
    expect(() => new CountdownGenerator({ seed: 1.5 })).toThrow(expect.objectContaining({ code: "INVALID_ARGUMENT" }));
    expect(() => new CountdownGenerator({ seed: 1.5 })).toThrow(/CountdownGenerator options\.seed/);
    expect(() => new CountdownGenerator({ maxTarget: 10, bogus: 1 } as never)).toThrow(/bogus/);
  });
});
