/**
 * `ChatEnv`: TorchRL's blank-canvas chat environment. Reset turns the dataset query into the prompt of the
 * conversation; step makes the policy's full conversation the prompt of the next turn. Rewards, tools, KL and
 * data loading are transforms (see `DatasetChatEnv`).
 */
import { z } from "zod";
import { getChatTemplate, History, HistoryBatch, type ChatMessage, type ChatTemplate } from "../data/index.js";
import { RaggedTensor, TensorDict, type NestedKey } from "../tensordict/index.js";
import { WorkerClient } from "../workers/client.js";
import { parseOptions } from "../core/index.js";
import { EnvBase, type EnvCallOptions } from "./env-base.js";
import { EnvStateError, InvalidArgumentError } from "./errors.js";
import { QUERY_KEY, modeKey, type InputMode } from "./keys.js";

/** A model in a worker whose tokenizer and chat template render conversations. */
export const WorkerTokenizerSchema = z.strictObject({
  /** The worker holding the model. */
  worker: z.instanceof(WorkerClient),
  /** The model's name in that worker (its HF tokenizer and chat template are used). */
  model: z.string().min(1),
});

/** A model in a worker whose tokenizer and chat template render conversations. */
export type WorkerTokenizer = z.input<typeof WorkerTokenizerSchema>;

const ChatTemplateSchema = z.union([
  z.string().min(1),
  z.custom<ChatTemplate>((v) => typeof v === "object" && v !== null && typeof (v as { render?: unknown }).render === "function", {
    message: "expected a chat template name or a ChatTemplate object",
  }),
]);

/** Options of {@link ChatEnv} (TorchRL's names, camelCased). */
export const ChatEnvOptionsSchema = z.strictObject({
  /** The batch size (at least one dimension; default `[1]`). */
  batchSize: z.array(z.number().int().min(1)).min(1).default([1]),
  /** What the env gives the policy: `"history"` (default), `"text"` or `"tokens"`. */
  inputMode: z.enum(["history", "text", "tokens"]).default("history"),
  /** A system message put before every conversation at reset. */
  systemPrompt: z.string().optional(),
  /** The role of the system prompt (default `"system"`). */
  systemRole: z.string().min(1).default("system"),
  /** The role a string query becomes (default `"user"`). */
  userRole: z.string().min(1).default("user"),
  /** The policy's role (default `"assistant"`): rewards read the last message with this role. */
  policyRole: z.string().min(1).default("assistant"),
  /** The key reset reads the query from (default `"query"`): strings, or a History per row. */
  dataKey: z.string().min(1).default(QUERY_KEY),
  /**
   * Renders text-mode prompts in TypeScript when no `tokenizer` is given (default `"chatml"`), and parses text back
   * into conversations for rewards.
   */
  chatTemplate: ChatTemplateSchema.default("chatml"),
  /** A worker model whose own chat template renders prompts (required in tokens mode; used in text mode). */
  tokenizer: WorkerTokenizerSchema.optional(),
});

/** Options of {@link ChatEnv}. */
export type ChatEnvOptions = z.input<typeof ChatEnvOptionsSchema>;
type Resolved = z.output<typeof ChatEnvOptionsSchema>;

/**
 * A chat environment (TorchRL's `ChatEnv`), batched over its batch size.
 *
 * - `reset(td)` reads `td[dataKey]` (default `"query"`): a string per row (a `userRole` message) or a
 *   `HistoryBatch`; puts the system prompt first; writes `(inputMode, "prompt")`: the History, the text rendered
 *   with a generation prompt, or its tokens. The other entries of `td` (dataset fields) are kept.
 * - `step(td)` reads the policy's `(inputMode, "full")` (or prompt + `(inputMode, "response")`) and returns
 *   `next` with `(inputMode, "prompt")` = that full conversation. The env never ends an episode by itself:
 *   transforms set `done` (a reward transform, `StepCounter`).
 */
export class ChatEnv extends EnvBase {
  /** The resolved options. */
  readonly config: Readonly<Omit<Resolved, "chatTemplate">> & { readonly chatTemplate: ChatTemplate };

