// The leaf-type protocol of sdk/tensordict/leaf.ts, with a leaf type of the test's own and without sdk/data: TensorDict
// holds, indexes, stacks, cats, clones, prints and sends whatever registers, and nothing of History is loaded here.
import { beforeAll, describe, expect, it } from "vitest";
import type { WireBatch, WireHistory } from "../../bridge/wire/index.js";
import {
  BatchSizeMismatchError,
  InvalidArgumentError,
  LeafKindMismatchError,
  LeafTypeNotRegisteredError,
  Tensor,
  TensorDict,
  kindOf,
  registerLeafType,
  takeRows,
  type LeafKind,
  type LeafType,
  type TensorDictValue,
} from "../../sdk/tensordict/index.js";
import { expectError, snapshot } from "./tensordict.helpers.js";

/** A test leaf type: one list of tags per batch row, immutable. */
class Tags {
  readonly rows: readonly (readonly string[])[];

  constructor(rows: readonly (readonly string[])[]) {
    this.rows = Object.freeze(rows.map((row) => Object.freeze([...row])));
  }

  toString(): string {
    return `Tags(${this.rows.length} rows)`;
  }

  toJSON(): readonly (readonly string[])[] {
    return this.rows;
  }
}

/** One tag, not a batch of them (the hint's case). */
class Tag {
  constructor(readonly name: string) {}
}

// bridge/wire's only leaf wire kind is "history" (sdk/data is not loaded here, so it is free): a tag travels as a
// message of role "tag".
const tagsLeaf: LeafType<Tags> = {
  kind: "tags",
  name: "Tags",
  wireKind: "history",
  is: (value): value is Tags => value instanceof Tags,
  rows: (tags) => tags.rows.length,
  take: (sources, plan) => new Tags(takeRows(sources.map((tags) => tags.rows), plan)),
  clone: (tags) => new Tags(tags.rows),
  describe: (tags) => tags.toString(),
  hint: (value) => (value instanceof Tag ? "wrap tags in a Tags batch, one list per row" : undefined),
  toWire: (tags) => ({ kind: "history", rows: tags.rows.map((row) => row.map((content) => ({ role: "tag", content }))) }),
  fromWire: (column, context) =>
    new Tags(
      column.rows.map((row, r) =>
        row.map((m, i) => {
          if (m.role !== "tag") throw new InvalidArgumentError(`${context}: row ${r}, tag ${i}: role ${JSON.stringify(m.role)} is not "tag"`);
          return m.content;
        }),
      ),
    ),
};

/** TypeScript knows only the leaf types sdk/ registers; the test's own values go through `TensorDictValue`. */
const leaf = (tags: Tags): TensorDictValue => tags as unknown as TensorDictValue;
const tagsOf = (value: unknown): readonly (readonly string[])[] => (value as Tags).rows;

const column = (rows: WireHistory["rows"]): WireBatch => ({ batchSize: [rows.length], columns: [["meta", { kind: "struct", columns: [["t", { kind: "history", rows }]] }]] });

describe("before a leaf type is registered", () => {
  it("fromWire names the key and the module that registers the column's wire kind", () => {
    const err = expectError(() => TensorDict.fromWire(column([[]])), LeafTypeNotRegisteredError, "LEAF_TYPE_NOT_REGISTERED");
    expect(err.key).toEqual(["meta", "t"]);
    expect(err.wireKind).toBe("history");
    expect(err.module).toBe("posttrain/data");
    expect(err.message).toBe(
      'fromWire: key ["meta","t"] is a "history" column but no leaf type is registered for that wire kind; import posttrain/data, which registers it',
    );
  });

  it("the constructor lists the kinds it knows", () => {
    const err = expectError(() => new TensorDict({ t: leaf(new Tags([["a"]])) }, { batchSize: [1] }), InvalidArgumentError, "INVALID_ARGUMENT");
    expect(err.message).toBe('key "t": expected a Tensor, RaggedTensor, string array, TensorDict or plain object, got Tags');
  });

  it("registerLeafType refuses TensorDict's own kinds", () => {
    for (const kind of ["tensor", "ragged", "strings", "tensordict"]) {
      const err = expectError(() => {
        registerLeafType({ ...tagsLeaf, kind });
      }, InvalidArgumentError, "INVALID_ARGUMENT");
      expect(err.message).toBe(`registerLeafType: "${kind}" is a kind TensorDict holds itself`);
    }
  });
});

