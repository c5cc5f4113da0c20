/**
 * `ToolEpisodeEnd`: ends multi-turn tool episodes — on an answer, or at a turn limit.
 */
import { z } from "zod";
import type { TensorDict } from "../../tensordict/index.js";
import { parseOptions } from "../../core/index.js";
import { ChatEnv } from "../chat-env.js";
import type { EnvCallOptions } from "../env-base.js";
import { HISTORY_PROMPT_KEY } from "../keys.js";
import { markDone } from "../rows.js";
import { Transform } from "../transform.js";
import { StepCounter } from "../transforms/step-counter.js";

/** zod schema of {@link ToolEpisodeEndOptions}. */
export const ToolEpisodeEndOptionsSchema = z.strictObject({
  /** Truncate an episode after this many policy turns (steps); default none. Counted in `step_count`. */
  maxTurns: z.number().int().min(1).optional(),
  /** A message holding `<tag>…</tag>` is an answer (default `"answer"`); `null` turns this test off. */
  answerTag: z.string().regex(/^[\w-]+$/).nullable().default("answer"),
  /** A policy message that no tool answered is an answer too (default true). */
  endWithoutToolCall: z.boolean().default(true),
});

/** Options of {@link ToolEpisodeEnd}. */
export type ToolEpisodeEndOptions = z.input<typeof ToolEpisodeEndOptionsSchema>;

/**
 * Ends the rows of a multi-turn tool episode: `terminated` when the policy's message of this step is an answer
 * — it holds `<answer>…</answer>`, or (with `endWithoutToolCall`) no tool answered it — and `truncated` after
 * `maxTurns` steps (through a `StepCounter` writing `step_count`). Append it after the tool transforms, which it
 * reads through the `tool` messages they appended to `("next", "history", "prompt")`.
 *
 * ```ts
 * const env = new TransformedEnv(new ChatEnv({ batchSize: [2] }), [new PythonInterpreter(), new ToolEpisodeEnd({ maxTurns: 4 })]);
 * ```
 */
export class ToolEpisodeEnd extends Transform {
  /** The resolved options. */
  readonly config: Readonly<z.output<typeof ToolEpisodeEndOptionsSchema>>;
  /** Counts turns for `maxTurns` (typed as a plain Transform: only the hooks are used). */
  private readonly counter: Transform | undefined;

  constructor(options: ToolEpisodeEndOptions = {}) {
    super();
    this.config = parseOptions(ToolEpisodeEndOptionsSchema, options, "ToolEpisodeEnd options");
    this.counter = this.config.maxTurns === undefined ? undefined : new StepCounter({ maxSteps: this.config.maxTurns });
  }

  override async reset(td: TensorDict, tdReset: TensorDict, options: EnvCallOptions): Promise<TensorDict> {
    return this.counter === undefined ? tdReset : this.counter.reset(td, tdReset, options);
  }

  override async step(td: TensorDict, next: TensorDict, options: EnvCallOptions): Promise<TensorDict> {
    const out = this.counter === undefined ? next : await this.counter.step(td, next, options);
    if (!out.has(HISTORY_PROMPT_KEY)) return out;
    const base = this.parent?.baseEnv;
    const policyRole = base instanceof ChatEnv ? base.config.policyRole : "assistant";
    const { answerTag, endWithoutToolCall } = this.config;
    const tag = answerTag === null ? undefined : new RegExp(`<${answerTag}>[\\s\\S]*?</${answerTag}>`);
    const answered = out.getHistory(HISTORY_PROMPT_KEY).rows.map((history) => {
      const messages = history.messages;
      let last = messages.length - 1;
      while (last >= 0 && messages[last]!.role !== policyRole) last--;
      if (last < 0) return false;
      const answeredByTools = last < messages.length - 1;
      return (tag !== undefined && tag.test(messages[last]!.content)) || (endWithoutToolCall && !answeredByTools);
    });
    return answered.some((a) => a) ? markDone(out, answered, "terminated") : out;
  }
}
