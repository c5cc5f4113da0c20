/**
 * Line charts as inline SVG strings: the run report embeds them so it renders with no script and no network.
 */

/** One line of a chart: `points` are `[x, y]`; non-finite `y` values break the line. */
export interface ChartSeries {
  readonly label: string;
  readonly points: readonly (readonly [number, number])[];
  /** Optional band drawn around the line, e.g. mean ± std: `[x, low, high]`. */
  readonly band?: readonly (readonly [number, number, number])[];
}

/** Options of {@link lineChart}. */
export interface LineChartOptions {
  readonly title: string;
  readonly xLabel?: string;
  readonly width?: number;
  readonly height?: number;
  /** The y axis covers at least `[low, high]` (e.g. `[0, 1]` for fractions); data outside it widens it. */
  readonly yRange?: readonly [number, number];
}

const PALETTE = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#4b5563", "#ca8a04"];
const MARGIN = { left: 56, right: 12, top: 28, bottom: 34 };

/** Escapes text for HTML/SVG content and attribute values. */
export function escapeXml(text: string): string {
  return text.replace(/[&<>"']/g, (c) => `&#${String(c.charCodeAt(0))};`);
}

/** "Nice" tick values covering `[lo, hi]` (1, 2 or 5 times a power of ten apart). */
export function niceTicks(lo: number, hi: number, count = 5): number[] {
  if (!Number.isFinite(lo) || !Number.isFinite(hi)) return [];
  if (lo === hi) {
    const pad = lo === 0 ? 1 : Math.abs(lo) * 0.1;
    lo -= pad;
    hi += pad;
  }
  const raw = (hi - lo) / Math.max(1, count);
  const power = 10 ** Math.floor(Math.log10(raw));
  const step = ([1, 2, 5, 10].map((m) => m * power).find((s) => s >= raw) ?? 10 * power);
  const ticks: number[] = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) ticks.push(Number(v.toPrecision(12)));
  return ticks;
}

function formatTick(v: number): string {
  const a = Math.abs(v);
  if (a !== 0 && (a >= 1e5 || a < 1e-3)) return v.toExponential(1);
  return String(Number(v.toPrecision(4)));
}

/** Renders `series` as one SVG line chart with axes, ticks, a legend and a title. */
export function lineChart(series: readonly ChartSeries[], options: LineChartOptions): string {
  const width = options.width ?? 460;
  const height = options.height ?? 240;
  const plotW = width - MARGIN.left - MARGIN.right;
  const plotH = height - MARGIN.top - MARGIN.bottom;
  const xs: number[] = [];
  const ys: number[] = [];
  for (const s of series) {
    for (const [x, y] of s.points) {
      if (Number.isFinite(x) && Number.isFinite(y)) {
        xs.push(x);
        ys.push(y);
      }
    }
    for (const [x, lo, hi] of s.band ?? []) {
      if (Number.isFinite(lo) && Number.isFinite(hi)) {
        xs.push(x);
        ys.push(lo, hi);
      }
    }
  }
  const title = `<text x="${String(width / 2)}" y="17" text-anchor="middle" class="title">${escapeXml(options.title)}</text>`;
  if (xs.length === 0) {
    return `<svg xmlns="http://www.w3.org/2000/svg" width="${String(width)}" height="${String(height)}" role="img">${title}<text x="${String(width / 2)}" y="${String(height / 2)}" text-anchor="middle" class="empty">no data</text></svg>`;
  }
  const [low, high] = options.yRange ?? [Number.NaN, Number.NaN];
  if (Number.isFinite(low) && Number.isFinite(high)) ys.push(low, high);
  const xTicks = niceTicks(Math.min(...xs), Math.max(...xs));
  const yTicks = niceTicks(Math.min(...ys), Math.max(...ys));
  const x0 = Math.min(Math.min(...xs), xTicks[0] ?? Infinity);
  const x1 = Math.max(Math.max(...xs), xTicks.at(-1) ?? -Infinity);
  const y0 = Math.min(Math.min(...ys), yTicks[0] ?? Infinity);
  const y1 = Math.max(Math.max(...ys), yTicks.at(-1) ?? -Infinity);
  const sx = (x: number): number => MARGIN.left + (x1 === x0 ? plotW / 2 : ((x - x0) / (x1 - x0)) * plotW);
  const sy = (y: number): number => MARGIN.top + plotH - (y1 === y0 ? plotH / 2 : ((y - y0) / (y1 - y0)) * plotH);
  const f = (v: number): string => v.toFixed(1);
  const parts: string[] = [title];
  parts.push(`<rect x="${String(MARGIN.left)}" y="${String(MARGIN.top)}" width="${String(plotW)}" height="${String(plotH)}" class="frame"/>`);
  for (const t of yTicks) {
    parts.push(`<line x1="${String(MARGIN.left)}" x2="${String(MARGIN.left + plotW)}" y1="${f(sy(t))}" y2="${f(sy(t))}" class="grid"/>`);
    parts.push(`<text x="${String(MARGIN.left - 4)}" y="${f(sy(t) + 3)}" text-anchor="end" class="tick">${escapeXml(formatTick(t))}</text>`);
  }
  for (const t of xTicks) {
    parts.push(`<text x="${f(sx(t))}" y="${String(MARGIN.top + plotH + 13)}" text-anchor="middle" class="tick">${escapeXml(formatTick(t))}</text>`);
  }
  if (options.xLabel !== undefined) {
    parts.push(`<text x="${String(MARGIN.left + plotW / 2)}" y="${String(height - 4)}" text-anchor="middle" class="axis">${escapeXml(options.xLabel)}</text>`);
  }
  const legend: string[] = [];
  series.forEach((s, i) => {
    const color = PALETTE[i % PALETTE.length] ?? "#000";
    const band = (s.band ?? []).filter(([x, lo, hi]) => [x, lo, hi].every(Number.isFinite));
    if (band.length > 1) {
      const upper = band.map(([x, , hi]) => `${f(sx(x))},${f(sy(hi))}`);
      const lower = band.map(([x, lo]) => `${f(sx(x))},${f(sy(lo))}`).reverse();
      parts.push(`<polygon points="${[...upper, ...lower].join(" ")}" fill="${color}" fill-opacity="0.15" stroke="none"/>`);
    }
    let segment: string[] = [];
    const flush = (): void => {
      if (segment.length > 1) parts.push(`<polyline points="${segment.join(" ")}" fill="none" stroke="${color}" stroke-width="1.6"/>`);
      else if (segment.length === 1) {
        const [cx, cy] = (segment[0] ?? "0,0").split(",");
        parts.push(`<circle cx="${cx ?? "0"}" cy="${cy ?? "0"}" r="2.5" fill="${color}"/>`);
      }
      segment = [];
    };
    for (const [x, y] of s.points) {
      if (Number.isFinite(x) && Number.isFinite(y)) segment.push(`${f(sx(x))},${f(sy(y))}`);
      else flush();
    }
    flush();
    legend.push(`<rect x="${String(MARGIN.left + 6)}" y="${String(MARGIN.top + 6 + i * 14)}" width="10" height="3" fill="${color}"/>`);
    legend.push(`<text x="${String(MARGIN.left + 20)}" y="${String(MARGIN.top + 10 + i * 14)}" class="legend">${escapeXml(s.label)}</text>`);
  });
  // The legend goes over every line, on a light box, so no curve hides it.
  const legendW = 24 + 6 * Math.max(...series.map((s) => s.label.length));
  parts.push(
    `<rect x="${String(MARGIN.left + 2)}" y="${String(MARGIN.top + 2)}" width="${String(legendW)}" height="${String(series.length * 14 + 4)}" fill="#fff" fill-opacity="0.85"/>`,
    ...legend,
  );
  return `<svg xmlns="http://www.w3.org/2000/svg" width="${String(width)}" height="${String(height)}" viewBox="0 0 ${String(width)} ${String(height)}" role="img" aria-label="${escapeXml(options.title)}">${parts.join("")}</svg>`;
}
