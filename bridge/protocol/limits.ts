import { InvalidArgumentError, PayloadTooLargeError } from "../errors.js";
import type { Payload } from "./payload.js";

/**
 * Deepest nesting of arrays and objects a worker parses in an envelope, the envelope object being level 1 (its
 * `args` object level 2). The worker answers a deeper one with `BAD_ENVELOPE` before parsing it
 * (python_worker/posttrain_worker/protocol/depth.py holds the same number).
 */
export const MAX_NESTING_DEPTH = 64;

/** Deepest nesting inside `args`, the `args` object being level 1: {@link MAX_NESTING_DEPTH} less the envelope. */
export const MAX_ARGS_DEPTH = MAX_NESTING_DEPTH - 1;

/**
 * The largest envelope (frame 0) a worker reads, 1 MiB whatever its `maxPayloadBytes`: it answers a larger one
 * `BAD_ENVELOPE` unread, so large data goes in payload frames (python_worker/posttrain_worker/protocol/envelope.py,
 * `MAX_ENVELOPE_BYTES`).
 */
export const MAX_ENVELOPE_BYTES = 1024 ** 2;

/**
 * A worker's socket never accepts frames below this size limit (its `ZMQ_MAXMSGSIZE` is `max(maxPayloadBytes, 1
 * MiB)`), so an envelope up to {@link MAX_ENVELOPE_BYTES} always reaches it (python_worker/posttrain_worker/server/
 * config.py, `MIN_FRAME_LIMIT_BYTES`).
 */
export const MIN_FRAME_LIMIT_BYTES = MAX_ENVELOPE_BYTES;

/** What a worker accepts in one request, from its handshake. */
export interface WorkerLimits {
  /** Largest sum of the payload frames of one request (the handshake's `maxPayloadBytes`). */
  readonly maxPayloadBytes: number;
}

/**
 * Refuses, before sending, `args` nested deeper than {@link MAX_ARGS_DEPTH}: an `InvalidArgumentError` naming the
 * method and the field. Walks iteratively (a 100 000-deep array would overflow the stack of a recursive walk, and
 * of `JSON.stringify`) and stops at the first level too deep; a cyclic value is reported as too deep.
 *
 * ```ts
 * checkArgsDepth("generate", { model: "policy", generateKwargs: {} }); // fine
 * ```
 */
export function checkArgsDepth(method: string, args: Record<string, unknown>): void {
  const stack: { value: object; depth: number; path: string }[] = [{ value: args, depth: 1, path: "args" }];
  for (let item = stack.pop(); item !== undefined; item = stack.pop()) {
    if (item.depth > MAX_ARGS_DEPTH) {
      throw new InvalidArgumentError(
        `${method} args: ${topField(item.path)} nests more than ${MAX_ARGS_DEPTH} levels of arrays/objects ` +
          `(at ${shorten(item.path)}); the limit is ${MAX_ARGS_DEPTH} inside args (${MAX_NESTING_DEPTH} in the ` +
          "envelope, docs/protocol.md)",
      );
    }
    const { value, depth, path } = item;
    if (Array.isArray(value)) {
      value.forEach((child: unknown, i) => {
        if (typeof child === "object" && child !== null) stack.push({ value: child, depth: depth + 1, path: `${path}[${i}]` });
      });
    } else {
      for (const [key, child] of Object.entries(value as Record<string, unknown>)) {
        if (typeof child === "object" && child !== null) stack.push({ value: child, depth: depth + 1, path: `${path}.${key}` });
      }
    }
  }
}

/**
 * Refuses, before sending, a request the worker would answer `BAD_ENVELOPE` (an envelope over
 * {@link MAX_ENVELOPE_BYTES}) or `PAYLOAD_TOO_LARGE` (payloads over `limits`, once the handshake told them): a
 * `PayloadTooLargeError` naming the limit and the size.
 *
 * ```ts
 * checkRequestSize("echo", encodeEnvelope(envelope), payloads, { maxPayloadBytes: 4 * 1024 ** 3 });
 * ```
 */
export function checkRequestSize(method: string, envelope: Uint8Array, payloads: readonly Payload[], limits: WorkerLimits | undefined): void {
  if (envelope.byteLength > MAX_ENVELOPE_BYTES) {
    throw new PayloadTooLargeError(
      `${method}: the envelope (args) is ${envelope.byteLength} bytes, over the worker's envelope limit of ` +
        `${MAX_ENVELOPE_BYTES} bytes (send large data as payloads)`,
      envelope.byteLength,
      MAX_ENVELOPE_BYTES,
    );
  }
  if (limits === undefined) return;
  const total = payloads.reduce((sum, p) => sum + payloadBytes(p.data), 0);
  if (total > limits.maxPayloadBytes) {
    throw new PayloadTooLargeError(
      `${method}: the payload frames add up to ${total} bytes, over the worker's maxPayloadBytes of ${limits.maxPayloadBytes}`,
      total,
      limits.maxPayloadBytes,
    );
  }
}

/** `args.a` of `args.a[0].b…`: the argument the caller named. */
function topField(path: string): string {
  const match = /^args(\.[^.[]+|\[\d+\])/.exec(path);
  return match?.[0] ?? path;
}

function shorten(path: string, max = 80): string {
  return path.length <= max ? path : `${path.slice(0, max)}…`;
}

function payloadBytes(data: Uint8Array | readonly Uint8Array[]): number {
  if (data instanceof Uint8Array) return data.byteLength;
  return data.reduce((sum, part) => sum + part.byteLength, 0);
}
