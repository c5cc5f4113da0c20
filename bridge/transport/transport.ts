/**
 * A transport moves multipart messages (arrays of frames) between the client and one worker.
 * It knows nothing of envelopes: the protocol layer (`RPCChannel`) sits on top.
 */
export interface Transport {
  /** Starts delivering received messages to `handler`; called once. */
  start(handler: TransportHandler): void;
  /** Sends one multipart message; resolves once it is handed to the transport (sends are queued in order). */
  send(frames: readonly Uint8Array[]): Promise<void>;
  /** Closes the transport; pending sends are dropped. Idempotent. */
  close(): Promise<void>;
}

/** Callbacks a transport calls. */
export interface TransportHandler {
  /** One multipart message arrived. */
  message(frames: Uint8Array[]): void;
  /** The transport stopped delivering (closed, or failed with `error`). */
  closed(error?: Error): void;
}
