/**
 * Typed errors thrown by `sdk/data` (History and chat templates). Each one is a {@link PosttrainError} with a stable
 * `code`; the fields say where the problem is (batch row, message index, field, text offset) so callers need not
 * parse messages.
 */
import { InvalidArgumentError, PosttrainError } from "../core/errors.js";

export { InvalidArgumentError, PosttrainError };

/** Where a problem sits inside a history or a batch of histories. */
export interface HistoryLocation {
  /** The batch row (a {@link HistoryBatch} row, or the i-th text of `HistoryBatch.fromText`). */
  readonly row?: number | undefined;
  /** The message index inside the history. */
  readonly messageIndex?: number | undefined;
  /** The message field, as a path such as `"content"` or `"toolCalls[0].name"`. */
  readonly field?: string | undefined;
}

function formatLocation(loc: HistoryLocation): string {
  const parts: string[] = [];
  if (loc.row !== undefined) parts.push(`row ${loc.row}`);
  if (loc.messageIndex !== undefined) parts.push(`message ${loc.messageIndex}`);
  if (loc.field !== undefined) parts.push(`field ${JSON.stringify(loc.field)}`);
  return parts.join(", ");
}

/**
 * A message or history row that does not fit: wrong type, missing or unknown field, or (when rendering) text the
 * chat template cannot carry. Code `INVALID_ARGUMENT`, like every malformed argument in posttrain; the message
 * names the row (in a batch), the message index and the field, e.g.
 * `History.from: message 1, field "content": is missing (expected string)`.
 */
export class InvalidHistoryError extends InvalidArgumentError {
  /** The batch row, when the history is part of a batch. */
  readonly row: number | undefined;
  /** The message index inside the history, when the problem is in one message. */
  readonly messageIndex: number | undefined;
  /** The offending field as a path (`"role"`, `"toolCalls[0].arguments"`), when the problem is in one field. */
  readonly field: string | undefined;
  /** What is wrong, without the context and location. */
  readonly reason: string;
  /** The operation that failed, e.g. `"History.from"`. */
  readonly context: string;

  constructor(context: string, location: HistoryLocation, reason: string) {
    const where = formatLocation(location);
    super(`${context}: ${where === "" ? "" : `${where}: `}${reason}`);
    this.context = context;
    this.row = location.row;
    this.messageIndex = location.messageIndex;
    this.field = location.field;
    this.reason = reason;
  }

  /** The same error located in batch row `row` (and reported by `context`). */
  withRow(row: number, context = this.context): InvalidHistoryError {
    return new InvalidHistoryError(context, { row, messageIndex: this.messageIndex, field: this.field }, this.reason);
  }
}

/**
 * Text that does not parse under a chat template (`History.fromText`): text outside any message, a header with no
 * end, an empty role. Code `CHAT_PARSE`. `offset` is the character offset in the text where parsing stopped.
 */
export class ChatParseError extends PosttrainError {
  /** The chat template the text was parsed with. */
  readonly template: string;
  /** Character offset in the text where the problem starts. */
  readonly offset: number;
  /** Index of the message being parsed, when the problem is inside one. */
  readonly messageIndex: number | undefined;
  /** The batch row (the index of the text in `HistoryBatch.fromText`). */
  readonly row: number | undefined;
  /** What is wrong, without the context and location. */
  readonly reason: string;

  constructor(template: string, offset: number, reason: string, location: { messageIndex?: number | undefined; row?: number | undefined } = {}) {
    const where = formatLocation({ row: location.row, messageIndex: location.messageIndex });
    super("CHAT_PARSE", `fromText (${template}): ${where === "" ? "" : `${where}: `}at offset ${offset}: ${reason}`);
    this.template = template;
    this.offset = offset;
    this.messageIndex = location.messageIndex;
    this.row = location.row;
    this.reason = reason;
  }

  /** The same error located in batch row `row`. */
  withRow(row: number): ChatParseError {
    return new ChatParseError(this.template, this.offset, this.reason, { messageIndex: this.messageIndex, row });
  }
}
