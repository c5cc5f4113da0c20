// History and HistoryBatch: validation, immutability, chat-template rendering and parsing (sdk/data).
import { describe, expect, it } from "vitest";
import {
  BatchSizeMismatchError,
  IndexOutOfRangeError,
  ShapeMismatchError,
  Tensor,
} from "../../sdk/tensordict/index.js";
import {
  ChatParseError,
  chatTemplateNames,
  delimitedChatTemplate,
  getChatTemplate,
  History,
  HistoryBatch,
  InvalidHistoryError,
  isCompleteMessage,
  registerChatTemplate,
  type ChatMessage,
} from "../../sdk/data/index.js";
import { InvalidArgumentError } from "../../bridge/index.js";
import { expectError } from "./tensordict.helpers.js";

const chat: ChatMessage[] = [
  { role: "system", content: "You are terse." },
  { role: "user", content: "2+2?" },
  { role: "assistant", content: "4" },
];

const chatText = "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n4<|im_end|>\n";

/** A value the types forbid, to test runtime validation of untyped (JavaScript) callers. */
function untyped(value: unknown): never {
  return value as never;
}

describe("History construction", () => {
  it("builds from messages, keeps them in order and gives them back from toJSON", () => {
    const h = History.from(chat);
    expect(h.length).toBe(3);
    expect(h.messages.map((m) => m.role)).toEqual(["system", "user", "assistant"]);
    expect(h.toJSON()).toEqual(chat);
    expect(JSON.parse(JSON.stringify(h))).toEqual(chat);
    expect(History.from(h)).toBe(h);
    expect(History.from(new Set(chat)).equals(h)).toBe(true);
    expect(History.EMPTY.length).toBe(0);
    expect(History.from([]).equals(History.EMPTY)).toBe(true);
    expect(String(h)).toBe("History(3 messages: system, user, assistant)");
  });

  it("accepts other roles, tool calls, tool responses and names, and normalizes optional fields", () => {
    const h = History.from([
      { role: "<none>", content: "" },
      {
        role: "assistant",
        content: "calling",
        toolCalls: [{ name: "add", arguments: { a: 1, b: [2, { c: null }] }, id: "call_0" }],
      },
      { role: "tool", content: "3", name: "add", toolResponses: ["3"] },
      untyped({ role: "user", content: "ok", name: undefined, isComplete: true }),
      { role: "assistant", content: "partial", isComplete: false },
    ]);
    expect(h.at(3)).toEqual({ role: "user", content: "ok" });
    expect(Object.keys(h.at(3)!)).toEqual(["role", "content"]);
    expect(h.at(-1)).toEqual({ role: "assistant", content: "partial", isComplete: false });
    expect(h.at(1)?.toolCalls?.[0]?.arguments).toEqual({ a: 1, b: [2, { c: null }] });
    expect(h.at(2)?.name).toBe("add");
    expect(isCompleteMessage(h.at(3)!)).toBe(true);
    expect(isCompleteMessage(h.last!)).toBe(false);
    expect(h.isComplete).toBe(false);
    expect(h.slice(0, -1).isComplete).toBe(true);
  });

  it("copies and freezes its messages deeply", () => {
    const input = [{ role: "assistant", content: "x", toolCalls: [{ name: "f", arguments: { list: [1] } }] }];
    const h = History.from(input);
    input[0]!.content = "changed";
    input[0]!.toolCalls[0]!.arguments.list.push(2);
    expect(h.at(0)?.content).toBe("x");
    expect(h.at(0)?.toolCalls?.[0]?.arguments).toEqual({ list: [1] });
    expect(Object.isFrozen(h.messages)).toBe(true);
    expect(Object.isFrozen(h.at(0))).toBe(true);
    expect(Object.isFrozen(h.at(0)?.toolCalls?.[0]?.arguments.list)).toBe(true);
    expect(() => {
      (h.messages as ChatMessage[]).push({ role: "user", content: "y" });
    }).toThrow(TypeError);
  });
});

