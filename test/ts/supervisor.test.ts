// Supervisor on its own: fake workers (FakeWorker, only a name and a connection's liveness) and restart steps that
// record what they were asked, over a real RunDirectory in a temp dir. The real runs it restarts are in
// supervision.test.ts.
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { WorkerDiedError, WorkerStartError } from "../../bridge/errors.js";
import { readRunEvents } from "../../sdk/reports/report.js";
import { RunDirectory } from "../../sdk/runs/run-directory.js";
import { Supervisor, type RestartSteps, type RoleWorker, type SupervisedWorker, type SupervisionSettings } from "../../sdk/runs/supervisor.js";

/** A worker as the supervisor sees it: its name and whether its connection is alive. */
class FakeWorker implements SupervisedWorker {
  readonly connection = { alive: true };

  constructor(readonly name: string) {}

  die(): this {
    this.connection.alive = false;
    return this;
  }
}

/** Restart steps that record their calls (with the time) and resume at `resumeStep`, or fail with `fail`. */
class RecordedRestart implements RestartSteps {
  readonly calls: { what: "close" | "build"; at: number }[] = [];

  constructor(
    private readonly resumeStep: number,
    private readonly fail?: () => Error,
  ) {}

  close(): Promise<void> {
    this.calls.push({ what: "close", at: performance.now() });
    return Promise.resolve();
  }

  build(): Promise<number> {
    this.calls.push({ what: "build", at: performance.now() });
    return this.fail === undefined ? Promise.resolve(this.resumeStep) : Promise.reject(this.fail());
  }
}

const settings = (backoffMs: number): SupervisionSettings => ({ maxRestarts: 3, backoffMs, maxBackoffMs: 60_000, healthySteps: 20, callWatchdogMs: 0 });
const died = (): WorkerDiedError => new WorkerDiedError("worker 1", null, "SIGKILL", "");

let dir: string;
let runDir: RunDirectory;
let lines: string[];

beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), "posttrain-supervisor-"));
  runDir = new RunDirectory(join(dir, "run"));
  await runDir.prepare(false);
  lines = [];
});

afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

function supervisor(workers: readonly RoleWorker[], backoffMs: number, signal?: AbortSignal): Supervisor {
  return new Supervisor({ name: "GRPOTrainer", settings: settings(backoffMs), runDir, log: (l) => lines.push(l), notRestartable: undefined, signal, workers: () => workers });
}

describe("Supervisor", () => {
  it("closes the parts before the backoff, builds after it, and records the step the build resumed from", async () => {
    const workers = [
      { worker: new FakeWorker("worker 0"), role: "trainer" },
      { worker: new FakeWorker("worker 1").die(), role: "generator" },
    ];
    const restart = new RecordedRestart(2);
    const s = supervisor(workers, 100);
    expect(await s.recover(died(), 5, restart)).toBe(2);
    expect(restart.calls.map((c) => c.what)).toEqual(["close", "build"]);
    expect(restart.calls[1]!.at - restart.calls[0]!.at).toBeGreaterThanOrEqual(95);
    expect(s.restarts).toBe(1);
    const events = await readRunEvents(runDir.path);
    expect(events.map((e) => [e.kind, e.step, e.worker, e.role, e.cause, e.signal, e.attempt, e.backoffMs, e.resumeStep])).toEqual([
      ["restart", 5, "worker 1", "generator", "WORKER_DIED", "SIGKILL", 1, 100, 2],
    ]);
    expect(lines).toEqual([
      "GRPOTrainer: worker 1 (generator) failed at step 5 (killed by SIGKILL): restarting the workers in 100 ms from the last checkpoint (attempt 1)",
      "GRPOTrainer: restarted (attempt 1), continuing from step 2",
    ]);
  });

  it("an abort during the backoff ends the restart at once: nothing built or counted, no event, resolves null", async () => {
    const controller = new AbortController();
    const restart = new RecordedRestart(2);
    const s = supervisor([{ worker: new FakeWorker("worker 0").die(), role: "trainer" }], 60_000, controller.signal);
    const start = performance.now();
    setTimeout(() => {
      controller.abort();
    }, 50);
    expect(await s.recover(died(), 3, restart)).toBeNull();
    expect(performance.now() - start).toBeLessThan(5_000);
    expect(restart.calls.map((c) => c.what)).toEqual(["close"]);
    expect(s.restarts).toBe(0);
    expect(await readRunEvents(runDir.path)).toEqual([]);
    expect(lines.at(-1)).toMatch(/stopped while restarting after the failure at step 3; the run ends at its last checkpoint/);
  });

  it("an abort before the restart closes nothing, and a start aborted during the build is no failure of it", async () => {
    const aborted = AbortSignal.abort();
    const before = new RecordedRestart(2);
    expect(await supervisor([], 10, aborted).recover(died(), 1, before)).toBeNull();
    expect(before.calls).toEqual([]);

    const controller = new AbortController();
    const during = new RecordedRestart(2, () => {
      controller.abort();
      return new WorkerStartError("start aborted");
    });
    const s = supervisor([], 10, controller.signal);
    expect(await s.recover(died(), 1, during)).toBeNull();
    expect(during.calls.map((c) => c.what)).toEqual(["close", "build"]);
    expect(s.restarts).toBe(0);
    expect(await readRunEvents(runDir.path)).toEqual([]);
  });

  it("rethrows an error that is not a worker's when the run's workers are alive (a dropped one is not listed)", async () => {
    const restart = new RecordedRestart(2);
    const failure = new Error("reward function failed");
    await expect(supervisor([{ worker: new FakeWorker("worker 0"), role: "trainer" }], 10).recover(failure, 4, restart)).rejects.toBe(failure);
    expect(restart.calls).toEqual([]);
  });
});
