// IFEval: every implemented checker on a passing and a failing response, strict against loose scoring (first/last
// line removed, markdown `*` removed), kwargs validation, and TorchRL's reward aggregate.
import { describe, expect, it } from "vitest";
import {
  followsInstructions,
  IFEVAL_INSTRUCTION_IDS,
  ifevalReward,
  ifevalScore,
  looseVariants,
  parseIFEvalInstructions,
  type IFEvalInstructionId,
} from "../../sdk/envs/tasks/index.js";

interface Case {
  readonly id: IFEvalInstructionId;
  readonly args?: Record<string, unknown>;
  readonly pass: string;
  readonly fail: string;
  /** Fails strictly, passes loosely. */
  readonly looseOnly?: string;
}

const CASES: readonly Case[] = [
  { id: "keywords:existence", args: { keywords: ["river", "Stone"] }, pass: "A stone sits by the River.", fail: "A stone sits by the lake." },
  { id: "keywords:frequency", args: { keyword: "tea", frequency: 2, relation: "at least" }, pass: "Tea, then more tea.", fail: "Just tea." },
  { id: "keywords:frequency", args: { keyword: "tea", frequency: 2, relation: "less than" }, pass: "Just tea.", fail: "Tea and TEA." },
  { id: "keywords:forbidden_words", args: { forbidden_words: ["cat"] }, pass: "A catalog of dogs.", fail: "The Cat sleeps." },
  { id: "keywords:letter_frequency", args: { letter: "z", let_frequency: 3, let_relation: "at least" }, pass: "Zig zag zoo", fail: "zig zag" },
  { id: "length_constraints:number_words", args: { num_words: 5, relation: "less than" }, pass: "only four words here", fail: "this one has six words here" },
  { id: "length_constraints:number_words", args: { num_words: 3, relation: "at least" }, pass: "one two three", fail: "one two" },
  {
    id: "length_constraints:number_paragraphs",
    args: { num_paragraphs: 2 },
    pass: "First part.\n***\nSecond part.",
    fail: "First part.\n***\n\n***\nSecond part.",
  },
  {
    id: "length_constraints:nth_paragraph_first_word",
    args: { num_paragraphs: 2, nth_paragraph: 2, first_word: "Then" },
    pass: "We start.\n\n\"Then, we finish.",
    fail: "We start.\n\nAfter that we finish.",
  },
  { id: "detectable_content:number_placeholders", args: { num_placeholders: 2 }, pass: "Dear [name], at [address].", fail: "Dear [name]." },
  { id: "detectable_content:postscript", args: { postscript_marker: "P.S." }, pass: "Hello.\np.s. bring snacks", fail: "Hello. PS bring snacks" },
  { id: "detectable_content:postscript", args: { postscript_marker: "P.P.S" }, pass: "Hi.\nP. P. S. more", fail: "Hi.\nP.S. more" },
  { id: "detectable_format:number_bullet_lists", args: { num_bullets: 2 }, pass: "* one\n- two", fail: "* one\n* two\n* three" },
  { id: "detectable_format:constrained_response", pass: "My answer is maybe.", fail: "Maybe." },
  { id: "detectable_format:number_highlighted_sections", args: { num_highlights: 2 }, pass: "*one* and **two**", fail: "*one* and ** **" },
  { id: "detectable_format:multiple_sections", args: { section_spliter: "Section", num_sections: 2 }, pass: "Section 1\na\nSection 2\nb", fail: "Section 1\na" },
  {
    id: "detectable_format:json_format",
    pass: '```json\n{"a": [1, 2]}\n```',
    fail: "{a: 1}",
    looseOnly: 'Here is the JSON:\n{"a": 1}',
  },
  { id: "detectable_format:title", pass: "<<A Quiet Morning>>\ntext", fail: "<< >> text" },
  { id: "combination:two_responses", pass: "First take.\n******\nSecond take.", fail: "Same.\n******\nSame." },
  { id: "combination:repeat_prompt", args: { prompt_to_repeat: "Name a color." }, pass: "name a color. Blue.", fail: "Blue. Name a color." },
  {
    id: "startend:end_checker",
    args: { end_phrase: "Any other questions?" },
    pass: 'Done. Any other questions?"',
    fail: "Any other questions? Bye.",
    looseOnly: "Done. **Any other questions?**",
  },
  { id: "startend:quotation", pass: '  "wrapped"  ', fail: '"only the start', looseOnly: 'Sure:\n"wrapped"' },
  { id: "change_case:english_lowercase", pass: "all lower, 123.", fail: "Not all lower.", looseOnly: "Sure!\nall lower here" },
  { id: "change_case:english_capital", pass: "ALL CAPS 42!", fail: "ALL CAPS but one", looseOnly: "ALL CAPS\nlast line lower" },
  {
    id: "change_case:capital_word_frequency",
    args: { capital_frequency: 2, capital_relation: "at least" },
    pass: "NASA and ESA met.",
    fail: "Only NASA met.",
  },
  { id: "punctuation:no_comma", pass: "No commas here.", fail: "One, two.", looseOnly: "Sure, here it is:\nNo commas here." },
];

