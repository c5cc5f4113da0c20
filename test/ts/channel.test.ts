// The protocol layer (RPCChannel) over the in-memory transport, against a scripted peer: a few lines that
// answer envelopes the way a broken or hostile worker might. Real workers never send these replies, so this
// is the only way to check that the client turns them into typed errors instead of hanging or crashing.
import { getEventListeners } from "node:events";
import { describe, expect, it, vi } from "vitest";
import {
  ConnectionClosedError,
  InMemoryTransport,
  ProtocolError,
  RequestAbortedError,
  RequestTimeoutError,
  RPCChannel,
  WorkerError,
} from "../../bridge/index.js";

const enc = new TextEncoder();
const dec = new TextDecoder();

/** A peer that answers each request with whatever `answer` returns (frames), or nothing. */
function scriptedPeer(
  answer: (request: { id: number; method: string }, send: (frames: string[]) => void) => (Uint8Array | string)[] | undefined,
) {
  const [client, peer] = InMemoryTransport.createPair();
  const seen: unknown[] = [];
  peer.start({
    message: (frames) => {
      const envelope = JSON.parse(dec.decode(frames[0])) as { type: string; id: number; method: string };
      seen.push(envelope);
      if (envelope.type !== "request") return;
      const send = (reply: string[]): void => void peer.send(reply.map((f) => enc.encode(f)));
      const reply = answer(envelope, send);
      if (reply !== undefined) void peer.send(reply.map((f) => (typeof f === "string" ? enc.encode(f) : f)));
    },
    closed: () => undefined,
  });
  const protocolErrors: ProtocolError[] = [];
  const channel = new RPCChannel(client, { name: "peer", onProtocolError: (e) => protocolErrors.push(e) });
  return { channel, seen, protocolErrors };
}

const ok = (id: number, payloads: unknown[] = []): string =>
  JSON.stringify({ v: 1, type: "response", id, ok: true, result: { echoed: id }, payloads });

describe("RPCChannel", () => {
  it("routes out-of-order replies to their requests", async () => {
    const held: number[] = [];
    const { channel } = scriptedPeer((req, send) => {
      held.push(req.id);
      if (held.length === 2) {
        send([ok(held[1]!)]); // answer the second request first
        send([ok(held[0]!)]);
      }
      return undefined;
    });
    const [a, b] = await Promise.all([channel.request("a"), channel.request("b")]);
    expect(a.result).toEqual({ echoed: 1 });
    expect(b.result).toEqual({ echoed: 2 });
    const c = channel.request("c");
    await channel.close();
    await expect(c).rejects.toBeInstanceOf(ConnectionClosedError);
  });

  it("resolves replies, rejects worker errors as WorkerError with code and details", async () => {
    const { channel } = scriptedPeer((req) =>
      req.method === "bad"
        ? [JSON.stringify({ v: 1, type: "response", id: req.id, ok: false, error: { code: "BAD_ARGUMENTS", message: "x must be 1", details: { field: "x" } } })]
        : [ok(req.id)],
    );
    expect((await channel.request("good")).result).toEqual({ echoed: 1 });
    const err = (await channel.request("bad").catch((e: unknown) => e)) as WorkerError;
    expect(err).toBeInstanceOf(WorkerError);
    expect(err.code).toBe("BAD_ARGUMENTS");
    expect(err.method).toBe("bad");
    expect(err.details).toEqual({ field: "x" });
  });

  it("rejects a reply whose payload frames do not match its descriptors with ProtocolError", async () => {
    const { channel } = scriptedPeer((req) => [ok(req.id, [{ kind: "tensordict" }])]);
    await expect(channel.request("m")).rejects.toBeInstanceOf(ProtocolError);
  });

  it("reports malformed envelopes and replies with id null without failing pending requests", async () => {
    let first = true;
    const { channel, protocolErrors } = scriptedPeer((req) => {
      if (first) {
        first = false;
        return ["{not json"];
      }
      return [ok(req.id)];
    });
    const pending = channel.request("m", {}, [], { timeoutMs: 50 });
    await expect(pending).rejects.toBeInstanceOf(RequestTimeoutError);
    expect(protocolErrors[0]?.message).toMatch(/not UTF-8 JSON/);
    expect((await channel.request("m")).result).toEqual({ echoed: 2 });
  });

  it("times out and aborts, telling the peer to cancel", async () => {
    const { channel, seen } = scriptedPeer(() => undefined);
    await expect(channel.request("slow", {}, [], { timeoutMs: 20 })).rejects.toBeInstanceOf(RequestTimeoutError);
    const ac = new AbortController();
    const pending = channel.request("slow", {}, [], { signal: ac.signal });
    ac.abort(new Error("user"));
    await expect(pending).rejects.toBeInstanceOf(RequestAbortedError);
    await new Promise((r) => setTimeout(r, 5));
    expect(seen.filter((e) => (e as { type: string }).type === "cancel")).toHaveLength(2);
    expect(channel.inFlight).toBe(0);
  });

  it("releases a settled call's timers and abort listener, whichever way it settles", async () => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] });
    try {
      const { channel } = scriptedPeer((req) => (req.method === "answered" ? [ok(req.id)] : undefined));
      const ac = new AbortController();
      const options = { timeoutMs: 60_000, watchdogMs: 120_000, signal: ac.signal };
      await expect(channel.request("answered", {}, [], options)).resolves.toMatchObject({ result: { echoed: 1 } });
      expect(vi.getTimerCount()).toBe(0);
      expect(getEventListeners(ac.signal, "abort")).toHaveLength(0);
      // a call with none of them arms nothing
      const plain = channel.request("answered");
      expect(vi.getTimerCount()).toBe(0);
      await plain;
      // timed out: its watchdog and listener go with it; aborted: its timers go with it
      const timedOut = channel.request("silent", {}, [], options);
      expect(vi.getTimerCount()).toBe(2);
      vi.advanceTimersByTime(60_000);
      await expect(timedOut).rejects.toBeInstanceOf(RequestTimeoutError);
      expect(vi.getTimerCount()).toBe(0);
      expect(getEventListeners(ac.signal, "abort")).toHaveLength(0);
      const aborted = channel.request("silent", {}, [], options);
      ac.abort();
      await expect(aborted).rejects.toBeInstanceOf(RequestAbortedError);
      expect(vi.getTimerCount()).toBe(0);
      vi.advanceTimersByTime(200_000); // no watchdog left to fail the channel
      expect(channel.failedWith).toBeUndefined();
      expect(channel.inFlight).toBe(0);
    } finally {
      vi.useRealTimers();
    }
  });

  it("rejects everything pending and later with the failure once failed", async () => {
    const { channel } = scriptedPeer(() => undefined);
    const pending = channel.request("m");
    const boom = new Error("worker exploded");
    channel.fail(boom);
    await expect(pending).rejects.toBe(boom);
    await expect(channel.request("m")).rejects.toBe(boom);
  });
});
