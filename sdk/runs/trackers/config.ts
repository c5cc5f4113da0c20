/**
 * The `loggers` and `tracking` fields of the run configs of `GRPOTrainer` and `SFTTrainer` (docs/trackers.md): where
 * each step's metrics go besides `metrics.jsonl`, and the names and folder of the tracker runs.
 */
import { z } from "zod";

/** What a run can log to: `"jsonl"` (`metrics.jsonl`, always written) and the experiment trackers. */
export const LOGGER_NAMES = ["jsonl", "tensorboard", "wandb", "mlflow", "trackio"] as const;

/** One of {@link LOGGER_NAMES}. */
export type LoggerName = (typeof LOGGER_NAMES)[number];

/** The experiment trackers among {@link LOGGER_NAMES} (written by the tracker logger process). */
export type TrackerName = Exclude<LoggerName, "jsonl">;

/**
 * `loggers`: where the metrics go (default `["jsonl"]`). `metrics.jsonl` is always written (resume and
 * `report.html` read it), so listing `"jsonl"` is optional: `["wandb"]` and `["jsonl", "wandb"]` do the same.
 */
export const LoggersSchema = z
  .array(z.enum(LOGGER_NAMES))
  .default(["jsonl"])
  .superRefine((names, ctx) => {
    names.forEach((name, i) => {
      if (names.indexOf(name) !== i) ctx.addIssue({ code: "custom", path: [i], message: `${JSON.stringify(name)} is listed twice` });
    });
  });

/**
 * `tracking`: the tracker runs' `project` (W&B and trackio project, MLflow experiment; default `"posttrain"`),
 * `runName` (default: the run directory's name) and `dir`, their folder (default `"trackers"`, relative to the run
 * directory; each tracker writes in a subfolder of it).
 */
export const TrackingConfigSchema = z.strictObject({
  project: z.string().min(1).default("posttrain"),
  runName: z.string().min(1).optional(),
  dir: z.string().min(1).default("trackers"),
});

/** The `tracking` block (input form). */
export type TrackingConfig = z.input<typeof TrackingConfigSchema>;

/** The trackers of a `loggers` list (without `"jsonl"`). */
export function trackersOf(loggers: readonly LoggerName[]): TrackerName[] {
  return loggers.filter((name): name is TrackerName => name !== "jsonl");
}
