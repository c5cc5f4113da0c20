// The raw ZeroMQ echo the bridge benchmarks compare against: bench/zmq_echo_server.py (a pyzmq ROUTER) and a
// connected zeromq.js DEALER. Shared by bench/bridge.ts and bench/echo-profile.ts.
import { spawn } from "node:child_process";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { Dealer } from "zeromq";
import { resolvePython } from "../bridge/index.js";

/** A running raw echo: `send` one frame and wait for it back; `stop` ends the server. */
export interface RawEcho {
  send: (frame: Uint8Array) => Promise<void>;
  stop: () => Promise<void>;
}

/** Starts the raw pyzmq echo server on `endpoint` (`ipc://...` or `tcp://127.0.0.1:*`) and connects a DEALER. */
export async function rawEcho(endpoint: string): Promise<RawEcho> {
  const child = spawn(resolvePython(), [join(import.meta.dirname, "zmq_echo_server.py"), endpoint], { stdio: ["ignore", "pipe", "inherit"] });
  const bound = await new Promise<string>((resolve, reject) => {
    createInterface({ input: child.stdout }).once("line", resolve);
    child.once("exit", (code) => {
      reject(new Error(`echo server exited with ${String(code)}`));
    });
  });
  const dealer = new Dealer({ linger: 0 });
  dealer.connect(bound);
  return {
    send: async (frame) => {
      await dealer.send(frame);
      await dealer.receive();
    },
    stop: async () => {
      await dealer.send("STOP");
      dealer.close();
      await new Promise((r) => child.once("exit", r));
    },
  };
}
