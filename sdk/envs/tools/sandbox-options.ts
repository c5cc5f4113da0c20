/** Options of the Python sandbox ({@link PythonSandbox}), validated with zod at the boundary. */
import { z } from "zod";

const MiB = 1024 * 1024;

/** zod schema of {@link PythonSandboxOptions}. */
export const PythonSandboxOptionsSchema = z.strictObject({
  /** Python interpreter; default `resolvePython()` (`$POSTTRAIN_PYTHON`, the `posttrain setup` venv, `.venv`), else `python3`. */
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
  /**
   * `RLIMIT_NPROC`: processes and threads the code may have at once (default 64; at least 4); a fork past it
   * fails with `BlockingIOError`. Set only inside the sandbox's own user namespace, where it counts the
   * sandbox's processes alone; `null` leaves it unlimited.
   */
  maxProcesses: z.number().int().min(4).nullable().default(64),
  /** Output kept per stream (stdout, stderr) in bytes, head and tail (default 16 KiB). */
  maxOutputBytes: z.number().int().min(64).default(16 * 1024),
  /**
   * `false` (default): each code block runs in a fresh process. `true`: one long-lived process keeps its globals
   * between blocks and is restarted (state lost) after a crash or a timeout.
   */
  persistent: z.boolean().default(false),
  /**
   * `"auto"` (default): no network (a network namespace of its own) where the OS allows it, else with the network.
   * `"blocked"`: require it (throws `SandboxUnavailableError` where it is not allowed). `"allowed"`: do not isolate.
   */
  network: z.enum(["auto", "blocked", "allowed"]).default("auto"),
  /**
   * `"best-effort"` (default): build every isolation mechanism the OS allows (namespaces, minimal root,
   * unprivileged user), report the rest in `info().isolation.missing` and warn once (`PosttrainSandboxWarning`).
   * `"strict"`: refuse to run code (`SandboxUnavailableError` naming what is missing) unless all are in place.
   */
  isolation: z.enum(["best-effort", "strict"]).default("best-effort"),
  /** Host paths (absolute) shown read-only to the code besides the system paths and the Python installation. */
  readOnlyPaths: z.array(z.string().startsWith("/", "must be an absolute path")).default([]),
  /** Extra environment variables for the code (the parent's environment is not passed on). */
  env: z.record(z.string(), z.string()).default({}),
  /** Milliseconds to wait for the interpreter to start (default 30 000). */
  startTimeoutMs: z.number().int().positive().default(30_000),
});

/** Options of {@link PythonSandbox}. */
export type PythonSandboxOptions = z.input<typeof PythonSandboxOptionsSchema>;

/** The resolved options (defaults filled in). */
export type ResolvedSandboxOptions = z.output<typeof PythonSandboxOptionsSchema>;
