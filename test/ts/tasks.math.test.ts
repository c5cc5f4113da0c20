// MATH: last \boxed{} extraction with nested braces, answer normalisation, the reward, and the optional math-verify
// backend (through pythonia when the interpreter has math_verify; otherwise the documented string fallback).
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { resolvePython } from "../../bridge/index.js";
import {
  extractBoxed,
  extractMathAnswer,
  mathAnswersEqual,
  mathScore,
  normalizeMathAnswer,
  openMathVerifier,
} from "../../sdk/envs/tasks/index.js";

function hasMathVerify(python: string): boolean {
  try {
    execFileSync(python, ["-c", "import math_verify"], { stdio: "ignore" });
    return true;
  } catch {
    return false;
  }
}

describe("extractBoxed", () => {
  it("handles nested braces", () => {
    expect(extractBoxed("so $x = \\boxed{\\frac{1}{2}}$.")).toBe("\\frac{1}{2}");
    expect(extractBoxed("\\boxed{\\sqrt{\\frac{a^{2}}{b}}}")).toBe("\\sqrt{\\frac{a^{2}}{b}}");
  });

  it("takes the last box", () => {
    expect(extractBoxed("first \\boxed{1}, then \\boxed{2}, finally \\boxed{\\{3, 4\\}}")).toBe("\\{3, 4\\}");
  });

  it("accepts \\fbox and the brace-less \\boxed form", () => {
    expect(extractBoxed("\\fbox{42}")).toBe("42");
    expect(extractBoxed("$\\boxed 7$ apples")).toBe("7");
    expect(extractBoxed("\\boxed {5}")).toBe("5");
  });

  it("returns undefined for no box, an unbalanced last box, or a look-alike command", () => {
    expect(extractBoxed("no box")).toBeUndefined();
    expect(extractBoxed("\\boxed{1} and then \\boxed{\\frac{1}{2}")).toBeUndefined();
    expect(extractBoxed("\\boxedwidth{3}")).toBeUndefined();
    expect(extractBoxed("\\boxed{}")).toBe("");
  });

  it("falls back to the whole solution for the reference answer", () => {
    expect(extractMathAnswer("  12  ")).toBe("12");
    expect(extractMathAnswer("work... \\boxed{12}")).toBe("12");
  });
});

describe("normalizeMathAnswer", () => {
  it.each([
    ["\\dfrac{1}{2}", "\\frac{1}{2}"],
    ["\\tfrac12", "\\frac{1}{2}"],
    ["1/2", "\\frac{1}{2}"],
    ["\\left( 1, 2 \\right)", "(1,2)"],
    ["$5$.", "5"],
    ["x = 5", "5"],
    ["10\\%", "10"],
    ["90^\\circ", "90"],
    ["\\text{Monday}", "Monday"],
    ["2\\!\\cdot\\!3", "2\\cdot3"],
    ["1,000", "1000"],
    [".50", "0.5"],
    ["3.0", "3"],
    ["\\sqrt2", "\\sqrt{2}"],
    ["\\boxed{7}", "7"],
  ])("%j → %j", (raw, expected) => {
    expect(normalizeMathAnswer(raw)).toBe(expected);
  });

  it("keeps different answers different", () => {
    expect(mathAnswersEqual("(1,2)", "(12)")).toBe(false);
    expect(mathAnswersEqual("\\frac{1}{2}", "\\frac{1}{3}")).toBe(false);
    expect(mathAnswersEqual("-3", "3")).toBe(false);
  });
});

describe("mathScore", () => {
  const solution = "Adding gives $\\frac{2}{4}$, which simplifies to $\\boxed{\\frac{1}{2}}$.";

  it("gives 1.0 / 0.1 / 0 with the string verifier", async () => {
    expect(await mathScore("<think>…</think><answer>\\dfrac{1}{2}</answer>", solution)).toMatchObject({ reward: 1, success: true });
    expect(await mathScore("<answer>$\\boxed{\\frac12}$</answer>", solution)).toMatchObject({ reward: 1 });
    expect(await mathScore("<answer>\\frac{1}{3}</answer>", solution)).toMatchObject({ reward: 0.1, success: false });
    expect(await mathScore("the answer is \\boxed{\\frac{1}{2}}", solution)).toMatchObject({ reward: 0, rewardAnswer: 0 });
  });

  it("uses the verifier it is given", async () => {
    const lenient = { backend: "string" as const, equivalent: () => Promise.resolve(true) };
    expect((await mathScore("<answer>anything</answer>", solution, { verifier: lenient })).reward).toBe(1);
  });

  it("rejects bad options naming the field", async () => {
    await expect(mathScore("<answer>1</answer>", solution, { correctReward: Infinity })).rejects.toThrow(/mathScore options\.correctReward/);
  });
});

