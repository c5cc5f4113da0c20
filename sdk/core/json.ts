/** JSON values: the type, and its zod schema for values that cross a boundary (data positions, tool arguments). */
import { z } from "zod";

/** A JSON value (what tool-call arguments, data positions and worker results may hold). */
export type JsonValue = string | number | boolean | null | readonly JsonValue[] | { readonly [key: string]: JsonValue };

/** A JSON object. */
export type JsonObject = { readonly [key: string]: JsonValue };

/** Any JSON value, checked recursively. */
export const JsonValueSchema: z.ZodType<JsonValue> = z.lazy(() =>
  z.union([z.string(), z.number(), z.boolean(), z.null(), z.array(JsonValueSchema), z.record(z.string(), JsonValueSchema)]),
);
