/** `posttrain info`: start one worker, print its handshake as JSON, stop it. */
import { EXIT, choiceFlag, parseCommandArgs, say, stringFlag, type Command } from "../args.js";

const HELP = `Usage: posttrain info [--device cpu|cuda|auto] [--transport ipc|tcp]

Start one worker, print its handshake (protocol version, torch and transformers versions, devices,
capabilities) as JSON, and stop it.

Options:
  --device cpu|cuda|auto   Where the worker computes (default auto: CUDA when there is a GPU).
  --transport ipc|tcp      How it is reached (default ipc).
  -h, --help               Show this help.
`;

/** The `info` command. */
export const infoCommand: Command = {
  name: "info",
  summary: "Start one worker, print its handshake (versions, devices, capabilities) as JSON.",
  help: HELP,
  async run(args) {
    const { values, help } = parseCommandArgs("info", args, {
      device: { type: "string", default: "auto" },
      transport: { type: "string", default: "ipc" },
    });
    if (help) {
      process.stdout.write(HELP);
      return EXIT.ok;
    }
    const device = choiceFlag("info", "device", stringFlag(values, "device") ?? "auto", ["cpu", "cuda", "auto"] as const);
    const transport = choiceFlag("info", "transport", stringFlag(values, "transport") ?? "ipc", ["ipc", "tcp"] as const);
    const { WorkerPool } = await import("../../workers/index.js");
    const pool = await WorkerPool.local({ workers: 1, device, transport });
    try {
      say(JSON.stringify(pool.worker(0).info, null, 2));
    } finally {
      await pool.close();
    }
    return EXIT.ok;
  },
};
