/**
 * `ToolTransformBase`: what every tool transform shares (TorchRL's `ToolTransformBase`). After the env's step it
 * takes the policy's new assistant message of each row, lets the subclass run the tool calls it finds there, and
 * appends one `tool` message per result to `("next", "history", "prompt")`, the prompt of the next turn. A tool
 * that fails produces an error message, never an exception: the episode goes on.
 */
import { z } from "zod";
import type { ChatMessage, History, HistoryBatch } from "../../data/index.js";
import type { TensorDict } from "../../tensordict/index.js";
import { ChatEnv } from "../chat-env.js";
import type { EnvCallOptions } from "../env-base.js";
import { EnvStateError } from "../errors.js";
import { DONE_KEY, HISTORY_FULL_KEY, HISTORY_PROMPT_KEY, HISTORY_RESPONSE_KEY } from "../keys.js";
import { readFlags } from "../rows.js";
import { Transform } from "../transform.js";
import { mapLimited } from "./limits.js";

/** Options every tool transform has. */
export const ToolTransformOptionsSchema = z.strictObject({
  /** The role of the result messages (default `"tool"`, TorchRL's `tool_name`). */
  toolRole: z.string().min(1).default("tool"),
  /** Rows whose calls run at the same time (default 4); the calls of one row run in order. */
  maxConcurrency: z.number().int().min(1).default(4),
});

/** Options of {@link ToolTransformBase}. */
export type ToolTransformOptions = z.input<typeof ToolTransformOptionsSchema>;

/** What a tool transform's {@link ToolTransformBase.runTools} gets besides the message and the row. */
export interface ToolRunOptions extends EnvCallOptions {
  /**
   * The row's conversation, the message being answered included (in an env step: `("next", "history", "prompt")`
   * of the row); absent when {@link ToolTransformBase.toolMessages} is called without one.
   */
  readonly history?: History;
}

/** Options of {@link ToolTransformBase.toolMessages}. */
export interface ToolCallOptions extends ToolRunOptions {
  /** The batch row the message belongs to (default 0): persistent tools keep one state per row. */
  readonly row?: number;
}

/**
 * The base of tool transforms. Subclasses implement {@link runTools}: the results of the calls in one assistant
 * message (one string per call), or `null` when the message has no call for this tool.
 *
 * Which message: the last message of `("history", "response")` of the step's input, else of `("history", "full")`,
 * else the last message of `("next", "history", "prompt")` — when its role is the policy's (`"assistant"`, or the
 * ChatEnv's `policyRole`). Rows already done in `next` are skipped. Works on ChatEnvs in history mode only.
 */
export abstract class ToolTransformBase extends Transform {
  /** The role of the result messages. */
  readonly toolRole: string;
  private readonly maxConcurrency: number;

  protected constructor(options: z.output<typeof ToolTransformOptionsSchema>) {
    super();
    this.toolRole = options.toolRole;
    this.maxConcurrency = options.maxConcurrency;
  }

  /** The results of the calls for this tool in `message` (one string per call), or `null` when there are none. */
  protected abstract runTools(message: ChatMessage, row: number, options: ToolRunOptions): Promise<readonly string[] | null>;

  /** The `tool` messages this transform answers `message` with (`[]` when it holds no call for this tool). */
  async toolMessages(message: ChatMessage | string, options: ToolCallOptions = {}): Promise<ChatMessage[]> {
    const msg: ChatMessage = typeof message === "string" ? { role: "assistant", content: message } : message;
    const results = await this.runTools(msg, options.row ?? 0, {
      ...(options.signal === undefined ? {} : { signal: options.signal }),
      ...(options.history === undefined ? {} : { history: options.history }),
    });
    return (results ?? []).map((content) => ({ role: this.toolRole, content }));
  }

  override async step(td: TensorDict, next: TensorDict, options: EnvCallOptions): Promise<TensorDict> {
    const base = this.parent?.baseEnv;
    if (base instanceof ChatEnv && base.inputMode !== "history") {
      throw new EnvStateError(`${this.toString()}: needs a ChatEnv in history mode (this one is in ${base.inputMode} mode)`);
    }
    if (!next.has(HISTORY_PROMPT_KEY)) {
      throw new EnvStateError(`${this.toString()}: the step has no ("next", "history", "prompt"); use it on a ChatEnv in history mode`);
    }
    const policyRole = base instanceof ChatEnv ? base.config.policyRole : "assistant";
    const prompts = next.getHistory(HISTORY_PROMPT_KEY);
    const messages = policyMessages(td, prompts, policyRole);
    const done = readFlags(next, DONE_KEY);
    const results = await mapLimited(messages, this.maxConcurrency, async (message, row) =>
      message === undefined || done[row] === true ? null : this.runTools(message, row, { ...options, history: prompts.row(row) }),
    );
    if (results.every((r) => r === null || r.length === 0)) return next;
    const added = results.map((r) => (r === null ? null : r.map((content): ChatMessage => ({ role: this.toolRole, content }))));
    return next.set(HISTORY_PROMPT_KEY, prompts.appendEach(added));
  }
}

/** The policy's new message of each row (see {@link ToolTransformBase}), or `undefined` where there is none. */
export function policyMessages(td: TensorDict, prompts: HistoryBatch, policyRole: string): (ChatMessage | undefined)[] {
  const source = td.has(HISTORY_RESPONSE_KEY) ? td.getHistory(HISTORY_RESPONSE_KEY) : td.has(HISTORY_FULL_KEY) ? td.getHistory(HISTORY_FULL_KEY) : prompts;
  return source.rows.map((h) => {
    const last = h.last;
    return last !== undefined && last.role === policyRole ? last : undefined;
  });
}