describe("History validation", () => {
  it("names the message index and the field of a role of the wrong type", () => {
    const err = expectError(
      () => History.from([{ role: "user", content: "a" }, untyped({ role: 7, content: "b" })]),
      InvalidHistoryError,
      "INVALID_ARGUMENT",
    );
    expect(err).toBeInstanceOf(InvalidArgumentError);
    expect(err.messageIndex).toBe(1);
    expect(err.field).toBe("role");
    expect(err.row).toBeUndefined();
    expect(err.message).toBe('History.from: message 1, field "role": expected string, got a number');
  });

  it("names a missing content field", () => {
    const err = expectError(() => History.from([untyped({ role: "user" })]), InvalidHistoryError, "INVALID_ARGUMENT");
    expect(err.messageIndex).toBe(0);
    expect(err.field).toBe("content");
    expect(err.message).toContain('message 0, field "content": is missing (expected string)');
  });

  it("rejects empty roles, unknown fields (with a camelCase hint), bad tool calls and non-objects", () => {
    const cases: [unknown, string | undefined, string][] = [
      [{ role: "", content: "a" }, "role", "must not be empty"],
      [{ role: "assistant", content: "a", tool_calls: [] }, "tool_calls", 'did you mean "toolCalls"?'],
      [{ role: "assistant", content: "a", extra: 1 }, "extra", "a message has role, content, name, toolCalls, toolResponses, isComplete"],
      [{ role: "assistant", content: "a", toolCalls: [{ name: "f", arguments: [1] }] }, "toolCalls[0].arguments", "expected a plain object, got an array"],
      [{ role: "assistant", content: "a", toolCalls: [{ name: "f" }] }, "toolCalls[0].arguments", "is missing"],
      [{ role: "assistant", content: "a", toolCalls: [{ name: "f", arguments: { x: Number.NaN } }] }, "toolCalls[0].arguments.x", "is not a JSON value"],
      [{ role: "assistant", content: "a", toolCalls: [{ name: "f", arguments: {}, args: {} }] }, "toolCalls[0].args", "a tool call has name, arguments, id"],
      [{ role: "tool", content: "a", toolResponses: "3" }, "toolResponses", "expected an array, got a string"],
      [{ role: "user", content: "a", isComplete: "no" }, "isComplete", "expected boolean"],
      ["hello", undefined, "expected a message object { role, content }, got a string"],
      [null, undefined, "got null"],
    ];
    for (const [message, field, text] of cases) {
      const err = expectError(() => History.from([untyped(message)]), InvalidHistoryError, "INVALID_ARGUMENT");
      expect(err.field, JSON.stringify(message)).toBe(field);
      expect(err.messageIndex).toBe(0);
      expect(err.message).toContain(text);
    }
  });

  it("rejects a non-iterable input", () => {
    const err = expectError(() => History.from(untyped({ role: "user", content: "a" })), InvalidArgumentError, "INVALID_ARGUMENT");
    expect(err.message).toBe("History.from: expected an array of messages, got an object");
  });
});

