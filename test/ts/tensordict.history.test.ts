// History leaves in a TensorDict: a HistoryBatch holds one conversation per batch row (TorchRL's ("history", "prompt")).
import { describe, expect, it, vi } from "vitest";
import type { WireBatch, WireHistory } from "../../bridge/wire/index.js";
import { History, HistoryBatch, InvalidHistoryError, type ChatMessage } from "../../sdk/data/index.js";
import { toolCallsToJSON } from "../../sdk/data/wire.js";
import {
  BatchSizeMismatchError,
  InvalidArgumentError,
  KeyNotFoundError,
  LeafKindMismatchError,
  Tensor,
  TensorDict,
  kindOf,
  registerLeafType,
  type LeafType,
  type TensorLeaf,
} from "../../sdk/tensordict/index.js";
import { dotted, expectError, snapshot } from "./tensordict.helpers.js";

const PROMPT = ["history", "prompt"] as const;

/** Row `i` is a one- or two-message conversation whose first content is `c<i>`. */
function conv(i: number): ChatMessage[] {
  const first: ChatMessage = { role: "user", content: `c${i}` };
  return i % 2 === 0 ? [first] : [first, { role: "assistant", content: `a${i}`, isComplete: false }];
}

function histories(n: number, offset = 0): HistoryBatch {
  return HistoryBatch.from(Array.from({ length: n }, (_, i) => conv(offset + i)));
}

/** The first content of each row, for compact assertions. */
function firsts(batch: HistoryBatch): string[] {
  return batch.rows.map((h) => h.at(0)?.content ?? "<empty>");
}

/** A TensorDict of batch size `batchSize` with ("history","prompt"), a tensor, strings and a top-level history. */
function sample(batchSize: readonly number[], offset = 0): TensorDict {
  const n = batchSize.reduce((a, b) => a * b, 1);
  return new TensorDict(
    {
      history: { prompt: histories(n, offset) },
      obs: Tensor.from(Float32Array.from({ length: n }, (_, i) => offset + i), { dtype: "float32", shape: [...batchSize] }),
      text: Array.from({ length: n }, (_, i) => `t${offset + i}`),
      chat: histories(n, offset + 100),
    },
    { batchSize },
  );
}

describe("TensorDict with History leaves: construction and access", () => {
  it("accepts a HistoryBatch under a nested key, in the constructor and with set", () => {
    const prompt = histories(3);
    const td = new TensorDict({ history: { prompt } }, { batchSize: [3] });
    expect(td.get(PROMPT)).toBe(prompt);
    expect(td.getHistory(PROMPT)).toBe(prompt);
    expect(kindOf(prompt)).toBe("history");
    expect(kindOf(td.getTensorDict("history"))).toBe("tensordict");

    const other = new TensorDict({}, { batchSize: [3] }).set(PROMPT, prompt).set("answer", histories(3, 10));
    expect(dotted(other.keys({ nested: true }))).toEqual(["history", "history.prompt", "answer"]);
    expect(dotted(other.keys({ nested: true, leavesOnly: true }))).toEqual(["history.prompt", "answer"]);
    expect(other.entries({ nested: true, leavesOnly: true }).map(([, v]) => kindOf(v))).toEqual(["history", "history"]);
    expect(other.values()[1]).toBeInstanceOf(HistoryBatch);
    expect(firsts(other.getHistory("answer"))).toEqual(["c10", "c11", "c12"]);
    expect(other.has(PROMPT)).toBe(true);
    other.del(PROMPT);
    expect(other.has(PROMPT)).toBe(false);
  });

  it("checks the number of rows against prod(batchSize), naming the key", () => {
    const err = expectError(() => new TensorDict({ history: { prompt: histories(5) } }, { batchSize: [2, 3] }), BatchSizeMismatchError, "BATCH_SIZE_MISMATCH");
    expect(err.message).toContain('["history","prompt"]');
    expect(err.message).toContain("HistoryBatch has 5 rows but batch size [2, 3] has 6");
    expect(err.actual).toEqual([5]);
    expectError(() => new TensorDict({}, { batchSize: [2] }).set(PROMPT, histories(3)), BatchSizeMismatchError, "BATCH_SIZE_MISMATCH");
    // batch size [] has one row
    expect(new TensorDict({ h: histories(1) }).getHistory("h").length).toBe(1);
  });

  it("rejects a lone History with a hint", () => {
    const err = expectError(() => new TensorDict({ h: History.from(conv(0)) } as never, { batchSize: [] }), InvalidArgumentError, "INVALID_ARGUMENT");
    expect(err.message).toContain("got History");
    expect(err.message).toContain("HistoryBatch.stack");
  });

  it("typed getters report the kind", () => {
    const td = sample([2]);
    const e1 = expectError(() => td.getHistory("text"), LeafKindMismatchError, "LEAF_KIND_MISMATCH");
    expect(e1.expected).toBe("history");
    expect(e1.actual).toBe("strings");
    const e2 = expectError(() => td.getStrings(PROMPT), LeafKindMismatchError, "LEAF_KIND_MISMATCH");
    expect(e2.message).toContain('key ["history","prompt"] holds a history value, expected a strings');
    expectError(() => td.getTensor("chat"), LeafKindMismatchError, "LEAF_KIND_MISMATCH");
    expectError(() => td.getHistory(["history", "missing"]), KeyNotFoundError, "KEY_NOT_FOUND");
    expectError(() => td.set(["chat", "inner"], histories(2)), LeafKindMismatchError, "LEAF_KIND_MISMATCH");
  });

  it("toString shows the leaf", () => {
    expect(sample([2]).toString()).toBe(
      ["TensorDict(batchSize=[2])", "  history: TensorDict", "    prompt: HistoryBatch(2 rows)", "  obs: Tensor(shape=[2], dtype=float32)", "  text: strings", "  chat: HistoryBatch(2 rows)"].join("\n"),
    );
  });
});

