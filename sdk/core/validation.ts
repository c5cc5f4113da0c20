/**
 * The one validation helper of the SDK: a value checked against a zod schema at a boundary (options, configs, worker
 * replies), with errors that name each bad field, what is allowed and what was given.
 */
import { z } from "zod";
import type { RPCReply } from "../../bridge/index.js";
import { InvalidArgumentError, ProtocolError } from "./errors.js";
import { unknownFieldHint } from "./field-hints.js";

function valueAt(value: unknown, path: readonly PropertyKey[]): unknown {
  let cursor = value;
  for (const key of path) {
    if (typeof cursor !== "object" || cursor === null) return undefined;
    cursor = (cursor as Record<PropertyKey, unknown>)[key];
  }
  return cursor;
}

/** A short rendering of a given value for messages (`"ppo"`, `3`, `a function`, `nothing`). */
function shown(value: unknown): string {
  if (typeof value === "function") return "a function";
  let text: string;
  try {
    text = JSON.stringify(value) ?? typeof value;
  } catch {
    text = typeof value;
  }
  return text.length > 80 ? `${text.slice(0, 77)}...` : text;
}

/** One problem of a value checked against a schema: where it is and what is wrong. */
export interface FieldProblem {
  /** The path of the field inside the value (`["loss", "variant"]`; empty for the value itself). */
  readonly path: readonly PropertyKey[];
  /** zod's issue code (`"invalid_type"`, `"too_small"`, `"unrecognized_keys"`, ...). */
  readonly code: string;
  /** What is wrong: zod's message, or for a key the schema does not know, `unknownKey`. */
  readonly message: string;
  /** The value given there, shown briefly (`"ppo"`, `3`); `undefined` when nothing was given. */
  readonly given: string | undefined;
  /** Set for a key the schema does not know: the key and the hint (nearest allowed key, the allowed keys). */
  readonly unknownKey?: { readonly key: string; readonly hint: string };
}

/**
 * The problems of `value` under `schema` (one per zod issue, one per unknown key), for callers that lay the message
 * out themselves (the CLI prints one line per problem); {@link parseOptions} formats them on one line.
 */
export function fieldProblems<T>(schema: z.ZodType<T>, value: unknown, error: z.ZodError): FieldProblem[] {
  return error.issues.flatMap((issue): FieldProblem[] => {
    if (issue.code === "unrecognized_keys") {
      return issue.keys.map((key) => ({
        path: [...issue.path, key],
        code: issue.code,
        message: "unknown field",
        given: undefined,
        unknownKey: { key, hint: unknownFieldHint(schema, issue.path, key) },
      }));
    }
    const given = valueAt(value, issue.path);
    return [{ path: issue.path, code: issue.code, message: issue.message, given: given === undefined ? undefined : shown(given) }];
  });
}

/**
 * Validates `value` against `schema` and returns the parsed value (defaults filled in). On failure throws
 * `InvalidArgumentError` naming each bad field with what is allowed and what was given, before anything is sent to a
 * worker: `GRPOTrainer config.loss.variant: Invalid option: expected one of "grpo"|"dapo"|... (got "ppo")`, or for a
 * typo `Trainer options.stepz: unknown field; did you mean "steps"?; allowed: ...`.
 *
 * ```ts
 * const options = parseOptions(ScoreOptionsSchema, input, "score options");
 * ```
 */
export function parseOptions<T>(schema: z.ZodType<T>, value: unknown, where: string): T {
  const parsed = schema.safeParse(value);
  if (parsed.success) return parsed.data;
  const problems = fieldProblems(schema, value, parsed.error).map((p) => {
    const field = `${where}${p.path.map((k) => `.${String(k)}`).join("")}`;
    if (p.unknownKey !== undefined) return `${field}: unknown field${p.unknownKey.hint}`;
    return `${field}: ${p.message} (got ${p.given ?? "nothing"})`;
  });
  throw new InvalidArgumentError(problems.join("; "));
}

/**
 * A worker's `reply.result` checked against `schema`; a mismatch is a `ProtocolError` naming the method (the worker
 * broke the contract, not the caller).
 *
 * ```ts
 * const info = parseReply("load_model", ModelInfoSchema, reply);
 * ```
 */
export function parseReply<T>(method: string, schema: z.ZodType<T>, reply: RPCReply): T {
  const parsed = schema.safeParse(reply.result);
  if (!parsed.success) throw new ProtocolError(`${method}: malformed result: ${z.prettifyError(parsed.error)}`);
  return parsed.data;
}
