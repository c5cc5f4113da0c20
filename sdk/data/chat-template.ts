/**
 * Chat templates on the TypeScript side: render messages to text and parse rendered text back into messages.
 *
 * The worker applies the model's own chat template through its HF tokenizer — that is the source of truth for what
 * the model sees and for assistant-token masks. The templates here are mirrors for token-free logic (parsing a
 * generation back into messages, building prompts in tests, reward parsing); a mirror renders exactly what the HF
 * template renders for the same messages and options, and tests on the worker side prove that they agree.
 *
 * `"chatml"` is built in. Other formats are added with {@link registerChatTemplate}, either from a
 * {@link DelimitedTemplateSpec} (formats of the shape `start role header-end content end`, like ChatML or Llama 3)
 * or as a hand-written {@link ChatTemplate}.
 */
import { ChatParseError, InvalidArgumentError, InvalidHistoryError } from "./errors.js";
import type { ChatMessage, JSONObject, JSONValue, ToolCall } from "./message.js";

/** Names of the registered chat templates (`"chatml"` built in). */
export type ChatTemplateName = "chatml" | (string & {});

/** Options of {@link ChatTemplate.render}, with HF `apply_chat_template` semantics. */
export interface RenderOptions {
  /** Append the header of a new assistant message (HF `add_generation_prompt`). */
  readonly addGenerationPrompt: boolean;
  /**
   * Leave the final message open: render it without its end token and what follows (HF `continue_final_message`).
   * HF implements this by cutting the fully rendered text after the last occurrence of the stripped final content,
   * which differs in corner cases (see docs/history.md); the rule here is exact.
   */
  readonly continueFinalMessage: boolean;
}

/** Options of {@link ChatTemplate.parse}. */
export interface ParseOptions {
  /**
   * Fill `toolCalls` from `<tool_call>{json}</tool_call>` blocks and `toolResponses` from
   * `<tool_response>…</tool_response>` blocks found in the content (the content itself is kept verbatim).
   */
  readonly parseTools: boolean;
}

/** A chat format: renders messages to text and parses text back. */
export interface ChatTemplate {
  /** The name it is registered under. */
  readonly name: string;
  /**
   * Renders messages. Throws {@link InvalidHistoryError} (naming the message and field) for a message the format
   * cannot carry so that it would parse back differently, e.g. content holding the end token.
   */
  render(messages: readonly ChatMessage[], options: RenderOptions): string;
  /**
   * Parses rendered text into messages (validated afterwards by `History`). A message whose end token is missing
   * (a generation cut off, or a trailing generation prompt) comes back with `isComplete: false`. Throws
   * {@link ChatParseError} for text that is not in the format.
   */
  parse(text: string, options: ParseOptions): ChatMessage[];
}

/**
 * A format where each message is `messageStart + role + headerEnd + content + messageEnd + afterMessage`, optionally
 * preceded once by `prefix`. ChatML is `{ messageStart: "<|im_start|>", headerEnd: "\n", messageEnd: "<|im_end|>",
 * afterMessage: "\n" }`.
 */
export interface DelimitedTemplateSpec {
  readonly name: string;
  /** Rendered once before the first message (e.g. a BOS token); optional when parsing. Default `""`. */
  readonly prefix?: string;
  /** Opens a message, before the role. */
  readonly messageStart: string;
  /** Ends the role header; the content follows. Must not be empty. */
  readonly headerEnd: string;
  /** Ends a message. */
  readonly messageEnd: string;
  /** Rendered after `messageEnd` (skipped when parsing if present). Default `""`. */
  readonly afterMessage?: string;
  /**
   * Other tokens that end a message when parsing (the message counts as complete), e.g. `<|endoftext|>`; between
   * messages they are skipped. Never rendered.
   */
  readonly extraEndTokens?: readonly string[];
  /** The role of the generation prompt. Default `"assistant"`. */
  readonly generationRole?: string;
  /** Tool blocks inside content: `"hermes"` (`<tool_call>`/`<tool_response>`, as Qwen) or `"none"`. Default `"hermes"`. */
  readonly toolFormat?: "hermes" | "none";
}

