/** Options of the Python sandbox ({@link PythonSandbox}), validated with zod at the boundary. */
import { z } from "zod";

const MiB = 1024 * 1024;

/** zod schema of {@link PythonSandboxOptions}. */
export const PythonSandboxOptionsSchema = z.strictObject({
  /** Python interpreter; default `resolvePython()` (`$POSTTRAIN_PYTHON`, the project's `.venv`, `python3`). */
  python: z.string().min(1).optional(),
  /** Wall-clock limit per code block in ms (default 10 000, TorchRL's 10 s); past it the process group is killed. */
  timeoutMs: z.number().int().positive().default(10_000),
  /** `RLIMIT_AS` in bytes (default 1 GiB; at least 32 MiB); `null` leaves it unlimited. */
  memoryBytes: z.number().int().min(32 * MiB).nullable().default(1024 * MiB),
  /** `RLIMIT_CPU` per code block in seconds; default the timeout rounded up; `null` leaves it unlimited. */
  cpuSeconds: z.number().int().positive().nullable().optional(),
  /** `RLIMIT_NOFILE` (default 256; at least 16). */
  maxOpenFiles: z.number().int().min(16).nullable().default(256),
  /** `RLIMIT_FSIZE`: largest file the code may write, in bytes (default 64 MiB; at least 1 MiB). */
  maxFileBytes: z.number().int().min(MiB).nullable().default(64 * MiB),
  /** Output kept per stream (stdout, stderr) in bytes, head and tail (default 16 KiB). */
  maxOutputBytes: z.number().int().min(64).default(16 * 1024),
  /**
   * `false` (default): each code block runs in a fresh process. `true`: one long-lived process keeps its globals
   * between blocks and is restarted (state lost) after a crash or a timeout.
   */
  persistent: z.boolean().default(false),
  /**
   * `"auto"` (default): no network through `unshare -rn` where the OS allows it, else run with the network.
   * `"blocked"`: require it (throws `SandboxUnavailableError` where it is not allowed). `"allowed"`: do not isolate.
   */
  network: z.enum(["auto", "blocked", "allowed"]).default("auto"),
  /** Extra environment variables for the code (the parent's environment is not passed on). */
  env: z.record(z.string(), z.string()).default({}),
  /** Milliseconds to wait for the interpreter to start (default 30 000). */
  startTimeoutMs: z.number().int().positive().default(30_000),
});

/** Options of {@link PythonSandbox}. */
export type PythonSandboxOptions = z.input<typeof PythonSandboxOptionsSchema>;

/** The resolved options (defaults filled in). */
export type ResolvedSandboxOptions = z.output<typeof PythonSandboxOptionsSchema>;
