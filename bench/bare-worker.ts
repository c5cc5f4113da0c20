// A worker driven without the SDK's client: the bridge benchmark's middle layer (issue 18). A Python worker started
// `--insecure` on a private ipc socket (no pool secret to handshake with) and a bare zeromq.js DEALER that sends
// envelope + payload frames and awaits the reply, no channel, no validation, no decoding on the Node side. Timed
// beside the raw echo and the SDK, it splits an SDK call's overhead into the worker's part and the client's part.
import { spawn } from "node:child_process";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { Dealer } from "zeromq";
import { resolvePython } from "../bridge/index.js";

/** A running bare worker: `call` one method with payload frames and wait for its reply; `stop` ends the worker. */
export interface BareWorker {
  call: (method: string, payloadFrames?: readonly Uint8Array[]) => Promise<void>;
  stop: () => Promise<void>;
}

/** Starts `python -m posttrain_worker --insecure` on `ipc://DIR/bare.sock` and connects a DEALER to it. */
export async function bareWorker(dir: string): Promise<BareWorker> {
  const args = ["-m", "posttrain_worker", "--endpoint", `ipc://${join(dir, "bare.sock")}`, "--insecure", "--no-stdin-watch", "--log-level", "ERROR"];
  const child = spawn(resolvePython(), args, { stdio: ["ignore", "pipe", "inherit"] });
  const exited = new Promise((resolve) => child.once("exit", resolve));
  const line = await new Promise<string>((resolve, reject) => {
    createInterface({ input: child.stdout }).once("line", resolve);
    child.once("exit", (code) => {
      reject(new Error(`bare worker exited with ${String(code)} before it was ready`));
    });
  });
  const ready = JSON.parse(line.slice(line.indexOf(" ") + 1)) as { endpoint: string };
  const dealer = new Dealer({ linger: 0 });
  dealer.connect(ready.endpoint);
  let id = 0;
  const call = async (method: string, payloadFrames: readonly Uint8Array[] = []): Promise<void> => {
    const payloads = payloadFrames.length === 0 ? [] : [{ kind: "tensordict", frames: payloadFrames.length }];
    const head = Buffer.from(JSON.stringify({ v: 1, type: "request", id: ++id, method, args: {}, payloads }));
    await dealer.send([head, ...payloadFrames]);
    const [reply] = await dealer.receive();
    // The one check: a refused call would be timed as a fast one.
    if (reply === undefined || !Buffer.from(reply).includes('"ok":true')) throw new Error(`bare worker: ${method} failed: ${String(reply)}`);
  };
  return {
    call,
    stop: async () => {
      await call("shutdown").catch(() => undefined);
      dealer.close();
      const killer = setTimeout(() => child.kill("SIGKILL"), 10_000);
      await exited;
      clearTimeout(killer);
    },
  };
}