/** Builds a {@link ChatTemplate} from a {@link DelimitedTemplateSpec}. */
export function delimitedChatTemplate(spec: DelimitedTemplateSpec): ChatTemplate {
  const prefix = spec.prefix ?? "";
  const afterMessage = spec.afterMessage ?? "";
  const extraEnds = spec.extraEndTokens ?? [];
  const generationRole = spec.generationRole ?? "assistant";
  const toolFormat = spec.toolFormat ?? "hermes";
  for (const [key, value] of [
    ["messageStart", spec.messageStart],
    ["headerEnd", spec.headerEnd],
    ["messageEnd", spec.messageEnd],
  ] as const) {
    if (value === "") throw new InvalidArgumentError(`delimitedChatTemplate(${spec.name}): ${key} must not be empty`);
  }
  /** Tokens that end content when parsing, so content may not contain them. */
  const contentStops = [spec.messageEnd, ...extraEnds, spec.messageStart];
  const name = spec.name;

  function checkMessage(m: ChatMessage, index: number): void {
    for (const token of contentStops) {
      if (m.content.includes(token)) {
        throw new InvalidHistoryError(
          `toText (${name})`,
          { messageIndex: index, field: "content" },
          `contains ${JSON.stringify(token)}, a delimiter of the ${name} format, so the text would not parse back`,
        );
      }
    }
    for (const token of [spec.headerEnd, ...contentStops]) {
      if (m.role.includes(token)) {
        throw new InvalidHistoryError(
          `toText (${name})`,
          { messageIndex: index, field: "role" },
          `contains ${JSON.stringify(token)}, a delimiter of the ${name} format`,
        );
      }
    }
  }

  function render(messages: readonly ChatMessage[], options: RenderOptions): string {
    if (options.addGenerationPrompt && options.continueFinalMessage) {
      throw new InvalidArgumentError(`toText (${name}): addGenerationPrompt and continueFinalMessage cannot both be true`);
    }
    if (options.continueFinalMessage && messages.length === 0) {
      throw new InvalidArgumentError(`toText (${name}): continueFinalMessage needs at least one message`);
    }
    let out = prefix;
    messages.forEach((m, i) => {
      checkMessage(m, i);
      out += spec.messageStart + m.role + spec.headerEnd + m.content;
      if (!(options.continueFinalMessage && i === messages.length - 1)) out += spec.messageEnd + afterMessage;
    });
    if (options.addGenerationPrompt) out += spec.messageStart + generationRole + spec.headerEnd;
    return out;
  }

  /** The earliest occurrence at or after `from` of any of `tokens`, or `undefined`. */
  function nextToken(text: string, from: number, tokens: readonly string[]): { at: number; token: string } | undefined {
    let best: { at: number; token: string } | undefined;
    for (const token of tokens) {
      const at = text.indexOf(token, from);
      if (at !== -1 && (best === undefined || at < best.at)) best = { at, token };
    }
    return best;
  }

  /** Skips whitespace and stray extra end tokens between messages. */
  function skipSeparators(text: string, pos: number): number {
    for (;;) {
      while (pos < text.length && /\s/.test(text[pos]!)) pos++;
      const token = extraEnds.find((t) => text.startsWith(t, pos));
      if (token === undefined) return pos;
      pos += token.length;
    }
  }

  function snippet(text: string, at: number): string {
    const s = text.slice(at, at + 30);
    return JSON.stringify(at + 30 < text.length ? `${s}…` : s);
  }

  function parse(text: string, options: ParseOptions): ChatMessage[] {
    const messages: ChatMessage[] = [];
    let pos = skipSeparators(text, 0);
    if (prefix !== "" && text.startsWith(prefix, pos)) pos = skipSeparators(text, pos + prefix.length);
    while (pos < text.length) {
      const index = messages.length;
      if (!text.startsWith(spec.messageStart, pos)) {
        throw new ChatParseError(name, pos, `expected ${JSON.stringify(spec.messageStart)} or the end of the text, found ${snippet(text, pos)}`, {
          messageIndex: index,
        });
      }
      const headerStart = pos + spec.messageStart.length;
      const headerEnd = text.indexOf(spec.headerEnd, headerStart);
      const stop = nextToken(text, headerStart, contentStops);
      if (headerEnd === -1 || (stop !== undefined && stop.at < headerEnd)) {
        throw new ChatParseError(name, headerStart, `the role header has no end (expected ${JSON.stringify(spec.headerEnd)} after the role)`, {
          messageIndex: index,
        });
      }
      const role = text.slice(headerStart, headerEnd);
      if (role === "") throw new ChatParseError(name, headerStart, "empty role", { messageIndex: index });
      const contentStart = headerEnd + spec.headerEnd.length;
      const end = nextToken(text, contentStart, contentStops);
      const content = text.slice(contentStart, end?.at ?? text.length);
      let isComplete: boolean;
      if (end === undefined) {
        isComplete = false;
        pos = text.length;
      } else if (end.token === spec.messageStart) {
        // The next message starts before this one ended: this one was cut off.
        isComplete = false;
        pos = end.at;
      } else {
        isComplete = true;
        pos = end.at + end.token.length;
        if (afterMessage !== "" && text.startsWith(afterMessage, pos)) pos += afterMessage.length;
        pos = skipSeparators(text, pos);
      }
      messages.push(buildMessage(role, content, isComplete, toolFormat === "hermes" && options.parseTools));
    }
    return messages;
  }

  return Object.freeze({ name, render, parse });
}

