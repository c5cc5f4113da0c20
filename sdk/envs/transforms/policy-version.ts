/**
 * `PolicyVersion`: tags every reset and step with the version of the policy that produced the data (TorchRL's
 * `PolicyVersion`), so a trainer can drop samples that are too old.
 */
import { randomUUID } from "node:crypto";
import { z } from "zod";
import { Tensor, TensorDict } from "../../tensordict/index.js";
import { parseOptions } from "../../core/index.js";
import { throwIfAborted, type EnvCallOptions } from "../env-base.js";
import { POLICY_VERSION_KEY } from "../keys.js";
import { Transform } from "../transform.js";

/** Options of {@link PolicyVersion}. */
export const PolicyVersionOptionsSchema = z.strictObject({
  /** `"int"` (default): 0, 1, 2, ... as int64; `"uuid"`: a new random UUID string per version. */
  versionType: z.enum(["int", "uuid"]).default("int"),
});

/** Options of {@link PolicyVersion}. */
export type PolicyVersionOptions = z.input<typeof PolicyVersionOptionsSchema>;

/** One version change. */
export interface VersionChange {
  /** When it changed. */
  readonly timestamp: Date;
  /** The version before (`undefined` for the first one). */
  readonly oldVersion: string | number | undefined;
  /** The version after. */
  readonly newVersion: string | number;
}

/**
 * Writes `policy_version` (`[...batch]`: int64 for `"int"`, strings for `"uuid"`) at reset and into `next` at each
 * step. Call {@link incrementVersion} when the policy's weights change (collectors do it on weight sync).
 */
export class PolicyVersion extends Transform {
  /** `"int"` or `"uuid"`. */
  readonly versionType: "int" | "uuid";
  readonly #history: VersionChange[] = [];
  #version: string | number;

  constructor(options: PolicyVersionOptions = {}) {
    super();
    this.versionType = parseOptions(PolicyVersionOptionsSchema, options, "PolicyVersion options").versionType;
    this.#version = this.versionType === "int" ? 0 : randomUUID();
    this.#history.push({ timestamp: new Date(), oldVersion: undefined, newVersion: this.#version });
  }

  /** The current version. */
  get version(): string | number {
    return this.#version;
  }

  /** Every version change so far, the first version included. */
  get versionHistory(): readonly VersionChange[] {
    return this.#history;
  }

  /** Moves to the next version (+1, or a new UUID) and returns it. */
  incrementVersion(): string | number {
    const old = this.#version;
    this.#version = typeof old === "number" ? old + 1 : randomUUID();
    this.#history.push({ timestamp: new Date(), oldVersion: old, newVersion: this.#version });
    return this.#version;
  }

  #tag(td: TensorDict): TensorDict {
    const version = this.#version;
    const rows = td.numel();
    if (typeof version === "number") return td.set(POLICY_VERSION_KEY, Tensor.full("int64", td.batchSize, BigInt(version)));
    return td.set(POLICY_VERSION_KEY, new Array<string>(rows).fill(version));
  }

  override reset(td: TensorDict, tdReset: TensorDict, options: EnvCallOptions): TensorDict {
    throwIfAborted(options.signal, "PolicyVersion.reset");
    return this.#tag(tdReset);
  }

  override step(td: TensorDict, next: TensorDict, options: EnvCallOptions): TensorDict {
    throwIfAborted(options.signal, "PolicyVersion.step");
    return this.#tag(next);
  }
}
