// SFT from the CLI on a chat template without {% generation %} markers, as real models' templates are: the tiny
// model with the same ChatML template minus its markers. The worker finds the assistant tokens by prefix rendering
// (docs/history.md, "Assistant masks"); the test counts them independently of it (the tokenizer is one token per
// ASCII character, `<|im_end|>` is id 258), and the run's loss covers exactly that many tokens. A template whose
// assistant turns render to nothing answers the typed ASSISTANT_MASK_EMPTY; the CLI run trains that model directory
// with the marker-less template given as `model.chatTemplateFile`, which must replace the directory's.
import { execFile } from "node:child_process";
import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { History, HistoryBatch, TensorDict, WorkerError, WorkerPool, digitSortExamples, makeTinyModel } from "../../sdk/index.js";

const ROOT = resolve(import.meta.dirname, "..", "..");
const CLI = join(ROOT, "sdk", "cli", "main.ts");
const IM_END = 258;
const BATCH = 16;
/** ChatML that drops assistant messages: they add no token to learn. */
const SILENT_TEMPLATE = [
  "{%- for m in messages %}{%- if m.role != 'assistant' %}{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}",
  "{%- endif %}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}",
].join("");
/** The tiny tokenizer's id of a printable ASCII character (`\t`, `\n`, then space..`~` from id 2). */
const charId = (c: string): number => c.charCodeAt(0) - 30;

function posttrain(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  return new Promise((done) => {
    execFile(process.execPath, ["--import", "tsx", CLI, ...args], { cwd: ROOT, timeout: 200_000 }, (err, stdout, stderr) => {
      done({ code: err === null ? 0 : typeof err.code === "number" ? err.code : 1, stdout, stderr });
    });
  });
}

describe("SFT on a chat template without generation markers", () => {
  let dir: string;
  let plain: string;
  let silent: string;
  let pool: WorkerPool;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), "posttrain-sft-markerless-"));
    let tiny;
    [tiny, pool] = await Promise.all([makeTinyModel(join(dir, "tiny"), { seed: 3 }), WorkerPool.local({ device: "cpu" })]);
    const template = readFileSync(join(tiny.path, "chat_template.jinja"), "utf8");
    const stripped = template.replaceAll(/\{%-?\s*(end)?generation\s*-?%\}/g, "");
    expect(stripped).not.toContain("generation %");
    expect(stripped).not.toEqual(template);
    plain = join(dir, "plain");
    cpSync(tiny.path, plain, { recursive: true });
    writeFileSync(join(plain, "chat_template.jinja"), stripped);
    writeFileSync(join(dir, "plain.jinja"), stripped);
    silent = join(dir, "silent");
    cpSync(tiny.path, silent, { recursive: true });
    writeFileSync(join(silent, "chat_template.jinja"), SILENT_TEMPLATE);
  }, 120_000);

  afterAll(async () => {
    await pool.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it("masks exactly each assistant's characters and its <|im_end|>", async () => {
    const worker = pool.worker(0);
    await worker.loadModel({ name: "plain", path: plain });
    const problems = digitSortExamples({ count: 32, numDigits: 4, split: "train", seed: 0 });
    const rows = problems.map((p) => History.from([{ role: "user", content: p.query }, { role: "assistant", content: p.answer }]));
    const td = new TensorDict({ history: { full: HistoryBatch.from(rows) } }, { batchSize: [rows.length] });
    const out = await worker.applyChatTemplate("plain", td, { key: "full" });
    const tokens = out.getRagged(["tokens", "full"]);
    const masks = out.getRagged(["masks", "all_assistant_mask"]);
    let total = 0;
    problems.forEach((p, row) => {
      const ids = Array.from(tokens.row(row).toArray() as ArrayLike<bigint | number>, Number);
      const mask = masks.row(row).toArray() as boolean[];
      const masked = ids.filter((_, k) => mask[k]);
      expect(masked).toEqual([...Array.from(p.answer, charId), IM_END]);
      total += masked.length;
    });
    expect(total).toBe(problems.reduce((sum, p) => sum + p.answer.length + 1, 0));
    await worker.unloadModel("plain");
  });

  it("a template whose assistant turns render to nothing is ASSISTANT_MASK_EMPTY naming the row and the model", async () => {
    const worker = pool.worker(0);
    await worker.loadModel({ name: "silent", path: silent });
    const td = new TensorDict(
      {
        history: {
          full: HistoryBatch.from([
            [{ role: "user", content: "Hi" }],
            [
              { role: "user", content: "Hi" },
              { role: "assistant", content: "Yo" },
            ],
          ]),
        },
      },
      { batchSize: [2] },
    );
    const err = await worker.applyChatTemplate("silent", td, { key: "full" }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(WorkerError);
    expect((err as WorkerError).code).toBe("ASSISTANT_MASK_EMPTY");
    expect((err as WorkerError).message).toMatch(/row 1: the chat template of model 'silent'/);
    await worker.unloadModel("silent");
  });

  it("posttrain sft trains 2 steps with a finite loss over exactly the assistant tokens, with model.chatTemplateFile", { timeout: 240_000 }, async () => {
    const runDir = join(dir, "run");
    const config = join(dir, "sft.yaml");
    writeFileSync(
      config,
      [
        // the directory's own template would give no mask: the file's must replace it
        `model: { path: ${JSON.stringify(silent)}, device: cpu, chatTemplateFile: ${JSON.stringify(join(dir, "plain.jinja"))} }`,
        "data: { type: digit-sort, numDigits: 4, examples: 64 }",
        `batchSize: ${String(BATCH)}`,
        "optimizer: { type: adamw, lr: 3.0e-3 }",
        "steps: 2",
        "eval: { every: 0 }",
        "checkpoint: { every: 0 }",
        "seed: 0",
        `runDir: ${JSON.stringify(runDir)}`,
      ].join("\n"),
    );
    const missing = join(dir, "missing.yaml");
    writeFileSync(missing, readFileSync(config, "utf8").replace("plain.jinja", "none.jinja").replace(runDir, join(dir, "run-missing")));
    const refused = await posttrain("sft", "--config", missing);
    expect(refused.code).not.toBe(0);
    expect(refused.stderr).toContain("model.chatTemplateFile: cannot read");
    const run = await posttrain("sft", "--config", config);
    expect(run.code, run.stderr).toBe(0);
    const metrics = readFileSync(join(runDir, "metrics.jsonl"), "utf8")
      .split("\n")
      .filter((l) => l.trim() !== "")
      .map((l) => JSON.parse(l) as Record<string, number>)
      .filter((m) => m.step !== undefined && m.step > 0);
    expect(metrics.map((m) => m.step)).toEqual([1, 2]);
    for (const m of metrics) {
      expect(Number.isFinite(m.loss)).toBe(true);
      // tokens_per_s is the loss's token count over the step time: every row is 4 sorted digits + <|im_end|>
      expect(Math.round(m.tokens_per_s! * m.step_time_s!)).toBe(BATCH * (4 + 1));
    }
  });
});
