/**
 * The transform interface of the replay buffer (TorchRL's replay-buffer transforms): `inv` runs on every write
 * (`extend`, `add`), `forward` on every sample.
 */
import type { JSONObject } from "../message.js";
import type { TensorDict } from "../../tensordict/tensordict.js";

/**
 * A replay-buffer transform. `ReplayBuffer` applies the `inv` of its transforms on write, last transform first (as
 * TorchRL's `Compose.inv`), and their `forward` on sample, first transform first. Both are optional.
 */
export interface ReplayBufferTransform {
  /** A name for messages and save files (e.g. `"MCAdvantage"`). */
  readonly name: string;
  /**
   * The write path: the rows to write (a TensorDict with a batch dimension; it may hold more or fewer rows than
   * `td`, e.g. a whole GRPO group once complete), or `null` to write nothing now.
   */
  inv?(td: TensorDict): TensorDict | null;
  /** The read path: the sampled batch as the caller sees it. */
  forward?(td: TensorDict): TensorDict;
  /** JSON state saved by `ReplayBuffer.save` (e.g. counters). */
  state?(): JSONObject;
  /** Restores a state returned by `state()` (`ReplayBuffer.load`). */
  loadState?(state: JSONObject): void;
  /**
   * The rows `inv` holds back and has not written yet (e.g. `MCAdvantage`'s incomplete groups), as whole
   * trajectories in arrival order: `ReplayBuffer.save` saves them so that a loaded buffer loses none.
   */
  heldBack?(): readonly TensorDict[];
  /** Holds back again trajectories returned by {@link heldBack} (`ReplayBuffer.load`); counters are left as they are. */
  restoreHeldBack?(trajectories: readonly TensorDict[]): void;
}

/** True when `value` has the shape of a {@link ReplayBufferTransform}. */
export function isReplayBufferTransform(value: unknown): value is ReplayBufferTransform {
  if (typeof value !== "object" || value === null) return false;
  const t = value as Partial<Record<keyof ReplayBufferTransform, unknown>>;
  const optionalFn = (v: unknown): boolean => v === undefined || typeof v === "function";
  return (
    typeof t.name === "string" && optionalFn(t.inv) && optionalFn(t.forward) && optionalFn(t.state) && optionalFn(t.loadState) &&
    optionalFn(t.heldBack) && optionalFn(t.restoreHeldBack)
  );
}
