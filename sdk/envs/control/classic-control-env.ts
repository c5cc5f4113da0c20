/**
 * `ClassicControlEnv`: the shared frame of the classic-control envs (`CartPoleEnv`, `PendulumEnv`): one env
 * (batch size `[]`) over a float64 state, float32 observations, the action checked against `actionSpec` at `step`,
 * Gymnasium's time limit (`maxEpisodeSteps`, which sets `truncated`) and seeded reset noise.
 */
import { Tensor, TensorDict } from "../../tensordict/index.js";
import { EnvBase } from "../env-base.js";
import { EnvStateError, InvalidArgumentError } from "../errors.js";
import { DONE_KEY, TERMINATED_KEY, TRUNCATED_KEY } from "../keys.js";
import { doneSpecOf, Unbounded, type Composite, type EnvSpecs, type TensorSpec } from "../specs.js";
import { SeededRandom } from "../tasks/random.js";
import { entropySeed } from "./random.js";

/** What one transition of the dynamics gives: the next state, the reward and whether the episode ended on its own. */
export interface ControlTransition {
  /** The next state (float64). */
  readonly state: Float64Array;
  /** The reward of the transition. */
  readonly reward: number;
  /** The episode ended on its own (the pole fell, the cart left the track). */
  readonly terminated: boolean;
}

function flag(value: boolean): Tensor<"bool"> {
  return new Tensor("bool", [1], Uint8Array.of(value ? 1 : 0));
}

/**
 * The base of the classic-control envs. Subclasses give the specs, the reset distribution, the dynamics and the
 * observation of a state; this class runs the episode (elapsed steps, truncation at `maxEpisodeSteps`).
 *
 * ```ts
 * const env = new CartPoleEnv();
 * env.setSeed(0);
 * const td = await env.reset();
 * ```
 */
export abstract class ClassicControlEnv extends EnvBase implements EnvSpecs {
  /** Steps after which an episode is truncated (Gymnasium's `TimeLimit`). */
  readonly maxEpisodeSteps: number;
  /** `("next", "reward")`: float32 `[1]`. */
  readonly rewardSpec: TensorSpec = new Unbounded({ shape: [1] });
  /** `done`, `terminated`, `truncated`: bool `[1]`. */
  readonly doneSpec: Composite = doneSpecOf([]);
  /** The observation keys. */
  abstract readonly observationSpec: Composite;
  /** The action the policy writes at `"action"`, checked at every `step`. */
  abstract readonly actionSpec: TensorSpec;
  #rng: SeededRandom;
  #state: Float64Array | undefined;
  #elapsed = 0;

  protected constructor(maxEpisodeSteps: number) {
    super({ batchSize: [] });
    this.maxEpisodeSteps = maxEpisodeSteps;
    this.#rng = new SeededRandom(entropySeed());
  }

  /** The length of a state (4 for CartPole, 2 for Pendulum). */
  protected abstract get stateSize(): number;

  /** A state drawn from the reset distribution (Gymnasium's uniform ranges). */
  protected abstract initialState(rng: SeededRandom): Float64Array;

  /** One transition from `state` under `action` (already checked against `actionSpec`). */
  protected abstract dynamics(state: Float64Array, action: Tensor): ControlTransition;

  /** The float32 observation of a state. */
  protected abstract observe(state: Float64Array): Float32Array;

  /** Seeds the reset noise: the same seed gives the same resets. Unseeded, an env starts from a random seed. */
  setSeed(seed: number): void {
    if (!Number.isSafeInteger(seed) || seed < 0) {
      throw new InvalidArgumentError(`${this.constructor.name}.setSeed seed: expected an integer >= 0, got ${String(seed)}`);
    }
    this.#rng = new SeededRandom(seed);
  }

  /**
   * Puts the env in a chosen state (the physical state, float64, Gymnasium's `env.unwrapped.state`) and starts a
   * new episode there: the elapsed step count goes back to 0. Returns the observation of that state, with the done
   * keys false, as `reset` does. Used for a chosen start (and by the Gymnasium parity test).
   *
   * ```ts
   * let td = env.setState([0, 0, 0.1, 0]); // CartPole: x, x_dot, theta, theta_dot
   * ```
   */
  setState(state: readonly number[] | Float64Array): TensorDict {
    const values = Array.from(state);
    if (values.length !== this.stateSize || !values.every((v) => typeof v === "number" && Number.isFinite(v))) {
      throw new InvalidArgumentError(`${this.constructor.name}.setState state: expected ${this.stateSize} finite numbers, got ${JSON.stringify(values)}`);
    }
    this.#state = Float64Array.from(values);
    this.#elapsed = 0;
    this.onNewEpisode();
    const td = this.#observation();
    for (const key of [DONE_KEY, TERMINATED_KEY, TRUNCATED_KEY]) td.set(key, flag(false));
    return td;
  }

  /** The current physical state (a copy), or undefined before the first reset. */
  getState(): Float64Array | undefined {
    return this.#state?.slice();
  }

  /** Called when an episode starts (reset or `setState`); subclasses clear per-episode bookkeeping here. */
  protected onNewEpisode(): void {
    // Nothing by default.
  }

  #observation(): TensorDict {
    const obs = this.observe(this.#state!);
    return new TensorDict({ observation: new Tensor("float32", [obs.length], obs) }, { batchSize: [] });
  }

  protected _reset(): Promise<TensorDict> {
    this.#state = this.initialState(this.#rng);
    this.#elapsed = 0;
    this.onNewEpisode();
    return Promise.resolve(this.#observation());
  }

  protected _step(td: TensorDict): Promise<TensorDict> {
    const name = this.constructor.name;
    const action = td.has("action") ? td.get("action") : undefined;
    this.actionSpec.assertIsIn(action, "action", `${name}.step`);
    if (this.#state === undefined) throw new EnvStateError(`${name}.step: the env has no state yet; call reset (or setState) first`);
    const out = this.dynamics(this.#state, action);
    this.#state = out.state;
    this.#elapsed += 1;
    const truncated = this.#elapsed >= this.maxEpisodeSteps;
    const next = this.#observation();
    next.set("reward", new Tensor("float32", [1], Float32Array.of(out.reward)));
    next.set(TERMINATED_KEY, flag(out.terminated));
    next.set(TRUNCATED_KEY, flag(truncated));
    next.set(DONE_KEY, flag(out.terminated || truncated));
    return Promise.resolve(next);
  }
}