describe("History append / extend / slice / equals", () => {
  it("returns new histories and leaves the original unchanged", () => {
    const h = History.from(chat.slice(0, 2));
    const h2 = h.append({ role: "assistant", content: "4" });
    const h3 = h2.extend([{ role: "user", content: "and 3+3?" }, { role: "assistant", content: "6" }]);
    expect(h.length).toBe(2);
    expect(h2.length).toBe(3);
    expect(h3.length).toBe(5);
    expect(h2.equals(History.from(chat))).toBe(true);
    expect(h3.slice(0, 3).equals(h2)).toBe(true);
    expect(h3.slice(-2).toJSON()).toEqual([{ role: "user", content: "and 3+3?" }, { role: "assistant", content: "6" }]);
    expect(h.extend(History.from([{ role: "assistant", content: "4" }])).equals(h2)).toBe(true);
    expect(h.extend([])).toBe(h);
    expect(h3.last?.content).toBe("6");
    expect(History.EMPTY.last).toBeUndefined();
  });

  it("numbers appended messages after the existing ones in errors", () => {
    const h = History.from(chat);
    expect(expectError(() => h.append(untyped({ role: "user", content: 1 })), InvalidHistoryError, "INVALID_ARGUMENT").messageIndex).toBe(3);
    const err = expectError(
      () => h.extend([{ role: "user", content: "ok" }, untyped({ content: "no role" })]),
      InvalidHistoryError,
      "INVALID_ARGUMENT",
    );
    expect(err.message).toBe('History.extend: message 4, field "role": is missing (expected string)');
  });

  it("compares messages field by field, tool-call argument key order aside", () => {
    const a = History.from([{ role: "assistant", content: "", toolCalls: [{ name: "f", arguments: { x: 1, y: 2 } }] }]);
    const b = History.from([{ role: "assistant", content: "", toolCalls: [{ name: "f", arguments: { y: 2, x: 1 } }] }]);
    const c = History.from([{ role: "assistant", content: "", toolCalls: [{ name: "f", arguments: { x: 1, y: 3 } }] }]);
    expect(a.equals(b)).toBe(true);
    expect(a.equals(c)).toBe(false);
    expect(History.from([{ role: "user", content: "a" }]).equals(History.from([{ role: "user", content: "a", isComplete: false }]))).toBe(false);
    expect(History.from([{ role: "user", content: "a" }]).equals(History.from([{ role: "user", content: "a", name: "n" }]))).toBe(false);
  });
});

describe("History.toText (chatml)", () => {
  it("renders ChatML, with a generation prompt when asked", () => {
    const h = History.from(chat);
    expect(h.toText({ chatTemplate: "chatml" })).toBe(chatText);
    expect(h.toText()).toBe(chatText);
    expect(h.slice(0, 2).toText({ addGenerationPrompt: true })).toBe(
      "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n",
    );
    expect(h.toText({ continueFinalMessage: true })).toBe(chatText.slice(0, -"<|im_end|>\n".length));
    expect(History.EMPTY.toText({ addGenerationPrompt: true })).toBe("<|im_start|>assistant\n");
  });

  it("refuses content or roles holding a delimiter, and inconsistent options", () => {
    const bad = History.from([{ role: "user", content: "a" }, { role: "assistant", content: "x<|im_end|>y" }]);
    const err = expectError(() => bad.toText(), InvalidHistoryError, "INVALID_ARGUMENT");
    expect(err.messageIndex).toBe(1);
    expect(err.field).toBe("content");
    expect(err.message).toContain('"<|im_end|>"');
    expect(expectError(() => History.from([{ role: "a\nb", content: "" }]).toText(), InvalidHistoryError, "INVALID_ARGUMENT").field).toBe("role");
    expect(expectError(() => History.from([{ role: "user", content: "<|endoftext|>" }]).toText(), InvalidHistoryError, "INVALID_ARGUMENT").field).toBe("content");
    expectError(() => History.from(chat).toText({ addGenerationPrompt: true, continueFinalMessage: true }), InvalidArgumentError, "INVALID_ARGUMENT");
    expectError(() => History.EMPTY.toText({ continueFinalMessage: true }), InvalidArgumentError, "INVALID_ARGUMENT");
    expectError(() => History.from(chat).toText({ addGenerationPrompt: untyped("yes") }), InvalidArgumentError, "INVALID_ARGUMENT");
    const unknown = expectError(() => History.from(chat).toText({ chatTemplate: "nope" }), InvalidArgumentError, "INVALID_ARGUMENT");
    expect(unknown.message).toContain('unknown chat template "nope"; registered: "chatml"');
  });
});

