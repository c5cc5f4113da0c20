/**
 * The run report: one self-contained `report.html` (inline CSS and SVG, no script, no network) with the
 * curves of `metrics.jsonl`, the run's config and sample completions.
 */
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { writeFileAtomic } from "../core/atomic-file.js";
import { PosttrainError } from "../core/errors.js";
import { eventsTable, isRunEvent, type RunEvent } from "./events.js";
import { escapeXml, lineChart, type ChartSeries } from "./svg-chart.js";

/** One line of `metrics.jsonl`: the step and numeric metrics (`null` where a metric was not computed). */
export interface MetricRecord {
  readonly step: number;
  readonly [metric: string]: number | null;
}

/** One line of `samples.jsonl`. */
export interface SampleRecord {
  readonly step: number;
  readonly prompt: string;
  readonly completion: string;
  readonly reward: number;
  readonly [extra: string]: unknown;
}

/** What {@link renderReportHTML} draws. */
export interface ReportInput {
  readonly title: string;
  readonly metrics: readonly MetricRecord[];
  readonly samples?: readonly SampleRecord[];
  /** The run's `config.yaml`, shown verbatim. */
  readonly configText?: string;
  /** The lines of `events.jsonl` (worker failures and restarts), shown as a table when there are any. */
  readonly events?: readonly RunEvent[];
}

/** A run directory whose files cannot be read as a report. */
export class ReportError extends PosttrainError {
  constructor(message: string, options?: { cause?: unknown }) {
    super("REPORT_FAILED", message, options);
  }
}

interface ChartSpec {
  readonly title: string;
  /** Exact metric names, or a prefix ending in `/` for a family (`reward/` = every per-reward mean). */
  readonly metrics: readonly string[];
  /** Draw `metric ± metric_std` as a band (for the first metric). */
  readonly bandStd?: string;
  /** The least y range (`[0, 1]`: fractions, and counts that cannot go below 0, even when all zero). */
  readonly yRange?: readonly [number, number];
}

/** The learning curves: every run that logs the metrics. */
const CHARTS: readonly ChartSpec[] = [
  { title: "Reward (mean ± std)", metrics: ["reward_mean", "eval_reward_mean"], bandStd: "reward_std" },
  { title: "Per-reward means", metrics: ["reward/"] },
  // control runs (PPOTrainer): the sampling policy's finished episodes and the deterministic evaluation
  { title: "Episode return (mean ± std)", metrics: ["eval_return_mean", "episode_return_mean"], bandStd: "eval_return_std" },
  { title: "Episode length (steps)", metrics: ["episode_length_mean", "eval_length_mean"] },
  { title: "Loss terms", metrics: ["loss_objective", "loss_kl_to_ref", "loss_entropy", "loss_critic", "loss"] },
  { title: "KL", metrics: ["kl_approx", "kl_to_ref"] },
  { title: "Entropy", metrics: ["entropy"] },
  { title: "Clip fraction", metrics: ["clip_fraction"] },
  { title: "Completion length (tokens)", metrics: ["completion_length_mean", "completion_length_max"] },
  { title: "Throughput (tokens/s)", metrics: ["tokens_per_s"] },
  { title: "Step time (s)", metrics: ["step_time_s", "generate_time_s", "train_time_s"] },
  { title: "Gradient norm", metrics: ["grad_norm"] },
  { title: "Learning rate", metrics: ["lr"] },
];

/**
 * The collector → replay buffer → trainer pipeline of a GRPO run (`async: { maxPolicyAge }`): drawn only when the
 * run logged these metrics, so the reports of older runs are unchanged.
 */
const PIPELINE_CHARTS: readonly ChartSpec[] = [
  { title: "Policy age (versions)", metrics: ["policy_age_min", "policy_age_mean", "policy_age_max"], yRange: [0, 1] },
  { title: "Stale samples dropped", metrics: ["stale_samples_dropped"], yRange: [0, 1] },
  { title: "Busy fraction (generator vs trainer)", metrics: ["generator_busy_frac", "trainer_busy_frac"], yRange: [0, 1] },
  { title: "Queue depth (groups in the buffer)", metrics: ["queue_depth"], yRange: [0, 1] },
];

function metricNames(records: readonly MetricRecord[]): string[] {
  const names = new Set<string>();
  for (const r of records) for (const k of Object.keys(r)) if (k !== "step") names.add(k);
  return [...names];
}