describe("openMathVerifier", () => {
  const python = resolvePython();
  const available = hasMathVerify(python);

  it("string backend compares normalised strings", async () => {
    await using v = await openMathVerifier({ backend: "string" });
    expect(v.backend).toBe("string");
    expect(await v.equivalent("\\dfrac{1}{2}", "\\frac12")).toBe(true);
    expect(await v.equivalent("0.5", "\\frac12")).toBe(false);
  });

  it("rejects bad options naming the field", async () => {
    await expect(openMathVerifier({ backend: "sympy" as never })).rejects.toThrow(/openMathVerifier options\.backend/);
  });

  it.skipIf(available)("auto falls back to strings when math_verify is missing, and required mode throws", async () => {
    await using v = await openMathVerifier();
    expect(v.backend).toBe("string");
    expect(v.fallbackReason).toMatch(/math_verify/);
    expect(await v.equivalent("x=5", "5")).toBe(true);
    await expect(openMathVerifier({ backend: "math-verify" })).rejects.toMatchObject({ code: "MATH_VERIFY_UNAVAILABLE", python });
  });

  it("auto falls back when the interpreter does not exist", async () => {
    await using v = await openMathVerifier({ python: "/nonexistent/python3" });
    expect(v.backend).toBe("string");
    expect(v.fallbackReason).toContain("/nonexistent/python3");
  });

  it("auto warns once per reason that it fell back; a required math-verify names the extra to install", async () => {
    const warnings: Error[] = [];
    const onWarning = (w: Error): void => {
      if (w.name === "PosttrainMathVerifyWarning" && w.message.includes("warn-once")) warnings.push(w);
    };
    process.on("warning", onWarning);
    try {
      const python = "/nonexistent/warn-once/python3";
      for (let i = 0; i < 3; i++) await (await openMathVerifier({ python })).close();
      await new Promise((r) => setImmediate(r)); // process warnings are emitted on the next tick
      expect(warnings.map((w) => w.message)).toHaveLength(1);
      expect(warnings[0]!.message).toMatch(/warn-once.*compared as normalised strings.*--extras math/);
    } finally {
      process.off("warning", onWarning);
    }
    await expect(openMathVerifier({ backend: "math-verify", python: "/nonexistent/python3" })).rejects.toThrow(
      /math-verify is not available with \/nonexistent\/python3: .*`npx posttrain setup --extras math`/,
    );
  });

  it.skipIf(!available)("math-verify decides symbolic equivalence through pythonia", async () => {
    await using v = await openMathVerifier({ backend: "math-verify" });
    expect(v.backend).toBe("math-verify");
    expect(await v.equivalent("0.5", "\\frac{1}{2}")).toBe(true);
    expect(await v.equivalent("1+x^2", "x^2+1")).toBe(true);
    expect(await v.equivalent("3", "4")).toBe(false);
    expect((await mathScore("<answer>0.5</answer>", "\\boxed{\\frac{1}{2}}", { verifier: v })).reward).toBe(1);
  });
});

describe("the math_mini fixture", () => {
  it("has one balanced \\boxed answer per solution", () => {
    const file = join(import.meta.dirname, "..", "fixtures", "datasets", "math_mini.jsonl");
    const rows = readFileSync(file, "utf8").trim().split("\n").map((l) => JSON.parse(l) as { problem: string; solution: string });
    expect(rows.length).toBeGreaterThanOrEqual(20);
    for (const row of rows) {
      const boxed = extractBoxed(row.solution);
      expect(boxed, row.solution).toBeDefined();
      expect(boxed).not.toBe("");
    }
  });
});
