// The interleaving every benchmark's ratios rest on (bench/stats.ts, `timeBalanced`): each function as often as the
// others, every order in turn, warm-up calls untimed, and with `block` runs of consecutive calls of one function.
import { describe, expect, it } from "vitest";
import { timeBalanced } from "../../bench/stats.js";

/** Functions that record which of them ran, in order. */
function recorders(n: number): { fns: (() => Promise<void>)[]; calls: number[] } {
  const calls: number[] = [];
  const fns = Array.from({ length: n }, (_, i) => () => {
    calls.push(i);
    return Promise.resolve();
  });
  return { fns, calls };
}

describe("timeBalanced", () => {
  it("calls each function once per round, rounds in every order, and times only the rounds after the warm-up", async () => {
    const { fns, calls } = recorders(3);
    const times = await timeBalanced(fns, 6, 6);
    expect(times.map((t) => t.length)).toEqual([6, 6, 6]);
    expect(calls).toHaveLength(36);
    const rounds = Array.from({ length: 12 }, (_, r) => calls.slice(3 * r, 3 * r + 3).join(""));
    expect(new Set(rounds.slice(0, 6))).toEqual(new Set(["012", "021", "102", "120", "201", "210"]));
    expect(rounds.slice(6)).toEqual(rounds.slice(0, 6)); // the timed rounds go through the orders again
  });

  it("with a block, runs each function that many times in a row, the blocks in every order", async () => {
    const { fns, calls } = recorders(2);
    const times = await timeBalanced(fns, 6, 2, 2);
    expect(times.map((t) => t.length)).toEqual([6, 6]);
    expect(calls.join("")).toBe("0011" + "1100" + "0011" + "1100");
  });

  it("refuses a block that does not divide the rounds or the warm-up, naming both", async () => {
    const { fns, calls } = recorders(2);
    await expect(timeBalanced(fns, 5, 0, 2)).rejects.toThrow(/block must be a positive integer dividing reps \(5\) and warmup \(0\), got 2/);
    await expect(timeBalanced(fns, 4, 1, 2)).rejects.toThrow(RangeError);
    await expect(timeBalanced(fns, 4, 0, 0)).rejects.toThrow(RangeError);
    expect(calls).toEqual([]);
  });
});
