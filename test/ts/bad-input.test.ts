// Raw malformed frames written straight to a real worker's ROUTER socket from a second DEALER: each gets an
// error reply naming what was wrong (or, for a frame over the socket's limit, a disconnect), and the worker keeps
// serving the next valid request. The typed client refuses what the worker would refuse before sending it, and maps
// the worker's OVERLOADED answer to its own error class.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Dealer } from "zeromq";
import { generatePoolKeys, InMemoryTransport, MAX_NESTING_DEPTH, PROTOCOL_VERSION, RPCChannel } from "../../bridge/index.js";
import { MAX_ARGS_DEPTH, MAX_ENVELOPE_BYTES, MIN_FRAME_LIMIT_BYTES } from "../../bridge/protocol/limits.js";
import {
  InvalidArgumentError,
  PayloadTooLargeError,
  Tensor,
  TensorDict,
  WorkerError,
  WorkerOverloadedError,
  WorkerPool,
} from "../../sdk/index.js";
import { computeFor, DIAGNOSTICS_EXTENSION, rowSums } from "./diagnostics.js";

const MAX_PAYLOAD = 64 * 1024;
const MAX_IN_FLIGHT = 4;

interface Reply {
  v: number;
  type: string;
  id: number | null;
  ok: boolean;
  error?: { code: string; message: string };
}

