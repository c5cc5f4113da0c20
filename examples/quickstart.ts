// The README's "Lower level" snippet, runnable: `npx tsx examples/quickstart.ts`. The code is the README snippet (which
// imports from "posttrain"; this file imports the same API from the source tree), with its results printed.
// Keep the two in step: test/ts/examples.test.ts runs this file.
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { makeTinyModel, PosttrainError, TensorDict, WorkerPool } from "../sdk/index.js";

const dir = await mkdtemp(join(tmpdir(), "posttrain-quickstart-"));
try {
  // A 91k-parameter random Qwen2 with a character tokenizer, built offline (or use any Hugging Face model directory).
  const tiny = await makeTinyModel(join(dir, "model"));

  // One local Python worker (CPU here; one per GPU where there are GPUs).
  await using pool = await WorkerPool.local({ workers: 1, device: "auto" });
  const worker = pool.worker(0);
  console.log("torch in worker 0:", worker.info.torch); // handshake: versions, devices, capabilities
  await worker.loadModel({ name: "policy", path: tiny.path });

  // 4 samples of one prompt, with their log-probs: TorchRL's keys, batch size [1, 4].
  const prompts = new TensorDict({ text: { prompt: ["sort 4 digits: 3817"] } }, { batchSize: [1] });
  const out = await worker.generate("policy", prompts, { maxNewTokens: 8, numSamples: 4, seed: 0 });
  console.log("batch size:", out.batchSize, "responses:", out.getStrings(["text", "response"]).length); // [ 1, 4 ] 4

  // Score the sampled sequences again (teacher forcing): one log-prob per token of each.
  const scored = await worker.score("policy", out.reshape([4]).select(["tokens", "full"]));
  console.log("scored rows:", scored.getRagged(["log_probs", "full"]).rows); // 4

  // Timeouts and cancellation on every call.
  await worker.generate("policy", prompts, { maxNewTokens: 64 }, { timeoutMs: 1 }).catch((err: unknown) => {
    console.log("generate with a 1 ms timeout:", err instanceof PosttrainError ? err.code : err); // "TIMEOUT"
  });
} finally {
  await rm(dir, { recursive: true, force: true });
}
