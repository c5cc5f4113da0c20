// DataLoadingPrimer over real JSONL, Parquet and Arrow fixtures (test/fixtures/datasets/make_fixtures.py):
// fields and kinds, repeats, seeded shuffling, epochs, resuming from a saved position, partial resets, and the
// typed errors naming the file, row and field.
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  ChatEnv,
  DataLoadingPrimer,
  DatasetChatEnv,
  DatasetExhaustedError,
  DatasetFieldError,
  DatasetFormatError,
  DatasetNotFoundError,
  History,
  InvalidArgumentError,
  StepCounter,
  Tensor,
  TensorDict,
  TransformedEnv,
  readDatasetFile,
  seededPermutation,
} from "../../sdk/index.js";

const dir = join(import.meta.dirname, "..", "fixtures", "datasets");
const jsonl = join(dir, "arith.jsonl");
const parquet = join(dir, "arith.parquet");
const arrow = join(dir, "arith.arrow");
const ids = (td: TensorDict): string[] => [...td.getStrings("id")];

describe("dataset files", () => {
  it("JSONL, Parquet and Arrow give the same rows", async () => {
    const [a, b, c] = await Promise.all([readDatasetFile(jsonl), readDatasetFile(parquet), readDatasetFile(arrow)]);
    expect(a.rows).toHaveLength(6);
    expect(b.rows).toEqual(a.rows);
    expect(c.rows).toEqual(a.rows);
    expect(a.rows[4]).toEqual({ id: "q4", question: "What is 10 + 20?", answer: "30", level: 1, numbers: [10, 20] });
  });

  it("names the file for a missing path, an unknown extension, bad JSON and a non-Parquet file", async () => {
    const missing = join(dir, "nope.jsonl");
    await expect(readDatasetFile(missing)).rejects.toThrow(DatasetNotFoundError);
    await expect(readDatasetFile(missing)).rejects.toThrow(/nope\.jsonl.*no such file/);
    await expect(readDatasetFile(join(dir, "make_fixtures.py"))).rejects.toThrow(/make_fixtures\.py.*unknown extension/);
    const bad = readDatasetFile(join(dir, "bad_line.jsonl"));
    await expect(bad).rejects.toThrow(DatasetFormatError);
    await expect(readDatasetFile(join(dir, "bad_line.jsonl"))).rejects.toThrow(/bad_line\.jsonl", row 1: line 2 is not valid JSON/);
    const tmp = await mkdtemp(join(tmpdir(), "posttrain-data-"));
    try {
      await writeFile(join(tmp, "fake.parquet"), "not parquet at all");
      await writeFile(join(tmp, "fake.arrow"), "not arrow");
      await expect(readDatasetFile(join(tmp, "fake.parquet"))).rejects.toThrow(/fake\.parquet.*not a readable Parquet file/);
      await expect(readDatasetFile(join(tmp, "fake.arrow"))).rejects.toThrow(DatasetFormatError);
    } finally {
      await rm(tmp, { recursive: true, force: true });
    }
  });
});

describe("DataLoadingPrimer", () => {
  it("maps fields to keys with their kinds", async () => {
    const primer = new DataLoadingPrimer({
      files: parquet,
      fields: { query: "question", answer: "answer", level: { column: "level", kind: "int64" }, numbers: "numbers", id: "id" },
      shuffle: false,
    });
    const td = await primer.take(2);
    expect(td.batchSize).toEqual([2]);
    expect(td.getStrings("query")).toEqual(["What is 1 + 2?", "What is 3 + 4?"]);
    expect(td.getTensor("level", "int64").toArray()).toEqual([0n, 1n]);
    expect(td.getStrings("numbers")).toEqual(["[1,2]", "[3,4]"]); // JSON kind
    expect(primer.fieldKinds.get("level")).toBe("int64");
    const auto = new DataLoadingPrimer({ files: arrow, shuffle: false });
    const all = await auto.take(1);
    expect(all.keys()).toEqual(["id", "question", "answer", "level", "numbers"]);
    expect(all.getTensor("level", "float64").toNumbers()).toEqual([0]);
  });

  it("repeats each sample in a row and walks epochs in file order without shuffle", async () => {
    const primer = new DataLoadingPrimer({ files: jsonl, shuffle: false, repeats: 2 });
    expect(ids(await primer.take(4))).toEqual(["q0", "q0", "q1", "q1"]);
    expect(ids(await primer.take(3))).toEqual(["q2", "q2", "q3"]);
    expect(ids(await primer.take(6))).toEqual(["q3", "q4", "q4", "q5", "q5", "q0"]);
    expect(primer.position).toEqual({ epoch: 1, index: 1 });
  });

  it("shuffles each epoch by seed: same seed same order, another seed another order, every row once per epoch", async () => {
    const a = new DataLoadingPrimer({ files: jsonl, seed: 7 });
    const b = new DataLoadingPrimer({ files: jsonl, seed: 7 });
    const c = new DataLoadingPrimer({ files: jsonl, seed: 8 });
    const seqA = ids(await a.take(12));
    expect(ids(await b.take(12))).toEqual(seqA);
    expect(ids(await c.take(12))).not.toEqual(seqA);
    const epoch0 = seqA.slice(0, 6);
    const epoch1 = seqA.slice(6);
    expect([...epoch0].sort()).toEqual(["q0", "q1", "q2", "q3", "q4", "q5"]);
    expect([...epoch1].sort()).toEqual(["q0", "q1", "q2", "q3", "q4", "q5"]);
    expect(epoch1).not.toEqual(epoch0); // a new order each epoch
    expect(epoch0).toEqual(Array.from(seededPermutation(6, 7, 0), (i) => `q${i}`));
  });

  it("stops after `epochs` with DATASET_EXHAUSTED, without moving", async () => {
    const primer = new DataLoadingPrimer({ files: jsonl, epochs: 1, repeats: 2 });
    await primer.take(10);
    await expect(primer.take(4)).rejects.toThrow(DatasetExhaustedError);
    expect(primer.position).toEqual({ epoch: 0, index: 10 });
    expect((await primer.take(2)).numel()).toBe(2);
    await expect(primer.take(1)).rejects.toMatchObject({ code: "DATASET_EXHAUSTED" });
    primer.resetDataloader();
    expect((await primer.take(1)).numel()).toBe(1);
  });

  it("resumes from a saved position with the same continuation", async () => {
    const first = new DataLoadingPrimer({ files: parquet, seed: 3, repeats: 3 });
    await first.take(5);
    await first.take(9); // into the second epoch
    const saved = first.position;
    const continuation = [ids(await first.take(4)), ids(await first.take(11))];
    const resumed = new DataLoadingPrimer({ files: parquet, seed: 3, repeats: 3, position: saved });
    expect([ids(await resumed.take(4)), ids(await resumed.take(11))]).toEqual(continuation);
    const seeked = new DataLoadingPrimer({ files: parquet, seed: 3, repeats: 3 });
    seeked.seek(saved);
    expect(ids(await seeked.take(4))).toEqual(continuation[0]);
  });

  it("a row missing a needed field is an error naming the file, the row and the field", async () => {
    const primer = new DataLoadingPrimer({ files: join(dir, "missing_answer.jsonl"), fields: { query: "question", answer: "answer" } });
    const err: unknown = await primer.load().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(DatasetFieldError);
    expect(err).toMatchObject({ code: "DATASET_FIELD", row: 2, field: "answer" });
    expect((err as Error).message).toMatch(/missing_answer\.jsonl", row 2, field "answer": is missing/);
    const optional = new DataLoadingPrimer({
      files: join(dir, "missing_answer.jsonl"),
      fields: { query: "question", answer: { column: "answer", optional: true, default: "?" } },
      shuffle: false,
    });
    expect((await optional.take(4)).getStrings("answer")).toEqual(["3", "7", "?", "15"]);
    const typed = new DataLoadingPrimer({ files: jsonl, fields: { query: { column: "level", kind: "string" } } });
    await expect(typed.load()).rejects.toThrow(/arith\.jsonl", row 0, field "level": expected a string, got a number \(line 1\)/);
  });

  it("validates its options and positions, naming the field", async () => {
    expect(() => new DataLoadingPrimer({ files: [] })).toThrow(/DataLoadingPrimer options\.files/);
    expect(() => new DataLoadingPrimer({ files: jsonl, repeats: 0 })).toThrow(/options\.repeats/);
    expect(() => new DataLoadingPrimer({ files: jsonl, fields: { q: { column: "question", kind: "float" as "string" } } })).toThrow(/options\.fields\.q/);
    const far = new DataLoadingPrimer({ files: jsonl, repeats: 2, position: { epoch: 0, index: 12 } });
    await expect(far.load()).rejects.toThrow(/options\.position\.index: 12 is past the end of an epoch/);
    const ok = new DataLoadingPrimer({ files: jsonl });
    expect(() => {
      ok.seek({ epoch: -1, index: 0 });
    }).toThrow(InvalidArgumentError);
    expect(() => ok.fieldKinds).toThrow(/not loaded/);
    await expect(new DataLoadingPrimer({ files: join(dir, "nope.parquet") }).load()).rejects.toThrow(DatasetNotFoundError);
  });

  it("fills only the rows of a partial reset, keeping the others", async () => {
    const primer = new DataLoadingPrimer({ files: jsonl, shuffle: false, fields: { query: "question", id: "id" } });
    const env = new TransformedEnv(new ChatEnv({ batchSize: [3] }), [primer, new StepCounter()]);
    const td = await env.reset();
    expect(ids(td)).toEqual(["q0", "q1", "q2"]);
    td.set("_reset", Tensor.from([[false], [true], [false]], { dtype: "bool" }));
    const again = await env.reset(td);
    expect(ids(again)).toEqual(["q0", "q3", "q2"]);
    expect(again.getHistory(["history", "prompt"]).row(1).last?.content).toBe("What is 7 + 8?");
    expect(primer.position).toEqual({ epoch: 0, index: 4 });
  });
});

describe("DatasetChatEnv", () => {
  let tmp: string;

  beforeAll(async () => {
    tmp = await mkdtemp(join(tmpdir(), "posttrain-dsenv-"));
  });

  afterAll(async () => {
    await rm(tmp, { recursive: true, force: true });
  });

  it("resets to groups of `repeats` identical prompts with the system prompt and the row fields", async () => {
    const env = new DatasetChatEnv({
      dataset: { files: jsonl, fields: { query: "question", answer: "answer", id: "id" }, repeats: 2, seed: 1 },
      batchSize: [4],
      systemPrompt: "Be brief.",
    });
    const td = await env.reset();
    const prompts = td.getHistory(["history", "prompt"]);
    expect(prompts.row(0).equals(prompts.row(1))).toBe(true);
    expect(prompts.row(2).equals(prompts.row(3))).toBe(true);
    expect(prompts.row(0).equals(prompts.row(2))).toBe(false);
    expect(prompts.row(0).messages.map((m) => m.role)).toEqual(["system", "user"]);
    const first = Number(ids(td)[0]!.slice(1));
    expect(td.getStrings("answer")[0]).toBe(String([3, 7, 11, 15, 30, 70][first]));
    expect(env.position).toEqual({ epoch: 0, index: 4 });
  });

  it("takes a History column as the query", async () => {
    const file = join(tmp, "chats.jsonl");
    await writeFile(file, `${JSON.stringify({ messages: [{ role: "user", content: "hi" }, { role: "assistant", content: "hello" }, { role: "user", content: "2+2?" }] })}\n`);
    const env = new DatasetChatEnv({ dataset: { files: file, fields: { query: "messages" } }, batchSize: [2] });
    const td = await env.reset();
    const h = td.getHistory(["history", "prompt"]).row(1);
    expect(h.equals(History.from([{ role: "user", content: "hi" }, { role: "assistant", content: "hello" }, { role: "user", content: "2+2?" }]))).toBe(true);
  });

  it("fails on data without the query field, naming file, row and field", async () => {
    const env = new DatasetChatEnv({ dataset: { files: jsonl }, batchSize: [1] });
    await expect(env.reset()).rejects.toThrow(/arith\.jsonl", row 0, field "query": is missing/);
    expect(() => new DatasetChatEnv({ dataset: { files: jsonl, fields: { prompt: "question" } } })).toThrow(/options\.dataset\.fields: must have the key "query"/);
    expect(() => new DatasetChatEnv({ dataset: { files: jsonl }, rewardOptions: { concurrency: 2 } })).toThrow(/rewardOptions: given without rewards/);
    expect(() => new DatasetChatEnv({ dataset: { files: jsonl, seed: 0.5 } })).toThrow(/DatasetChatEnv options\.dataset\.seed/);
  });
});
