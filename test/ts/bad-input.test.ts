// Raw malformed frames written straight to a real worker's ROUTER socket from a second DEALER: each gets an
// error reply naming what was wrong, and the worker keeps serving the next valid request.
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Dealer } from "zeromq";
import { Tensor, TensorDict, WorkerPool } from "../../sdk/index.js";
import { DIAGNOSTICS_EXTENSION, rowSums } from "./diagnostics.js";

const MAX_PAYLOAD = 64 * 1024;

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
    pool = await WorkerPool.local({ workers: 1, device: "cpu", maxPayloadBytes: MAX_PAYLOAD, extensions: [DIAGNOSTICS_EXTENSION] });
    raw = new Dealer({ linger: 0, receiveTimeout: 10_000 });
    raw.connect(pool.worker(0).connection.process!.ready.endpoint);
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

  it("answers a payload count that does not match the descriptors with BAD_PAYLOAD", async () => {
    const reply = await send([envelope({ method: "echo", payloads: [{ kind: "tensordict" }, { kind: "tensordict" }] }), validArrow()]);
    expect(reply.error?.code).toBe("BAD_PAYLOAD");
    await expectStillServing();
  });
});
