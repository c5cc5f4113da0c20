/**
 * `BatchedEnvBase`: what `SerialEnv` and `ParallelEnv` share (TorchRL's `BatchedEnvBase`): `numWorkers` copies of
 * one env as a batch `[numWorkers]`, the copies' specs stacked, the stacked action checked at `step`, and copy `i`
 * seeded with `seed + i`.
 */
import { z } from "zod";
import { parseOptions } from "../core/index.js";
import type { TensorDict } from "../tensordict/index.js";
import { EnvBase, type EnvCallOptions } from "./env-base.js";
import { PosttrainError, SubEnvError } from "./errors.js";
import type { Composite, EnvSpecs, TensorSpec } from "./specs.js";

/** An env that a batched env can hold: an {@link EnvBase} of batch size `[]` with specs, seedable (`setSeed`). */
export type SpecifiedEnv = EnvBase &
  EnvSpecs & {
    /** Seeds the copy's randomness (its reset noise); a batched env gives copy `i` the seed `seed + i`. */
    setSeed?(seed: number): void;
  };

/** Wraps what copy `copyIndex` threw as {@link SubEnvError} (code `SUB_ENV_FAILED`) naming the copy. */
export function subEnvError(env: string, copyIndex: number, err: unknown): SubEnvError {
  const message = err instanceof Error ? err.message : String(err);
  const causeCode = err instanceof PosttrainError ? err.code : undefined;
  return new SubEnvError(env, copyIndex, message, { cause: err, causeCode });
}

/**
 * The base of the batched envs: batch size `[numWorkers]`, specs of the stack (each copy's specs with
 * `[numWorkers]` prepended), the action checked against `actionSpec` before any copy steps.
 */
export abstract class BatchedEnvBase extends EnvBase implements EnvSpecs {
  /** The number of copies. */
  readonly numWorkers: number;
  #specs: EnvSpecs | undefined;

  protected constructor(numWorkers: number) {
    const n = parseOptions(z.number().int().min(1), numWorkers, `${new.target.name} numWorkers`);
    super({ batchSize: [n] });
    this.numWorkers = n;
  }

  /** Stores the specs of one copy (batch size `[]`); the batched specs prepend `[numWorkers]`. */
  protected setCopySpecs(copy: EnvSpecs): void {
    const batch = [this.numWorkers];
    this.#specs = {
      observationSpec: copy.observationSpec.expand(batch),
      actionSpec: copy.actionSpec.expand(batch),
      rewardSpec: copy.rewardSpec.expand(batch),
      doneSpec: copy.doneSpec.expand(batch),
    };
  }

  /** The specs, once known (a `ParallelEnv` over a module factory learns them at `start`). */
  protected get specs(): EnvSpecs {
    if (this.#specs === undefined) throw this.specsUnknown();
    return this.#specs;
  }

  /** The error for reading specs before they are known. */
  protected abstract specsUnknown(): Error;

  /** The observation keys, `[numWorkers, ...]`. */
  get observationSpec(): Composite {
    return this.specs.observationSpec;
  }

  /** The stacked action, `[numWorkers, ...]`. */
  get actionSpec(): TensorSpec {
    return this.specs.actionSpec;
  }

  /** `("next", "reward")`, `[numWorkers, 1]`. */
  get rewardSpec(): TensorSpec {
    return this.specs.rewardSpec;
  }

  /** The done keys, `[numWorkers, 1]` each. */
  get doneSpec(): Composite {
    return this.specs.doneSpec;
  }

  /** Seeds copy `i` with `seed + i` (each copy's reset noise); applied before the next reset or step. */
  abstract setSeed(seed: number): void;

  /** Steps every copy on its row of `td` (the action already checked); returns the stacked `next`. */
  protected abstract stepCopies(td: TensorDict, options: EnvCallOptions): Promise<TensorDict>;

  protected _step(td: TensorDict, options: EnvCallOptions): Promise<TensorDict> {
    const spec: TensorSpec = this.actionSpec;
    spec.assertIsIn(td.has("action") ? td.get("action") : undefined, "action", `${this.constructor.name}.step`);
    return this.stepCopies(td, options);
  }
}
