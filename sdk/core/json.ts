/** JSON values: the type, and its zod schema for values that cross a boundary (data positions, tool arguments). */
import { z } from "zod";

/** A JSON value (what tool-call arguments, data positions and worker results may hold). */
export type JSONValue = string | number | boolean | null | readonly JSONValue[] | { readonly [key: string]: JSONValue };

/** A JSON object. */
export type JSONObject = { readonly [key: string]: JSONValue };

/** Any JSON value, checked recursively. */
export const JSONValueSchema: z.ZodType<JSONValue> = z.lazy(() =>
  z.union([z.string(), z.number(), z.boolean(), z.null(), z.array(JSONValueSchema), z.record(z.string(), JSONValueSchema)]),
);