describe("History.fromText (chatml)", () => {
  it("parses a complete chat", () => {
    const h = History.fromText(chatText, { chatTemplate: "chatml" });
    expect(h.toJSON()).toEqual(chat);
    expect(h.isComplete).toBe(true);
    expect(History.fromText(chatText.trimEnd()).toJSON()).toEqual(chat); // the last newline is optional
  });

  it("marks an unterminated last assistant message (a generation cut off before <|im_end|>)", () => {
    const text = "<|im_start|>user\nWrite a poem.<|im_end|>\n<|im_start|>assistant\nRoses are red,\nviolets";
    const h = History.fromText(text);
    expect(h.toJSON()).toEqual([
      { role: "user", content: "Write a poem." },
      { role: "assistant", content: "Roses are red,\nviolets", isComplete: false },
    ]);
    expect(h.isComplete).toBe(false);
    expect(h.last?.isComplete).toBe(false);
    expect(h.toText({ continueFinalMessage: true })).toBe(text);
  });

  it("parses a trailing generation prompt as an incomplete assistant message with empty content", () => {
    const prompt = History.from(chat.slice(0, 2)).toText({ addGenerationPrompt: true });
    const h = History.fromText(prompt);
    expect(h.length).toBe(3);
    expect(h.last).toEqual({ role: "assistant", content: "", isComplete: false });
    expect(h.slice(0, -1).toJSON()).toEqual(chat.slice(0, 2));
    expect(h.slice(0, -1).toText({ addGenerationPrompt: true })).toBe(prompt);
    expect(h.toText({ continueFinalMessage: true })).toBe(prompt);
  });

  it("keeps content verbatim: newlines, surrounding whitespace and special-looking text", () => {
    const messages: ChatMessage[] = [
      { role: "user", content: "\nline 1\n\nline 2\n" },
      { role: "assistant", content: "<think>hmm</think>\n<answer>4</answer>" },
      { role: "user", content: "  <|im_start <|user|> im_end|> <|IM_END|> <|endoftext <s></s> [INST] {{ x }}  " },
      { role: "assistant", content: "<tool_call>\nnot json\n</tool_call>" },
      { role: "user", content: "" },
      { role: "assistant", content: "unicode: é 漢字 🙂 \t\r\n" },
    ];
    const text = History.from(messages).toText();
    expect(History.fromText(text).toJSON()).toEqual(messages);
  });

  it("accepts <|endoftext|> as an end token, whitespace around messages, and an empty text", () => {
    const h = History.fromText("\n  <|im_start|>user\nhi<|endoftext|>\n<|im_start|>assistant\nyo<|im_end|><|endoftext|>\n");
    expect(h.toJSON()).toEqual([{ role: "user", content: "hi" }, { role: "assistant", content: "yo" }]);
    expect(History.fromText("").length).toBe(0);
    expect(History.fromText(" \n").length).toBe(0);
  });

  it("ends a message cut off by the next <|im_start|> as incomplete", () => {
    const h = History.fromText("<|im_start|>user\nhi<|im_start|>assistant\nyo<|im_end|>\n");
    expect(h.toJSON()).toEqual([{ role: "user", content: "hi", isComplete: false }, { role: "assistant", content: "yo" }]);
  });

  it("extracts Hermes/Qwen tool calls and tool responses, keeping the content", () => {
    const call = '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>';
    const text =
      `<|im_start|>assistant\nLet me add.\n${call}\n<tool_call>\n{"name": "neg", "arguments": "{\\"x\\": 3}"}\n</tool_call><|im_end|>\n` +
      "<|im_start|>tool\n<tool_response>\n3\n</tool_response>\n<tool_response>\n-3\n</tool_response><|im_end|>\n";
    const h = History.fromText(text);
    expect(h.at(0)?.toolCalls).toEqual([
      { name: "add", arguments: { a: 1, b: 2 } },
      { name: "neg", arguments: { x: 3 } },
    ]);
    expect(h.at(0)?.content).toContain(call);
    expect(h.at(1)?.toolResponses).toEqual(["3", "-3"]);
    expect(History.fromText(h.toText()).equals(h)).toBe(true);
    const plain = History.fromText(text, { parseTools: false });
    expect(plain.at(0)?.toolCalls).toBeUndefined();
    expect(plain.at(1)?.toolResponses).toBeUndefined();
    // Malformed calls are skipped (the content still shows them).
    const junk = History.fromText('<|im_start|>assistant\n<tool_call>{"arguments": {}}</tool_call><tool_call>[1]</tool_call>');
    expect(junk.at(0)?.toolCalls).toBeUndefined();
  });

  it("reports text outside the format with its offset", () => {
    const cases: [string, number, string][] = [
      ["hello <|im_start|>user\nhi<|im_end|>", 0, 'expected "<|im_start|>" or the end of the text, found "hello <|im_start|>user\\nhi<|im_…"'],
      ["<|im_start|>user\nhi<|im_end|>\ntrailing", 30, 'found "trailing"'],
      ["<|im_start|>user\nhi<|im_end|>\n<|im_start|>assist", 42, "the role header has no end"],
      ["<|im_start|>user<|im_end|>\n", 12, "the role header has no end"],
      ["<|im_start|>\nhi<|im_end|>", 12, "empty role"],
    ];
    for (const [text, offset, reason] of cases) {
      const err = expectError(() => History.fromText(text), ChatParseError, "CHAT_PARSE");
      expect(err.offset, text).toBe(offset);
      expect(err.template).toBe("chatml");
      expect(err.message).toContain(reason);
    }
    const err = expectError(() => History.fromText("<|im_start|>user\nhi<|im_end|>\nxx"), ChatParseError, "CHAT_PARSE");
    expect(err.messageIndex).toBe(1);
    expectError(() => History.fromText(untyped(3)), InvalidArgumentError, "INVALID_ARGUMENT");
  });
});

