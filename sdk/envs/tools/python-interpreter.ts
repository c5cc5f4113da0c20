/**
 * `PythonInterpreter`: runs the ```` ```python ```` blocks of the policy's message in the Python sandbox and
 * answers each with a `tool` message (TorchRL's `PythonInterpreter`, sandboxed).
 */
import { z } from "zod";
import type { ChatMessage } from "../../data/index.js";
import type { TensorDict } from "../../tensordict/index.js";
import { parseOptions } from "../../core/index.js";
import type { EnvCallOptions } from "../env-base.js";
import { RESET_KEY } from "../keys.js";
import { readFlags } from "../rows.js";
import { extractPythonBlocks } from "./parse.js";
import { PythonSandbox, type SandboxResult } from "./sandbox.js";
import { PythonSandboxOptionsSchema } from "./sandbox-options.js";
import { ToolTransformBase, ToolTransformOptionsSchema } from "./tool-transform.js";

/** Options of {@link PythonInterpreter}: the sandbox's options plus `toolRole` and `maxConcurrency`. */
export const PythonInterpreterOptionsSchema = PythonSandboxOptionsSchema.extend(ToolTransformOptionsSchema.shape);

/** Options of {@link PythonInterpreter}. */
export type PythonInterpreterOptions = z.input<typeof PythonInterpreterOptionsSchema>;

/**
 * Runs each ```` ```python ```` block of the policy's message in a {@link PythonSandbox} (timeout, hard limits,
 * private namespaces and filesystem view where the OS allows them, no network) and appends one `tool` message per block, in TorchRL's words:
 * `Code block 1 executed successfully:\n<stdout>` or `Code block 1 failed:\n<output and traceback>`, with a line
 * saying so when the block timed out or crashed the interpreter. A failing block never stops the episode.
 *
 * `persistent: true` keeps one interpreter per batch row, whose globals live across turns; an env reset of a row
 * restarts its interpreter, and a crash or timeout restarts it too (the message says the variables are gone).
 *
 * ```ts
 * const env = new TransformedEnv(new ChatEnv({ batchSize: [4] }), [new PythonInterpreter({ timeoutMs: 5000 })]);
 * ```
 */
export class PythonInterpreter extends ToolTransformBase {
  /** The resolved options. */
  readonly config: Readonly<z.output<typeof PythonInterpreterOptionsSchema>>;
  private readonly shared: PythonSandbox | undefined;
  private readonly perRow = new Map<number, PythonSandbox>();

  constructor(options: PythonInterpreterOptions = {}) {
    const parsed = parseOptions(PythonInterpreterOptionsSchema, options, "PythonInterpreter options");
    super(parsed);
    this.config = parsed;
    this.shared = parsed.persistent ? undefined : new PythonSandbox(this.sandboxOptions());
  }

  protected override async runTools(message: ChatMessage, row: number, options: EnvCallOptions): Promise<readonly string[] | null> {
    const blocks = extractPythonBlocks(message.content);
    if (blocks.length === 0) return null;
    const sandbox = this.sandboxFor(row);
    const results: string[] = [];
    for (const [i, code] of blocks.entries()) {
      const result = await sandbox.run(code, options.signal === undefined ? {} : { signal: options.signal });
      results.push(formatBlockResult(i + 1, result));
    }
    return results;
  }

  /** Persistent mode: restarts the interpreters of the rows being reset (all rows without a `"_reset"` mask). */
  override async reset(td: TensorDict, tdReset: TensorDict): Promise<TensorDict> {
    if (!this.config.persistent) return tdReset;
    const mask = td.has(RESET_KEY) ? readFlags(td, RESET_KEY) : undefined;
    await Promise.all([...this.perRow].filter(([row]) => mask === undefined || mask[row] === true).map(([, sandbox]) => sandbox.reset()));
    return tdReset;
  }

  /** Stops every interpreter and removes their directories. */
  override async close(): Promise<void> {
    const all = [...this.perRow.values(), ...(this.shared === undefined ? [] : [this.shared])];
    this.perRow.clear();
    await Promise.all(all.map((s) => s.close()));
  }

  private sandboxFor(row: number): PythonSandbox {
    if (this.shared !== undefined) return this.shared;
    let sandbox = this.perRow.get(row);
    if (sandbox === undefined) {
      sandbox = new PythonSandbox(this.sandboxOptions());
      this.perRow.set(row, sandbox);
    }
    return sandbox;
  }

  private sandboxOptions(): z.input<typeof PythonSandboxOptionsSchema> {
    const c = this.config;
    return {
      timeoutMs: c.timeoutMs,
      memoryBytes: c.memoryBytes,
      maxOpenFiles: c.maxOpenFiles,
      maxFileBytes: c.maxFileBytes,
      maxProcesses: c.maxProcesses,
      maxOutputBytes: c.maxOutputBytes,
      persistent: c.persistent,
      network: c.network,
      isolation: c.isolation,
      readOnlyPaths: c.readOnlyPaths,
      env: c.env,
      startTimeoutMs: c.startTimeoutMs,
      ...(c.cpuSeconds !== undefined ? { cpuSeconds: c.cpuSeconds } : {}),
      ...(c.python !== undefined ? { python: c.python } : {}),
    };
  }
}

/** The text of the `tool` message for block `index` (1-based), TorchRL's wording plus what went wrong. */
export function formatBlockResult(index: number, result: SandboxResult): string {
  if (result.status === "ok") return `Code block ${index} executed successfully:\n${result.stdout}`;
  const output = result.stdout + result.stderr;
  const sep = output === "" || output.endsWith("\n") ? "" : "\n";
  const lost = result.stateLost ? "; the interpreter was restarted and earlier variables are gone" : "";
  const what =
    result.status === "timeout"
      ? `${sep}Execution ${result.detail}${lost}.`
      : result.status === "crashed"
        ? `${sep}The interpreter crashed (${result.detail})${lost}.`
        : "";
  return `Code block ${index} failed:\n${output}${what}`;
}
