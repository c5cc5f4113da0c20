import { ConnectionClosedError } from "../errors.js";
import type { Transport, TransportHandler } from "./transport.js";

/**
 * Two linked in-memory transports: what one sends, the other receives (on a later microtask).
 * For tests of the protocol layer and for in-process peers; frames are passed by reference.
 */
export class InMemoryTransport implements Transport {
  private peer: InMemoryTransport | undefined;
  private handler: TransportHandler | undefined;
  private readonly backlog: Uint8Array[][] = [];
  private closed = false;

  /** A connected pair `[a, b]`. */
  static createPair(): [InMemoryTransport, InMemoryTransport] {
    const a = new InMemoryTransport();
    const b = new InMemoryTransport();
    a.peer = b;
    b.peer = a;
    return [a, b];
  }

  start(handler: TransportHandler): void {
    if (this.handler !== undefined) throw new Error("transport already started");
    this.handler = handler;
    for (const frames of this.backlog.splice(0)) handler.message(frames);
  }

  send(frames: readonly Uint8Array[]): Promise<void> {
    const peer = this.peer;
    if (this.closed || peer === undefined || peer.closed) {
      return Promise.reject(new ConnectionClosedError("in-memory transport is closed"));
    }
    const copy = [...frames];
    queueMicrotask(() => {
      peer.deliver(copy);
    });
    return Promise.resolve();
  }

  close(): Promise<void> {
    if (this.closed) return Promise.resolve();
    this.closed = true;
    this.handler?.closed();
    const peer = this.peer;
    if (peer !== undefined && !peer.closed) {
      peer.closed = true;
      peer.handler?.closed();
    }
    return Promise.resolve();
  }

  private deliver(frames: Uint8Array[]): void {
    if (this.closed) return;
    if (this.handler === undefined) this.backlog.push(frames);
    else this.handler.message(frames);
  }
}
