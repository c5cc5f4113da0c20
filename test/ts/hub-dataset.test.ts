// Tasks over datasets read through the Python `datasets` library, offline: test/python/hub_datasets.py builds (with
// the library itself) a temporary HF_HOME whose datasets cache holds a GSM8K-shaped Hub id, and save_to_disk copies;
// the loader (`python -m posttrain_worker.data.hub_dataset`) hands the rows over as Arrow and they go through the
// same field mapping and envs as local files. Bad sources fail with typed errors naming the field. Also IFEval in
// Google's input_data.jsonl format and the Hub's format: rows with instructions that have no checker are skipped
// and reported. Nothing here reaches a network.
import { execFile } from "node:child_process";
import { mkdtemp, mkdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { resolvePython } from "../../bridge/worker/python.js";
import {
  DatasetNotCachedError,
  DatasetNotFoundError,
  DatasetsNotInstalledError,
  IFEvalEnv,
  InvalidArgumentError,
  readColumn,
  TaskConfigSchema,
  type ChatMessage,
  type EnvBase,
  type TensorDict,
} from "../../sdk/index.js";
import { createTaskEnv, type TaskEnv } from "../../sdk/runs/task-env.js";

interface Built {
  readonly hfHome: string;
  readonly gsm8kId: string;
  readonly gsm8kTrainFile: string;
  readonly prompts: string;
  readonly promptsTrain: string;
  readonly ifeval: string;
}

const BUILDER = join(import.meta.dirname, "..", "python", "hub_datasets.py");
const ENV_KEYS = ["HF_HOME", "HF_HUB_OFFLINE", "HF_DATASETS_CACHE", "PYTHONPATH"] as const;

let dir: string;
let built: Built;
const savedEnv = new Map<string, string | undefined>();

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "posttrain-hub-dataset-"));
  for (const key of ENV_KEYS) savedEnv.set(key, process.env[key]);
  const { stdout } = await promisify(execFile)(resolvePython(), [BUILDER, dir], { timeout: 120_000 });
  built = JSON.parse(stdout.trim().split("\n").at(-1)!) as Built;
  // The loader's child inherits these: the temporary cache, and no network.
  process.env.HF_HOME = built.hfHome;
  process.env.HF_HUB_OFFLINE = "1";
  delete process.env.HF_DATASETS_CACHE;
}, 180_000);

afterAll(async () => {
  for (const [key, value] of savedEnv) {
    if (value === undefined) Reflect.deleteProperty(process.env, key);
    else process.env[key] = value;
  }
  await rm(dir, { recursive: true, force: true });
});

const task = (config: Record<string, unknown>, rows = 2): TaskEnv =>
  createTaskEnv(TaskConfigSchema.parse(config), { batchSize: rows, repeats: 1, seed: 0, split: "train", where: "task" });

/** Steps `env` from `td` with one assistant message per row. */
async function respond(env: EnvBase, td: TensorDict, contents: readonly string[]): Promise<TensorDict> {
  const response: ChatMessage[][] = contents.map((content) => [{ role: "assistant", content }]);
  td.set(["history", "full"], td.getHistory(["history", "prompt"]).appendEach(response));
  return env.step(td);
}

const userMessages = (td: TensorDict): (string | undefined)[] => td.getHistory(["history", "prompt"]).rows.map((h) => h.at(-1)?.content);

