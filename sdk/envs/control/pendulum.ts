/**
 * `PendulumEnv`: Gymnasium's Pendulum-v1 written in TypeScript — swing a pendulum up and hold it, torque in
 * [-2, 2], reward −(θ² + 0.1·θ̇² + 0.001·u²), never terminated, truncated after 200 steps.
 */
import { z } from "zod";
import { parseOptions } from "../../core/index.js";
import type { Tensor } from "../../tensordict/index.js";
import { Bounded, Composite } from "../specs.js";
import { ClassicControlEnv, type ControlTransition } from "./classic-control-env.js";
import type { SeededRandom } from "../tasks/random.js";
import { uniform } from "./random.js";

const MAX_SPEED = 8;
const MAX_TORQUE = 2.0;
const DT = 0.05;
const MASS = 1.0;
const LENGTH = 1.0;
const TORQUE_COST = Math.fround(0.001);

/** Options of {@link PendulumEnv}. */
export const PendulumOptionsSchema = z.strictObject({
  /** Truncate an episode after this many steps (Pendulum-v1's time limit: 200). */
  maxEpisodeSteps: z.number().int().min(1).default(200),
  /** Gravity (Gymnasium's `g`, default 10.0). */
  g: z.number().positive().default(10.0),
});

/** Options of {@link PendulumEnv}. */
export type PendulumOptions = z.input<typeof PendulumOptionsSchema>;

/** An angle brought into [-π, π) (the floored modulo of the reference, not JavaScript's truncated `%`). */
function angleNormalize(x: number): number {
  const period = 2 * Math.PI;
  let m = (x + Math.PI) % period;
  if (m < 0) m += period;
  return m - Math.PI;
}

/**
 * Pendulum-v1 (Gymnasium's dynamics, reward and time limit), batch size `[]`.
 *
 * - `observation`: float32 `[3]` — cos θ, sin θ, θ̇ (θ = 0 is upright).
 * - `action`: float32 `[1]`, the torque; the spec says [-2, 2] and a value outside is refused with
 *   `SpecMismatchError` naming `action` (within the spec the torque is clipped to [-2, 2] as Gymnasium does, which
 *   only matters for a subclass or a caller that widens the spec).
 * - reward −(normalized θ² + 0.1·θ̇² + 0.001·u²); the torque term is computed in float32, as Gymnasium does with
 *   its float32 action under NumPy 2's promotion rules.
 * - reset: θ uniform in [-π, π), θ̇ in [-1, 1), from the env's seeded generator (`setSeed`).
 * - `setState([theta, thetaDot])` starts an episode from a chosen state.
 *
 * ```ts
 * const env = new PendulumEnv({ maxEpisodeSteps: 100 });
 * const td = await env.reset();
 * await env.step(td.set("action", Tensor.from([0.5], { dtype: "float32" })));
 * ```
 */
export class PendulumEnv extends ClassicControlEnv {
  readonly observationSpec = new Composite({ observation: new Bounded({ low: [-1, -1, -MAX_SPEED], high: [1, 1, MAX_SPEED], shape: [3] }) });
  readonly actionSpec = new Bounded({ low: -MAX_TORQUE, high: MAX_TORQUE, shape: [1] });
  /** Gravity. */
  readonly g: number;

  constructor(options: PendulumOptions = {}) {
    const parsed = parseOptions(PendulumOptionsSchema, options, "PendulumEnv options");
    super(parsed.maxEpisodeSteps);
    this.g = parsed.g;
  }

  protected get stateSize(): number {
    return 2;
  }

  protected initialState(rng: SeededRandom): Float64Array {
    return Float64Array.of(uniform(rng, -Math.PI, Math.PI), uniform(rng, -1, 1));
  }

  protected dynamics(state: Float64Array, action: Tensor): ControlTransition {
    const [theta, thetaDot] = state as unknown as [number, number];
    // The torque stays float32 (the action's dtype): products with it round to float32, as in the reference.
    const u = Math.fround(Math.min(Math.max(Number(action.data[0]), -MAX_TORQUE), MAX_TORQUE));
    const angle = angleNormalize(theta);
    const costs = angle * angle + 0.1 * (thetaDot * thetaDot) + Math.fround(TORQUE_COST * Math.fround(u * u));
    const gravityTerm = ((3 * this.g) / (2 * LENGTH)) * Math.sin(theta);
    const torqueTerm = Math.fround((3.0 / (MASS * LENGTH * LENGTH)) * u);
    let newThetaDot = thetaDot + (gravityTerm + torqueTerm) * DT;
    newThetaDot = Math.min(Math.max(newThetaDot, -MAX_SPEED), MAX_SPEED);
    const newTheta = theta + newThetaDot * DT;
    return { state: Float64Array.of(newTheta, newThetaDot), reward: -costs, terminated: false };
  }

  protected observe(state: Float64Array): Float32Array {
    return Float32Array.of(Math.cos(state[0]!), Math.sin(state[0]!), state[1]!);
  }
}
