// The flags of `npm run bench:grpo` (bench/grpo-options.ts): per-model defaults, the quick mode that
// `npm run bench` runs, explicit flags winning, and bad flags as typed errors naming the flag.
import { describe, expect, it } from "vitest";
import { grpoBenchConfig, parseGrpoFlags } from "../../bench/grpo-options.js";
import { InvalidArgumentError } from "../../sdk/index.js";

describe("bench:grpo flags", () => {
  it("keeps the tiny headline by default: 16 prompts x 8, 6 new tokens, SFT warm-up, 50 timed steps, TRL", () => {
    const config = grpoBenchConfig(parseGrpoFlags([]));
    expect(config.model.preset).toBe("tiny");
    expect([config.promptsPerStep, config.groupSize, config.maxNewTokens]).toEqual([16, 8, 6]);
    expect([config.sftWarmup.steps, config.steps, config.warmup, config.skipTrl]).toEqual([100, 50, 3, false]);
  });

  it("gives the random medium model longer completions on fewer rows and no SFT warm-up, and says why", () => {
    const config = grpoBenchConfig(parseGrpoFlags(["--model", "medium", "--max-new-tokens", "128"]));
    expect(config.model).toMatchObject({ preset: "medium", hiddenSize: 1024, numLayers: 12, vocabSize: 32000 });
    expect([config.promptsPerStep, config.groupSize, config.maxNewTokens, config.sftWarmup.steps]).toEqual([2, 4, 128, 0]);
    expect(config.sftWarmup).toHaveProperty("skipped", expect.stringContaining("random weights"));
  });

  it("--quick is a few steps with no warm-up model and no TRL; explicit flags still win", () => {
    const quick = grpoBenchConfig(parseGrpoFlags(["--quick"]));
    expect([quick.steps, quick.warmup, quick.sftWarmup.steps, quick.skipTrl]).toEqual([3, 1, 0, true]);
    const overridden = grpoBenchConfig(parseGrpoFlags(["--quick", "--steps", "2", "--last", "5"]));
    expect([overridden.steps, overridden.lastK]).toEqual([2, 2]);
  });

  it("rejects a bad flag with an InvalidArgumentError naming it and what was expected", () => {
    expect(() => parseGrpoFlags(["--model", "huge"])).toThrow(InvalidArgumentError);
    expect(() => parseGrpoFlags(["--model", "huge"])).toThrow(/bench:grpo flags\.model/);
    expect(() => parseGrpoFlags(["--group-size", "1"])).toThrow(/bench:grpo flags\.groupSize/);
    expect(() => parseGrpoFlags(["--max-new-tokens", "abc"])).toThrow(/bench:grpo flags\.maxNewTokens/);
  });
});