function seriesFor(records: readonly MetricRecord[], spec: ChartSpec, all: readonly string[]): ChartSeries[] {
  const names = spec.metrics.flatMap((m) => (m.endsWith("/") ? all.filter((n) => n.startsWith(m)).sort() : [m]));
  const out: ChartSeries[] = [];
  names.forEach((name, i) => {
    const rows = records.filter((r) => typeof r[name] === "number");
    if (rows.length === 0) return;
    const points = rows.map((r) => [r.step, r[name] ?? Number.NaN] as const);
    const std = spec.bandStd;
    if (i === 0 && std !== undefined && rows.some((r) => typeof r[std] === "number")) {
      const band = rows.map((r) => {
        const m = r[name] ?? Number.NaN;
        const s = r[std] ?? Number.NaN;
        return [r.step, m - s, m + s] as const;
      });
      out.push({ label: name, points, band });
    } else out.push({ label: name, points });
  });
  return out;
}

function summaryRows(records: readonly MetricRecord[]): string {
  const pick = (name: string): { first: number; last: number } | undefined => {
    const values = records.map((r) => r[name]).filter((v): v is number => typeof v === "number");
    const first = values[0];
    const last = values.at(-1);
    return first === undefined || last === undefined ? undefined : { first, last };
  };
  const rows: string[] = [];
  for (const name of ["eval_reward_mean", "reward_mean", "eval_return_mean", "episode_return_mean", "kl_approx", "entropy", "completion_length_mean", "tokens_per_s"]) {
    const v = pick(name);
    if (v === undefined) continue;
    rows.push(`<tr><td>${escapeXml(name)}</td><td>${v.first.toPrecision(4)}</td><td>${v.last.toPrecision(4)}</td></tr>`);
  }
  return rows.length === 0 ? "" : `<table class="summary"><tr><th>metric</th><th>first</th><th>last</th></tr>${rows.join("")}</table>`;
}

const STYLE = `
body{font:14px/1.4 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#111;background:#fff}
h1{font-size:20px;margin:0 0 4px}h2{font-size:16px;margin:24px 0 8px}
.meta{color:#555}.charts{display:flex;flex-wrap:wrap;gap:12px}.charts svg{border:1px solid #e5e7eb;border-radius:6px}
.title{font-size:13px;font-weight:600}.tick{font-size:10px;fill:#555}.axis{font-size:11px;fill:#333}
.legend{font-size:10px;fill:#222}.empty{font-size:12px;fill:#999}.frame{fill:none;stroke:#d1d5db}.grid{stroke:#f1f5f9}
table{border-collapse:collapse}td,th{border:1px solid #e5e7eb;padding:4px 8px;text-align:left;vertical-align:top}
pre{background:#f8fafc;padding:8px;border-radius:6px;overflow:auto;max-height:320px}
td.text{white-space:pre-wrap;font-family:ui-monospace,monospace;font-size:12px;max-width:520px}`;

