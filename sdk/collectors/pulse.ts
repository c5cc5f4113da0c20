/**
 * A wake-up for async waiters (internal): `wait()` resolves at the next `notify()`, or rejects when the signal aborts.
 * The background collector and the trainer reading its replay buffer wait on one each other.
 */
import { RequestAbortedError } from "../../bridge/index.js";

export class Pulse {
  #waiters: (() => void)[] = [];

  /** Wakes every current waiter. */
  notify(): void {
    const waiters = this.#waiters;
    this.#waiters = [];
    for (const wake of waiters) wake();
  }

  /** Resolves at the next {@link notify}; rejects with `RequestAbortedError` when `signal` aborts first. */
  wait(signal: AbortSignal | undefined, what: string): Promise<void> {
    if (signal?.aborted === true) return Promise.reject(new RequestAbortedError(what, signal.reason));
    return new Promise<void>((resolve, reject) => {
      const onAbort = (): void => {
        this.#waiters = this.#waiters.filter((w) => w !== wake);
        reject(new RequestAbortedError(what, signal?.reason));
      };
      const wake = (): void => {
        signal?.removeEventListener("abort", onAbort);
        resolve();
      };
      this.#waiters.push(wake);
      signal?.addEventListener("abort", onAbort, { once: true });
    });
  }
}
