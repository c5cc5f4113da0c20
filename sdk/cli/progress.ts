/**
 * Training progress on the terminal: a one-line bar redrawn with `\r` on a TTY (step/total, reward, KL, tokens/s,
 * ETA), and one plain `key=value` line per step otherwise (logs, CI, pipes). No dependency.
 */

/** The metrics of one step that the display reads (a `metrics.jsonl` record). */
export interface ProgressRecord {
  readonly step: number;
  readonly [metric: string]: number | null | undefined;
}

/** Where the display writes: a stream, and whether it is a terminal and how wide. */
export interface ProgressStream {
  write(text: string): unknown;
  readonly isTTY?: boolean | undefined;
  readonly columns?: number | undefined;
}

/** Options of {@link ProgressDisplay}. */
export interface ProgressOptions {
  /** The last step of the run (`undefined` when the run ends on epochs and the count is unknown). */
  readonly totalSteps: number | undefined;
  /** Draw the bar (default: `stream.isTTY`). */
  readonly tty?: boolean;
  /** Clock in milliseconds (default `performance.now`). */
  readonly now?: () => number;
}

const CLEAR_LINE = "\r\u001b[K";
const BAR_WIDTH = 20;

/** A metric value in 4 significant digits (`-` when absent or not finite). */
export function formatMetric(value: number | null | undefined): string {
  if (value === null || value === undefined || !Number.isFinite(value)) return "-";
  if (value === 0) return "0";
  const abs = Math.abs(value);
  if (abs >= 1e5 || abs < 1e-3) return value.toExponential(2);
  if (abs >= 1000) return value.toFixed(0);
  return String(Number(value.toPrecision(4)));
}

/** A duration as `m:ss` or `h:mm:ss`. */
export function formatDuration(seconds: number): string {
  if (!Number.isFinite(seconds) || seconds < 0) return "-";
  const s = Math.round(seconds);
  const h = Math.floor(s / 3600);
  const m = Math.floor((s % 3600) / 60);
  const ss = String(s % 60).padStart(2, "0");
  return h > 0 ? `${String(h)}:${String(m).padStart(2, "0")}:${ss}` : `${String(m)}:${ss}`;
}

/** The KL shown: to the reference model when there is one, else the approximate KL to the sampling policy. */
function klOf(record: ProgressRecord): number | null | undefined {
  return typeof record.kl_to_ref === "number" ? record.kl_to_ref : record.kl_approx;
}

/**
 * Shows a run's progress: {@link step} once per step record, {@link message} for lines that must stay in the
 * scrollback (they are printed above the bar), {@link finish} at the end.
 */
export class ProgressDisplay {
  private readonly tty: boolean;
  private readonly now: () => number;
  private readonly started: number;
  private firstStep: number | undefined;
  private bar = "";

  constructor(
    private readonly stream: ProgressStream,
    private readonly options: ProgressOptions,
  ) {
    this.tty = options.tty ?? stream.isTTY === true;
    this.now = options.now ?? (() => performance.now());
    this.started = this.now();
  }

  /** Seconds left, from the mean wall time of the steps this process ran; `undefined` until one step is done. */
  eta(step: number): number | undefined {
    const total = this.options.totalSteps;
    if (total === undefined || this.firstStep === undefined) return undefined;
    const done = step - this.firstStep + 1;
    if (done <= 0) return undefined;
    const perStep = (this.now() - this.started) / 1000 / done;
    return perStep * Math.max(0, total - step);
  }

  /** Shows one step. */
  step(record: ProgressRecord): void {
    this.firstStep ??= record.step;
    if (this.tty) {
      const evals = [
        typeof record.eval_reward_mean === "number" ? `reward ${formatMetric(record.eval_reward_mean)}` : "",
        typeof record.eval_loss === "number" ? `loss ${formatMetric(record.eval_loss)}` : "",
        typeof record.eval_return_mean === "number" ? `return ${formatMetric(record.eval_return_mean)}` : "",
      ].filter((e) => e !== "");
      if (evals.length > 0) this.message(`eval at step ${String(record.step)}: ${evals.join(", ")}`);
      this.bar = this.barLine(record);
      this.stream.write(`${CLEAR_LINE}${this.bar}`);
    } else {
      this.stream.write(`${this.plainLine(record)}\n`);
    }
  }

  /** Prints a line that stays (above the bar on a TTY). */
  message(line: string): void {
    if (this.tty && this.bar !== "") this.stream.write(`${CLEAR_LINE}${line}\n${this.bar}`);
    else this.stream.write(`${line}\n`);
  }

  /** Ends the bar's line (on a TTY); call before printing anything else. */
  finish(): void {
    if (this.tty && this.bar !== "") this.stream.write("\n");
    this.bar = "";
  }

  /** `step 3/10 reward=0.41 reward_std=0.2 kl=0.0012 loss=0.1 tokens/s=1234 step_time=0.85s eta=0:06`. */
  plainLine(record: ProgressRecord): string {
    const total = this.options.totalSteps;
    const parts = [`step ${String(record.step)}${total === undefined ? "" : `/${String(total)}`}`];
    const add = (label: string, value: number | null | undefined, unit = ""): void => {
      if (value !== undefined) parts.push(`${label}=${formatMetric(value)}${value === null ? "" : unit}`);
    };
    add("reward", record.reward_mean);
    add("reward_std", record.reward_std);
    add("eval_reward", typeof record.eval_reward_mean === "number" ? record.eval_reward_mean : undefined);
    add("eval_loss", typeof record.eval_loss === "number" ? record.eval_loss : undefined);
    add("return", record.episode_return_mean);
    add("eval_return", typeof record.eval_return_mean === "number" ? record.eval_return_mean : undefined);
    add("kl", klOf(record));
    add("loss", record.loss);
    add("tokens/s", record.tokens_per_s);
    add("frames/s", record.fps);
    add("step_time", record.step_time_s, "s");
    const eta = this.eta(record.step);
    if (eta !== undefined) parts.push(`eta=${formatDuration(eta)}`);
    return parts.join(" ");
  }

  /** `[######--------------] 3/10 reward 0.41 kl 0.0012 1234 tok/s ETA 0:06`, cut to the terminal width. */
  barLine(record: ProgressRecord): string {
    const total = this.options.totalSteps;
    const parts: string[] = [];
    if (total !== undefined && total > 0) {
      const filled = Math.min(BAR_WIDTH, Math.round((record.step / total) * BAR_WIDTH));
      parts.push(`[${"#".repeat(filled)}${"-".repeat(BAR_WIDTH - filled)}] ${String(record.step)}/${String(total)}`);
    } else parts.push(`step ${String(record.step)}`);
    if (record.reward_mean !== undefined) parts.push(`reward ${formatMetric(record.reward_mean)}`);
    else if (record.episode_return_mean !== undefined) parts.push(`return ${formatMetric(record.episode_return_mean)}`);
    else if (record.loss !== undefined) parts.push(`loss ${formatMetric(record.loss)}`);
    const kl = klOf(record);
    if (kl !== undefined) parts.push(`kl ${formatMetric(kl)}`);
    if (record.tokens_per_s !== undefined) parts.push(`${formatMetric(record.tokens_per_s)} tok/s`);
    if (typeof record.fps === "number") parts.push(`${formatMetric(record.fps)} frames/s`);
    const eta = this.eta(record.step);
    if (eta !== undefined) parts.push(`ETA ${formatDuration(eta)}`);
    const line = parts.join("  ");
    const columns = this.stream.columns;
    return columns !== undefined && columns > 1 && line.length >= columns ? line.slice(0, columns - 1) : line;
  }
}
