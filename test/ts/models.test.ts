// Model hosting through a real worker: the tiny model built offline, loaded, listed and unloaded, and the
// typed errors for bad options (before anything is sent) and bad paths (from the worker).
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { InvalidArgumentError, PosttrainError, WorkerError, WorkerPool, makeTinyModel, type TinyModel } from "../../sdk/index.js";

describe("models in a worker", () => {
  let dir: string;
  let tiny: TinyModel;
  let pool: WorkerPool;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "posttrain-models-"));
    [tiny, pool] = await Promise.all([makeTinyModel(join(dir, "tiny"), { seed: 2 }), WorkerPool.local({ device: "cpu" })]);
  });

  afterAll(async () => {
    await pool.close();
    await rm(dir, { recursive: true, force: true });
  });

  it("builds the tiny model offline and reports what it wrote", () => {
    expect(tiny.path).toBe(join(dir, "tiny"));
    expect(tiny.parameters).toBeGreaterThan(10_000);
    expect(tiny.vocabSize).toBeGreaterThan(95);
  });

  it("loads under a name, lists, and unloads", async () => {
    const worker = pool.worker(0);
    const info = await worker.loadModel({ name: "policy", path: tiny.path });
    expect(info).toMatchObject({ name: "policy", modelType: "qwen2", dtype: "float32", device: "cpu", hasChatTemplate: true });
    expect(info.parameters).toBe(tiny.parameters);
    const ref = await worker.loadModel({ name: "ref", path: tiny.path, dtype: "bfloat16" });
    expect(ref.memoryBytes).toBeLessThan(info.memoryBytes);
    expect((await worker.listModels()).map((m) => m.name)).toEqual(["policy", "ref"]);
    await worker.unloadModel("ref");
    await worker.unloadModel("policy");
    expect(await worker.listModels()).toEqual([]);
  });

  it("rejects bad options before sending, naming the field", async () => {
    const worker = pool.worker(0);
    const err = await worker.loadModel({ name: "m", path: tiny.path, dtype: "int8" as "float32" }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(InvalidArgumentError);
    expect((err as Error).message).toContain("loadModel options.dtype");
    await expect(worker.loadModel({ name: "", path: tiny.path })).rejects.toThrow(/options\.name/);
    await expect(makeTinyModel(join(dir, "x"), { hiddenSize: -1 })).rejects.toBeInstanceOf(InvalidArgumentError);
  });

  it("answers a path that does not exist with MODEL_NOT_FOUND and keeps serving", async () => {
    const worker = pool.worker(0);
    const err = await worker.loadModel({ name: "m", path: join(dir, "missing") }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(WorkerError);
    expect((err as WorkerError).code).toBe("MODEL_NOT_FOUND");
    expect((err as WorkerError).message).toContain(join(dir, "missing"));
    await expect(worker.unloadModel("m")).rejects.toMatchObject({ code: "MODEL_NOT_LOADED" });
    expect(await worker.ping()).toBeGreaterThan(0);
  });

  it("fails to build with a typed error naming the bad size", async () => {
    const err = await makeTinyModel(join(dir, "bad"), { hiddenSize: 30, numHeads: 4 }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(PosttrainError);
    expect((err as PosttrainError).code).toBe("MODEL_BUILD_FAILED");
    expect((err as Error).message).toMatch(/num_heads|hidden_size/);
  });
});
