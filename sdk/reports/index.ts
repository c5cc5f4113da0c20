/** Run reports: a self-contained HTML page with the curves of a run directory. */
export { ReportError, parseJSONLines, readOptional, renderReportHTML, writeReport } from "./report.js";
export type { MetricRecord, ReportInput, SampleRecord } from "./report.js";
export { eventsTable, isRunEvent, type RunEvent, type RunEventKind } from "./events.js";
export { escapeXml, lineChart, niceTicks } from "./svg-chart.js";
export type { ChartSeries, LineChartOptions } from "./svg-chart.js";