describe("a worker fed malformed frames", () => {
  let pool: WorkerPool;
  let raw: Dealer;
  let nextId = 1000;

  beforeAll(async () => {
    // The raw client is admitted like the SDK's own: it shows the pool's secret in its handshake first.
    const keys = generatePoolKeys();
    pool = await WorkerPool.local({
      keys,
      workers: 1,
      device: "cpu",
      maxPayloadBytes: MAX_PAYLOAD,
      maxInFlight: MAX_IN_FLIGHT,
      extensions: [DIAGNOSTICS_EXTENSION],
    });
    raw = new Dealer({ linger: 0, receiveTimeout: 10_000 });
    raw.connect(pool.worker(0).connection.process!.ready.endpoint);
    const admitted = await send([
      envelope({ method: "handshake", args: { protocolVersion: PROTOCOL_VERSION, client: { name: "raw", version: "0" }, secret: keys.secret } }),
    ]);
    expect(admitted.ok).toBe(true);
  });

  afterAll(async () => {
    raw.close();
    await pool.close();
  });

  async function send(frames: (Uint8Array | string)[]): Promise<Reply> {
    await raw.send(frames);
    const [head] = await raw.receive();
    return JSON.parse(head!.toString("utf8")) as Reply;
  }

  const envelope = (fields: Record<string, unknown>): string =>
    JSON.stringify({ v: 1, type: "request", id: nextId++, args: {}, payloads: [], ...fields });

  async function expectStillServing(): Promise<void> {
    const td = new TensorDict({ x: Tensor.from([1, 2, 3], { dtype: "float32" }) }, { batchSize: [3] });
    const sums = await rowSums(pool.worker(0), td);
    expect(Array.from(sums.getTensor("x").toFloat32Array())).toEqual([1, 2, 3]);
  }

  const validArrow = (): Uint8Array =>
    new TensorDict({ x: Tensor.from([1, 2, 3, 4], { dtype: "float32", shape: [2, 2] }) }, { batchSize: [2] }).toArrow();

  it("answers a truncated Arrow stream with BAD_PAYLOAD", async () => {
    const bytes = validArrow();
    const reply = await send([envelope({ method: "echo", payloads: [{ kind: "tensordict" }] }), bytes.subarray(0, bytes.length - 40)]);
    expect(reply.ok).toBe(false);
    expect(reply.error?.code).toBe("BAD_PAYLOAD");
    expect(reply.error?.message).toMatch(/payload 0/i);
    await expectStillServing();
  });

  it("answers random bytes posing as Arrow with BAD_PAYLOAD", async () => {
    const junk = Uint8Array.from({ length: 300 }, (_, i) => (i * 37) % 251);
    const reply = await send([envelope({ method: "row_sums", payloads: [{ kind: "tensordict" }] }), junk]);
    expect(reply.error?.code).toBe("BAD_PAYLOAD");
    await expectStillServing();
  });

  it("answers a non-JSON envelope with BAD_ENVELOPE and id null", async () => {
    const reply = await send(["{not json"]);
    expect(reply.id).toBeNull();
    expect(reply.error?.code).toBe("BAD_ENVELOPE");
    await expectStillServing();
  });

  it("answers an envelope with a wrongly typed field with BAD_ENVELOPE naming the field", async () => {
    const reply = await send([JSON.stringify({ v: 1, type: "request", id: nextId++, method: 42, args: {}, payloads: [] })]);
    expect(reply.error?.code).toBe("BAD_ENVELOPE");
    expect(reply.error?.message).toContain("method");
    await expectStillServing();
  });

  it("answers another protocol version with UNSUPPORTED_VERSION", async () => {
    const reply = await send([JSON.stringify({ v: 99, type: "request", id: nextId++, method: "ping", args: {}, payloads: [] })]);
    expect(reply.error?.code).toBe("UNSUPPORTED_VERSION");
    await expectStillServing();
  });

  it("answers an unknown method with UNKNOWN_METHOD listing the known ones", async () => {
    const reply = await send([envelope({ method: "train_everything" })]);
    expect(reply.error?.code).toBe("UNKNOWN_METHOD");
    expect(reply.error?.message).toContain("train_everything");
    expect(reply.error?.message).toContain("echo");
    await expectStillServing();
  });

  it("answers a payload over the configured maximum with PAYLOAD_TOO_LARGE", async () => {
    const big = new Uint8Array(MAX_PAYLOAD + 1);
    const reply = await send([envelope({ method: "echo", payloads: [{ kind: "bytes" }] }), big]);
    expect(reply.error?.code).toBe("PAYLOAD_TOO_LARGE");
    expect(reply.error?.message).toContain(String(MAX_PAYLOAD));
    await expectStillServing();
  });

  it("answers a 100 000-deep envelope with BAD_ENVELOPE naming the depth limit, and keeps serving", async () => {
    const id = nextId++;
    const deep = `${"[".repeat(100_000)}${"]".repeat(100_000)}`;
    const reply = await send([`{"v":1,"type":"request","id":${id},"method":"ping","args":{"x":${deep}},"payloads":[]}`]);
    expect(reply.id).toBe(id);
    expect(reply.error?.code).toBe("BAD_ENVELOPE");
    expect(reply.error?.message).toContain(`the limit is ${MAX_NESTING_DEPTH}`);
    await expectStillServing();
  });

  it("refuses, before sending, args nested deeper than the limit with InvalidArgumentError naming the field", async () => {
    const worker = pool.worker(0);
    // Built in a loop: a 100 000-deep value would overflow a recursive walk (and JSON.stringify).
    let deep: unknown[] = [];
    for (let i = 0; i < 100_000; i++) deep = [deep];
    for (const value of [deep, nest(MAX_ARGS_DEPTH)]) {
      const err = await worker.call("compute_for", { seconds: value }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(InvalidArgumentError);
      expect((err as InvalidArgumentError).message).toContain("compute_for args: args.seconds nests more than");
      expect((err as InvalidArgumentError).message).toContain(String(MAX_ARGS_DEPTH));
    }
    // One level less is sent: the worker reads it and answers with its own argument check.
    const sent = await worker.call("compute_for", { seconds: nest(MAX_ARGS_DEPTH - 1) }).catch((e: unknown) => e);
    expect((sent as WorkerError).code).toBe("BAD_ARGUMENTS");
    expect(worker.connection.alive).toBe(true);
    await expectStillServing();
  });

  it("refuses, before sending, payloads over maxPayloadBytes and an envelope over the envelope limit", async () => {
    const worker = pool.worker(0);
    const big = { kind: "bytes" as const, data: new Uint8Array(MAX_PAYLOAD + 1) };
    const err = await worker.call("echo", {}, [big]).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(PayloadTooLargeError);
    expect((err as PayloadTooLargeError).code).toBe("PAYLOAD_TOO_LARGE");
    expect((err as PayloadTooLargeError).sizeBytes).toBe(MAX_PAYLOAD + 1);
    expect((err as PayloadTooLargeError).limitBytes).toBe(MAX_PAYLOAD);
    expect((err as PayloadTooLargeError).message).toContain(`${MAX_PAYLOAD + 1} bytes, over the worker's maxPayloadBytes of ${MAX_PAYLOAD}`);
    // Args are not payloads: the worker reads no envelope over 1 MiB, whatever its maxPayloadBytes.
    const huge = await worker.call("echo", { note: "x".repeat(MAX_ENVELOPE_BYTES) }).catch((e: unknown) => e);
    expect(huge).toBeInstanceOf(PayloadTooLargeError);
    expect((huge as PayloadTooLargeError).limitBytes).toBe(MAX_ENVELOPE_BYTES);
    expect((huge as PayloadTooLargeError).message).toContain(`over the worker's envelope limit of ${MAX_ENVELOPE_BYTES} bytes`);
    expect(worker.connection.alive).toBe(true);
    await expectStillServing();
  });

  it("disconnects a foreign client that sends a frame over the socket's limit, and keeps serving others", async () => {
    const foreign = new Dealer({ linger: 0 });
    try {
      const connected = untilEvent(foreign, "connect"); // the observer must exist before the connection does
      foreign.connect(pool.worker(0).connection.process!.ready.endpoint);
      await connected;
      const disconnected = untilEvent(foreign, "disconnect");
      const head = envelope({ method: "echo", payloads: [{ kind: "bytes" }] });
      await foreign.send([head, new Uint8Array(MIN_FRAME_LIMIT_BYTES + 1)]);
      await disconnected;
      await expectStillServing();
    } finally {
      foreign.close();
    }
  });

  it("answers requests over --max-in-flight with OVERLOADED at once, serves the rest, then serves as before", async () => {
    const worker = pool.worker(0);
    const order: string[] = [];
    const accepted = Array.from({ length: MAX_IN_FLIGHT }, (_, i) =>
      computeFor(worker, 0.3).then((n) => {
        order.push(`accepted ${i}`);
        return n;
      }),
    );
    const refused = Array.from({ length: 3 }, (_, i) =>
      computeFor(worker, 0).catch((e: unknown) => {
        order.push(`refused ${i}`);
        return e;
      }),
    );
    for (const err of await Promise.all(refused)) {
      expect(err).toBeInstanceOf(WorkerOverloadedError);
      expect(err).toBeInstanceOf(WorkerError);
      expect((err as WorkerOverloadedError).code).toBe("OVERLOADED");
      expect((err as WorkerOverloadedError).maxInFlight).toBe(MAX_IN_FLIGHT);
      expect((err as WorkerOverloadedError).message).toContain("compute_for");
    }
    for (const iterations of await Promise.all(accepted)) expect(iterations).toBeGreaterThan(0);
    // Refused at once, not after waiting their turn.
    expect(order.slice(0, 3).every((o) => o.startsWith("refused"))).toBe(true);
    expect(worker.connection.alive).toBe(true);
    expect(await computeFor(worker, 0)).toBe(0);
    await expectStillServing();
  });

  it("answers a payload count that does not match the descriptors with BAD_PAYLOAD", async () => {
    const reply = await send([envelope({ method: "echo", payloads: [{ kind: "tensordict" }, { kind: "tensordict" }] }), validArrow()]);
    expect(reply.error?.code).toBe("BAD_PAYLOAD");
    await expectStillServing();
  });
});

/** `[[...[]...]]`, `levels` deep. */
function nest(levels: number): unknown[] {
  let value: unknown[] = [];
  for (let i = 1; i < levels; i++) value = [value];
  return value;
}

/** Resolves at the socket's next event of `type` (monitor events of libzmq); fails after 10 s. */
async function untilEvent(socket: Dealer, type: "connect" | "disconnect"): Promise<void> {
  const seen = (async () => {
    for (;;) if ((await socket.events.receive()).type === type) return;
  })();
  seen.catch(() => undefined); // a receive still pending when the socket closes rejects: nobody waits for it then
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      reject(new Error(`no ${type} event within 10 s`));
    }, 10_000);
  });
  try {
    await Promise.race([seen, deadline]);
  } finally {
    clearTimeout(timer);
  }
}

describe("the typed client, before any worker sees it", () => {
  it("refuses an envelope over 1 MiB whatever maxPayloadBytes, before the handshake too, and sends nothing", async () => {
    const [client, peer] = InMemoryTransport.createPair();
    const received: Uint8Array[][] = [];
    peer.start({
      message: (frames) => {
        received.push(frames);
      },
      closed: () => undefined,
    });
    const channel = new RPCChannel(client, { name: "in-memory" });
    const note = "x".repeat(MAX_ENVELOPE_BYTES);
    for (const limits of [undefined, { maxPayloadBytes: 4 * 1024 ** 3 }]) {
      if (limits !== undefined) channel.setLimits(limits);
      const err = await channel.request("echo", { note }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(PayloadTooLargeError);
      expect((err as PayloadTooLargeError).limitBytes).toBe(MAX_ENVELOPE_BYTES);
    }
    await Promise.resolve();
    expect(received).toEqual([]);
    expect(channel.inFlight).toBe(0);
    await client.close();
  });
});
