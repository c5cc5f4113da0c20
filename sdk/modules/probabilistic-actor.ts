/**
 * `ProbabilisticActor` (TorchRL's): a policy for control envs over a `ControlAgent` held by a worker. It reads
 * `observation` and writes `action` and `action_log_prob` — one worker call for all the rows of a batched env. The
 * exploration type (sample, or the distribution's mode) is the call's option, else the one set around the call with
 * {@link setExplorationType} (TorchRL's `set_exploration_type`), else the actor's own.
 */
import { AsyncLocalStorage } from "node:async_hooks";
import { z } from "zod";
import type { RequestOptions } from "../../bridge/index.js";
import { parseOptions } from "../core/index.js";
import type { TensorDict } from "../tensordict/index.js";
import { EXPLORATION_TYPES, type ExplorationType } from "../workers/control.js";
import type { ControlAgent } from "./control-agent.js";

const ExplorationSchema = z.enum(EXPLORATION_TYPES);

/** Options of {@link ProbabilisticActor}. */
export const ProbabilisticActorOptionsSchema = z.strictObject({
  /** The actor's exploration type when neither the call nor {@link setExplorationType} says (default `"random"`). */
  exploration: ExplorationSchema.default("random"),
});

/** Options of {@link ProbabilisticActor} (input form). */
export type ProbabilisticActorOptions = z.input<typeof ProbabilisticActorOptionsSchema>;

/** Options of {@link ProbabilisticActor.forward}: the request's (`signal`, `timeoutMs`) and this call's exploration type. */
export interface ActorForwardOptions extends RequestOptions {
  /** Overrides {@link setExplorationType} and the actor's own for this call. */
  readonly exploration?: ExplorationType;
}

const scope = new AsyncLocalStorage<ExplorationType>();

/**
 * Runs `fn` with every `ProbabilisticActor` call inside it (awaited ones included) using `type`, unless a call names
 * its own — TorchRL's `with set_exploration_type(...)`. Resolves with what `fn` returns.
 *
 * ```ts
 * const episode = await setExplorationType("deterministic", () => env.rollout(500, actor));
 * ```
 */
export function setExplorationType<T>(type: ExplorationType, fn: () => T): T {
  return scope.run(parseOptions(ExplorationSchema, type, "setExplorationType type"), fn);
}

/** The exploration type {@link setExplorationType} set around the current call, or `undefined` outside one. */
export function explorationType(): ExplorationType | undefined {
  return scope.getStore();
}

/**
 * A policy (EnvBase's `Policy` shape) sampling from an agent's actor: `forward(td)` sends `td`'s `observation` (float32
 * `[N, obsSize]`) to the worker and writes `action` (int64 `[N]` for a categorical head, float32 `[N, size]` in the
 * action bounds for a tanh-normal one) and `action_log_prob` (float32 `[N]`) into `td`, which it returns.
 *
 * ```ts
 * const actor = new ProbabilisticActor(agent);
 * const batch = await env.rollout(200, actor); // sampled actions
 * const greedy = await actor.forward(await env.reset(), { exploration: "deterministic" });
 * ```
 */
export class ProbabilisticActor {
  /** The agent whose actor this is. */
  readonly agent: ControlAgent;
  /** The keys read (TorchRL's `in_keys`). */
  readonly inKeys: readonly string[] = Object.freeze(["observation"]);
  /** The keys written (TorchRL's `out_keys`). */
  readonly outKeys: readonly string[] = Object.freeze(["action", "action_log_prob"]);
  #exploration: ExplorationType;

  /** Throws `InvalidArgumentError` naming the field when an option does not fit. */
  constructor(agent: ControlAgent, options: ProbabilisticActorOptions = {}) {
    this.agent = agent;
    this.#exploration = parseOptions(ProbabilisticActorOptionsSchema, options, "ProbabilisticActor options").exploration;
  }

  /** The actor's own exploration type (used when neither the call nor {@link setExplorationType} gives one). */
  get exploration(): ExplorationType {
    return this.#exploration;
  }

  /** Sets the actor's own exploration type (checked: `"random"` or `"deterministic"`). */
  set exploration(type: ExplorationType) {
    this.#exploration = parseOptions(ExplorationSchema, type, "ProbabilisticActor exploration");
  }

  /** Acts on `td`: writes `action` and `action_log_prob` into it and returns it (see the class notes). */
  async forward(td: TensorDict, options: ActorForwardOptions = {}): Promise<TensorDict> {
    const { exploration, ...request } = options;
    const type = exploration === undefined ? (scope.getStore() ?? this.#exploration) : parseOptions(ExplorationSchema, exploration, "ProbabilisticActor.forward exploration");
    const out = await this.agent.act(td, type, request);
    for (const key of this.outKeys) td.set(key, out.getTensor(key));
    return td;
  }
}