function buildMessage(role: string, content: string, isComplete: boolean, parseTools: boolean): ChatMessage {
  const toolCalls = parseTools ? parseHermesToolCalls(content) : [];
  const toolResponses = parseTools ? parseHermesToolResponses(content) : [];
  return {
    role,
    content,
    ...(toolCalls.length > 0 ? { toolCalls } : {}),
    ...(toolResponses.length > 0 ? { toolResponses } : {}),
    ...(isComplete ? {} : { isComplete: false }),
  };
}

function isJsonObject(value: unknown): value is JSONObject {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/**
 * Tool calls written as Hermes/Qwen blocks, `<tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>`. A block
 * whose body is not such JSON is skipped (the content keeps it, so callers can still see it). `arguments` may also be
 * a JSON string holding an object; a missing `arguments` is `{}`.
 */
export function parseHermesToolCalls(content: string): ToolCall[] {
  const calls: ToolCall[] = [];
  for (const match of content.matchAll(/<tool_call>([\s\S]*?)<\/tool_call>/g)) {
    let body: unknown;
    try {
      body = JSON.parse(match[1]!);
    } catch {
      continue;
    }
    if (!isJsonObject(body) || typeof body.name !== "string" || body.name === "") continue;
    let args: JSONValue | undefined = body.arguments;
    if (typeof args === "string") {
      try {
        args = JSON.parse(args) as JSONValue;
      } catch {
        continue;
      }
    }
    if (args === undefined) args = {};
    if (!isJsonObject(args)) continue;
    const id = body.id;
    calls.push(typeof id === "string" ? { name: body.name, arguments: args, id } : { name: body.name, arguments: args });
  }
  return calls;
}

/** Tool outputs written as `<tool_response>\n…\n</tool_response>` blocks (one newline each side is dropped). */
export function parseHermesToolResponses(content: string): string[] {
  return [...content.matchAll(/<tool_response>\n?([\s\S]*?)\n?<\/tool_response>/g)].map((m) => m[1]!);
}

/**
 * ChatML: `<|im_start|>role\ncontent<|im_end|>\n` per message, generation prompt `<|im_start|>assistant\n` — the
 * canonical ChatML Jinja template (`{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' +
 * message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n'
 * }}{% endif %}`). No default system prompt and no tool rendering (Qwen's templates add both). When parsing,
 * `<|endoftext|>` also ends a message (as in TorchRL's inverse parser), whitespace between messages is skipped (so
 * the indented output of TorchRL's `chatml_format` template parses too), and a `<|im_start|>` before `<|im_end|>`
 * ends the previous message as incomplete.
 */
export const CHATML: ChatTemplate = delimitedChatTemplate({
  name: "chatml",
  messageStart: "<|im_start|>",
  headerEnd: "\n",
  messageEnd: "<|im_end|>",
  afterMessage: "\n",
  extraEndTokens: ["<|endoftext|>"],
  generationRole: "assistant",
  toolFormat: "hermes",
});

const registry = new Map<string, ChatTemplate>([[CHATML.name, CHATML]]);

/**
 * Registers a chat template under `template.name` (TorchRL's `add_chat_template`). Throws
 * {@link InvalidArgumentError} if the name is taken, unless `replace` is set.
 */
export function registerChatTemplate(template: ChatTemplate, options: { readonly replace?: boolean } = {}): void {
  if (typeof template.name !== "string" || template.name === "") throw new InvalidArgumentError("registerChatTemplate: template.name must be a non-empty string");
  if (registry.has(template.name) && options.replace !== true) {
    throw new InvalidArgumentError(`registerChatTemplate: a template named ${JSON.stringify(template.name)} exists; pass { replace: true } to replace it`);
  }
  registry.set(template.name, template);
}

/** The names of the registered chat templates. */
export function chatTemplateNames(): string[] {
  return [...registry.keys()];
}

/** The template registered as `name` (or `name` itself when it is a template). */
export function getChatTemplate(name: ChatTemplateName | ChatTemplate): ChatTemplate {
  if (typeof name !== "string") return name;
  const template = registry.get(name);
  if (template === undefined) {
    throw new InvalidArgumentError(
      `chatTemplate: unknown chat template ${JSON.stringify(name)}; registered: ${chatTemplateNames().map((n) => JSON.stringify(n)).join(", ")}`,
    );
  }
  return template;
}
