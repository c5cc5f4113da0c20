/**
 * The keys environments, transforms and policies agree on, named as in TorchRL's LLM stack. A nested key is a
 * tuple (`["history", "prompt"]`); a step's outputs live under `"next"` (`["next", "reward"]`).
 *
 * The conversation flow of a {@link ChatEnv} in history mode (text and tokens modes are the same with
 * `"text"` / `"tokens"` in place of `"history"`):
 *
 * 1. `reset` writes `("history", "prompt")`: the dataset query as a user message, after the system prompt.
 * 2. The policy (`TransformersWrapper`) reads it and writes `("history", "response")` (the new assistant
 *    message) and `("history", "full")` (prompt + response).
 * 3. `step` writes `("next", "history", "prompt")` = the full conversation, the prompt of the next turn.
 *    Transforms then edit `next`: a tool transform reads the last assistant message of `("history", "full")` (or
 *    `("history", "response")`) and appends `tool` messages to `("next", "history", "prompt")`; a reward
 *    transform writes `("next", "reward")`; `StepCounter` writes `("next", "step_count")` and may set
 *    `("next", "truncated")`.
 * 4. `stepMdp` moves `next` to the root for the following turn.
 */
import type { NestedKey } from "../tensordict/index.js";

/** The sub-env done flag, `[...batch, 1]` bool: `terminated || truncated`. */
export const DONE_KEY = "done";
/** The episode ended on its own (e.g. the answer was graded), `[...batch, 1]` bool. */
export const TERMINATED_KEY = "terminated";
/** The episode was cut (e.g. by `StepCounter`'s `maxSteps`), `[...batch, 1]` bool. */
export const TRUNCATED_KEY = "truncated";
/** The three done keys, in TorchRL's order. */
export const DONE_KEYS: readonly string[] = Object.freeze([DONE_KEY, TERMINATED_KEY, TRUNCATED_KEY]);
/** The reward of a step (inside `"next"`), `[...batch, 1]` float32. */
export const REWARD_KEY = "reward";
/** Where a step writes its outputs. */
export const NEXT_KEY = "next";
/** `("next", "reward")`. */
export const NEXT_REWARD_KEY: readonly string[] = Object.freeze([NEXT_KEY, REWARD_KEY]);
/** `("next", "done")`. */
export const NEXT_DONE_KEY: readonly string[] = Object.freeze([NEXT_KEY, DONE_KEY]);
/** Per-reward values written by `RewardTransform`: `("next", "reward_components", name)`, `[...batch, 1]` float32. */
export const REWARD_COMPONENTS_KEY = "reward_components";
/** A partial-reset mask, `[...batch, 1]` bool: only the rows where it is true are reset. */
export const RESET_KEY = "_reset";
/** Steps taken since the last reset (`StepCounter`), `[...batch, 1]` int64. */
export const STEP_COUNT_KEY = "step_count";
/** The policy version that produced the data (`PolicyVersion`), `[...batch]` int64 or strings. */
export const POLICY_VERSION_KEY = "policy_version";
/** What the dataset gives `ChatEnv.reset`: a string (a user message) or a History per row. */
export const QUERY_KEY = "query";

/** The conversation so far, read by the policy: `("history", "prompt")`. */
export const HISTORY_PROMPT_KEY: readonly string[] = Object.freeze(["history", "prompt"]);
/** The policy's new assistant message(s): `("history", "response")`. */
export const HISTORY_RESPONSE_KEY: readonly string[] = Object.freeze(["history", "response"]);
/** Prompt followed by response: `("history", "full")`. */
export const HISTORY_FULL_KEY: readonly string[] = Object.freeze(["history", "full"]);
/** `("text", "prompt")`. */
export const TEXT_PROMPT_KEY: readonly string[] = Object.freeze(["text", "prompt"]);
/** `("text", "response")`. */
export const TEXT_RESPONSE_KEY: readonly string[] = Object.freeze(["text", "response"]);
/** `("text", "full")`. */
export const TEXT_FULL_KEY: readonly string[] = Object.freeze(["text", "full"]);
/** `("tokens", "prompt")`, ragged int64. */
export const TOKENS_PROMPT_KEY: readonly string[] = Object.freeze(["tokens", "prompt"]);
/** `("tokens", "response")`, ragged int64. */
export const TOKENS_RESPONSE_KEY: readonly string[] = Object.freeze(["tokens", "response"]);
/** `("tokens", "full")`, ragged int64. */
export const TOKENS_FULL_KEY: readonly string[] = Object.freeze(["tokens", "full"]);
/** The policy's per-token log-probs over `("tokens", "full")`: `("log_probs", "full")`, ragged float32. */
export const LOG_PROBS_FULL_KEY: readonly string[] = Object.freeze(["log_probs", "full"]);
/** `("log_probs", "response")`, ragged float32. */
export const LOG_PROBS_RESPONSE_KEY: readonly string[] = Object.freeze(["log_probs", "response"]);
/** The reference model's per-token log-probs: `("ref_log_probs", "full")`, ragged float32. */
export const REF_LOG_PROBS_FULL_KEY: readonly string[] = Object.freeze(["ref_log_probs", "full"]);
/** The KL to the reference model (inside `"next"`), `[...batch, 1]` float32: Σ_t (logp − logp_ref). */
export const KL_PENALTY_KEY = "kl_penalty";
/** `("masks", "all_assistant_mask")`, ragged bool over `("tokens", "full")`. */
export const ASSISTANT_MASK_KEY: readonly string[] = Object.freeze(["masks", "all_assistant_mask"]);
/** `("masks", "all_attention_mask")`, ragged bool over `("tokens", "full")`. */
export const ATTENTION_MASK_KEY: readonly string[] = Object.freeze(["masks", "all_attention_mask"]);

/** The three input modes of `ChatEnv` and the policy wrappers. */
export type InputMode = "history" | "text" | "tokens";

/** `(mode, part)`, e.g. `modeKey("text", "full")` is `("text", "full")`. */
export function modeKey(mode: InputMode, part: "prompt" | "response" | "full"): NestedKey {
  return Object.freeze([mode, part]);
}
