// Profiling aid of bench/grpo.ts (`--worker-timing`): the worker runs under bench/grpo_timed_worker.py, which
// appends one JSON line per timed part (the whole call by method, prompt rendering, the decoding loop, the reply's
// columns, reading the training batch, the trainer's step) to a file; this side reads the lines each step added.
import { chmod, open, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { z } from "zod";

const LineSchema = z.object({ part: z.string(), method: z.string(), ms: z.number() });

/** Worker-side timings, read step by step. */
export class WorkerTimings {
  #offset = 0;

  private constructor(
    /** The interpreter to give the worker pool: a script that starts the timed worker. */
    readonly python: string,
    /** The file the timed worker appends to. */
    readonly file: string,
  ) {}

  /**
   * Writes the launcher into `dir` (a `python` that runs bench/grpo_timed_worker.py with `python`) and points the
   * timed worker at `dir/worker-timings.jsonl` through `POSTTRAIN_BENCH_TIMINGS` in this process's environment, which
   * the workers started afterwards inherit.
   */
  static async create(dir: string, python: string): Promise<WorkerTimings> {
    const file = join(dir, "worker-timings.jsonl");
    await writeFile(file, "");
    const launcher = join(dir, "timed-python");
    const script = join(import.meta.dirname, "grpo_timed_worker.py");
    await writeFile(launcher, `#!/bin/sh\nexec ${JSON.stringify(python)} ${JSON.stringify(script)} "$@"\n`);
    await chmod(launcher, 0o755);
    process.env.POSTTRAIN_BENCH_TIMINGS = file;
    return new WorkerTimings(launcher, file);
  }

  /** Milliseconds by `part.method` (`call.generate`, `generation`, `step`, ...) of the lines added since the last take. */
  async take(): Promise<Record<string, number>> {
    const handle = await open(this.file, "r");
    try {
      const { size } = await handle.stat();
      const buffer = Buffer.alloc(size - this.#offset);
      await handle.read(buffer, 0, buffer.length, this.#offset);
      const text = buffer.toString("utf8");
      const complete = text.lastIndexOf("\n") + 1; // a line still being written waits for the next take
      this.#offset += Buffer.byteLength(text.slice(0, complete));
      const totals: Record<string, number> = {};
      for (const line of text.slice(0, complete).split("\n")) {
        if (line.trim() === "") continue;
        const { part, method, ms } = LineSchema.parse(JSON.parse(line));
        const key = part === method ? part : `${part}.${method}`;
        totals[key] = (totals[key] ?? 0) + ms;
      }
      return totals;
    } finally {
      await handle.close();
    }
  }
}