describe("render → fromText round trip", () => {
  const histories: ChatMessage[][] = [
    [],
    chat,
    [{ role: "user", content: "" }],
    [{ role: "system", content: "a\nb" }, { role: "user", content: "\n\n" }, { role: "assistant", content: " x " }],
    [{ role: "custom-role", content: "<|im_start" }, { role: "tool", content: "im_end|>" }],
  ];

  it("gives back the same messages, with and without a generation prompt", () => {
    for (const messages of histories) {
      const h = History.from(messages);
      expect(History.fromText(h.toText()).equals(h)).toBe(true);
      const withPrompt = History.fromText(h.toText({ addGenerationPrompt: true }));
      expect(withPrompt.slice(0, -1).equals(h)).toBe(true);
      expect(withPrompt.last).toEqual({ role: "assistant", content: "", isComplete: false });
    }
  });

  it("gives back an incomplete last message with continueFinalMessage, and the same text", () => {
    const h = History.from([...chat.slice(0, 2), { role: "assistant", content: "Four, beca", isComplete: false }]);
    const text = h.toText({ continueFinalMessage: true });
    expect(text.endsWith("<|im_start|>assistant\nFour, beca")).toBe(true);
    expect(History.fromText(text).equals(h)).toBe(true);
    expect(History.fromText(text).toText({ continueFinalMessage: true })).toBe(text);
  });
});

describe("chat template registry", () => {
  it("lists chatml and registers delimited formats", () => {
    expect(chatTemplateNames()).toContain("chatml");
    expect(getChatTemplate("chatml").name).toBe("chatml");
    const llamaLike = delimitedChatTemplate({
      name: "test-llama3-like",
      prefix: "<|begin_of_text|>",
      messageStart: "<|start_header_id|>",
      headerEnd: "<|end_header_id|>\n\n",
      messageEnd: "<|eot_id|>",
      extraEndTokens: ["<|end_of_text|>"],
    });
    registerChatTemplate(llamaLike);
    const h = History.from(chat);
    const text = h.toText({ chatTemplate: "test-llama3-like", addGenerationPrompt: true });
    expect(text).toBe(
      "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>" +
        "<|start_header_id|>user<|end_header_id|>\n\n2+2?<|eot_id|>" +
        "<|start_header_id|>assistant<|end_header_id|>\n\n4<|eot_id|>" +
        "<|start_header_id|>assistant<|end_header_id|>\n\n",
    );
    const back = History.fromText(text, { chatTemplate: "test-llama3-like" });
    expect(back.slice(0, -1).equals(h)).toBe(true);
    expect(back.last?.isComplete).toBe(false);
    // A template object works without registering it.
    expect(History.fromText(text, { chatTemplate: llamaLike }).equals(back)).toBe(true);
    expectError(() => { registerChatTemplate(llamaLike); }, InvalidArgumentError, "INVALID_ARGUMENT");
    registerChatTemplate(llamaLike, { replace: true });
    expectError(() => delimitedChatTemplate({ name: "x", messageStart: "<s>", headerEnd: "", messageEnd: "</s>" }), InvalidArgumentError, "INVALID_ARGUMENT");
  });

  it("validates what a custom parser returns", () => {
    const broken = { name: "broken", render: () => "", parse: () => [untyped({ role: "user" })] };
    const err = expectError(() => History.fromText("x", { chatTemplate: broken }), InvalidHistoryError, "INVALID_ARGUMENT");
    expect(err.message).toBe('History.fromText (broken): message 0, field "content": is missing (expected string)');
  });
});

