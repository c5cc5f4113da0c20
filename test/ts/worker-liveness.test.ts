// Liveness of real workers: a death is seen from the process's exit even while a grandchild holds its stderr, and a
// per-call watchdog (connection default, per call, or a trainer's `callWatchdogMs`) fails the connection and kills a
// worker whose compute thread hangs, its process group with it, unlike a plain timeout which gives up on one request
// only.
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { setTimeout as delay } from "node:timers/promises";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import {
  makeTinyModel,
  RequestTimeoutError,
  SFTLoss,
  Trainer,
  WorkerDiedError,
  WorkerHungError,
  WorkerPool,
  type WorkerClient,
} from "../../sdk/index.js";
import { computeFor, DIAGNOSTICS_EXTENSION, isAlive, isRunning, stopsRunning } from "./diagnostics.js";

/** The test-only faults: `hang` (a compute method that never returns), `spawn_stderr_holder`, `spawn_group_child`. */
const LIVENESS_EXTENSION = resolve(import.meta.dirname, "../python/extensions/liveness.py");
const EXTENSIONS = [DIAGNOSTICS_EXTENSION, LIVENESS_EXTENSION];

/** Starts a call that blocks the worker's compute thread for good (its rejection is observed by the caller). */
function hang(worker: WorkerClient, options: { timeoutMs?: number; watchdogMs?: number } = {}): Promise<unknown> {
  return worker.call("hang", {}, [], options);
}

describe("exit detection", () => {
  it("rejects pending calls with WorkerDiedError at once while a grandchild still holds the worker's stderr", async () => {
    const pool = await WorkerPool.local({ workers: 1, device: "cpu", extensions: EXTENSIONS });
    let holder: number | undefined;
    try {
      const worker = pool.worker(0);
      const reply = await worker.call("spawn_stderr_holder");
      holder = z.object({ pid: z.number().int() }).parse(reply.result).pid;
      const pending = [computeFor(worker, 30), computeFor(worker, 30)];
      await delay(200);
      const killedAt = performance.now();
      process.kill(worker.info.pid, "SIGKILL");
      // Bounded, so that a regression fails here and still kills the grandchild below.
      const outcomes = await Promise.race([Promise.allSettled(pending), delay(10_000).then(() => [])]);
      const detectedMs = performance.now() - killedAt;
      expect(outcomes, "no rejection within 10 s of the kill").toHaveLength(pending.length);
      // The order that matters: every call failed while the grandchild still held the pipe (waiting for the pipe
      // to close took as long as the grandchild lived: 19 s in the report).
      expect(isAlive(holder)).toBe(true);
      expect(detectedMs).toBeLessThan(5000);
      for (const outcome of outcomes) {
        expect(outcome.status).toBe("rejected");
        const reason = (outcome as PromiseRejectedResult).reason as WorkerDiedError;
        expect(reason).toBeInstanceOf(WorkerDiedError);
        expect(reason.signal).toBe("SIGKILL");
        expect(reason.stderrTail).toContain("serving on");
      }
      expect(worker.connection.process?.exit).toEqual({ exitCode: null, signal: "SIGKILL" });
      await expect(worker.ping()).rejects.toBeInstanceOf(WorkerDiedError);
    } finally {
      if (holder !== undefined && isAlive(holder)) process.kill(holder, "SIGKILL");
      await pool.close();
    }
  });
});

describe("per-call watchdog", () => {
  it("a timeout gives up on one call; the connection's watchdog fails the connection and kills a hung worker", async () => {
    const pool = await WorkerPool.local({ workers: 1, device: "cpu", extensions: EXTENSIONS, watchdogMs: 1000 });
    let child: number | undefined;
    try {
      const worker = pool.worker(0);
      const proc = worker.connection.process!;
      // A process the worker started in its own process group, as a vLLM engine is: the kill must reach it too.
      child = z.object({ pid: z.number().int() }).parse((await worker.call("spawn_group_child")).result).pid;
      // Calls answered within the watchdog are untouched by it; a limit that is no number of ms is refused.
      expect(await computeFor(worker, 0.05)).toBeGreaterThan(0);
      await expect(worker.ping({ watchdogMs: -1 })).rejects.toThrow(/ping options\.watchdogMs: expected a non-negative number/);

      // A plain timeout (watchdog off for this call) rejects that call only: the worker lives and keeps serving on
      // its I/O thread, though its compute thread is now stuck for good.
      await expect(hang(worker, { timeoutMs: 300, watchdogMs: 0 })).rejects.toBeInstanceOf(RequestTimeoutError);
      expect(worker.connection.alive).toBe(true);
      expect(await worker.ping()).toBeGreaterThan(0);

      // The next compute call inherits the connection's 1000 ms watchdog; one sent after it with the watchdog off is
      // rejected with the same error when the connection fails.
      const watched = computeFor(worker, 0.01).catch((e: unknown) => e);
      const unwatched = computeFor(worker, 0.01, { watchdogMs: 0 }).catch((e: unknown) => e);
      const hung = await watched;
      expect(hung).toBeInstanceOf(WorkerHungError);
      expect((hung as WorkerHungError).code).toBe("WORKER_HUNG");
      expect((hung as WorkerHungError).method).toBe("compute_for");
      expect((hung as WorkerHungError).limitMs).toBe(1000);
      expect((hung as WorkerHungError).message).toContain("1000 ms");
      expect(await unwatched).toBe(hung);
      expect(worker.connection.alive).toBe(false);
      // The worker was killed by the client, not left hanging, and its process group with it.
      expect(await proc.exited).toEqual({ exitCode: null, signal: "SIGKILL" });
      expect(await stopsRunning(child, 5000), "the worker's child outlived the kill").toBe(true);
      await expect(worker.ping()).rejects.toBe(hung);
    } finally {
      if (child !== undefined && isRunning(child)) process.kill(child, "SIGKILL");
      await pool.close();
    }
  });

  describe("a trainer's callWatchdogMs", () => {
    let dir: string;
    let pool: WorkerPool;

    beforeAll(async () => {
      dir = await mkdtemp(join(tmpdir(), "posttrain-liveness-"));
      const [tiny, started] = await Promise.all([
        makeTinyModel(join(dir, "tiny"), { seed: 0 }),
        WorkerPool.local({ workers: 1, device: "cpu", extensions: EXTENSIONS }),
      ]);
      pool = started;
      await pool.worker(0).loadModel({ name: "policy", path: tiny.path });
    });

    afterAll(async () => {
      await pool.close();
      await rm(dir, { recursive: true, force: true });
    });

    it("applies to the trainer's calls: a step stuck behind a hung compute thread fails with WorkerHungError", async () => {
      const worker = pool.worker(0);
      const trainer = await Trainer.create(worker, { model: "policy", loss: new SFTLoss(), callWatchdogMs: 800 });
      expect((await trainer.state()).step).toBe(0);
      // No watchdog on this connection: only the trainer's own calls are watched.
      const stuck = hang(worker).catch((e: unknown) => e);
      const err = await trainer.state().catch((e: unknown) => e);
      expect(err).toBeInstanceOf(WorkerHungError);
      expect((err as WorkerHungError).method).toBe("trainer_state");
      expect((err as WorkerHungError).limitMs).toBe(800);
      expect(await stuck).toBe(err);
      expect((await worker.connection.process!.exited).signal).toBe("SIGKILL");
    });
  });
});