describe("a registered leaf type", () => {
  beforeAll(() => {
    registerLeafType(tagsLeaf);
    registerLeafType(tagsLeaf); // the same object again: nothing happens
  });

  const rows = (n: number, offset = 0): Tags => new Tags(Array.from({ length: n }, (_, i) => Array.from({ length: (offset + i) % 3 }, (_, k) => `t${offset + i}.${k}`)));
  const sample = (batchSize: readonly number[], offset = 0): TensorDict => {
    const n = batchSize.reduce((a, b) => a * b, 1);
    return new TensorDict(
      {
        meta: { t: leaf(rows(n, offset)) },
        id: Tensor.from(Int32Array.from({ length: n }, (_, i) => offset + i), { dtype: "int32", shape: [...batchSize] }),
      },
      { batchSize },
    );
  };
  /** Row i of a sample holds `(offset + i) % 3` tags named after `offset + i`: the ids say which rows a result holds. */
  const expectRowsFollowIds = (td: TensorDict): void => {
    const ids = td.getTensor("id").toNumbers();
    expect(tagsOf(td.get(["meta", "t"]))).toEqual(rows(ids.length).rows.map((_, r) => rows(1, ids[r]).rows[0]));
  };

  it("is held under a key, counted by rows and named by its kind", () => {
    const tags = rows(6);
    const td = new TensorDict({ t: leaf(tags) }, { batchSize: [2, 3] });
    expect(td.get("t")).toBe(tags);
    expect(kindOf(td.get("t"))).toBe("tags");
    expect(td.getLeaf("t", "tags" as LeafKind)).toBe(tags);
    const mismatch = expectError(() => td.getTensor("t"), LeafKindMismatchError, "LEAF_KIND_MISMATCH");
    expect(mismatch.message).toBe('getTensor: key "t" holds a tags value, expected a tensor');
    const rowsErr = expectError(() => td.set("u", leaf(rows(5))), BatchSizeMismatchError, "BATCH_SIZE_MISMATCH");
    expect(rowsErr.message).toBe('key "u": Tags has 5 rows but batch size [2, 3] has 6');
    expect(rowsErr.actual).toEqual([5]);
  });

  it("adds its name and hint to the constructor's error", () => {
    const err = expectError(() => new TensorDict({ t: new Tag("x") as unknown as TensorDictValue }), InvalidArgumentError, "INVALID_ARGUMENT");
    expect(err.message).toBe('key "t": expected a Tensor, RaggedTensor, string array, Tags, TensorDict or plain object, got Tag (wrap tags in a Tags batch, one list per row)');
  });

  it("follows every batch operation through its take", () => {
    const td = sample([4]);
    for (const index of [-1, { start: 1, stop: 3 }, { start: 0, step: 2 }, [true, false, true, true], [3, 3, -4]]) expectRowsFollowIds(td.index(index));
    td.split([1, 3]).forEach(expectRowsFollowIds);
    td.unbind().forEach(expectRowsFollowIds);
    expectRowsFollowIds(TensorDict.stack([td, sample([4], 10)], 1));
    expectRowsFollowIds(TensorDict.cat([td, sample([2], 20)]));
    const grid = sample([2, 3]);
    expectRowsFollowIds(grid.index(1, 1));
    expectRowsFollowIds(TensorDict.cat([grid, sample([2, 1], 30)], 1));
    for (const view of [grid.reshape([3, 2]), grid.flatten(), grid.unsqueeze(0).squeeze()]) expect(view.get(["meta", "t"])).toBe(grid.get(["meta", "t"]));
  });

  it("stack and cat need it on every side", () => {
    const other = sample([2]).set(["meta", "t"], ["a", "b"]);
    const err = expectError(() => TensorDict.stack([sample([2]), other]), LeafKindMismatchError, "LEAF_KIND_MISMATCH");
    expect(err.message).toBe('stack: tds[1] (tds[0] holds a tags): key ["meta","t"] holds a strings value, expected a tags');
  });

  it("is cloned by its clone, kept by apply and printed by its describe", () => {
    const td = sample([3]);
    const copy = td.clone();
    expect(copy.get(["meta", "t"])).not.toBe(td.get(["meta", "t"]));
    expect(tagsOf(copy.get(["meta", "t"]))).toEqual(tagsOf(td.get(["meta", "t"])));
    expect(snapshot(copy)).toEqual(snapshot(td));
    expect(td.apply((x) => x).get(["meta", "t"])).toBe(td.get(["meta", "t"]));
    expect(td.toString()).toBe(["TensorDict(batchSize=[3])", "  meta: TensorDict", "    t: Tags(3 rows)", "  id: Tensor(shape=[3], dtype=int32)"].join("\n"));
  });

  it("crosses the wire and Arrow through its toWire and fromWire", () => {
    const td = sample([2, 3]);
    const wire = td.toWire();
    const meta = wire.columns[0]![1] as { columns: WireBatch["columns"] };
    expect(meta.columns[0]![1]).toEqual({ kind: "history", rows: tagsOf(td.get(["meta", "t"])).map((row) => row.map((content) => ({ role: "tag", content }))) });
    expect(snapshot(TensorDict.fromWire(wire))).toEqual(snapshot(td));
    expect(snapshot(TensorDict.fromArrow(td.toArrow()))).toEqual(snapshot(td));
    const err = expectError(() => TensorDict.fromWire(column([[{ role: "user", content: "x" }]])), InvalidArgumentError, "INVALID_ARGUMENT");
    expect(err.message).toBe('fromWire: key ["meta","t"]: row 0, tag 0: role "user" is not "tag"');
    const short = expectError(() => TensorDict.fromWire({ ...column([[]]), batchSize: [2] }), BatchSizeMismatchError, "BATCH_SIZE_MISMATCH");
    expect(short.message).toContain('key ["meta","t"]: Tags has 1 rows but batch size [2] has 2');
  });

  it("a second leaf type cannot take its kind or its wire kind", () => {
    expect(() => {
      registerLeafType({ ...tagsLeaf });
    }).toThrow('registerLeafType: kind "tags" is already registered (by Tags)');
    expect(() => {
      registerLeafType({ ...tagsLeaf, kind: "labels" });
    }).toThrow('registerLeafType: wire kind "history" already carries leaf type "tags" (Tags)');
  });
});
