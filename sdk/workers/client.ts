import { z } from "zod";
import {
  ProtocolError,
  type Payload,
  type RequestOptions,
  type RpcReply,
  type WorkerConnection,
  type WorkerInfo,
} from "../../bridge/index.js";
import { TensorDict } from "../tensordict/index.js";
import {
  ChatTemplateOptionsSchema,
  GenerateOptionsSchema,
  ScoreOptionsSchema,
  type ChatTemplateOptions,
  type GenerateOptions,
  type ScoreOptions,
} from "./generation.js";
import { LoadModelOptionsSchema, ModelInfoSchema, ModelListSchema, type LoadModelOptions, type ModelInfo } from "./models.js";
import { parseOptions } from "./options.js";

const ComputeForResult = z.object({ iterations: z.number().int().nonnegative() });

/**
 * The typed client of one worker: each worker method as an async function taking and returning
 * TensorDicts. Obtain it from `WorkerPool.local(...)`; the transport underneath is `connection`.
 */
export class WorkerClient {
  constructor(
    /** The bridge connection (generic `request` by method name). */
    readonly connection: WorkerConnection,
  ) {}

  /** Name used in messages, e.g. `"worker 0"`. */
  get name(): string {
    return this.connection.name;
  }

  /** What the worker reported in its handshake: versions, devices, capabilities. */
  get info(): WorkerInfo {
    return this.connection.info;
  }

  /** Round trip of a no-op request, in milliseconds. */
  async ping(options: RequestOptions = {}): Promise<number> {
    const start = performance.now();
    await this.connection.request("ping", {}, [], options);
    return performance.now() - start;
  }

  /** Sends `td` to the worker, which decodes it into torch tensors and sends it back re-encoded. */
  async echo(td: TensorDict, options: RequestOptions = {}): Promise<TensorDict> {
    const reply = await this.connection.request("echo", {}, [{ kind: "tensordict", data: td.toArrow() }], options);
    return singleTensorDict("echo", reply);
  }

  /**
   * Per row of every tensor leaf, the sum of its elements (float64), computed by torch in the worker; for
   * string leaves, the row's length in characters (int64). Same keys and batch size as `td`.
   */
  async rowSums(td: TensorDict, options: RequestOptions = {}): Promise<TensorDict> {
    const reply = await this.connection.request("row_sums", {}, [{ kind: "tensordict", data: td.toArrow() }], options);
    return singleTensorDict("row_sums", reply);
  }

  /** Keeps the worker's compute thread busy for `seconds` (for tests of liveness, timeouts and cancellation). */
  async computeFor(seconds: number, options: RequestOptions = {}): Promise<number> {
    const reply = await this.connection.request("compute_for", { seconds }, [], options);
    return parseResult("compute_for", ComputeForResult, reply).iterations;
  }

  /**
   * Loads a Hugging Face causal LM (weights and tokenizer) under `name`. Options are validated before anything
   * is sent; the worker answers `MODEL_NOT_FOUND` (no such directory, or not on the hub), `MODEL_LOAD_FAILED`
   * (no tokenizer, not a causal LM, unreadable weights), `MODEL_ALREADY_LOADED` or `BACKEND_UNAVAILABLE`
   * (`backend: "vllm"` where the `vllm` package cannot be imported) as a `WorkerError`.
   */
  async loadModel(options: LoadModelOptions, requestOptions: RequestOptions = {}): Promise<ModelInfo> {
    const args = parseOptions(LoadModelOptionsSchema, options, "loadModel options");
    const reply = await this.connection.request("load_model", { ...args }, [], requestOptions);
    return parseResult("load_model", ModelInfoSchema, reply);
  }

  /** Unloads the model `name` and frees its memory (`MODEL_NOT_LOADED` when there is none). */
  async unloadModel(name: string, requestOptions: RequestOptions = {}): Promise<void> {
    const checked = parseOptions(z.string().min(1), name, "unloadModel name");
    await this.connection.request("unload_model", { name: checked }, [], requestOptions);
  }

