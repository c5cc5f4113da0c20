/**
 * The entry of a `ParallelEnv` thread (internal): builds its share of the copies (a `SerialEnv` over copies
 * `first .. first + count - 1`) from the env factory, then answers `reset`, `step` and `close` commands one at a time.
 * TensorDicts cross as transferred typed arrays (thread-leaves.ts); an error names the global copy index.
 */
import { parentPort, workerData } from "node:worker_threads";
import { z } from "zod";
import { PosttrainError } from "../core/index.js";
import { TensorDict } from "../tensordict/index.js";
import { loadEnvFactory, type ResolvedEnvFactory } from "./env-factory.js";
import { SubEnvError } from "./errors.js";
import { DONE_KEYS, NEXT_KEY, RESET_KEY } from "./keys.js";
import { flagColumn } from "./rows.js";
import { SerialEnv } from "./serial-env.js";
import { packLeaves, unpackLeaves } from "./thread-leaves.js";

/** What the main thread gives a thread at start. */
export const ThreadInitSchema = z.strictObject({
  factory: z.custom<ResolvedEnvFactory>((v) => typeof v === "object" && v !== null),
  first: z.number().int().nonnegative(),
  count: z.number().int().min(1),
});

/** A command from the main thread. */
export const ThreadCommandSchema = z.discriminatedUnion("op", [
  z.strictObject({ op: z.literal("reset"), mask: z.instanceof(Uint8Array), seed: z.number().int().nonnegative().optional() }),
  z.strictObject({ op: z.literal("step"), leaves: z.unknown(), seed: z.number().int().nonnegative().optional() }),
  z.strictObject({ op: z.literal("close") }),
]);

/** A thread's answer: `ready` once built, `ok` with the result's leaves, `closed`, or `error` naming the copy. */
export type ThreadReply =
  | { op: "ready" }
  | { op: "ok"; leaves: unknown }
  | { op: "closed" }
  | { op: "error"; copy: number; name: string; code: string | undefined; message: string };

const port = parentPort!;
const init = ThreadInitSchema.parse(workerData);

function post(reply: ThreadReply, transfer: ArrayBuffer[] = []): void {
  port.postMessage(reply, transfer);
}

function postError(err: unknown): void {
  // SerialEnv wraps a copy's error with the copy's index in this share; report the copy's own error.
  const local = err instanceof SubEnvError ? err.copyIndex : 0;
  const cause = err instanceof SubEnvError && err.cause !== undefined ? err.cause : err;
  post({
    op: "error",
    copy: init.first + local,
    name: cause instanceof Error ? cause.name : "Error",
    code: cause instanceof PosttrainError ? cause.code : undefined,
    message: cause instanceof Error ? cause.message : String(cause),
  });
}

async function handle(env: SerialEnv, raw: unknown): Promise<boolean> {
  const command = ThreadCommandSchema.parse(raw);
  if (command.op === "close") {
    await env.close();
    post({ op: "closed" });
    return false;
  }
  if (command.seed !== undefined) env.setSeed(command.seed);
  let out: TensorDict;
  if (command.op === "reset") {
    const td = new TensorDict({ [RESET_KEY]: flagColumn([init.count], Array.from(command.mask, (m) => m !== 0)) }, { batchSize: [init.count] });
    out = (await env.reset(td)).exclude(...DONE_KEYS);
  } else {
    const td = unpackLeaves(command.leaves, [init.count], "ParallelEnv step");
    out = (await env.step(td)).getTensorDict(NEXT_KEY);
  }
  const { leaves, transfer } = packLeaves(out, "ParallelEnv thread");
  post({ op: "ok", leaves }, transfer);
  return true;
}

async function main(): Promise<void> {
  let env: SerialEnv;
  try {
    env = new SerialEnv(init.count, await loadEnvFactory(init.factory));
  } catch (err) {
    postError(err);
    port.close();
    return;
  }
  post({ op: "ready" });
  // One command at a time: the main thread waits for each answer before it sends the next.
  let queue = Promise.resolve(true);
  port.on("message", (raw: unknown) => {
    queue = queue.then(async (open) => {
      if (!open) return false;
      try {
        const stillOpen = await handle(env, raw);
        if (!stillOpen) port.close();
        return stillOpen;
      } catch (err) {
        postError(err);
        return true;
      }
    });
  });
}

void main();
