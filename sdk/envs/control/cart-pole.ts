/**
 * `CartPoleEnv`: Gymnasium's CartPole-v1 written in TypeScript — a pole on a cart pushed left or right, Euler
 * integration every 0.02 s, reward 1 per step, terminated when the cart leaves ±2.4 or the pole tilts past 12°,
 * truncated after 500 steps.
 */
import { z } from "zod";
import { parseOptions } from "../../core/index.js";
import type { Tensor } from "../../tensordict/index.js";
import { Bounded, Categorical, Composite } from "../specs.js";
import { ClassicControlEnv, type ControlTransition } from "./classic-control-env.js";
import type { SeededRandom } from "../tasks/random.js";
import { uniform } from "./random.js";

const GRAVITY = 9.8;
const MASS_CART = 1.0;
const MASS_POLE = 0.1;
const TOTAL_MASS = MASS_POLE + MASS_CART;
const HALF_LENGTH = 0.5;
const POLE_MASS_LENGTH = MASS_POLE * HALF_LENGTH;
const FORCE_MAG = 10.0;
const TAU = 0.02;
const THETA_THRESHOLD = (12 * 2 * Math.PI) / 360;
const X_THRESHOLD = 2.4;
const FLOAT32_MAX = 3.4028234663852886e38;

/** Options of {@link CartPoleEnv}. */
export const CartPoleOptionsSchema = z.strictObject({
  /** Truncate an episode after this many steps (CartPole-v1's time limit: 500). */
  maxEpisodeSteps: z.number().int().min(1).default(500),
});

/** Options of {@link CartPoleEnv}. */
export type CartPoleOptions = z.input<typeof CartPoleOptionsSchema>;

/**
 * CartPole-v1 (Gymnasium's dynamics, reward, termination and time limit), batch size `[]`.
 *
 * - `observation`: float32 `[4]` — cart position, cart velocity, pole angle (rad), pole angular velocity.
 * - `action`: int64 `[]`, 0 = push left, 1 = push right (`Categorical(n=2)`); anything else is refused with
 *   `SpecMismatchError` (`SPEC_MISMATCH`) naming `action`.
 * - reward 1 per step, the terminating step included (0 for steps taken after termination without a reset).
 * - reset: each state variable uniform in [-0.05, 0.05), from the env's seeded generator (`setSeed`).
 * - `setState([x, xDot, theta, thetaDot])` starts an episode from a chosen state.
 *
 * ```ts
 * const env = new CartPoleEnv();
 * env.setSeed(0);
 * const td = await env.rollout(500, (td) => td.set("action", Tensor.from(1n, { dtype: "int64" })));
 * ```
 */
export class CartPoleEnv extends ClassicControlEnv {
  readonly observationSpec = new Composite({
    observation: new Bounded({
      low: [-X_THRESHOLD * 2, -FLOAT32_MAX, -THETA_THRESHOLD * 2, -FLOAT32_MAX],
      high: [X_THRESHOLD * 2, FLOAT32_MAX, THETA_THRESHOLD * 2, FLOAT32_MAX],
      shape: [4],
    }),
  });
  readonly actionSpec = new Categorical({ n: 2, shape: [] });
  #terminated = false;

  constructor(options: CartPoleOptions = {}) {
    super(parseOptions(CartPoleOptionsSchema, options, "CartPoleEnv options").maxEpisodeSteps);
  }

  protected get stateSize(): number {
    return 4;
  }

  protected override onNewEpisode(): void {
    this.#terminated = false;
  }

  protected initialState(rng: SeededRandom): Float64Array {
    return Float64Array.from({ length: 4 }, () => uniform(rng, -0.05, 0.05));
  }

  protected dynamics(state: Float64Array, action: Tensor): ControlTransition {
    const [x, xDot, theta, thetaDot] = state as unknown as [number, number, number, number];
    const force = action.data[0] === 1n ? FORCE_MAG : -FORCE_MAG;
    const cos = Math.cos(theta);
    const sin = Math.sin(theta);
    // The order of the operations follows the reference so that float64 rounding agrees with it.
    const temp = (force + POLE_MASS_LENGTH * (thetaDot * thetaDot) * sin) / TOTAL_MASS;
    const thetaAcc = (GRAVITY * sin - cos * temp) / (HALF_LENGTH * (4.0 / 3.0 - (MASS_POLE * (cos * cos)) / TOTAL_MASS));
    const xAcc = temp - (POLE_MASS_LENGTH * thetaAcc * cos) / TOTAL_MASS;
    const next = Float64Array.of(x + TAU * xDot, xDot + TAU * xAcc, theta + TAU * thetaDot, thetaDot + TAU * thetaAcc);
    const terminated = next[0]! < -X_THRESHOLD || next[0]! > X_THRESHOLD || next[2]! < -THETA_THRESHOLD || next[2]! > THETA_THRESHOLD;
    const reward = this.#terminated ? 0 : 1;
    if (terminated) this.#terminated = true;
    return { state: next, reward, terminated };
  }

  protected observe(state: Float64Array): Float32Array {
    return Float32Array.from(state);
  }
}