describe("a Hub id from the datasets cache, offline", () => {
  it("loads a GSM8K task with the same rows, mapping and rewards as the local file", async () => {
    const hub = task({ type: "gsm8k", hub: built.gsm8kId, config: "main", split: "train", shuffle: false });
    const local = task({ type: "gsm8k", files: built.gsm8kTrainFile, shuffle: false });
    expect(await hub.epochSize()).toBe(6);
    const [fromHub, fromFile] = [await hub.env.reset(), await local.env.reset()];
    expect(userMessages(fromHub)).toEqual(userMessages(fromFile));
    expect(userMessages(fromHub)[0]).toMatch(/^Ann has 1 apples/);
    expect(fromHub.get("answer")).toEqual(fromFile.get("answer"));
    const out = await respond(hub.env, fromHub, ["<answer>3</answer>", "<answer>4</answer>"]); // 1+2 = 3; 2+3 = 5
    expect(readColumn(out, ["next", "reward"])?.map((r) => Math.round(r * 1e6) / 1e6)).toEqual([1, 0.1]);
  });

  it("streams the first rows with a limit", async () => {
    const env = task({ type: "gsm8k", hub: built.gsm8kId, config: "main", split: "train", streaming: true, limit: 2, shuffle: false });
    expect(await env.epochSize()).toBe(2);
  });

  it("names the id, config, split and cache when they are not cached, and the split when there is none", async () => {
    const missing = task({ type: "gsm8k", hub: "posttrain-test/never-downloaded", config: "main", split: "train" });
    const err = await missing.epochSize().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(DatasetNotCachedError);
    expect(err).toMatchObject({ code: "DATASET_NOT_CACHED", hub: "posttrain-test/never-downloaded", config: "main", split: "train" });
    expect((err as DatasetNotCachedError).cacheDir).toContain(built.hfHome);
    expect((err as Error).message).toMatch(/offline.*save_to_disk/s);
    const noSplit = task({ type: "gsm8k", hub: built.gsm8kId, config: "main", split: "validation" });
    const splitErr = await noSplit.epochSize().catch((e: unknown) => e);
    expect(splitErr).toBeInstanceOf(DatasetNotFoundError);
    expect(splitErr).toMatchObject({ code: "DATASET_NOT_FOUND", field: "split" });
    expect((splitErr as Error).message).toMatch(/validation.*'train', 'test'/);
  });
});

describe("save_to_disk copies", () => {
  it("feed a dataset task through fields, by split; a column missing from the copy names the field", async () => {
    const fields = { query: "question", answer: "solution", level: { column: "level", kind: "int64" } };
    const env = task({ type: "dataset", disk: built.prompts, split: "train", fields, reward: "exact-match", shuffle: false }, 3);
    const td = await env.env.reset();
    expect(userMessages(td)).toEqual(["2+2", "3+3", "4+4"]);
    expect(td.get("level")).toMatchObject({ dtype: "int64" });
    const out = await respond(env.env, td, ["4", "5", "8"]);
    expect(readColumn(out, ["next", "reward"])).toEqual([1, 0, 1]);
    const bad = task({ type: "dataset", disk: built.prompts, split: "test", fields: { query: "prompt" }, reward: "exact-match" }, 1);
    await expect(bad.epochSize()).rejects.toMatchObject({ code: "DATASET_FIELD", field: "prompt", row: 0, file: `${built.prompts} (test)` });
  });

  it("a config for a copy named as `hub` is an InvalidArgumentError naming the field", async () => {
    const err = await task({ type: "gsm8k", hub: built.promptsTrain, config: "main", split: "train" }).epochSize().catch((e: unknown) => e);
    expect(err).toBeInstanceOf(InvalidArgumentError);
    expect(err).toMatchObject({ code: "INVALID_ARGUMENT" });
    expect((err as Error).message).toMatch(/^task\.config: .*does not apply to a save_to_disk copy/);
  });

  it("fail with DATASETS_NOT_INSTALLED naming the extra when the library cannot be imported", async () => {
    // A Python path whose `datasets` raises ImportError, as an environment without the library does.
    const shadow = join(dir, "no-datasets");
    await mkdir(shadow, { recursive: true });
    await writeFile(join(shadow, "datasets.py"), 'raise ImportError("No module named \'datasets\'")\n');
    process.env.PYTHONPATH = shadow;
    try {
      const err = await task({ type: "gsm8k", disk: built.promptsTrain }).epochSize().catch((e: unknown) => e);
      expect(err).toBeInstanceOf(DatasetsNotInstalledError);
      expect(err).toMatchObject({ code: "DATASETS_NOT_INSTALLED", extra: "datasets" });
      expect((err as Error).message).toContain("npx posttrain setup --extras datasets");
    } finally {
      delete process.env.PYTHONPATH;
    }
  });
});