describe("TensorDict with History leaves: batch operations", () => {
  it("indexes with every index kind, like strings", () => {
    const td = sample([4]);
    const same = (sub: TensorDict): void => {
      // History rows follow the string rows everywhere.
      expect(firsts(sub.getHistory(PROMPT))).toEqual(sub.getStrings("text").map((t) => t.replace("t", "c")));
      expect(sub.getHistory(PROMPT).length).toBe(sub.numel());
    };
    const one = td.index(-1);
    expect(one.batchSize).toEqual([]);
    expect(firsts(one.getHistory(PROMPT))).toEqual(["c3"]);
    expect(one.getHistory(PROMPT).rows[0]).toBe(td.getHistory(PROMPT).rows[3]); // histories are shared, not copied
    for (const index of [
      { start: 1, stop: 3 },
      { start: 0, step: 2 },
      [true, false, false, true],
      Uint8Array.from([0, 1, 1, 0]),
      Tensor.from([true, true, false, true], { dtype: "bool" }),
      [3, 3, -4],
      Int32Array.from([2, 0]),
      Tensor.from([1n, 0n], { dtype: "int64" }),
    ]) {
      same(td.index(index));
    }
    expect(firsts(td.index([3, 3, -4]).getHistory(PROMPT))).toEqual(["c3", "c3", "c0"]);
    expect(firsts(td.index({ start: 0, step: 2 }).getHistory("chat"))).toEqual(["c100", "c102"]);
    const grid = td.index(Tensor.from([[0, 1], [2, 3]], { dtype: "int32" }));
    expect(grid.batchSize).toEqual([2, 2]);
    expect(firsts(grid.getHistory(PROMPT))).toEqual(["c0", "c1", "c2", "c3"]);
  });

  it("keeps row-major order over multi-dimensional batches", () => {
    const td = sample([2, 3]);
    expect(firsts(td.index(1).getHistory(PROMPT))).toEqual(["c3", "c4", "c5"]);
    expect(firsts(td.index(1, 1).getHistory(PROMPT))).toEqual(["c1", "c4"]);
    expect(firsts(td.index({ start: 0, step: 2 }, 1).getHistory(PROMPT))).toEqual(["c0", "c2", "c3", "c5"]);
    const mask = Tensor.from([[true, false, true], [false, true, false]], { dtype: "bool" });
    const masked = td.index(mask);
    expect(masked.batchSize).toEqual([3]);
    expect(firsts(masked.getHistory(PROMPT))).toEqual(["c0", "c2", "c4"]);
    expect(firsts(td.index([1, 0]).getHistory("chat"))).toEqual(["c103", "c104", "c105", "c100", "c101", "c102"]);
  });

  it("reshape, flatten, unsqueeze and squeeze keep the same HistoryBatch", () => {
    const td = sample([2, 3]);
    const prompt = td.getHistory(PROMPT);
    for (const view of [td.reshape([3, -1]), td.flatten(), td.unsqueeze(1), td.unsqueeze(0).squeeze(0), td.reshape([6, 1]).squeeze()]) {
      expect(view.getHistory(PROMPT)).toBe(prompt);
    }
    expect(td.reshape([3, 2]).index(2).getHistory(PROMPT).rows.map((h) => h.at(0)!.content)).toEqual(["c4", "c5"]);
    expect(td.flatten().batchSize).toEqual([6]);
  });

  it("split and unbind", () => {
    const td = sample([5]);
    const parts = td.split([2, 3]);
    expect(parts.map((p) => firsts(p.getHistory(PROMPT)))).toEqual([["c0", "c1"], ["c2", "c3", "c4"]]);
    expect(td.split(2).map((p) => p.getHistory("chat").length)).toEqual([2, 2, 1]);
    const grid = sample([2, 3]);
    expect(grid.unbind(1).map((p) => firsts(p.getHistory(PROMPT)))).toEqual([["c0", "c3"], ["c1", "c4"], ["c2", "c5"]]);
    expect(grid.split(1, 1)[2]!.batchSize).toEqual([2, 1]);
  });

  it("stack and cat concatenate histories in row order, along any dim", () => {
    const a = sample([2], 0);
    const b = sample([2], 10);
    const stacked = TensorDict.stack([a, b]);
    expect(stacked.batchSize).toEqual([2, 2]);
    expect(firsts(stacked.getHistory(PROMPT))).toEqual(["c0", "c1", "c10", "c11"]);
    const stacked1 = TensorDict.stack([a, b], 1);
    expect(stacked1.batchSize).toEqual([2, 2]);
    expect(firsts(stacked1.getHistory(PROMPT))).toEqual(["c0", "c10", "c1", "c11"]);
    expect(stacked1.getHistory(PROMPT).equals(HistoryBatch.from([conv(0), conv(10), conv(1), conv(11)]))).toBe(true);

    const cat = TensorDict.cat([a, b, a.index({ start: 0, stop: 1 })]);
    expect(firsts(cat.getHistory(PROMPT))).toEqual(["c0", "c1", "c10", "c11", "c0"]);
    expect(firsts(cat.getHistory("chat"))).toEqual(["c100", "c101", "c110", "c111", "c100"]);
    const grids = TensorDict.cat([sample([2, 2], 0), sample([2, 1], 10)], 1);
    expect(grids.batchSize).toEqual([2, 3]);
    expect(firsts(grids.getHistory(PROMPT))).toEqual(["c0", "c1", "c10", "c2", "c3", "c11"]);
    // Scalars stack into a batch.
    expect(firsts(TensorDict.stack(a.unbind()).getHistory(PROMPT))).toEqual(["c0", "c1"]);
  });

  it("stack and cat errors name the key and both kinds", () => {
    const a = sample([2]);
    const b = sample([2]).set(PROMPT, ["x", "y"]);
    const err = expectError(() => TensorDict.stack([a, b]), LeafKindMismatchError, "LEAF_KIND_MISMATCH");
    expect(err.key).toEqual(PROMPT);
    expect(err.expected).toBe("history");
    expect(err.actual).toBe("strings");
    expect(err.message).toBe('stack: tds[1] (tds[0] holds a history): key ["history","prompt"] holds a strings value, expected a history');
    const err2 = expectError(() => TensorDict.cat([b, a]), LeafKindMismatchError, "LEAF_KIND_MISMATCH");
    expect(err2.message).toContain('cat: tds[1] (tds[0] holds a strings): key ["history","prompt"] holds a history value');
    const c = sample([2]).exclude("chat");
    const err3 = expectError(() => TensorDict.cat([a, c]), KeyNotFoundError, "KEY_NOT_FOUND");
    expect(err3.key).toBe("chat");
    expectError(() => TensorDict.stack([a, sample([3])]), BatchSizeMismatchError, "BATCH_SIZE_MISMATCH");
  });
});

