import { z } from "zod";
import { InvalidArgumentError } from "../../bridge/index.js";

/**
 * Validates `value` against `schema`; on failure throws `InvalidArgumentError` naming each bad field
 * (`loadModel options.dtype: ...`), before anything is sent to a worker.
 */
export function parseOptions<T>(schema: z.ZodType<T>, value: unknown, where: string): T {
  const parsed = schema.safeParse(value);
  if (parsed.success) return parsed.data;
  const problems = parsed.error.issues.map((issue) => {
    const field = issue.path.length > 0 ? `.${issue.path.map(String).join(".")}` : "";
    return `${where}${field}: ${issue.message}`;
  });
  throw new InvalidArgumentError(problems.join("; "));
}
