/**
 * The envs of a PPO run: N copies of a built-in control env (`SerialEnv` in this thread, or `ParallelEnv` over worker
 * threads) from the run config's `env` block, and the agent's shape read from their specs.
 */
import { CartPoleOptionsSchema } from "../envs/control/cart-pole.js";
import { PendulumOptionsSchema } from "../envs/control/pendulum.js";
import { builtInEnv, type BuiltInEnvId } from "../envs/env-factory.js";
import type { BatchedEnvBase } from "../envs/batched-env.js";
import { ParallelEnv } from "../envs/parallel-env.js";
import { SerialEnv } from "../envs/serial-env.js";
import { Bounded, Categorical, type TensorSpec } from "../envs/specs.js";
import { InvalidArgumentError } from "../core/errors.js";
import type { ControlAgentConfig } from "../modules/control-agent.js";

/** The batched env of a PPO run. */
export type ControlEnv = BatchedEnvBase;

/** What {@link createControlEnv} reads of the run config's `env` block. */
export interface ControlEnvConfig {
  readonly name: BuiltInEnvId;
  readonly parallel: boolean;
  readonly maxEpisodeSteps?: number | undefined;
}

/** Gymnasium's time limit of `name` (CartPole-v1 500, Pendulum-v1 200): the env's own default. */
export function defaultMaxEpisodeSteps(name: BuiltInEnvId): number {
  return name === "CartPole-v1" ? CartPoleOptionsSchema.parse({}).maxEpisodeSteps : PendulumOptionsSchema.parse({}).maxEpisodeSteps;
}

/** `numEnvs` copies of the env `config` names, stepped together (batch size `[numEnvs]`). */
export function createControlEnv(config: ControlEnvConfig, numEnvs: number): ControlEnv {
  const factory = { env: config.name, options: config.maxEpisodeSteps === undefined ? {} : { maxEpisodeSteps: config.maxEpisodeSteps } };
  if (config.parallel) return new ParallelEnv(numEnvs, factory);
  return new SerialEnv(numEnvs, () => builtInEnv(factory)!);
}

/**
 * The observation width and action head of an agent for `env`, from its specs. Throws `InvalidArgumentError` for an
 * action spec that is neither `Categorical` nor `Bounded` with the same bounds in every dimension.
 */
export function controlEnvShape(env: ControlEnv): Pick<ControlAgentConfig, "observationSize" | "action"> {
  const observation = env.observationSpec.get("observation") as TensorSpec | undefined;
  const observationSize = observation?.shape.at(-1);
  if (observationSize === undefined) throw new InvalidArgumentError(`${env.constructor.name}: its observation spec has no "observation" of shape [..., size]`);
  const a = env.actionSpec;
  if (a instanceof Categorical) return { observationSize, action: { type: "categorical", n: a.n } };
  if (a instanceof Bounded) {
    // the agent's tanh-normal head scales every dimension into one [low, high]
    const low = a.low[0];
    const high = a.high[0];
    if (low === undefined || high === undefined || a.low.some((l) => l !== low) || a.high.some((h) => h !== high)) {
      throw new InvalidArgumentError(
        `${env.constructor.name}: its action spec ${a.toString()} has per-dimension bounds; a tanh_normal agent needs the same low and high for every dimension`,
      );
    }
    return { observationSize, action: { type: "tanh_normal", size: a.shape.at(-1) ?? 1, low, high } };
  }
  throw new InvalidArgumentError(`${env.constructor.name}: its action spec ${a.toString()} is neither Categorical nor Bounded`);
}
