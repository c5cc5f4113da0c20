import { randomBytes } from "node:crypto";
import { Dealer } from "zeromq";
import { ConnectionClosedError } from "../errors.js";
import type { Transport, TransportHandler } from "./transport.js";

/** CURVE settings of a DEALER: the worker's public key and this client's key pair (Z85 text). */
export interface ZMQCurveClientOptions {
  /** The worker's CURVE server public key. */
  readonly serverPublicKey: string;
  /** This client's public key: the worker admits only the pool's. */
  readonly publicKey: string;
  /** This client's secret key. */
  readonly secretKey: string;
}

/** Options of {@link ZMQDealerTransport}. */
export interface ZMQDealerOptions {
  /** Endpoint of the worker's ROUTER, e.g. `ipc:///tmp/x/worker-0.sock` or `tcp://127.0.0.1:5555`. */
  readonly endpoint: string;
  /**
   * Connect as a CURVE client (encrypted and authenticated; required by tcp workers the SDK starts). A worker
   * that refuses the key never answers: the handshake's timeout reports it.
   */
  readonly curve?: ZMQCurveClientOptions;
}

/**
 * A ZeroMQ DEALER connected to one worker's ROUTER. zeromq.js allows one pending send and one pending
 * receive per socket, so this class owns the socket: a single receive loop and a FIFO send queue.
 */
export class ZMQDealerTransport implements Transport {
  private readonly socket: Dealer;
  private sendTail: Promise<void> = Promise.resolve();
  /** Sends started and not yet settled. */
  private queued = 0;
  private closing = false;
  private handler: TransportHandler | undefined;
  // Bound once: a send settles through these, not through two new closures per message.
  private readonly sendSettled = (): void => {
    this.queued--;
  };

  constructor(options: ZMQDealerOptions) {
    // linger 0: close() must not block on unsent messages to a worker that may be gone.
    // routingId: a worker admits identities, and libzmq would give each reconnect a new one, every later call
    // refused UNAUTHENTICATED; 128 random bits (as hex: zeromq.js takes a string, and an identity must not start
    // with a zero byte) keep this connection's identity across reconnects and unguessable by other processes.
    const curve = options.curve;
    this.socket = new Dealer({
      routingId: randomBytes(16).toString("hex"),
      linger: 0,
      sendHighWaterMark: 0,
      receiveHighWaterMark: 0,
      ...(curve !== undefined
        ? { curveServerKey: curve.serverPublicKey, curvePublicKey: curve.publicKey, curveSecretKey: curve.secretKey }
        : {}),
    });
    this.socket.connect(options.endpoint);
  }

  start(handler: TransportHandler): void {
    if (this.handler !== undefined) throw new Error("transport already started");
    this.handler = handler;
    this.receiveLoop(handler);
  }

  send(frames: readonly Uint8Array[]): Promise<void> {
    if (this.closing) return Promise.reject(new ConnectionClosedError("transport is closed"));
    // Fast path: nothing queued, so this send may go out at once (one pending send per socket).
    const next =
      this.queued === 0
        ? this.socket.send(frames as Uint8Array[])
        : this.sendTail.then(async () => {
            if (this.closing) throw new ConnectionClosedError("transport is closed");
            await this.socket.send(frames as Uint8Array[]);
          });
    this.queued++;
    // Keep the queue going after a failed send; the caller still sees the failure through `next`.
    this.sendTail = next.then(this.sendSettled, this.sendSettled);
    return next;
  }

  close(): Promise<void> {
    if (!this.closing) {
      this.closing = true;
      this.socket.close();
    }
    return Promise.resolve();
  }

  // One callback per message, not an `await` loop: a suspended async function keeps the last message it handled
  // in its saved registers until the next one arrives, so a large reply's frames (external memory, e.g. 16 MB)
  // outlived the caller by a whole call and survived the collection that should have freed them.
  private receiveLoop(handler: TransportHandler): void {
    const stop = (err: unknown): void => {
      handler.closed(this.closing ? undefined : (err as Error));
    };
    const next = (): void => {
      let received: Promise<Uint8Array[]>;
      try {
        received = this.socket.receive(); // throws at once on a socket closed meanwhile (e.g. by the handler)
      } catch (err) {
        stop(err);
        return;
      }
      received.then((frames) => {
        try {
          handler.message(frames);
        } catch (err) {
          stop(err);
          return;
        }
        next();
      }, stop);
    };
    next();
  }
}