describe("IFEval checkers", () => {
  it("covers every implemented instruction", () => {
    expect(new Set(CASES.map((c) => c.id))).toEqual(new Set(IFEVAL_INSTRUCTION_IDS));
  });

  it.each(CASES.map((c, i) => [`${c.id} #${i}`, c] as const))("%s: strict pass and fail", (_name, c) => {
    const instructions = parseIFEvalInstructions([c.id], [c.args ?? {}]);
    expect(followsInstructions(c.pass, instructions, "strict")).toEqual([true]);
    expect(followsInstructions(c.fail, instructions, "strict")).toEqual([false]);
    // Loose is an upper bound of strict.
    expect(followsInstructions(c.pass, instructions, "loose")).toEqual([true]);
  });

  it.each(CASES.filter((c) => c.looseOnly !== undefined).map((c) => [c.id, c] as const))("%s: loose accepts what strict rejects", (_id, c) => {
    const instructions = parseIFEvalInstructions([c.id], [c.args ?? {}]);
    expect(followsInstructions(c.looseOnly!, instructions, "strict")).toEqual([false]);
    expect(followsInstructions(c.looseOnly!, instructions, "loose")).toEqual([true]);
  });

  it("an empty response follows nothing, even forbidden-word or no-comma rules", () => {
    const instructions = parseIFEvalInstructions(["punctuation:no_comma", "keywords:forbidden_words"], [{}, { forbidden_words: ["x"] }]);
    expect(followsInstructions("  ", instructions, "loose")).toEqual([false, false]);
  });
});

describe("loose variants", () => {
  it("are IFEval's eight", () => {
    expect(looseVariants("*a*\nb\n*c*")).toEqual(["*a*\nb\n*c*", "b\n*c*", "*a*\nb", "b", "a\nb\nc", "b\nc", "a\nb", "b"]);
  });
});

describe("parseIFEvalInstructions", () => {
  it("drops null kwargs (IFEval's unused arguments) and accepts missing kwargs for argument-less checkers", () => {
    const parsed = parseIFEvalInstructions(["length_constraints:number_words", "punctuation:no_comma"], [
      { num_words: 3, relation: "at least", keywords: null },
      null,
    ]);
    expect(parsed).toEqual([
      { id: "length_constraints:number_words", args: { num_words: 3, relation: "at least" } },
      { id: "punctuation:no_comma", args: {} },
    ]);
    expect(parseIFEvalInstructions(["startend:quotation"], undefined)).toHaveLength(1);
  });

  it("rejects unknown or unsupported ids naming the index", () => {
    const unsupported = (): unknown => parseIFEvalInstructions(["punctuation:no_comma", "language:response_language"], [{}, { language: "fr" }]);
    expect(unsupported).toThrow(expect.objectContaining({ code: "INVALID_ARGUMENT" }));
    expect(unsupported).toThrow(/IFEval row: instruction_id_list\[1\]: unknown or unsupported instruction "language:response_language"/);
    expect(() => parseIFEvalInstructions([], [])).toThrow(/instruction_id_list/);
    expect(() => parseIFEvalInstructions("punctuation:no_comma", [])).toThrow(/instruction_id_list/);
  });

  it("rejects bad kwargs naming the field", () => {
    expect(() => parseIFEvalInstructions(["length_constraints:number_words"], [{ num_words: 3, relation: "at most" }])).toThrow(
      /IFEval row: kwargs\[0\]\.relation/,
    );
    expect(() => parseIFEvalInstructions(["length_constraints:number_words"], [{ relation: "at least" }])).toThrow(/kwargs\[0\]\.num_words/);
    expect(() => parseIFEvalInstructions(["keywords:letter_frequency"], [{ letter: "ab", let_frequency: 1, let_relation: "at least" }])).toThrow(
      /kwargs\[0\]\.letter/,
    );
    expect(() => parseIFEvalInstructions(["punctuation:no_comma"], [{ typo: 1 }])).toThrow(/typo/);
    expect(() => parseIFEvalInstructions(["punctuation:no_comma", "startend:quotation"], [{}])).toThrow(/kwargs: expected an array of 2/);
  });
});

describe("ifevalScore and ifevalReward", () => {
  const instructions = parseIFEvalInstructions(
    ["punctuation:no_comma", "length_constraints:number_words"],
    [{}, { num_words: 4, relation: "at least" }],
  );

  it("scores the first answer block with TorchRL's weights and format bonus", () => {
    const s = ifevalScore("<think>plan</think><answer>four words, one comma</answer>", instructions);
    expect(s.scored).toBe("four words, one comma");
    expect(s.instLevelStrictAcc).toEqual([false, true]);
    expect(s.promptLevelStrictAcc).toBe(false);
    // 0.4·0 + 0.3·0.5 + 0.2·0 + 0.1·0.5 + 0.1 (one answer) + 0.05 (one think)
    expect(s.reward).toBeCloseTo(0.35, 12);
    const perfect = ifevalScore("<answer>four words no comma</answer><|im_end|>", instructions);
    expect(perfect.reward).toBeCloseTo(1.1, 12);
  });

  it("follows nothing without an answer block unless asked to score the whole response", () => {
    const text = "four words no comma";
    expect(ifevalScore(text, instructions)).toMatchObject({ hasAnswer: false, promptLevelLooseAcc: false, reward: 0 });
    expect(ifevalScore(text, instructions, { scoreWholeResponse: true }).reward).toBeCloseTo(1.0, 12);
  });

  it("all-pass and fraction rewards through the weights", () => {
    const acc = { promptLevelStrictAcc: false, instLevelStrictAcc: [true, false, true, true], promptLevelLooseAcc: true, instLevelLooseAcc: [true, true, true, true] };
    const none = { answers: 0, thinks: 0 };
    expect(ifevalReward(acc, none, { formatWeights: [1, 0, 0, 0] })).toBe(0);
    expect(ifevalReward(acc, none, { formatWeights: [0, 1, 0, 0] })).toBe(0.75);
    expect(ifevalReward(acc, { answers: 2, thinks: 1 }, { formatWeights: [0, 0, 1, 0] })).toBe(1.05);
  });

  it("rejects bad options naming the field", () => {
    expect(() => ifevalScore("x", instructions, { formatWeights: [1, 2] as never })).toThrow(/ifevalScore options\.formatWeights/);
  });
});
