/**
 * The `<think>…</think>` / `<answer>…</answer>` response format shared by the task environments (TorchRL's
 * reward parsers): end-of-sequence stripping and tag extraction.
 */

/** End-of-sequence markers removed from the end of a response before parsing (ChatML / Qwen names). */
export const DEFAULT_EOS_TOKENS: readonly string[] = ["<|im_end|>", "<|endoftext|>"];

/** The parts of a response in the `<think>…</think> <answer>…</answer>` format. */
export interface TaggedResponse {
  /** The trimmed content of the first `<think>…</think>` block, `""` when there is none. */
  readonly think: string;
  /** The trimmed content of the first `<answer>…</answer>` block, `""` when there is none. */
  readonly answer: string;
}

/**
 * `text` without its trailing end-of-sequence markers (any of `eosTokens`, repeatedly, so `"…<|im_end|><|endoftext|>"`
 * loses both) and the whitespace around them. Text that ends with no marker is returned unchanged.
 */
export function stripEos(text: string, eosTokens: readonly string[] = DEFAULT_EOS_TOKENS): string {
  let out = text;
  let stripped = false;
  for (;;) {
    const trimmed = out.trimEnd();
    const token = eosTokens.find((t) => t !== "" && trimmed.endsWith(t));
    if (token === undefined) return stripped ? trimmed : text;
    out = trimmed.slice(0, trimmed.length - token.length);
    stripped = true;
  }
}

const THINK = /<think>([\s\S]*?)<\/think>/;
const ANSWER = /<answer>([\s\S]*?)<\/answer>/;

/**
 * The first `<think>` and the first `<answer>` block of `text` (non-greedy, across lines), trimmed; an unclosed
 * tag counts as absent. Regex-based like TorchRL's parsers, since model output is rarely well-formed markup.
 */
export function extractTags(text: string): TaggedResponse {
  return { think: THINK.exec(text)?.[1]?.trim() ?? "", answer: ANSWER.exec(text)?.[1]?.trim() ?? "" };
}

/** Every `<tag>…</tag>` block of `text`, untrimmed, in order (IFEval's format bonus counts them). */
export function findAllTagBlocks(text: string, tag: "think" | "answer"): string[] {
  const re = new RegExp(`<${tag}>([\\s\\S]*?)</${tag}>`, "g");
  return [...text.matchAll(re)].map((m) => m[1] ?? "");
}
