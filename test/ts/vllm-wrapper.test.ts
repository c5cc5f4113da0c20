// vLLMWrapper and loadModel({ backend: "vllm" }) through real workers. A worker whose environment lacks vllm (a
// TEST DOUBLE hides the installed package: test/fixtures/without-vllm/sitecustomize.py) must not advertise it and
// must answer BACKEND_UNAVAILABLE; and a worker started with POSTTRAIN_FAKE_VLLM runs its vLLM backend on
// test/python/fake_vllm.py, a FAKE of vLLM's API backed by the tiny HF model, through which vLLMWrapper must give
// exactly what TransformersWrapper gives (the real engine: test/python/test_vllm_real.py, test/ts/grpo-vllm.test.ts).
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  BackendUnavailableError,
  HistoryBatch,
  InvalidArgumentError,
  RaggedTensor,
  Tensor,
  TensorDict,
  TransformersWrapper,
  WorkerError,
  WorkerPool,
  makeTinyModel,
  vLLMWrapper,
  type TinyModel,
  type WorkerClient,
} from "../../sdk/index.js";

/** The FAKE vllm module (a test double; see its docstring). */
const FAKE_VLLM = fileURLToPath(new URL("../python/fake_vllm.py", import.meta.url));
/** A folder whose sitecustomize hides the installed vllm from the worker (a test double of its absence). */
const WITHOUT_VLLM = fileURLToPath(new URL("../fixtures/without-vllm", import.meta.url));

let dir: string;
let tiny: TinyModel;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "posttrain-vllm-"));
  tiny = await makeTinyModel(join(dir, "tiny"), { seed: 8 });
});

afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** Each leaf's key and kind (with its dtype for tensors), sorted: the shape of a payload without its values. */
function layout(td: TensorDict): string[] {
  return td
    .entries({ nested: true, leavesOnly: true })
    .map(([key, value]) => {
      const name = Array.isArray(key) ? key.join(".") : String(key);
      if (value instanceof RaggedTensor) return `${name}: ragged ${value.dtype}`;
      if (value instanceof Tensor) return `${name}: dense ${value.dtype}`;
      if (value instanceof HistoryBatch) return `${name}: history`;
      return `${name}: strings`;
    })
    .sort();
}

const chats = (): TensorDict =>
  new TensorDict(
    {
      history: { prompt: HistoryBatch.from([[{ role: "user", content: "2+2?" }], [{ role: "user", content: "Say hi" }]]) },
      id: ["a", "b"],
    },
    { batchSize: [2] },
  );

