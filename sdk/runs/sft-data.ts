/**
 * The examples of an SFT run: conversations from a `data` block (dataset files or the digit-sort task), rendered
 * once with the model's own chat template into tokens and assistant masks, then served in seeded, shuffled batches
 * with a resumable position.
 */
import type { z } from "zod";
import type { RequestOptions } from "../../bridge/index.js";
import { InvalidArgumentError } from "../core/errors.js";
import { History, HistoryBatch, type ChatMessage } from "../data/index.js";
import { DataLoadingPrimer } from "../envs/data/primer.js";
import { seededPermutation } from "../envs/data/shuffle.js";
import { digitSortExamples, type DigitSortSplit } from "../envs/tasks/digit-sort.js";
import { TensorDict } from "../tensordict/index.js";
import type { WorkerClient } from "../workers/client.js";
import type { SFTDataConfigSchema } from "./sft-config.js";

type SftData = z.output<typeof SFTDataConfigSchema>;

/** Where the batch stream is: the epoch and the examples already served in it. */
export interface SFTPosition {
  readonly epoch: number;
  readonly index: number;
}

function conversation(system: string | undefined, user: string, assistant: string): ChatMessage[] {
  return [...(system !== undefined ? [{ role: "system", content: system }] : []), { role: "user", content: user }, { role: "assistant", content: assistant }];
}

/**
 * The conversations of a data block. Digit-sort draws `data.examples` problems of `split` (at most `limit`); files
 * give one conversation per row (`messages`, or `prompt` + `completion`).
 */
export async function loadConversations(data: SftData, seed: number, split: DigitSortSplit, limit?: number): Promise<History[]> {
  if (data.type === "digit-sort") {
    const count = Math.min(data.examples, limit ?? data.examples);
    const problems = digitSortExamples({ count, numDigits: data.numDigits, heldOutFraction: data.heldOutFraction, split, seed: data.seed ?? seed });
    return problems.map((p) => History.from(conversation(data.systemPrompt, p.query, p.answer)));
  }
  const primer = new DataLoadingPrimer({ files: data.files, fields: data.fields, shuffle: false });
  const columns = await primer.load();
  const size = Math.min(columns.size, limit ?? columns.size);
  const out: History[] = [];
  const messages = columns.values.get("messages");
  if (messages !== undefined) {
    for (let i = 0; i < size; i++) {
      const h = messages[i];
      if (!(h instanceof History)) {
        throw new InvalidArgumentError(`SFT data.fields.messages: row ${String(i)} is not a conversation (map a column of { role, content } lists with kind "history")`);
      }
      out.push(data.systemPrompt !== undefined && h.messages[0]?.role !== "system" ? History.from([{ role: "system", content: data.systemPrompt }, ...h.messages]) : h);
    }
    return out;
  }
  const prompts = columns.values.get("prompt") ?? [];
  const completions = columns.values.get("completion") ?? [];
  for (let i = 0; i < size; i++) out.push(History.from(conversation(data.systemPrompt, String(prompts[i]), String(completions[i]))));
  return out;
}

/**
 * Renders conversations with `model`'s chat template in `worker`, in chunks: `("tokens","full")` and the masks
 * (`all_assistant_mask` marks the trained tokens).
 */
export async function renderConversations(worker: WorkerClient, model: string, rows: readonly History[], requestOptions: RequestOptions = {}): Promise<TensorDict> {
  const chunks: TensorDict[] = [];
  const chunk = 512;
  for (let start = 0; start < rows.length; start += chunk) {
    const part = rows.slice(start, start + chunk);
    const td = new TensorDict({ history: { full: HistoryBatch.from(part) } }, { batchSize: [part.length] });
    const rendered = await worker.applyChatTemplate(model, td, { key: "full" }, requestOptions);
    chunks.push(rendered.select(["tokens", "full"], ["masks", "all_assistant_mask"], ["masks", "all_attention_mask"]));
  }
  return chunks.length === 1 ? chunks[0]! : TensorDict.cat(chunks);
}

/** Seeded, shuffled batches over rendered examples, epoch after epoch; `position` resumes. */
export class SFTBatches {
  readonly #examples: TensorDict;
  readonly #batchSize: number;
  readonly #seed: number;
  readonly #shuffle: boolean;
  #epoch: number;
  #index: number;
  #order: Int32Array;

  constructor(examples: TensorDict, options: { batchSize: number; seed: number; shuffle: boolean; position?: SFTPosition | undefined }) {
    this.#examples = examples;
    this.#batchSize = options.batchSize;
    this.#seed = options.seed;
    this.#shuffle = options.shuffle;
    this.#epoch = options.position?.epoch ?? 0;
    this.#index = options.position?.index ?? 0;
    this.#order = this.#orderOf(this.#epoch);
  }

  /** Examples per epoch. */
  get size(): number {
    return this.#examples.numel();
  }

  /** Where the stream is (save it with a checkpoint). */
  get position(): SFTPosition {
    return { epoch: this.#epoch, index: this.#index };
  }

  #orderOf(epoch: number): Int32Array {
    const n = this.size;
    return this.#shuffle ? seededPermutation(n, this.#seed, epoch) : Int32Array.from({ length: n }, (_, i) => i);
  }

  /** The next batch (`batchSize` rows; an epoch boundary inside a batch moves on to the next epoch's order). */
  next(): TensorDict {
    const rows = new Int32Array(this.#batchSize);
    for (let i = 0; i < rows.length; i++) {
      if (this.#index >= this.size) {
        this.#epoch++;
        this.#index = 0;
        this.#order = this.#orderOf(this.#epoch);
      }
      rows[i] = this.#order[this.#index++]!;
    }
    return this.#examples.index(rows);
  }
}
