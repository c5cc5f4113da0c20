import type { z } from "zod";
import { ProtocolError, type RpcReply } from "../../bridge/index.js";

/** `reply.result` checked against `schema`; a mismatch is a `ProtocolError` naming the method. */
export function parseReply<T>(method: string, schema: z.ZodType<T>, reply: RpcReply): T {
  const parsed = schema.safeParse(reply.result);
  if (!parsed.success) throw new ProtocolError(`${method}: malformed result: ${parsed.error.message}`);
  return parsed.data;
}