  constructor(options: ChatEnvOptions = {}) {
    const parsed = parseOptions(ChatEnvOptionsSchema, options, "ChatEnv options");
    super({ batchSize: parsed.batchSize });
    let chatTemplate: ChatTemplate;
    try {
      chatTemplate = getChatTemplate(parsed.chatTemplate);
    } catch (err) {
      throw new InvalidArgumentError(`ChatEnv options.chatTemplate: ${err instanceof Error ? err.message : String(err)}`);
    }
    if (parsed.inputMode === "tokens" && parsed.tokenizer === undefined) {
      throw new InvalidArgumentError("ChatEnv options.tokenizer: required in tokens mode ({ worker, model } whose tokenizer renders the prompts)");
    }
    this.config = Object.freeze({ ...parsed, chatTemplate });
  }

  /** The input mode. */
  get inputMode(): InputMode {
    return this.config.inputMode;
  }

  /** The policy's output keys: `(inputMode, "full")` and `(inputMode, "response")`. */
  override get actionKeys(): readonly NestedKey[] {
    return [modeKey(this.inputMode, "full"), modeKey(this.inputMode, "response")];
  }

  /** The conversations of the reset: the query of each row after the system prompt. */
  protected queryHistories(td: TensorDict): HistoryBatch {
    const { dataKey, userRole, systemPrompt, systemRole } = this.config;
    const value = td.get(dataKey, undefined);
    if (value === undefined) {
      throw new EnvStateError(
        `ChatEnv.reset: the TensorDict has no ${JSON.stringify(dataKey)} entry (the query of each row, e.g. from a DataLoadingPrimer); keys: ${JSON.stringify(td.keys({ nested: true }))}`,
      );
    }
    let queries: HistoryBatch;
    if (value instanceof HistoryBatch) queries = value;
    else if (Array.isArray(value)) queries = HistoryBatch.from((value as readonly string[]).map((content): ChatMessage[] => [{ role: userRole, content }]));
    else throw new EnvStateError(`ChatEnv.reset: ${JSON.stringify(dataKey)} must hold strings or a HistoryBatch, got a ${value.constructor.name}`);
    if (systemPrompt === undefined) return queries;
    const system = History.from([{ role: systemRole, content: systemPrompt }]);
    return queries.map((h) => system.extend(h));
  }

  /** Renders `histories` with the worker's chat template (generation prompt added): text and tokens. */
  protected async renderWithWorker(histories: HistoryBatch, options: EnvCallOptions): Promise<TensorDict> {
    const tokenizer = this.config.tokenizer!;
    const rows = histories.length;
    const td = new TensorDict({ history: { prompt: histories } }, { batchSize: [rows] });
    const request = options.signal === undefined ? {} : { signal: options.signal };
    return tokenizer.worker.applyChatTemplate(tokenizer.model, td, { key: "prompt" }, request);
  }

  protected override async _reset(td: TensorDict, options: EnvCallOptions): Promise<TensorDict> {
    const histories = this.queryHistories(td);
    const out = td.exclude("next", "_reset");
    const key = modeKey(this.inputMode, "prompt");
    if (this.inputMode === "history") return out.set(key, histories);
    if (this.inputMode === "text" && this.config.tokenizer === undefined) {
      return out.set(key, histories.toText({ chatTemplate: this.config.chatTemplate, addGenerationPrompt: true }));
    }
    const rendered = await this.renderWithWorker(histories, options);
    if (this.inputMode === "text") return out.set(key, rendered.getStrings(["text", "prompt"]));
    const tokens = rendered.getRagged(["tokens", "prompt"]);
    return out.set(key, tokens);
  }

  protected override _step(td: TensorDict): Promise<TensorDict> {
    const mode = this.inputMode;
    const full = modeKey(mode, "full");
    const response = modeKey(mode, "response");
    const prompt = modeKey(mode, "prompt");
    let value: HistoryBatch | readonly string[] | RaggedTensor;
    if (td.has(full)) {
      value = mode === "history" ? td.getHistory(full) : mode === "text" ? td.getStrings(full) : td.getRagged(full);
    } else if (td.has(response) && td.has(prompt) && mode !== "tokens") {
      if (mode === "history") {
        value = td.getHistory(prompt).appendEach(td.getHistory(response).rows);
      } else {
        const responses = td.getStrings(response);
        value = td.getStrings(prompt).map((p, i) => p + responses[i]!);
      }
    } else {
      throw new EnvStateError(
        `ChatEnv.step (${mode} mode): the TensorDict has no ${JSON.stringify(full)} (the policy's output)${mode === "tokens" ? "" : ` nor ${JSON.stringify(response)}`}; run the policy before step`,
      );
    }
    const next = new TensorDict({}, { batchSize: this.batchSize });
    return Promise.resolve(next.set(prompt, value));
  }
}
