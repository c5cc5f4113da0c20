/**
 * zod schemas shared by the replay-buffer options (internal).
 */
import { z } from "zod";
import type { NestedKey } from "../../tensordict/keys.js";

/** A TensorDict key: a non-empty string, or a non-empty array of non-empty strings. */
export const NestedKeySchema: z.ZodType<NestedKey> = z.union([
  z.string().min(1),
  z.array(z.string().min(1)).min(1).readonly(),
]);
