// Shared by the GRPOTrainer suites: what a run's steps train on.
import type { GRPOTrainer, TensorDict } from "../../sdk/index.js";

/** The batches the steps of `run` train on, as its collector hands them out (every key kept), in step order. */
export function trainedBatches(run: GRPOTrainer): TensorDict[] {
  const batches: TensorDict[] = [];
  const collector = run.collector;
  const takeBatch = collector.takeBatch.bind(collector);
  collector.takeBatch = async (...args) => {
    const taken = await takeBatch(...args);
    batches.push(taken.batch);
    return taken;
  };
  return batches;
}
