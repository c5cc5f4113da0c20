// Shared by the tool tests: a scripted policy (a TS object with forward(td), not a model) that answers each turn
// with a fixed assistant message, and a ChatEnv reset helper.
import { History, HistoryBatch, TensorDict, type EnvBase } from "../../sdk/index.js";

/** What the scripted policy says at `turn` (0-based: the number of assistant messages already in `prompt`). */
export type Script = (turn: number, prompt: History, row: number) => string;

/**
 * A scripted policy: it writes `("history", "response")` and `("history", "full")` as TransformersWrapper does,
 * with the assistant message `script(turn, prompt, row)`. It stands in for a model that calls tools.
 */
export class ScriptedPolicy {
  readonly prompts: HistoryBatch[] = [];

  constructor(private readonly script: Script) {}

  forward(td: TensorDict): TensorDict {
    const prompts = td.getHistory(["history", "prompt"]);
    this.prompts.push(prompts);
    const responses = HistoryBatch.from(
      prompts.rows.map((h, row) => {
        const turn = h.messages.filter((m) => m.role === "assistant").length;
        return [{ role: "assistant", content: this.script(turn, h, row) }];
      }),
    );
    const out = td.exclude();
    out.set(["history", "response"], responses);
    out.set(["history", "full"], prompts.appendEach(responses.rows));
    return out;
  }
}

/** Resets `env` with one user query per row. */
export function resetWith(env: EnvBase, queries: readonly string[]): Promise<TensorDict> {
  return env.reset(new TensorDict({ query: [...queries] }, { batchSize: [queries.length] }));
}

/** The messages after the last assistant message of a History (what the tools answered). */
export function toolReplies(history: History): { role: string; content: string }[] {
  const messages = history.messages;
  let last = messages.length - 1;
  while (last >= 0 && messages[last]!.role !== "assistant") last--;
  return messages.slice(last + 1).map((m) => ({ role: m.role, content: m.content }));
}