describe("TensorDict with History leaves: per-leaf operations", () => {
  it("clone gives a new HistoryBatch of the same (immutable) histories", () => {
    const td = sample([3]);
    const copy = td.clone();
    expect(copy.getHistory(PROMPT)).not.toBe(td.getHistory(PROMPT));
    expect(copy.getHistory(PROMPT).equals(td.getHistory(PROMPT))).toBe(true);
    expect(copy.getHistory(PROMPT).rows[1]).toBe(td.getHistory(PROMPT).rows[1]);
    expect(snapshot(copy)).toEqual(snapshot(td));
  });

  it("select and exclude share the leaf", () => {
    const td = sample([2]);
    const sel = td.select(PROMPT, "obs");
    expect(dotted(sel.keys({ nested: true }))).toEqual(["history", "history.prompt", "obs"]);
    expect(sel.getHistory(PROMPT)).toBe(td.getHistory(PROMPT));
    const exc = td.exclude("history", "obs", "text");
    expect(dotted(exc.keys({ nested: true }))).toEqual(["chat"]);
    expect(exc.getHistory("chat")).toBe(td.getHistory("chat"));
  });

  it("apply passes tensor leaves only and keeps histories", () => {
    const td = sample([2]);
    const seen: string[] = [];
    const out = td.apply((leaf: TensorLeaf, key) => {
      seen.push(typeof key === "string" ? key : key.join("."));
      return leaf instanceof Tensor ? leaf.to("float64") : leaf;
    });
    expect(seen).toEqual(["obs"]);
    expect(out.getTensor("obs").dtype).toBe("float64");
    expect(out.getHistory(PROMPT)).toBe(td.getHistory(PROMPT));
    expect(out.getHistory("chat")).toBe(td.getHistory("chat"));
    expect(td.apply(() => undefined).keys({ nested: true, leavesOnly: true })).toEqual([PROMPT, "text", "chat"]);
  });
});

