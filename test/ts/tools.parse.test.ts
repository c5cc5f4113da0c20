// Finding tool calls in assistant messages: ```python blocks, TorchRL's <tool> layouts, Hermes <tool_call> blocks
// and the structured toolCalls field, with malformed calls reported rather than dropped.
import { describe, expect, it } from "vitest";
import { History } from "../../sdk/index.js";
import { extractPythonBlocks, hasToolCall, parseToolCalls } from "../../sdk/envs/tools/index.js";

describe("extractPythonBlocks", () => {
  it("finds ```python blocks in order, as TorchRL's PythonInterpreter does", () => {
    const text = "First:\n```python\na = 1\nprint(a)\n```\nthen\n```python\nprint(2)\n```\nDone.";
    expect(extractPythonBlocks(text)).toEqual(["a = 1\nprint(a)", "print(2)"]);
  });

  it("accepts ```py and ```python3, trailing spaces after the tag and a fence right after the code", () => {
    expect(extractPythonBlocks("```py\nx = 1\n```")).toEqual(["x = 1"]);
    expect(extractPythonBlocks("```python3  \nx = 2\n```")).toEqual(["x = 2"]);
    expect(extractPythonBlocks("```python\nprint(3)```")).toEqual(["print(3)"]);
  });

  it("ignores other languages, inline mentions and unterminated blocks", () => {
    expect(extractPythonBlocks("```bash\nls\n```")).toEqual([]);
    expect(extractPythonBlocks("use ```python to mark code")).toEqual([]);
    expect(extractPythonBlocks("```python\nprint(1)\n")).toEqual([]);
  });
});

describe("parseToolCalls", () => {
  it("reads TorchRL's <tool>name\\n{json}</tool> layout, with empty arguments as {}", () => {
    const calls = parseToolCalls('Let me add.\n<tool>add\n{"a": 2, "b": 3}</tool>\n<tool>clock\n</tool>');
    expect(calls).toEqual([
      { ok: true, name: "add", arguments: { a: 2, b: 3 }, format: "tool-block" },
      { ok: true, name: "clock", arguments: {}, format: "tool-block" },
    ]);
  });

  it("reads server-qualified MCP names, the XMLBlockParser attribute layout and a JSON body", () => {
    const text =
      '<tool>calc.add\n{"a": 1}</tool> <tool name="search" tag="A">{"query": "torchrl"}</tool> ' +
      '<tool>{"name": "mul", "arguments": {"a": 4, "b": 5}}</tool>';
    expect(parseToolCalls(text)).toEqual([
      { ok: true, name: "calc.add", arguments: { a: 1 }, format: "tool-block" },
      { ok: true, name: "search", arguments: { query: "torchrl" }, id: "A", format: "tool-attr" },
      { ok: true, name: "mul", arguments: { a: 4, b: 5 }, format: "tool-json" },
    ]);
  });

  it("reads Hermes <tool_call> blocks (arguments may be a JSON string) in order with <tool> blocks", () => {
    const text = '<tool_call>\n{"name": "b", "arguments": "{\\"x\\": 1}"}\n</tool_call> then <tool>a\n{}</tool>';
    const calls = parseToolCalls(text);
    expect(calls.map((c) => (c.ok ? [c.name, c.format, c.arguments] : null))).toEqual([
      ["b", "hermes", { x: 1 }],
      ["a", "tool-block", {}],
    ]);
  });

  it("reports malformed calls with the tool name (when readable) and the reason", () => {
    const calls = parseToolCalls(
      '<tool>add\n{"a": 2,}</tool><tool>add\n[1, 2]</tool><tool>\n{"a": 1}</tool><tool>{"arguments": {}}</tool><tool_call>nope</tool_call>',
    );
    expect(calls.every((c) => !c.ok)).toBe(true);
    const bad = calls.map((c) => (c.ok ? null : { name: c.name, reason: c.reason, format: c.format }));
    expect(bad[0]).toMatchObject({ name: "add", format: "tool-block" });
    expect(bad[0]?.reason).toMatch(/^arguments are not valid JSON/);
    expect(bad[1]).toEqual({ name: "add", reason: "arguments must be a JSON object", format: "tool-block" });
    expect(bad[2]).toMatchObject({ name: null, format: "tool-json" });
    expect(bad[3]).toMatchObject({ name: null, reason: 'the call needs a "name" string naming a tool', format: "tool-json" });
    expect(bad[4]).toMatchObject({ name: null, format: "hermes" });
    expect(bad[4]?.reason).toMatch(/^the call is not valid JSON/);
  });

  it("rejects a first line that is not a tool name", () => {
    const [call] = parseToolCalls("<tool>do the thing please\n{}</tool>");
    expect(call).toMatchObject({ ok: false, name: "do the thing please" });
    expect(call?.ok === false && call.reason).toBe('"do the thing please" is not a tool name');
  });

  it("uses a message's toolCalls field when it has one, instead of searching the text again", () => {
    const h = History.fromText('<|im_start|>assistant\n<tool_call>\n{"name": "add", "arguments": {"a": 1}}\n</tool_call><|im_end|>\n');
    const message = h.last!;
    expect(message.toolCalls).toHaveLength(1);
    expect(parseToolCalls(message)).toEqual([{ ok: true, name: "add", arguments: { a: 1 }, format: "message" }]);
    const withId = { role: "assistant", content: "", toolCalls: [{ name: "f", arguments: {}, id: "call-1" }] };
    expect(parseToolCalls(withId)).toEqual([{ ok: true, name: "f", arguments: {}, id: "call-1", format: "message" }]);
  });

  it("finds nothing in plain text, and hasToolCall agrees", () => {
    expect(parseToolCalls("The answer is <answer>4</answer>.")).toEqual([]);
    expect(hasToolCall("The answer is 4.")).toBe(false);
    expect(hasToolCall("```python\nprint(1)\n```")).toBe(true);
    expect(hasToolCall({ role: "assistant", content: "<tool>x\n{}</tool>" })).toBe(true);
  });
});