  /** The models loaded in this worker. */
  async listModels(requestOptions: RequestOptions = {}): Promise<ModelInfo[]> {
    const reply = await this.connection.request("list_models", {}, [], requestOptions);
    return parseResult("list_models", ModelListSchema, reply).models;
  }

  /**
   * Samples completions from the loaded model `model` for a batch of prompts: `prompts` holds
   * `("tokens","prompt")` (ragged int64), `("text","prompt")` (strings) or `("history","prompt")` (conversations,
   * rendered in the worker with the model's chat template and its generation prompt). The result has TorchRL's keys:
   * `("tokens"|"text", "prompt"|"response"|"full")`, `("log_probs","response"|"full")`,
   * `("masks","all_attention_mask"|"all_assistant_mask")` and `finish_reason`; its batch size is `[B]`, or
   * `[B, numSamples]` when `numSamples > 1`. See docs/models.md.
   */
  async generate(
    model: string,
    prompts: TensorDict,
    options: GenerateOptions,
    requestOptions: RequestOptions = {},
  ): Promise<TensorDict> {
    const args = parseOptions(GenerateOptionsSchema, options, "generate options");
    return this.modelCall("generate", model, args, prompts, requestOptions);
  }

  /**
   * Per-token log-probabilities of given sequences under `model` (TorchRL convention: entry t is
   * log p(tok_t | tok_<t), the first token gets 0): reads `("tokens","full")`, returns `("log_probs","full")`.
   */
  async score(
    model: string,
    sequences: TensorDict,
    options: ScoreOptions = {},
    requestOptions: RequestOptions = {},
  ): Promise<TensorDict> {
    const args = parseOptions(ScoreOptionsSchema, options, "score options");
    return this.modelCall("score", model, args, sequences, requestOptions);
  }

  /**
   * Renders conversations with the model's own chat template (the HF tokenizer is the source of truth): reads
   * `("history", key)` and returns `("tokens", key)`, `("text", key)` and
   * `("masks","all_attention_mask"|"all_assistant_mask")` (assistant tokens, from the template's
   * `{% generation %}` blocks). An incomplete last message is continued rather than closed.
   */
  async applyChatTemplate(
    model: string,
    conversations: TensorDict,
    options: ChatTemplateOptions = {},
    requestOptions: RequestOptions = {},
  ): Promise<TensorDict> {
    const args = parseOptions(ChatTemplateOptionsSchema, options, "applyChatTemplate options");
    return this.modelCall("apply_chat_template", model, args, conversations, requestOptions);
  }

  /** A method on a loaded model taking one TensorDict and answering one (validated args already). */
  private async modelCall(
    method: string,
    model: string,
    args: Record<string, unknown>,
    td: TensorDict,
    requestOptions: RequestOptions,
  ): Promise<TensorDict> {
    const name = parseOptions(z.string().min(1), model, `${method} model`);
    const payload = { kind: "tensordict" as const, data: td.toArrow() };
    const reply = await this.connection.request(method, { model: name, ...args }, [payload], requestOptions);
    return singleTensorDict(method, reply);
  }

  /** Calls any worker method by name (the escape hatch below the typed methods). */
  call(
    method: string,
    args: Record<string, unknown> = {},
    payloads: readonly Payload[] = [],
    options: RequestOptions = {},
  ): Promise<RpcReply> {
    return this.connection.request(method, args, payloads, options);
  }
}

function singleTensorDict(method: string, reply: RpcReply): TensorDict {
  const payload = reply.payloads[0];
  if (reply.payloads.length !== 1 || payload?.kind !== "tensordict") {
    throw new ProtocolError(`${method}: expected one tensordict payload in the reply, got ${reply.payloads.length}`);
  }
  return TensorDict.fromArrow(payload.data);
}

function parseResult<T>(method: string, schema: z.ZodType<T>, reply: RpcReply): T {
  const parsed = schema.safeParse(reply.result);
  if (!parsed.success) throw new ProtocolError(`${method}: malformed result: ${z.prettifyError(parsed.error)}`);
  return parsed.data;
}
