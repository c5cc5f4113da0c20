import { z } from "zod";
import { DTYPES } from "../wire/dtypes.js";

/** The envelope protocol version this client speaks (docs/protocol.md). */
export const PROTOCOL_VERSION = 1;

/** Describes one payload: an Arrow TensorDict stream (one frame, or `frames` of a split one), a raw unbatched tensor, or opaque bytes. */
export const PayloadDescriptorSchema = z.discriminatedUnion("kind", [
  // frames: how many consecutive frames carry the stream (a split payload); absent means 1.
  z.object({ kind: z.literal("tensordict"), frames: z.number().int().min(1).optional() }),
  z.object({
    kind: z.literal("tensor"),
    dtype: z.enum(DTYPES),
    shape: z.array(z.number().int().nonnegative()),
    name: z.string().optional(),
  }),
  z.object({ kind: z.literal("bytes") }),
]);

/** A payload descriptor as it appears in an envelope. */
export type PayloadDescriptor = z.infer<typeof PayloadDescriptorSchema>;

const RequestId = z.number().int().nonnegative();
const JSONObject = z.record(z.string(), z.unknown());

/** Client → worker: call a method. */
export const RequestEnvelopeSchema = z.object({
  v: z.literal(PROTOCOL_VERSION),
  type: z.literal("request"),
  id: RequestId,
  method: z.string().min(1),
  args: JSONObject,
  payloads: z.array(PayloadDescriptorSchema),
});

/** Client → worker: liveness probe. */
export const HeartbeatEnvelopeSchema = z.object({
  v: z.literal(PROTOCOL_VERSION),
  type: z.literal("heartbeat"),
  id: RequestId,
});

/** Client → worker: drop a request that has not started. */
export const CancelEnvelopeSchema = z.object({
  v: z.literal(PROTOCOL_VERSION),
  type: z.literal("cancel"),
  id: RequestId,
});

/** The error object of a failed response. */
export const RemoteErrorSchema = z.object({
  code: z.string(),
  message: z.string(),
  details: JSONObject.optional(),
});

/** Worker → client: the outcome of a request. */
export const ResponseEnvelopeSchema = z.object({
  v: z.literal(PROTOCOL_VERSION),
  type: z.literal("response"),
  id: RequestId.nullable(),
  ok: z.boolean(),
  result: JSONObject.optional(),
  error: RemoteErrorSchema.optional(),
  payloads: z.array(PayloadDescriptorSchema).default([]),
});

/** Worker → client: the answer to a heartbeat. */
export const HeartbeatReplySchema = z.object({
  v: z.literal(PROTOCOL_VERSION),
  type: z.literal("heartbeat"),
  id: RequestId,
  busy: z.boolean(),
  queued: z.number().int().nonnegative(),
});

/** Any message a worker sends. */
export const WorkerMessageSchema = z.discriminatedUnion("type", [ResponseEnvelopeSchema, HeartbeatReplySchema]);

export type RequestEnvelope = z.infer<typeof RequestEnvelopeSchema>;
export type ResponseEnvelope = z.infer<typeof ResponseEnvelopeSchema>;
/** A worker's answer to a heartbeat: whether it is busy and how many requests it has queued. */
export type HeartbeatReply = z.infer<typeof HeartbeatReplySchema>;
export type WorkerMessage = z.infer<typeof WorkerMessageSchema>;
export type ClientMessage =
  | RequestEnvelope
  | z.infer<typeof HeartbeatEnvelopeSchema>
  | z.infer<typeof CancelEnvelopeSchema>;

/** The arguments of the `handshake` request, the first a client sends. */
export const HandshakeArgsSchema = z.strictObject({
  protocolVersion: z.number().int().nonnegative(),
  client: z.object({ name: z.string(), version: z.string() }).optional(),
  /**
   * The pool secret (hex). A worker started with one answers every other request, heartbeats included, with
   * `UNAUTHENTICATED` until this identity has handshaken with it; a wrong one is refused the same way.
   */
  secret: z.string().optional(),
});

/** The arguments of the `handshake` request. */
export type HandshakeArgs = z.infer<typeof HandshakeArgsSchema>;

/** Facts a worker reports in its handshake. */
export const WorkerInfoSchema = z.object({
  protocolVersion: z.number().int(),
  workerVersion: z.string(),
  workerId: z.number().int().nonnegative(),
  pid: z.number().int(),
  python: z.string(),
  torch: z.string(),
  numpy: z.string(),
  pyarrow: z.string(),
  zmq: z.string(),
  devices: z.array(
    z.object({
      type: z.string(),
      index: z.number().int().nullable(),
      name: z.string(),
      totalMemoryBytes: z.number().optional(),
    }),
  ),
  capabilities: z.object({ methods: z.array(z.string()), backends: z.array(z.string()) }),
  maxPayloadBytes: z.number().int().positive(),
});

/** Facts a worker reports in its handshake: versions, devices, capabilities. */
export type WorkerInfo = z.infer<typeof WorkerInfoSchema>;

const decoder = new TextDecoder("utf-8", { fatal: true });

/** Encode a client message as the envelope frame. */
export function encodeEnvelope(message: ClientMessage): Uint8Array {
  // Buffer.from takes a slice of Node's shared pool: cheaper than TextEncoder's fresh ArrayBuffer per envelope,
  // and less for the garbage collector on the path of every call. Same UTF-8 bytes.
  return Buffer.from(JSON.stringify(message), "utf8");
}

/**
 * Decode and validate a worker message from frame 0. Returns a description of the problem instead of
 * throwing, so that the receive loop can report it without dying.
 */
export function decodeWorkerMessage(frame: Uint8Array): { ok: true; message: WorkerMessage } | { ok: false; problem: string } {
  let json: unknown;
  try {
    json = JSON.parse(decoder.decode(frame));
  } catch (err) {
    return { ok: false, problem: `envelope is not UTF-8 JSON (${(err as Error).message})` };
  }
  const parsed = WorkerMessageSchema.safeParse(json);
  if (!parsed.success) return { ok: false, problem: `invalid envelope: ${z.prettifyError(parsed.error)}` };
  return { ok: true, message: parsed.data };
}
