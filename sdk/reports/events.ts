/**
 * Run events: the lines of `<runDir>/events.jsonl` (worker failures and the supervisor's restarts), and their table in
 * the report. See docs/trainers.md, "Supervision and restarts".
 */
import { escapeXml } from "./svg-chart.js";

/** What happened: the run restarted its workers, a generator was dropped (the others took its rows), or it gave up. */
export type RunEventKind = "restart" | "generator_failure" | "gave_up";

/** One line of `events.jsonl`. */
export interface RunEvent {
  /** ISO 8601 time of the event. */
  readonly time: string;
  readonly kind: RunEventKind;
  /** The step in progress when the failure happened (1-based; 0 = before the first step). */
  readonly step: number;
  /** The failed worker (`"worker 1"`), or `null` when no worker could be named. */
  readonly worker: string | null;
  /** Its role: `"trainer"`, `"generator"` or `"reference"` (or `null`). */
  readonly role: string | null;
  /** The error code (`"WORKER_DIED"`, `"WORKER_UNRESPONSIVE"`, `"WORKER_HUNG"`, ...). */
  readonly cause: string;
  /** The worker's exit code, or `null` (killed by a signal, or still running). */
  readonly exitCode: number | null;
  /** The signal that killed it (`"SIGKILL"`), or `null`. */
  readonly signal: string | null;
  /** The last lines the worker wrote to stderr. */
  readonly stderrTail: string;
  /** The error's message. */
  readonly message: string;
  /** Restart number in the current run of failures (1 = the first), or `null` for a generator failure. */
  readonly attempt: number | null;
  /** The wait before the restart (ms), or `null`. */
  readonly backoffMs: number | null;
  /** The checkpoint step the run continues from, or `null` (no restart). */
  readonly resumeStep: number | null;
}

/** Whether a parsed line is a {@link RunEvent} (lines of other shapes are skipped). */
export function isRunEvent(value: unknown): value is RunEvent {
  if (typeof value !== "object" || value === null) return false;
  const v = value as Record<string, unknown>;
  return typeof v.time === "string" && typeof v.kind === "string" && typeof v.step === "number" && typeof v.cause === "string";
}

/** The report's table of events (time, step, worker, cause, attempt), or `""` when there are none. */
export function eventsTable(events: readonly RunEvent[]): string {
  if (events.length === 0) return "";
  const cell = (v: string | number | null): string => `<td>${v === null ? "-" : escapeXml(String(v))}</td>`;
  const rows = events.map((e) => {
    const how = e.signal ?? (e.exitCode === null ? null : `exit ${String(e.exitCode)}`);
    const worker = e.worker === null ? null : e.role === null ? e.worker : `${e.worker} (${e.role})`;
    const cause = how === null ? e.cause : `${e.cause} (${how})`;
    const next = e.resumeStep === null ? e.kind : `${e.kind} from step ${String(e.resumeStep)}`;
    return `<tr>${[e.time, e.step, worker, cause, e.attempt, next].map(cell).join("")}</tr>`;
  });
  return `<table class="events"><tr><th>time</th><th>step</th><th>worker</th><th>cause</th><th>attempt</th><th>action</th></tr>${rows.join("")}</table>`;
}