const toolChat: ChatMessage[] = [
  { role: "system", content: "Use tools.", name: "sys" },
  { role: "user", content: "Weather in Paris?" },
  {
    role: "assistant",
    content: '<tool_call>{"name":"weather"}</tool_call>',
    toolCalls: [
      { name: "weather", arguments: { city: "Paris", days: 2, units: { t: "C" } }, id: "call-1" },
      { name: "clock", arguments: {} },
    ],
  },
  { role: "tool", content: "<tool_response>sunny</tool_response>", toolResponses: ["sunny", "é\n"] },
  { role: "assistant", content: "It is sun", isComplete: false },
];

describe("TensorDict with History leaves: wire", () => {
  it("toWire writes a WireHistory column; fromWire reads it back", () => {
    const prompt = HistoryBatch.from([toolChat, [], conv(1)]);
    const td = new TensorDict({ history: { prompt }, n: Tensor.from([1, 2, 3], { dtype: "int32" }) }, { batchSize: [3] });
    const wire = td.toWire();
    const struct = wire.columns[0]![1];
    expect(struct.kind).toBe("struct");
    const column = (struct as { columns: WireBatch["columns"] }).columns[0]![1] as WireHistory;
    expect(column.kind).toBe("history");
    expect(column.rows.length).toBe(3);
    expect(column.rows[1]).toEqual([]);
    expect(column.rows[0]).toStrictEqual([
      { role: "system", content: "Use tools.", name: "sys" },
      { role: "user", content: "Weather in Paris?" },
      {
        role: "assistant",
        content: '<tool_call>{"name":"weather"}</tool_call>',
        toolCalls: '[{"name":"weather","arguments":{"city":"Paris","days":2,"units":{"t":"C"}},"id":"call-1"},{"name":"clock","arguments":{}}]',
      },
      { role: "tool", content: "<tool_response>sunny</tool_response>", toolResponses: ["sunny", "é\n"] },
      { role: "assistant", content: "It is sun", isComplete: false },
    ]);
    const back = TensorDict.fromWire(wire);
    expect(back.getHistory(PROMPT).equals(prompt)).toBe(true);
    expect(back.getHistory(PROMPT).toJSON()).toStrictEqual(prompt.toJSON());
    expect(snapshot(back)).toEqual(snapshot(td));
  });

  it("round-trips multi-dim batches, batch [] and [0]", () => {
    for (const batchSize of [[2, 3], [], [0], [3, 0]]) {
      const td = sample(batchSize);
      const back = TensorDict.fromWire(td.toWire());
      expect(back.batchSize).toEqual(batchSize);
      expect(back.getHistory(PROMPT).equals(td.getHistory(PROMPT))).toBe(true);
      expect(snapshot(back)).toEqual(snapshot(td));
    }
  });

  it("fromWire normalizes the wire's empty values and validates messages", () => {
    const column = (rows: WireHistory["rows"]): WireBatch => ({ batchSize: [rows.length], columns: [["h", { kind: "history", rows }]] });
    const td = TensorDict.fromWire(column([[{ role: "user", content: "x", isComplete: true, toolCalls: "" }]]));
    expect(td.getHistory("h").toJSON()).toStrictEqual([[{ role: "user", content: "x" }]]);

    const bad = (rows: WireHistory["rows"]): InvalidHistoryError => expectError(() => TensorDict.fromWire(column(rows)), InvalidHistoryError, "INVALID_ARGUMENT");
    const e1 = bad([[], [{ role: "assistant", content: "", toolCalls: "[{" }]]);
    expect([e1.row, e1.messageIndex, e1.field]).toEqual([1, 0, "toolCalls"]);
    expect(e1.message).toMatch(/^fromWire: key "h": row 1, message 0, field "toolCalls": is not JSON text/);
    const e2 = bad([[{ role: "assistant", content: "", toolCalls: '{"name":"f"}' }]]);
    expect(e2.message).toContain("expected JSON text of an array, got an object");
    const e3 = bad([[{ role: "user", content: "" }, { role: "assistant", content: "", toolCalls: '[{"name":"f"}]' }]]);
    expect([e3.row, e3.messageIndex, e3.field]).toEqual([0, 1, "toolCalls[0].arguments"]);
    expect(e3.message).toContain('fromWire: key "h": row 0, message 1');
    const e4 = bad([[{ role: "", content: "" }]]);
    expect(e4.field).toBe("role");

    const nested: WireBatch = { batchSize: [2], columns: [["history", { kind: "struct", columns: [["prompt", { kind: "history", rows: [[]] }]] }]] };
    const e5 = expectError(() => TensorDict.fromWire(nested), BatchSizeMismatchError, "BATCH_SIZE_MISMATCH");
    expect(e5.message).toContain('key ["history","prompt"]: HistoryBatch has 1 rows');
  });

  it("tool calls travel as compact JSON that Python's json.dumps(separators=(',', ':'), ensure_ascii=False) reproduces", () => {
    const nums = [1e-7, 0.00001, 1.5e-7, -2.5e-6, 0.0001, 0.00012, 123.456, 1e21, 1.5e300, 5e-324, 1e16, 1e20, 0.1, -0, 3, -1e-5, 4.35e-5, 1.5e15];
    const text = toolCallsToJSON([{ name: "f", arguments: { nums, s: 'a\u0001\n\u007f\u2028é"\\\t', nested: { z: [null, true, {}], a: [] } }, id: "x" }]);
    // The expected text is Python's output for json.loads(text) (checked with CPython 3).
    expect(text).toBe(
      '[{"name":"f","arguments":{"nums":[1e-07,1e-05,1.5e-07,-2.5e-06,0.0001,0.00012,123.456,1e+21,1.5e+300,5e-324,10000000000000000,100000000000000000000,0.1,0,3,-1e-05,4.35e-05,1500000000000000],' +
        '"s":"a\\u0001\\n\u007f\u2028é\\"\\\\\\t","nested":{"z":[null,true,{}],"a":[]}},"id":"x"}]',
    );
    expect(JSON.parse(text)).toEqual([{ name: "f", arguments: { nums: nums.map((n) => (Object.is(n, -0) ? 0 : n)), s: 'a\u0001\n\u007f\u2028é"\\\t', nested: { z: [null, true, {}], a: [] } }, id: "x" }]);
    // Without such numbers it is exactly JSON.stringify.
    const calls = toolChat[2]!.toolCalls!;
    expect(toolCallsToJSON(calls)).toBe(JSON.stringify(calls));
  });

  it("round-trips through Arrow", () => {
    const td = new TensorDict(
      { history: { prompt: HistoryBatch.from([toolChat, [], conv(1), conv(2), [{ role: "user", content: "" }], conv(3)]) }, id: Tensor.from([[1, 2, 3], [4, 5, 6]], { dtype: "int64" }) },
      { batchSize: [2, 3] },
    );
    const back = TensorDict.fromArrow(td.toArrow());
    expect(back.batchSize).toEqual([2, 3]);
    expect(back.getHistory(PROMPT).equals(td.getHistory(PROMPT))).toBe(true);
    expect(back.getHistory(PROMPT).toJSON()).toStrictEqual(td.getHistory(PROMPT).toJSON());
    expect(snapshot(back)).toEqual(snapshot(td));
    for (const batchSize of [[], [0], [4]]) {
      const s = sample(batchSize);
      expect(snapshot(TensorDict.fromArrow(s.toArrow()))).toEqual(snapshot(s));
    }
  });

  it("over Arrow, an empty name and empty toolResponses come back absent (the wire's encoding of absent)", () => {
    const td = new TensorDict({ h: HistoryBatch.from([[{ role: "user", content: "x", name: "", toolCalls: [], toolResponses: [] }]]) }, { batchSize: [1] });
    expect(TensorDict.fromWire(td.toWire()).getHistory("h").toJSON()).toStrictEqual(td.getHistory("h").toJSON());
    expect(TensorDict.fromArrow(td.toArrow()).getHistory("h").toJSON()).toStrictEqual([[{ role: "user", content: "x", toolCalls: [] }]]);
  });
});

