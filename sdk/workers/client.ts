import type { Payload, RequestOptions, RPCReply, WorkerConnection, WorkerInfo } from "../../bridge/index.js";
import { InvalidArgumentError, ProtocolError } from "../core/errors.js";
import { parseOptions, parseReply } from "../core/validation.js";
import { TensorDict } from "../tensordict/index.js";
import type { ChatTemplateOptions, GenerateOptions, ScoreOptions } from "./generation.js";
import {
  WORKER_METHODS,
  type MethodArgs,
  type MethodResult,
  type PayloadShape,
  type WorkerMethod,
  type WorkerMethodName,
} from "./methods.js";
import type { LoadModelOptions, ModelInfo } from "./models.js";
import type { WeightsDigest } from "./weight-results.js";

/** A checked reply: the method's result and the payloads that came with it. */
export interface MethodReply<M extends WorkerMethodName> {
  readonly result: MethodResult<M>;
  readonly payloads: readonly Payload[];
}

/**
 * The typed client of one worker: each worker method as an async function taking and returning
 * TensorDicts. Obtain it from `WorkerPool.local(...)`; the transport underneath is `connection`.
 *
 * Every call takes `RequestOptions` last: `timeoutMs` (give up on this call), `signal` (cancel it) and `watchdogMs`
 * (a call unanswered that long means the worker is hung: the connection fails with `WorkerHungError` and the worker
 * is killed; the pool's `watchdogMs` is the default). Requests the worker would refuse are refused here first:
 * `args` nested too deep (`InvalidArgumentError`), payloads over the worker's `maxPayloadBytes`
 * (`PayloadTooLargeError`).
 *
 * ```ts
 * const out = await worker.generate("policy", prompts, { maxNewTokens: 32 }, { watchdogMs: 5 * 60_000 });
 * ```
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

  /**
   * The address of the node the worker runs on: a Ray worker's node address (what other nodes reach it at), and
   * `"127.0.0.1"` for a local worker.
   *
   * ```ts
   * const initMethod = `tcp://${worker.nodeAddress}:${port}`;
   * ```
   */
  get nodeAddress(): string {
    return this.connection.node?.address ?? "127.0.0.1";
  }

  /** The Ray node id of a Ray worker's node; `undefined` for a local worker. */
  get nodeId(): string | undefined {
    return this.connection.node?.id;
  }

  /** What the worker reported in its handshake: versions, devices, capabilities. */
  get info(): WorkerInfo {
    return this.connection.info;
  }

  /**
   * Calls worker method `method` through the method table ({@link WORKER_METHODS}): `args` are checked against its
   * schema here (an `InvalidArgumentError` naming the field, labelled `where`, default `"<method> args"`), the
   * payloads against what it takes, and the reply's result against its result schema (`ProtocolError` otherwise).
   *
   * ```ts
   * const { result } = await worker.invoke("trainer_state", { model: "policy" });
   * ```
   */
  async invoke<M extends WorkerMethodName>(
    method: M,
    args: MethodArgs<M>,
    payloads: readonly Payload[] = [],
    requestOptions: RequestOptions = {},
    where = `${method} args`,
  ): Promise<MethodReply<M>> {
    const spec: WorkerMethod = WORKER_METHODS[method];
    const wireArgs = parseOptions(spec.args, args, where) as Record<string, unknown>;
    checkPayloads(method, spec.takes, payloads);
    const reply = await this.connection.request(method, wireArgs, payloads, requestOptions);
    return { result: parseReply(method, spec.result, reply) as MethodResult<M>, payloads: reply.payloads };
  }

  /** Round trip of a no-op request, in milliseconds. */
  async ping(options: RequestOptions = {}): Promise<number> {
    const start = performance.now();
    await this.invoke("ping", {}, [], options);
    return performance.now() - start;
  }

  /** Sends `td` to the worker, which decodes it into torch tensors and sends it back re-encoded. */
  async echo(td: TensorDict, options: RequestOptions = {}): Promise<TensorDict> {
    const reply = await this.invoke("echo", {}, [tensorDictPayload(td)], options);
    return singleTensorDict("echo", reply.payloads);
  }

  /**
   * Loads a Hugging Face causal LM (weights and tokenizer) under `name`. Options are validated before anything
   * is sent; the worker answers `MODEL_NOT_FOUND` (no such directory, or not on the hub), `MODEL_NOT_CACHED`
   * (a hub id while offline, `HF_HUB_OFFLINE=1`, that is not in the HF cache), `BAD_ARGUMENTS` (a `path` that
   * is neither a directory nor a hub id), `MODEL_LOAD_FAILED`
   * (no tokenizer, not a causal LM, unreadable weights), `MODEL_ALREADY_LOADED` or `BACKEND_UNAVAILABLE`
   * (`backend: "vllm"` where the `vllm` package cannot be imported) as a `WorkerError`.
   */
  async loadModel(options: LoadModelOptions, requestOptions: RequestOptions = {}): Promise<ModelInfo> {
    return (await this.invoke("load_model", options, [], requestOptions, "loadModel options")).result;
  }

  /** Unloads the model `name` and frees its memory (`MODEL_NOT_LOADED` when there is none). */
  async unloadModel(name: string, requestOptions: RequestOptions = {}): Promise<void> {
    await this.invoke("unload_model", { name }, [], requestOptions, "unloadModel");
  }

  /** The models loaded in this worker. */
  async listModels(requestOptions: RequestOptions = {}): Promise<ModelInfo[]> {
    return (await this.invoke("list_models", {}, [], requestOptions)).result.models;
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
    return this.modelCall("generate", { ...options, model }, prompts, requestOptions);
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
    return this.modelCall("score", { ...options, model }, sequences, requestOptions);
  }

  /**
   * Renders conversations with the model's own chat template (the HF tokenizer is the source of truth): reads
   * `("history", key)` and returns `("tokens", key)`, `("text", key)` and
   * `("masks","all_attention_mask"|"all_assistant_mask")` (assistant tokens: the template's `{% generation %}`
   * blocks, or, for a template without them, prefix rendering; docs/history.md, "Assistant masks"). An incomplete last message is continued rather than closed.
   */
  async applyChatTemplate(
    model: string,
    conversations: TensorDict,
    options: ChatTemplateOptions = {},
    requestOptions: RequestOptions = {},
  ): Promise<TensorDict> {
    return this.modelCall("apply_chat_template", { ...options, model }, conversations, requestOptions);
  }

  /**
   * A fingerprint of the weights of the loaded model `model`: sha256 over every parameter's name, dtype, shape and raw
   * bytes (what a weight sync sends: a LoRA model's merged weights), with its policy version. Equal digests mean
   * bit-identical weights, e.g. every generator after a sync (`MODEL_NOT_LOADED` when there is no such model).
   *
   * ```ts
   * const same = (await a.weightsDigest("policy")).digest === (await b.weightsDigest("policy")).digest;
   * ```
   */
  async weightsDigest(model: string, requestOptions: RequestOptions = {}): Promise<WeightsDigest> {
    return (await this.invoke("weights_digest", { model }, [], requestOptions, "weightsDigest")).result;
  }

  /** A method on a loaded model taking one TensorDict and answering one; options errors say `"<method> options"`. */
  private async modelCall<M extends "generate" | "score" | "apply_chat_template">(
    method: M,
    args: MethodArgs<M>,
    td: TensorDict,
    requestOptions: RequestOptions,
  ): Promise<TensorDict> {
    const where = `${method === "apply_chat_template" ? "applyChatTemplate" : method} options`;
    const reply = await this.invoke(method, args, [tensorDictPayload(td)], requestOptions, where);
    return singleTensorDict(method, reply.payloads);
  }

  /**
   * Calls any worker method by name, unchecked: the escape hatch for methods outside the table (a worker extension's,
   * see `WorkerPool.local({ extensions })`). Prefer {@link invoke} for the worker's own methods.
   */
  call(
    method: string,
    args: Record<string, unknown> = {},
    payloads: readonly Payload[] = [],
    options: RequestOptions = {},
  ): Promise<RPCReply> {
    return this.connection.request(method, args, payloads, options);
  }
}

function tensorDictPayload(td: TensorDict): Payload {
  // In parts: large tensors go out as frames of their own, without a copy (docs/protocol.md, "Split payloads").
  return { kind: "tensordict", data: td.toArrowParts() };
}

/** Checks what a request carries before it is sent: a mismatch is the caller's mistake (`InvalidArgumentError`). */
function checkPayloads(method: string, takes: PayloadShape, payloads: readonly Payload[]): void {
  const ok =
    takes === "any" ||
    (takes === "none" && payloads.length === 0) ||
    (takes === "tensordict" && payloads.length === 1 && payloads[0]!.kind === "tensordict") ||
    (takes === "tensors" && payloads.every((p) => p.kind === "tensor"));
  if (!ok) throw new InvalidArgumentError(`${method}: takes ${takes} payload(s), got [${payloads.map((p) => p.kind).join(", ")}]`);
}

function singleTensorDict(method: string, payloads: readonly Payload[]): TensorDict {
  const payload = payloads[0];
  if (payloads.length !== 1 || payload?.kind !== "tensordict") {
    throw new ProtocolError(`${method}: expected one tensordict payload in the reply, got ${payloads.length}`);
  }
  return TensorDict.fromArrow(payload.data);
}
