/**
 * A held-out evaluation, as both `GRPOTrainer` and `SFTTrainer` run it: the policy's completions of the held-out
 * env's first prompts, their rewards and a few samples.
 */
import { NEXT_KEY, REWARD_KEY } from "../envs/keys.js";
import { readColumn } from "../envs/rows.js";
import type { TransformersWrapper } from "../modules/transformers.js";
import type { TensorDict } from "../tensordict/index.js";
import type { EvalRecord } from "./records.js";
import { rewardMeans, rewardStats } from "./step-metrics.js";
import type { TaskEnv } from "./task-env.js";

/** The user's question of each row (the `query` field), else the rendered prompt. */
export function promptTexts(td: TensorDict): string[] {
  if (td.has("query")) {
    try {
      return [...td.getStrings("query")];
    } catch {
      // not a string leaf: fall back to the rendered prompt
    }
  }
  return td.has(["text", "prompt"]) ? [...td.getStrings(["text", "prompt"])] : new Array<string>(td.numel()).fill("");
}

/**
 * The reward of `policy` on the held-out env, from its first prompts (the stream is restarted, so every evaluation
 * sees the same ones): mean, std, per-reward means and four samples marked `eval: true`.
 */
export async function evaluateOnEnv(env: TaskEnv, policy: TransformersWrapper, step: number, loss: number | null = null): Promise<EvalRecord> {
  env.restart();
  const generated = await policy.forward(await env.env.reset());
  const next = (await env.env.step(generated)).getTensorDict(NEXT_KEY);
  const rewards = readColumn(next, REWARD_KEY) ?? [];
  const { mean, std } = rewardStats(rewards);
  const texts = promptTexts(generated);
  const responses = generated.getStrings(["text", "response"]);
  const samples = rewards.slice(0, 4).map((reward, i) => ({ step, prompt: texts[i] ?? "", completion: responses[i] ?? "", reward, eval: true }));
  return { step, count: rewards.length, rewardMean: mean, rewardStd: std, rewards: rewardMeans(next), loss, samples };
}