describe("History registers itself as a TensorDict leaf type", () => {
  it("loading sdk/data/history.ts alone registers the leaf type and adds getHistory", async () => {
    vi.resetModules(); // a fresh module graph: a fresh leaf-type registry, nothing of sdk/data loaded
    const fresh = await import("../../sdk/tensordict/index.js");
    const wire: WireBatch = { batchSize: [1], columns: [["h", { kind: "history", rows: [[{ role: "user", content: "hi" }]] }]] };
    // (expectError would check against the first module graph's PosttrainError class.)
    let err: unknown;
    try {
      fresh.TensorDict.fromWire(wire);
    } catch (caught) {
      err = caught;
    }
    if (!(err instanceof fresh.LeafTypeNotRegisteredError)) throw new Error(`expected LeafTypeNotRegisteredError, got ${String(err)}`);
    expect(err).toBeInstanceOf(fresh.PosttrainError);
    expect(err.code).toBe("LEAF_TYPE_NOT_REGISTERED");
    expect(err.message).toBe('fromWire: key "h" is a "history" column but no leaf type is registered for that wire kind; import posttrain/data, which registers it');
    expect([err.key, err.wireKind, err.module]).toEqual(["h", "history", "posttrain/data"]);
    expect("getHistory" in fresh.TensorDict.prototype).toBe(false);

    const { HistoryBatch: FreshHistoryBatch } = await import("../../sdk/data/history.js");
    const td = fresh.TensorDict.fromWire(wire);
    expect(td.getHistory("h")).toBeInstanceOf(FreshHistoryBatch);
    expect(td.getLeaf("h", "history")).toBe(td.getHistory("h"));
    expect(fresh.kindOf(td.get("h"))).toBe("history");
    expect(Object.keys(fresh.TensorDict.prototype)).not.toContain("getHistory"); // non-enumerable, like a class method
  });

  it("the History leaf type is registered once; its kind and wire kind are taken", () => {
    const other: LeafType<string[]> = {
      kind: "history",
      name: "Other",
      wireKind: "history",
      is: (value): value is string[] => Array.isArray(value),
      rows: () => 0,
      take: (s) => s[0]!,
      clone: (v) => v,
      toWire: () => ({ kind: "history", rows: [] }),
      fromWire: () => [],
    };
    expect(() => {
      registerLeafType(other);
    }).toThrow('registerLeafType: kind "history" is already registered (by HistoryBatch)');
    expect(() => {
      registerLeafType({ ...other, kind: "chat" });
    }).toThrow('registerLeafType: wire kind "history" already carries leaf type "history" (HistoryBatch)');
  });

  it("getHistory reports a missing key and another kind under the name getLeaf", () => {
    const td = sample([2]);
    expect(expectError(() => td.getHistory("nope"), KeyNotFoundError, "KEY_NOT_FOUND").message).toMatch(/^getLeaf: key "nope" not found/);
    expect(expectError(() => td.getHistory("obs"), LeafKindMismatchError, "LEAF_KIND_MISMATCH").message).toBe(
      'getLeaf: key "obs" holds a tensor value, expected a history',
    );
  });
});