describe("HistoryBatch", () => {
  const rows: ChatMessage[][] = [
    [{ role: "user", content: "a" }],
    [{ role: "user", content: "b" }],
    [{ role: "user", content: "c" }, { role: "assistant", content: "C" }],
  ];

  it("builds from histories or message arrays, one per row", () => {
    const batch = HistoryBatch.from([History.from(rows[0]!), rows[1]!, rows[2]!]);
    expect(batch.length).toBe(3);
    expect(batch.batchSize).toEqual([3]);
    expect(batch.toJSON()).toEqual(rows);
    expect(batch.row(-1).length).toBe(2);
    expect([...batch].map((h) => h.length)).toEqual([1, 1, 2]);
    expect(HistoryBatch.stack(batch.rows).equals(batch)).toBe(true);
    expect(HistoryBatch.cat([batch.index({ stop: 1 }), batch.index({ start: 1 })]).equals(batch)).toBe(true);
    expect(HistoryBatch.from([]).length).toBe(0);
    expect(Object.isFrozen(batch.rows)).toBe(true);
    expect(String(batch)).toBe("HistoryBatch(3 rows)");
  });

  it("names the row, the message and the field of a bad message", () => {
    const err = expectError(
      () => HistoryBatch.from([rows[0]!, [{ role: "user", content: "ok" }, untyped({ role: "user", content: null })]]),
      InvalidHistoryError,
      "INVALID_ARGUMENT",
    );
    expect([err.row, err.messageIndex, err.field]).toEqual([1, 1, "content"]);
    expect(err.message).toBe('HistoryBatch.from: row 1, message 1, field "content": expected string, got null');
    const notRow = expectError(() => HistoryBatch.from([rows[0]!, untyped("text")]), InvalidHistoryError, "INVALID_ARGUMENT");
    expect(notRow.row).toBe(1);
    expect(notRow.message).toBe("HistoryBatch.from: row 1: expected a History or an array of messages, got a string");
    expect(expectError(() => HistoryBatch.stack([History.EMPTY, untyped(rows[0])]), InvalidHistoryError, "INVALID_ARGUMENT").row).toBe(1);
    expectError(() => HistoryBatch.cat([untyped(rows)]), InvalidArgumentError, "INVALID_ARGUMENT");
  });

  it("indexes rows with integers, ranges, masks and index arrays", () => {
    const batch = HistoryBatch.from(rows);
    expect(batch.index(1).toJSON()).toEqual(rows[1]);
    expect(batch.index(-1).toJSON()).toEqual(rows[2]);
    expect(batch.index([2, 0, 2]).toJSON()).toEqual([rows[2], rows[0], rows[2]]);
    expect(batch.index([-1]).toJSON()).toEqual([rows[2]]);
    expect(batch.index(Int32Array.from([1])).toJSON()).toEqual([rows[1]]);
    expect(batch.index([true, false, true]).toJSON()).toEqual([rows[0], rows[2]]);
    expect(batch.index(Tensor.from([false, true, false], { dtype: "bool" })).toJSON()).toEqual([rows[1]]);
    expect(batch.index({ start: 0, step: 2 }).toJSON()).toEqual([rows[0], rows[2]]);
    expect(batch.index({ start: 5 }).length).toBe(0);
    expect(batch.index(1)).toBe(batch.rows[1]);
    expectError(() => batch.index(3), IndexOutOfRangeError, "INDEX_OUT_OF_RANGE");
    expectError(() => batch.index([0, -4]), IndexOutOfRangeError, "INDEX_OUT_OF_RANGE");
    expectError(() => batch.index([true, false]), ShapeMismatchError, "SHAPE_MISMATCH");
    expectError(() => batch.row(0.5), InvalidArgumentError, "INVALID_ARGUMENT");
  });

  it("appends per row for multi-turn, leaving the source batch unchanged", () => {
    const batch = HistoryBatch.from(rows);
    const next = batch.appendEach([
      { role: "assistant", content: "A" },
      null,
      [{ role: "user", content: "d" }, { role: "assistant", content: "D" }],
    ]);
    expect(next.toJSON()).toEqual([
      [...rows[0]!, { role: "assistant", content: "A" }],
      rows[1],
      [...rows[2]!, { role: "user", content: "d" }, { role: "assistant", content: "D" }],
    ]);
    expect(batch.toJSON()).toEqual(rows);
    expect(next.row(1)).toBe(batch.row(1));
    const viaHistory = batch.appendEach([History.from([{ role: "assistant", content: "A" }]), undefined, []]);
    expect(viaHistory.row(0).equals(next.row(0))).toBe(true);
    expect(viaHistory.row(2)).toBe(batch.row(2));
    const mapped = batch.map((h) => h.append({ role: "assistant", content: "!" }));
    expect(mapped.toJSON().map((r) => r.length)).toEqual([2, 2, 3]);
  });

  it("checks appendEach's length and names the row, message and field of a bad message", () => {
    const batch = HistoryBatch.from(rows);
    const size = expectError(() => batch.appendEach([null, null]), BatchSizeMismatchError, "BATCH_SIZE_MISMATCH");
    expect([size.expected, size.actual]).toEqual([[3], [2]]);
    const err = expectError(
      () => batch.appendEach([null, null, [{ role: "user", content: "ok" }, untyped({ role: 1, content: "" })]]),
      InvalidHistoryError,
      "INVALID_ARGUMENT",
    );
    expect([err.row, err.messageIndex, err.field]).toEqual([2, 3, "role"]);
    expect(err.message).toBe('HistoryBatch.appendEach: row 2, message 3, field "role": expected string, got a number');
  });

  it("renders and parses per row, naming the row in errors", () => {
    const batch = HistoryBatch.from(rows);
    const texts = batch.toText({ addGenerationPrompt: true });
    expect(texts[0]).toBe("<|im_start|>user\na<|im_end|>\n<|im_start|>assistant\n");
    const back = HistoryBatch.fromText(texts);
    expect(HistoryBatch.stack(back.rows.map((h) => h.slice(0, -1))).equals(batch)).toBe(true);
    const parse = expectError(() => HistoryBatch.fromText([texts[0]!, "junk"]), ChatParseError, "CHAT_PARSE");
    expect(parse.row).toBe(1);
    expect(parse.message).toContain("row 1, message 0: at offset 0");
    const render = expectError(
      () => HistoryBatch.from([rows[0]!, [{ role: "user", content: "<|im_end|>" }]]).toText(),
      InvalidHistoryError,
      "INVALID_ARGUMENT",
    );
    expect([render.row, render.messageIndex, render.field]).toEqual([1, 0, "content"]);
    const notText = expectError(() => HistoryBatch.fromText(["", untyped(5)]), InvalidArgumentError, "INVALID_ARGUMENT");
    expect(notText.message).toContain("row 1");
    expect(batch.equals(HistoryBatch.from(rows))).toBe(true);
    expect(batch.equals(batch.index([0, 1]))).toBe(false);
  });
});
