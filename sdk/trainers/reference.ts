import { z } from "zod";
import type { RequestOptions } from "../../bridge/index.js";
import type { TensorDict } from "../tensordict/index.js";
import type { WorkerClient } from "../workers/client.js";
import { parseOptions } from "../core/index.js";

/** Options of {@link ReferenceModel}. */
export const ReferenceModelOptionsSchema = z.strictObject({
  /** Rows per forward pass when scoring; default all at once. */
  microBatchSize: z.number().int().min(1).nullable().default(null),
});

/** Options of {@link ReferenceModel} (input form). */
export type ReferenceModelOptions = z.input<typeof ReferenceModelOptionsSchema>;

/**
 * A frozen reference model held by a worker: the log-probs of the KL-to-reference term (or of a
 * `KLRewardTransform`). It lives in the trainer's worker (then the trainer scores it there, without moving
 * anything) or in any other worker (then `forward` scores there).
 *
 * ```ts
 * const ref = await ReferenceModel.copyOf(worker, "policy");           // a frozen copy, same worker
 * const trainer = await Trainer.create(worker, { model: "policy", loss, reference: ref });
 * ```
 */
export class ReferenceModel {
  private readonly options: z.output<typeof ReferenceModelOptionsSchema>;

  constructor(
    /** The worker holding the model. */
    readonly worker: WorkerClient,
    /** The model's name in that worker. */
    readonly model: string,
    options: ReferenceModelOptions = {},
  ) {
    parseOptions(z.string().min(1), model, "ReferenceModel model");
    this.options = parseOptions(ReferenceModelOptionsSchema, options, "ReferenceModel options");
  }

  /**
   * A frozen deep copy of `source` in the same worker, named `name` (default `"ref"`): the policy as it is
   * now, whatever the trainer does to `source` later.
   */
  static async copyOf(
    worker: WorkerClient,
    source: string,
    name = "ref",
    requestOptions: RequestOptions = {},
  ): Promise<ReferenceModel> {
    await worker.invoke("clone_model", { source, name, replace: true }, [], requestOptions, "ReferenceModel.copyOf");
    return new ReferenceModel(worker, name);
  }

  /**
   * Scores `td`'s `("tokens","full")` and returns a copy of `td` with `("ref_log_probs","full")` added (TorchRL's
   * convention: entry t is log p_ref(tok_t | tok_<t), the first token gets 0). `td` is not modified.
   */
  async forward(td: TensorDict, requestOptions: RequestOptions = {}): Promise<TensorDict> {
    const scoreOptions = this.options.microBatchSize !== null ? { microBatchSize: this.options.microBatchSize } : {};
    const scored = await this.worker.score(this.model, td.select(["tokens", "full"]), scoreOptions, requestOptions);
    return td.exclude().set(["ref_log_probs", "full"], scored.getRagged(["log_probs", "full"]));
  }
}