/** Renders the report as one HTML document string. */
export function renderReportHTML(input: ReportInput): string {
  const all = metricNames(input.metrics);
  const draw = (specs: readonly ChartSpec[]): string[] =>
    specs
      .map((spec) => ({ spec, series: seriesFor(input.metrics, spec, all) }))
      .filter((c) => c.series.length > 0)
      .map((c) => lineChart(c.series, { title: c.spec.title, xLabel: "step", ...(c.spec.yRange !== undefined ? { yRange: c.spec.yRange } : {}) }));
  const charts = draw(CHARTS);
  const pipeline = draw(PIPELINE_CHARTS);
  const lastStep = input.metrics.at(-1)?.step;
  const events = input.events ?? [];
  const eventsSection =
    events.length === 0
      ? ""
      : `<h2>Restarts and worker failures</h2><p class="meta">${String(events.filter((e) => e.kind === "restart").length)} restart(s); each restart continued from the last checkpoint, and the steps after it were taken again (each step appears once in the curves).</p>${eventsTable(events)}\n`;
  const samples = (input.samples ?? []).slice(-24);
  const sampleTable =
    samples.length === 0
      ? "<p class=\"meta\">No samples recorded.</p>"
      : `<table><tr><th>step</th><th>prompt</th><th>completion</th><th>reward</th></tr>${samples
          .map(
            (s) =>
              `<tr><td>${String(s.step)}</td><td class="text">${escapeXml(s.prompt)}</td><td class="text">${escapeXml(s.completion)}</td><td>${s.reward.toPrecision(3)}</td></tr>`,
          )
          .join("")}</table>`;
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>${escapeXml(input.title)}</title>
<meta name="viewport" content="width=device-width,initial-scale=1"><style>${STYLE}</style></head>
<body><h1>${escapeXml(input.title)}</h1>
<p class="meta">${String(input.metrics.length)} logged steps${lastStep === undefined ? "" : `, last step ${String(lastStep)}`}.</p>
${summaryRows(input.metrics)}
${eventsSection}<h2>Curves</h2><div class="charts">${charts.length === 0 ? "<p class=\"meta\">No metrics yet.</p>" : charts.join("\n")}</div>
${pipeline.length === 0 ? "" : `<h2>Pipeline</h2><p class="meta">Collector → replay buffer → trainer: how old the trained samples were (policy versions behind the trainer), what was dropped as too old, how busy each side was over each step, and the groups left waiting.</p><div class="charts">${pipeline.join("\n")}</div>\n`}<h2>Sample completions</h2>${sampleTable}
${input.configText === undefined ? "" : `<h2>Config</h2><pre>${escapeXml(input.configText)}</pre>`}
</body></html>
`;
}

/** Parses JSON lines, skipping blank lines and a torn last line (a run killed mid-write). */
export function parseJSONLines(text: string, file: string): unknown[] {
  const lines = text.split("\n");
  const out: unknown[] = [];
  lines.forEach((line, i) => {
    if (line.trim() === "") return;
    try {
      out.push(JSON.parse(line));
    } catch (cause) {
      if (i === lines.length - 1) return; // torn last line: the run was interrupted while appending
      throw new ReportError(`${file}: line ${String(i + 1)} is not valid JSON`, { cause });
    }
  });
  return out;
}

/** The text of the file at `path`, or `undefined` when there is none (other read errors are thrown). */
export async function readOptional(path: string): Promise<string | undefined> {
  try {
    return await readFile(path, "utf8");
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw err;
  }
}

function isMetricRecord(value: unknown): value is MetricRecord {
  return typeof value === "object" && value !== null && typeof (value as { step?: unknown }).step === "number";
}

function isSampleRecord(value: unknown): value is SampleRecord {
  if (typeof value !== "object" || value === null) return false;
  const v = value as Record<string, unknown>;
  return typeof v.step === "number" && typeof v.prompt === "string" && typeof v.completion === "string" && typeof v.reward === "number";
}

/**
 * The events of `runDir/events.jsonl` (worker failures and restarts), oldest first; none when there is no such file.
 *
 * ```ts
 * const restarts = (await readRunEvents("runs/digit-sort")).filter((e) => e.kind === "restart").length;
 * ```
 */
export async function readRunEvents(runDir: string): Promise<RunEvent[]> {
  return parseJSONLines((await readOptional(join(runDir, "events.jsonl"))) ?? "", "events.jsonl").filter(isRunEvent);
}

/**
 * Reads `metrics.jsonl`, `samples.jsonl`, `events.jsonl` and `config.yaml` from `runDir` and writes `runDir/report.html`
 * (atomically: a temporary file renamed over). Returns the report's path.
 */
export async function writeReport(runDir: string, options: { title?: string } = {}): Promise<string> {
  const metricsText = await readOptional(join(runDir, "metrics.jsonl"));
  if (metricsText === undefined) throw new ReportError(`${runDir}: no metrics.jsonl (is this a run directory?)`);
  const metrics = parseJSONLines(metricsText, "metrics.jsonl").filter(isMetricRecord);
  const samples = parseJSONLines((await readOptional(join(runDir, "samples.jsonl"))) ?? "", "samples.jsonl").filter(isSampleRecord);
  const configText = await readOptional(join(runDir, "config.yaml"));
  const events = await readRunEvents(runDir);
  const html = renderReportHTML({
    title: options.title ?? `posttrain run: ${runDir}`,
    metrics,
    samples,
    events,
    ...(configText === undefined ? {} : { configText }),
  });
  const out = join(runDir, "report.html");
  await writeFileAtomic(out, html);
  return out;
}
