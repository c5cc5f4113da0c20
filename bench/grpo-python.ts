// The TypeScript end of the line protocol of bench/grpo_common.py: starts one of the Python GRPO baselines
// (bench/grpo_inprocess_fair.py, bench/grpo_inprocess.py, bench/grpo_trl.py) with the request on its first stdin line, then asks for one step at a
// time, so that bench/grpo.ts can interleave the three systems.
import { spawn } from "node:child_process";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { z } from "zod";

/** What a baseline answers for one GRPO step (`ms` measured inside the baseline). */
export const PythonStepSchema = z.looseObject({
  ms: z.number(),
  reward: z.number(),
  completionLength: z.number().nullable().optional(),
  loss: z.number().nullable().optional(),
  gradNorm: z.number().nullable().optional(),
  /** Milliseconds per phase of the step, where the baseline reports them. */
  phases: z.record(z.string(), z.number()).optional(),
});

/** One step of a baseline. */
export type PythonStep = z.infer<typeof PythonStepSchema>;

const ReadySchema = z.looseObject({ ready: z.literal(true), threads: z.number().int(), torch: z.string() });

/** The request the baselines read (camelCase keys, see bench/grpo_common.py). */
export interface PythonRequest {
  readonly modelDir: string;
  readonly prompts: readonly { readonly prompt: string; readonly answer: string }[];
  readonly groupSize: number;
  readonly promptsPerStep: number;
  readonly maxNewTokens: number;
  readonly temperature: number;
  readonly topP: number;
  readonly topK: number;
  readonly lr: number;
  readonly weightDecay: number;
  readonly gradClip: number;
  readonly clipEpsilon: number;
  readonly entropyCoeff: number;
  readonly seed: number;
  /** Per step, the SDK's generation seed (the fair baseline only). */
  readonly sampleSeeds?: readonly number[];
  /** The SDK worker's `trainer_state`: its loss, optimizer and schedule configs (the fair baseline only). */
  readonly trainer?: Readonly<Record<string, unknown>>;
}

/** A running baseline process. */
export interface PythonStepper {
  /** Torch's intra-op threads in the baseline. */
  readonly threads: number;
  /** Torch's version there. */
  readonly torch: string;
  /** Runs one GRPO step and returns its figures. */
  step(): Promise<PythonStep>;
  /** Asks the process to quit and waits for it. */
  stop(): Promise<void>;
}

/** Starts `bench/<script>` with `python`, sends `request`, and waits until its model is loaded. */
export async function startPythonStepper(python: string, script: string, request: PythonRequest): Promise<PythonStepper> {
  // A session of its own, as the SDK's workers have (bridge/worker/os-process.ts spawns them detached): Linux's
  // autogroup scheduling shares the CPU between sessions first, so a baseline left in this process's session would
  // share one session's slice with every other process there while the SDK's worker gets a slice of its own, and on a
  // loaded machine the comparison would favour the SDK. The process still ends with its stdin (see `stop`).
  const child = spawn(python, [join(import.meta.dirname, script)], { stdio: ["pipe", "pipe", "inherit"], detached: process.platform !== "win32" });
  const lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]();
  const exited = new Promise<never>((_, reject) => {
    child.once("exit", (code, signal) => {
      reject(new Error(`${script} exited (code ${String(code)}, signal ${String(signal)})`));
    });
  });
  exited.catch(() => undefined);
  const readJson = async (): Promise<unknown> => {
    const line = await Promise.race([lines.next(), exited]);
    if (line.done === true) throw new Error(`${script} closed its stdout`);
    const value = JSON.parse(line.value) as unknown;
    if (typeof value === "object" && value !== null && "error" in value) throw new Error(`${script}: ${String(value.error)}`);
    return value;
  };
  child.stdin.write(`${JSON.stringify(request)}\n`);
  const ready = ReadySchema.parse(await readJson());
  return {
    threads: ready.threads,
    torch: ready.torch,
    step: async () => {
      child.stdin.write("step\n");
      return PythonStepSchema.parse(await readJson());
    },
    stop: async () => {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const done = new Promise((resolve) => child.once("exit", resolve));
      child.stdin.end("quit\n");
      await done;
    },
  };
}
