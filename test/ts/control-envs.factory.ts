// Env factories that ParallelEnv threads import by module URL (control-envs.test.ts): a Pendulum with options, and
// a CartPole whose copy seeded `failSeed` throws on its first step (to check that errors name the copy).
import { CartPoleEnv, PendulumEnv } from "../../sdk/envs/index.js";
import type { TensorDict } from "../../sdk/tensordict/index.js";

/** A Pendulum with the given options. */
export function pendulum(options: { maxEpisodeSteps?: number } | undefined): PendulumEnv {
  return new PendulumEnv(options ?? {});
}

/** A CartPole that throws at `step` when it was seeded with `failSeed`. */
class FailingCartPole extends CartPoleEnv {
  #seed = -1;
  readonly #failSeed: number;

  constructor(failSeed: number) {
    super();
    this.#failSeed = failSeed;
  }

  override setSeed(seed: number): void {
    this.#seed = seed;
    super.setSeed(seed);
  }

  protected override _step(td: TensorDict): Promise<TensorDict> {
    if (this.#seed === this.#failSeed) throw new Error(`the simulator of seed ${this.#seed} crashed`);
    return super._step(td);
  }
}

/** A CartPole failing at step when seeded `options.failSeed`. */
export default function failing(options: { failSeed: number }): FailingCartPole {
  return new FailingCartPole(options.failSeed);
}