describe("the vllm backend on a worker without vllm", () => {
  let pool: WorkerPool;
  let worker: WorkerClient;

  beforeAll(async () => {
    pool = await WorkerPool.local({ device: "cpu", env: { PYTHONPATH: WITHOUT_VLLM } });
    worker = pool.worker(0);
  });

  afterAll(async () => {
    await pool.close();
  });

  it("is not advertised, and loading answers BACKEND_UNAVAILABLE naming the package; the worker keeps serving", async () => {
    const info = await worker.connection.request("info", {}, []);
    const backends = (info.result as { capabilities: { backends: string[] } }).capabilities.backends;
    expect(backends).toContain("transformers");
    expect(worker.info.capabilities.backends).not.toContain("vllm");
    const err = await worker.loadModel({ name: "fast", path: tiny.path, backend: "vllm" }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(WorkerError);
    expect((err as WorkerError).code).toBe("BACKEND_UNAVAILABLE");
    expect((err as WorkerError).message).toContain('package "vllm"');
    expect(await worker.listModels()).toEqual([]);
  });

  it("refuses a vLLMWrapper with BackendUnavailableError", () => {
    let err: unknown;
    try {
      new vLLMWrapper(worker, { model: "fast", generateKwargs: { max_tokens: 4 } });
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(BackendUnavailableError);
    expect((err as BackendUnavailableError).code).toBe("BACKEND_UNAVAILABLE");
    expect((err as Error).message).toMatch(/offers no vllm backend \(its backends: transformers\)/);
  });

  it("checks the backend options before sending, naming the field", async () => {
    for (const [options, field] of [
      [{ gpuMemoryUtilization: 0.5 }, "gpuMemoryUtilization"],
      [{ enforceEager: true }, "enforceEager"],
      [{ backend: "vllm", gpuMemoryUtilization: 0 }, "gpuMemoryUtilization"],
      [{ backend: "vllm", gpuMemoryUtilization: 1.2 }, "gpuMemoryUtilization"],
      [{ backend: "vllm", maxModelLen: 0 }, "maxModelLen"],
      [{ backend: "vllm", device: "cuda:1" }, "device"],
      [{ backend: "tensorrt" }, "backend"],
    ] as const) {
      const err = await worker.loadModel({ name: "m", path: tiny.path, ...options } as never).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(InvalidArgumentError);
      expect((err as Error).message).toContain(`loadModel options.${field}`);
    }
    expect(await worker.ping()).toBeGreaterThan(0);
  });
});

describe("vLLMWrapper on the FAKE vllm (POSTTRAIN_FAKE_VLLM, test only)", () => {
  let pool: WorkerPool;
  let worker: WorkerClient;

  beforeAll(async () => {
    pool = await WorkerPool.local({ device: "cpu", env: { POSTTRAIN_FAKE_VLLM: FAKE_VLLM } });
    worker = pool.worker(0);
    const [fast, hf] = await Promise.all([
      worker.loadModel({ name: "fast", path: tiny.path, backend: "vllm", gpuMemoryUtilization: 0.5 }),
      worker.loadModel({ name: "hf", path: tiny.path }),
    ]);
    expect(fast.backend).toBe("vllm");
    expect(fast.engine).toMatch(/^FAKE vllm/);
    expect(hf.backend).toBe("transformers");
    expect(fast.parameters).toBe(hf.parameters);
  });

  afterAll(async () => {
    await pool.close();
  });

  it("is advertised by the worker's handshake", () => {
    expect(worker.info.capabilities.backends).toEqual(["transformers", "vllm"]);
  });

  it("generates in history mode exactly what TransformersWrapper generates (greedy)", async () => {
    const kwargs = { max_tokens: 8, do_sample: false };
    const fast = await new vLLMWrapper(worker, { model: "fast", generateKwargs: kwargs }).forward(chats());
    const hf = await new TransformersWrapper(worker, { model: "hf", generateKwargs: kwargs }).forward(chats());
    expect(layout(fast)).toEqual(layout(hf));
    expect(fast.batchSize).toEqual(hf.batchSize);
    for (const key of [["tokens", "full"], ["masks", "all_assistant_mask"]]) {
      expect(fast.getRagged(key).toArray()).toEqual(hf.getRagged(key).toArray());
    }
    expect(fast.getStrings(["text", "full"])).toEqual(hf.getStrings(["text", "full"]));
    expect(fast.getStrings("finish_reason")).toEqual(hf.getStrings("finish_reason"));
    expect(fast.getHistory(["history", "full"]).toJSON()).toEqual(hf.getHistory(["history", "full"]).toJSON());
    const a = fast.getRagged(["log_probs", "full"]).values as Float32Array;
    const b = hf.getRagged(["log_probs", "full"]).values as Float32Array;
    expect(a.length).toBe(b.length);
    a.forEach((v, i) => {
      expect(Math.abs(v - b[i]!)).toBeLessThan(1e-4);
    });
  });

  it("makes GRPO groups with n and a seed: batch [B, n], inputs repeated, reproducible", async () => {
    const options = { model: "fast", generateKwargs: { max_tokens: 6, n: 3, seed: 4, top_k: 40, stop: ["e"] } };
    const first = await new vLLMWrapper(worker, options).forward(chats());
    const again = await new vLLMWrapper(worker, options).forward(chats());
    const hf = await new TransformersWrapper(worker, { ...options, model: "hf" }).forward(chats());
    expect(first.batchSize).toEqual([2, 3]);
    expect(layout(first)).toEqual(layout(hf));
    expect(first.getStrings("id")).toEqual(["a", "a", "a", "b", "b", "b"]);
    expect(first.getStrings(["text", "response"])).toEqual(again.getStrings(["text", "response"]));
    for (const reason of first.getStrings("finish_reason")) expect(["eos", "stop", "length"]).toContain(reason);
    const responses = first.getStrings(["text", "response"]);
    first.getStrings("finish_reason").forEach((reason, r) => {
      if (reason === "stop") expect(responses[r]).toContain("e");
    });
  });

  it("scores (generate: false) to the transformers backend's log-probs", async () => {
    const generated = await new vLLMWrapper(worker, { model: "fast", generateKwargs: { max_tokens: 5, seed: 1 } }).forward(chats());
    const full = generated.select(["text", "full"]);
    const fast = await new vLLMWrapper(worker, { model: "fast", generate: false, inputMode: "text" }).forward(full);
    const hf = await new TransformersWrapper(worker, { model: "hf", generate: false, inputMode: "text" }).forward(full);
    expect(layout(fast)).toEqual(layout(hf));
    const a = fast.getRagged(["log_probs", "full"]).values as Float32Array;
    const b = hf.getRagged(["log_probs", "full"]).values as Float32Array;
    expect(a.length).toBe(b.length);
    a.forEach((v, i) => {
      expect(Math.abs(v - b[i]!)).toBeLessThan(1e-4);
    });
  });

  it("refuses a model loaded with the transformers backend, naming options.model", async () => {
    const policy = new vLLMWrapper(worker, { model: "hf", generateKwargs: { max_tokens: 2 } });
    const err = await policy.forward(chats()).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(InvalidArgumentError);
    expect((err as Error).message).toContain("vLLMWrapper options.model");
    expect((err as Error).message).toContain('backend "transformers"');
    const missing = await new vLLMWrapper(worker, { model: "nobody", generateKwargs: { max_tokens: 2 } }).forward(chats()).catch((e: unknown) => e);
    expect(missing).toMatchObject({ code: "MODEL_NOT_LOADED" });
  });

  it("validates its options like TransformersWrapper, naming vLLMWrapper", () => {
    expect(() => new vLLMWrapper(worker, { model: "fast" })).toThrow(/vLLMWrapper options\.generateKwargs\.max_new_tokens/);
    expect(() => new vLLMWrapper(worker, { model: "fast", generateKwargs: { max_tokens: 2, top_p: 0 } })).toThrow(/generateKwargs\.top_p/);
  });

  it("answers sampling options vLLM rejects with BAD_ARGUMENTS naming the field, and keeps serving", async () => {
    const hot = new vLLMWrapper(worker, { model: "fast", inputMode: "text", generateKwargs: { max_tokens: 2, temperature: 3 } });
    const prompts = new TensorDict({ text: { prompt: ["abc"] } }, { batchSize: [1] });
    const err = await hot.forward(prompts).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(WorkerError);
    expect((err as WorkerError).code).toBe("BAD_ARGUMENTS");
    expect((err as WorkerError).message).toMatch(/vllm backend.*temperature/);
    const out = await worker.generate("fast", prompts, { maxNewTokens: 2, temperature: 3 }).catch((e: unknown) => e);
    expect(out).toMatchObject({ code: "BAD_ARGUMENTS" });
    const fine = await worker.generate("hf", prompts, { maxNewTokens: 2, temperature: 3 }); // transformers takes it
    expect(fine.getRagged(["tokens", "response"]).lengths()[0]).toBeLessThanOrEqual(2);
  });
});