describe("the task block", () => {
  it("takes exactly one source, and only the options that source takes", () => {
    const issue = (config: Record<string, unknown>): { path: PropertyKey[]; message: string } | undefined => {
      const result = TaskConfigSchema.safeParse(config);
      return result.success ? undefined : result.error.issues[0];
    };
    expect(issue({ type: "gsm8k", files: "a.jsonl", hub: "openai/gsm8k", split: "train" })).toMatchObject({ path: ["hub"], message: /exactly one of files/ });
    expect(issue({ type: "gsm8k" })).toMatchObject({ path: ["files"] });
    expect(issue({ type: "gsm8k", hub: "openai/gsm8k" })).toMatchObject({ path: ["split"], message: /needs a split/ });
    expect(issue({ type: "math", files: "a.jsonl", config: "main" })).toMatchObject({ path: ["config"], message: /only to a Hub dataset/ });
    expect(issue({ type: "ifeval", disk: "/data/ifeval", streaming: true })).toMatchObject({ path: ["streaming"] });
    expect(issue({ type: "dataset", hub: "openai/gsm8k", config: "main", split: "train", fields: { query: "question" } })).toBeUndefined();
  });

  it("limit keeps the first rows of local files too", async () => {
    expect(await task({ type: "gsm8k", files: [built.gsm8kTrainFile, built.gsm8kTrainFile], limit: 8 }).epochSize()).toBe(8);
  });
});

describe("IFEval in its real formats", () => {
  // Google's input_data.jsonl: `key`, `prompt`, `instruction_id_list`, `kwargs` (one object per instruction, empty
  // when it takes none); the second row asks for a response language, which has no checker here; the third counts
  // a non-letter character, as two rows of the real file do.
  const GOOGLE_ROWS = [
    { key: 1000, prompt: "Describe a harbor at dawn without commas.", instruction_id_list: ["punctuation:no_comma"], kwargs: [{}] },
    {
      key: 1108,
      prompt: "Answer only in Kannada, and use fewer than 50 words.",
      instruction_id_list: ["language:response_language", "length_constraints:number_words"],
      kwargs: [{ language: "kn" }, { relation: "less than", num_words: 50 }],
    },
    {
      key: 1122,
      prompt: "Write a tweet with at least 3 hashtags.",
      instruction_id_list: ["keywords:letter_frequency"],
      kwargs: [{ let_relation: "at least", letter: "#", let_frequency: 3 }],
    },
  ];

  const skipWarnings = async (load: () => Promise<unknown>): Promise<string[]> => {
    const seen: string[] = [];
    const onWarning = (w: Error): void => void seen.push(w.message);
    process.on("warning", onWarning);
    try {
      await load();
      await new Promise((resolve) => setImmediate(resolve)); // warnings are emitted on the next tick
    } finally {
      process.off("warning", onWarning);
    }
    return seen.filter((m) => m.startsWith("IFEvalEnv: skipped"));
  };

  it("loads Google's file, skipping and reporting rows with unchecked instructions", async () => {
    const file = join(dir, "input_data.jsonl");
    await writeFile(file, GOOGLE_ROWS.map((r) => JSON.stringify(r)).join("\n") + "\n");
    const env = new IFEvalEnv({ dataset: { files: file, shuffle: false }, batchSize: [2] });
    const warnings = await skipWarnings(() => env.load());
    expect(env.primer.size).toBe(2);
    expect(env.skippedRows).toEqual([{ file, row: 1, key: 1108, instructionIds: ["language:response_language"] }]);
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toContain("skipped 1 of 3 rows");
    expect(warnings[0]).toContain("key 1108 (language:response_language)");
    const td = await env.reset();
    expect(userMessages(td)).toEqual([GOOGLE_ROWS[0]!.prompt, GOOGLE_ROWS[2]!.prompt]);
    const out = await respond(env, td, ["<answer>Calm water and gulls</answer>", "<answer>#a #b #c</answer>"]);
    expect(readColumn(out, ["next", "ifeval_score", "prompt_level_strict_acc"])).toEqual([1, 1]);
  });

  it("loads the Hub's format (null-valued kwargs) from a save_to_disk copy through the task block", async () => {
    const env = task({ type: "ifeval", disk: built.ifeval, shuffle: false });
    const warnings = await skipWarnings(() => env.epochSize());
    expect(await env.epochSize()).toBe(2);
    if (!(env.env instanceof IFEvalEnv)) throw new Error("the ifeval task built no IFEvalEnv");
    expect(env.env.skippedRows).toMatchObject([{ row: 1, key: 1108, instructionIds: ["language:response_language"] }]);
    expect(warnings).toHaveLength(1);
  });
});
