/**
 * posttrain's data structures. `History` (one conversation) and `HistoryBatch` (one History per batch row), with
 * chat-template rendering and parsing (TorchRL's `History`, `History.from_text`). See docs/history.md. Loading it
 * registers `HistoryBatch` as a TensorDict leaf type and adds `TensorDict.getHistory` (history.ts does both).
 *
 * @module posttrain/data
 */
export {
  CHATML,
  chatTemplateNames,
  delimitedChatTemplate,
  getChatTemplate,
  parseHermesToolCalls,
  parseHermesToolResponses,
  registerChatTemplate,
  type ChatTemplate,
  type ChatTemplateName,
  type DelimitedTemplateSpec,
  type ParseOptions,
  type RenderOptions,
} from "./chat-template.js";
export { ChatParseError, InvalidHistoryError, type HistoryLocation } from "./errors.js";
export { History, HistoryBatch, type FromTextOptions, type RowAppend, type ToTextOptions } from "./history.js";
export {
  ChatMessageSchema,
  isCompleteMessage,
  MESSAGE_FIELDS,
  ToolCallSchema,
  type ChatMessage,
  type JSONObject,
  type JSONValue,
  type Role,
  type ToolCall,
} from "./message.js";
export * from "./replay-buffer/index.js";
export * from "./deprecated.js";
