// ReplayBuffer.save / ReplayBuffer.load: one Arrow IPC file with the rows and a JSON metadata entry; the loaded buffer
// holds the same rows, priorities, sampler/writer state, counters and generator stream. Bad files are typed errors.
import { execFile } from "node:child_process";
import { mkdtemp, readdir, rm, writeFile, readFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { tableFromArrays, tableToIPC } from "apache-arrow";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { resolvePython } from "../../bridge/worker/python.js";
import {
  HistoryBatch,
  LazyStackStorage,
  ListStorage,
  MCAdvantage,
  PrioritizedSampler,
  ReplayBuffer,
  ReplayBufferFileError,
  SamplerWithoutReplacement,
  Tensor,
  TensorDict,
  TensorDictMaxValueWriter,
} from "../../sdk/index.js";
import { snapshot } from "./tensordict.helpers.js";

const run = promisify(execFile);

/** `n` single-step trajectories (rows of batch size []) of prompt `p{i % groups}`, with token leaves of different lengths. */
function stepRows(n: number, start: number, groups = 2): TensorDict[] {
  return Array.from({ length: n }, (_, k) => {
    const i = start + k;
    return new TensorDict({
      query: [`p${i % groups}`],
      history: { prompt: HistoryBatch.from([[{ role: "user", content: `solve p${i % groups}` }]]) },
      next: { reward: Tensor.from([(i * 7) % 5], { dtype: "float32" }), done: Tensor.ones("bool", [1]) },
      id: Tensor.from(i, { dtype: "int32" }),
      tokens: Tensor.from(Array.from({ length: 1 + (i % 4) }, (_, t) => BigInt(i * 10 + t)), { dtype: "int64" }),
    });
  });
}

/** The same trajectories as one TensorDict of batch size [n], without the token leaves. */
const steps = (n: number, start: number, groups = 2): TensorDict => TensorDict.stack(stepRows(n, start, groups).map((r) => r.exclude("tokens")));

/** Every stored row, in position order, as a comparable snapshot. */
const stored = (rb: ReplayBuffer): unknown => snapshot(rb.storage.get(Int32Array.from({ length: rb.length }, (_, i) => i)));

describe("ReplayBuffer save/load", () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "posttrain-rb-"));
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it("round-trips rows, priorities, writer state, counters and the generator stream (prioritized, lazy stack)", async () => {
    const advantage = new MCAdvantage({ groupSize: 3 });
    const sampler = new PrioritizedSampler({ maxCapacity: 32, alpha: 0.7, beta: 0.5 });
    const rb = new ReplayBuffer({ storage: new LazyStackStorage({ maxSize: 32 }), sampler, transforms: [advantage], batchSize: 4, seed: 9 });
    for (const row of stepRows(8, 0)) rb.add(row);
    rb.updatePriority([0, 1, 2], [5, 0.5, 2]);
    rb.sample(); // advance the generator
    expect(rb.length).toBe(6); // two complete groups of 3; the rest is held by MCAdvantage
    const path = join(dir, "prio.arrow");
    await rb.save(path);
    expect((await readdir(dir)).filter((f) => f.endsWith(".tmp"))).toEqual([]);

    const restored = new MCAdvantage({ groupSize: 3 });
    const back = await ReplayBuffer.load(path, { transforms: [restored] });
    expect(back.length).toBe(6);
    expect(back.batchSize).toBe(4);
    expect(back.storage).toBeInstanceOf(LazyStackStorage);
    expect(back.storage.maxSize).toBe(32);
    expect(stored(back)).toEqual(stored(rb));
    const backSampler = back.sampler;
    if (!(backSampler instanceof PrioritizedSampler)) throw new Error("expected a PrioritizedSampler");
    for (let p = 0; p < 6; p++) expect(backSampler.weightOf(p)).toBe(sampler.weightOf(p));
    expect(backSampler.defaultPriority).toBe(5);
    expect(back.writeCount).toBe(rb.writeCount);
    expect(restored.stats).toEqual(advantage.stats); // the counters and the held-back trajectories (one per prompt)
    expect(restored.stats.queuedTrajectories).toBe(2);
    // The generator continues where it was: the next samples are the same.
    expect(snapshot(back.sample())).toEqual(snapshot(rb.sample()));
    // And the writer continues at the same cursor.
    for (const row of stepRows(3, 60, 1)) {
      row.set("query", ["a new prompt"]);
      expect(Array.from(back.add(row))).toEqual(Array.from(rb.add(row)));
    }
    expect(back.length).toBe(9);
    expect(stored(back)).toEqual(stored(rb));
  });

  it("saves the rows MCAdvantage holds back: after load, the incomplete groups complete as they would have", async () => {
    const advantage = new MCAdvantage({ groupSize: 3 });
    const rb = new ReplayBuffer({ storage: new LazyStackStorage({ maxSize: 32 }), transforms: [advantage] });
    rb.extend(steps(4, 0)); // p0: rows 0, 2; p1: rows 1, 3
    expect(rb.length).toBe(0);
    const path = join(dir, "held.arrow");
    await rb.save(path);
    expect(await ReplayBuffer.load(path)).toHaveProperty("length", 0); // without the transform its rows are not loaded
    const restored = new MCAdvantage({ groupSize: 3 });
    const back = await ReplayBuffer.load(path, { transforms: [restored] });
    expect(restored.stats).toEqual(advantage.stats);
    expect(restored.heldBack().map((t) => snapshot(t))).toEqual(advantage.heldBack().map((t) => snapshot(t)));
    // trajectories that would complete a group are not held-back ones
    expect(() => {
      new MCAdvantage({ groupSize: 2 }).restoreHeldBack(advantage.heldBack());
    }).toThrow(/restoreHeldBack: trajectories: 2 for one group complete it \(groupSize 2\)/);
    for (const row of stepRows(2, 4)) {
      row.del("tokens");
      back.add(row);
      rb.add(row);
    }
    expect(back.length).toBe(6); // both groups complete with the saved rows, the same advantages
    expect(stored(back)).toEqual(stored(rb));
  });

  it("continues a pass of SamplerWithoutReplacement and the top-k state of TensorDictMaxValueWriter", async () => {
    const rb = new ReplayBuffer({
      storage: new ListStorage({ maxSize: 5 }),
      sampler: new SamplerWithoutReplacement(),
      writer: new TensorDictMaxValueWriter({ rankKey: ["next", "reward"] }),
      batchSize: 2,
      seed: 4,
    });
    rb.extend(steps(12, 0));
    rb.sample(); // mid-pass
    const path = join(dir, "pass.arrow");
    await rb.save(path);
    const back = await ReplayBuffer.load(path);
    expect(back.writer).toBeInstanceOf(TensorDictMaxValueWriter);
    expect([...back].map((b) => snapshot(b))).toEqual([...rb].map((b) => snapshot(b)));
    const more = steps(4, 100);
    expect(Array.from(back.extend(more))).toEqual(Array.from(rb.extend(more)));
    expect(stored(back)).toEqual(stored(rb));
  });

  it("round-trips an empty buffer and overwrites an existing file", async () => {
    const path = join(dir, "empty.arrow");
    await writeFile(path, "old content");
    await new ReplayBuffer({ storage: new ListStorage({ maxSize: 7 }) }).save(path);
    const back = await ReplayBuffer.load(path);
    expect(back.length).toBe(0);
    expect(back.storage).toBeInstanceOf(ListStorage);
    expect(back.storage.maxSize).toBe(7);
    expect(back.batchSize).toBeUndefined();
  });

  it("writes a standard Arrow IPC file that pyarrow reads; dense leaves of different lengths come back dense", async () => {
    const rb = new ReplayBuffer({ storage: new LazyStackStorage() });
    for (const row of stepRows(5, 0)) rb.add(row);
    const path = join(dir, "py.arrow");
    await rb.save(path);
    const script = [
      "import json, sys, pyarrow.ipc as ipc",
      "r = ipc.open_file(sys.argv[1])",
      "t = r.read_all()",
      "meta = json.loads(t.schema.metadata[b'posttrain.replay_buffer'])",
      "print(json.dumps({'rows': t.num_rows, 'columns': t.column_names, 'storage': meta['storage']}))",
    ].join("\n");
    const { stdout } = await run(resolvePython(), ["-c", script, path]);
    const seen = JSON.parse(stdout) as { rows: number; columns: string[]; storage: unknown };
    expect(seen.rows).toBe(5);
    expect(seen.columns).toEqual(expect.arrayContaining(["query", "history", "next", "id", "tokens"]));
    expect(seen.storage).toEqual({ kind: "lazy-stack", maxSize: null, length: 5 });
    const back = await ReplayBuffer.load(path);
    for (let p = 0; p < 5; p++) expect(snapshot(back.storage.row(p))).toEqual(snapshot(rb.storage.row(p)));
    expect(back.storage.row(3).getTensor("tokens").shape).toEqual([4]);
  });

  it("rejects files that are not replay buffers with REPLAY_BUFFER_FILE", async () => {
    const expectFileError = async (bytes: Uint8Array | string, fragment: string): Promise<void> => {
      const path = join(dir, "bad.arrow");
      await writeFile(path, bytes);
      const err = await ReplayBuffer.load(path).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ReplayBufferFileError);
      expect((err as ReplayBufferFileError).code).toBe("REPLAY_BUFFER_FILE");
      expect((err as ReplayBufferFileError).message).toContain(fragment);
    };
    await expectFileError("not arrow at all", "not an Arrow IPC file");
    await expectFileError(steps(2, 0).toArrow(), "not an Arrow IPC file"); // a stream, not a file
    await expectFileError(tableToIPC(tableFromArrays({ a: Float32Array.of(1, 2) }), "file"), "posttrain.replay_buffer");
    const good = join(dir, "good.arrow");
    const rb = new ReplayBuffer();
    rb.extend(steps(2, 0));
    await rb.save(good);
    const text = (await readFile(good)).toString("latin1");
    await expectFileError(Buffer.from(text.replace('"version":1', '"version":9'), "latin1"), "version");
    await expectFileError(Buffer.from(text.replace('"kind":"random"', '"kind":"fancy!"'), "latin1"), "unknown sampler kind");
  });
});
