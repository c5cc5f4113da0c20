import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ReportError, lineChart, niceTicks, parseJSONLines, renderReportHTML, writeReport } from "../../sdk/reports/index.js";

describe("niceTicks", () => {
  it("covers the range with 1/2/5 steps", () => {
    expect(niceTicks(0, 1)).toEqual([0, 0.2, 0.4, 0.6, 0.8, 1]);
    expect(niceTicks(3, 47)).toEqual([10, 20, 30, 40]);
    expect(niceTicks(5, 5).length).toBeGreaterThan(1);
    expect(niceTicks(Number.NaN, 1)).toEqual([]);
  });
});

describe("lineChart", () => {
  it("draws one polyline per unbroken run and a legend entry per series", () => {
    const svg = lineChart(
      [
        { label: "a", points: [[0, 1], [1, 2], [2, Number.NaN], [3, 4], [4, 5]] },
        { label: "b<x>", points: [[0, 0]] },
      ],
      { title: "T & U" },
    );
    expect(svg.match(/<polyline/g)?.length).toBe(2);
    expect(svg).toContain("<circle");
    expect(svg).toContain("b&#60;x&#62;");
    expect(svg).toContain("T &#38; U");
  });

  it("widens the y axis to yRange but not past the data", () => {
    // the y axis's tick labels (right-aligned left of the plot)
    const ticks = (svg: string): string[] => [...svg.matchAll(/text-anchor="end" class="tick">([^<]*)</g)].map((m) => m[1] ?? "");
    const fixed = lineChart([{ label: "busy", points: [[0, 0.4], [1, 0.5]] }], { title: "f", yRange: [0, 1] });
    expect(ticks(fixed)).toEqual(expect.arrayContaining(["0", "1"]));
    const free = lineChart([{ label: "busy", points: [[0, 0.4], [1, 0.5]] }], { title: "f" });
    expect(ticks(free)).not.toContain("1");
    expect(ticks(lineChart([{ label: "x", points: [[0, 0.5], [1, 3]] }], { title: "f", yRange: [0, 1] }))).toContain("3");
  });

  it("says so when there is nothing to draw", () => {
    expect(lineChart([{ label: "a", points: [] }], { title: "empty" })).toContain("no data");
  });
});

describe("renderReportHTML", () => {
  it("renders a chart per metric family present, a summary and escaped samples", () => {
    const metrics = Array.from({ length: 10 }, (_, i) => ({
      step: i + 1,
      reward_mean: i / 10,
      reward_std: 0.1,
      "reward/format": i / 20,
      "reward/answer": i / 30,
      loss_objective: 1 - i / 10,
      kl_approx: i / 100,
      eval_reward_mean: i % 5 === 4 ? i / 9 : null,
    }));
    const html = renderReportHTML({
      title: "run",
      metrics,
      samples: [{ step: 1, prompt: "<script>alert(1)</script>", completion: "4", reward: 1 }],
      configText: "model: tiny",
    });
    expect(html).toContain("Reward (mean ± std)");
    expect(html).toContain("Per-reward means");
    expect(html).toContain("reward/answer");
    expect(html).toContain("<polygon"); // the std band
    expect(html).not.toContain("Clip fraction"); // absent metrics draw no chart
    expect(html).not.toContain("<script>");
    expect(html).toContain("&#60;script&#62;");
    expect(html).not.toMatch(/(src|href)="https?:/); // self-contained
    expect(html).toMatch(/<td>eval_reward_mean<\/td><td>0\.4444<\/td><td>1\.000<\/td>/);
  });
});

describe("renderReportHTML: the pipeline charts", () => {
  /** A run's records with the pipeline metrics of GRPOTrainer's collector → replay buffer → trainer. */
  const pipelineRun = Array.from({ length: 8 }, (_, i) => ({
    step: i + 1,
    reward_mean: i / 8,
    step_time_s: 0.2,
    generate_time_s: 0.1,
    train_time_s: 0.09,
    policy_age_min: i === 0 ? 0 : 1,
    policy_age_mean: i === 0 ? 0 : 1.25,
    policy_age_max: i === 0 ? 0 : 2,
    stale_samples_dropped: i === 3 ? 16 : 0,
    generator_busy_frac: 0.9,
    trainer_busy_frac: 0.45,
    queue_depth: i % 3,
  }));

  /** The `aria-label` of every chart, in order. */
  const charts = (html: string): string[] => [...html.matchAll(/<svg [^>]*aria-label="([^"]*)"/g)].map((m) => m[1] ?? "");

  /** The legend labels of the chart titled `title`. */
  const legend = (html: string, title: string): string[] => {
    const svg = [...html.matchAll(/<svg [^>]*aria-label="([^"]*)"[^>]*>(.*?)<\/svg>/gs)].find((m) => m[1] === title)?.[2] ?? "";
    return [...svg.matchAll(/class="legend">([^<]*)</g)].map((m) => m[1] ?? "");
  };

  it("draws policy age, stale drops, busy fractions and queue depth under a Pipeline heading", () => {
    const html = renderReportHTML({ title: "async run", metrics: pipelineRun });
    expect(html).toContain("<h2>Pipeline</h2>");
    expect(charts(html)).toEqual(
      expect.arrayContaining(["Policy age (versions)", "Stale samples dropped", "Busy fraction (generator vs trainer)", "Queue depth (groups in the buffer)"]),
    );
    expect(legend(html, "Policy age (versions)")).toEqual(["policy_age_min", "policy_age_mean", "policy_age_max"]);
    expect(legend(html, "Stale samples dropped")).toEqual(["stale_samples_dropped"]);
    expect(legend(html, "Busy fraction (generator vs trainer)")).toEqual(["generator_busy_frac", "trainer_busy_frac"]);
    expect(legend(html, "Queue depth (groups in the buffer)")).toEqual(["queue_depth"]);
    expect(legend(html, "Step time (s)")).toEqual(["step_time_s", "generate_time_s", "train_time_s"]);
    // counts and fractions from 0: no negative ticks when every value is 0
    const noDrops = renderReportHTML({ title: "no drops", metrics: pipelineRun.map((r) => ({ ...r, stale_samples_dropped: 0 })) });
    const staleSvg = [...noDrops.matchAll(/<svg [^>]*aria-label="Stale samples dropped"[^>]*>(.*?)<\/svg>/gs)][0]?.[1] ?? "";
    expect([...staleSvg.matchAll(/text-anchor="end" class="tick">([^<]*)</g)].map((m) => m[1])).toEqual(["0", "0.2", "0.4", "0.6", "0.8", "1"]);
    // the pipeline charts come after the learning curves
    expect(html.indexOf("<h2>Pipeline</h2>")).toBeGreaterThan(html.indexOf("Reward (mean ± std)"));
    expect(html.indexOf("Policy age (versions)")).toBeGreaterThan(html.indexOf("<h2>Pipeline</h2>"));
  });

  it("leaves them out for a run without the pipeline metrics (older runs render as before)", () => {
    const old = pipelineRun.map((r) => ({ step: r.step, reward_mean: r.reward_mean, step_time_s: r.step_time_s }));
    const html = renderReportHTML({ title: "old run", metrics: old });
    expect(html).not.toContain("Pipeline");
    expect(charts(html)).toEqual(["Reward (mean ± std)", "Step time (s)"]);
    expect(legend(html, "Step time (s)")).toEqual(["step_time_s"]);
  });

  it("draws only the pipeline metrics a run has", () => {
    const html = renderReportHTML({ title: "part", metrics: pipelineRun.map((r) => ({ step: r.step, queue_depth: r.queue_depth })) });
    expect(charts(html)).toEqual(["Queue depth (groups in the buffer)"]);
    expect(html).toContain("<h2>Curves</h2><div class=\"charts\"><p class=\"meta\">No metrics yet.</p>");
  });
});

describe("parseJSONLines", () => {
  it("skips a torn last line but rejects a corrupt line in the middle", () => {
    expect(parseJSONLines('{"step":1}\n{"step":2}\n{"st', "m.jsonl")).toEqual([{ step: 1 }, { step: 2 }]);
    expect(() => parseJSONLines('{"step":1}\n{bad\n{"step":3}\n', "m.jsonl")).toThrow(/m\.jsonl: line 2/);
  });
});

describe("writeReport", () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "posttrain-report-"));
  });
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it("writes report.html from a run directory", async () => {
    await writeFile(join(dir, "metrics.jsonl"), [1, 2, 3].map((s) => JSON.stringify({ step: s, reward_mean: s / 3 })).join("\n") + "\n");
    await writeFile(join(dir, "config.yaml"), "model: tiny\n");
    const path = await writeReport(dir, { title: "demo" });
    const html = await readFile(path, "utf8");
    expect(html).toContain("<title>demo</title>");
    expect(html).toContain("model: tiny");
    expect(html).toContain("<polyline");
    expect(html).not.toContain("Pipeline");
  });

  it("draws the pipeline charts of a run directory whose metrics have them", async () => {
    const sub = join(dir, "async");
    await mkdir(sub);
    const line = (s: number): string =>
      JSON.stringify({ step: s, reward_mean: s / 3, policy_age_min: 1, policy_age_mean: 1, policy_age_max: 1, stale_samples_dropped: 0, generator_busy_frac: 0.8, trainer_busy_frac: 0.5, queue_depth: 0 });
    await writeFile(join(sub, "metrics.jsonl"), [1, 2, 3].map(line).join("\n") + "\n");
    const html = await readFile(await writeReport(sub), "utf8");
    expect(html).toContain("<h2>Pipeline</h2>");
    for (const title of ["Policy age (versions)", "Stale samples dropped", "Busy fraction (generator vs trainer)", "Queue depth (groups in the buffer)"]) {
      expect(html).toContain(`aria-label="${title}"`);
    }
  });

  it("shows the restarts and worker failures of events.jsonl as a table, escaped, and none for a run without events", async () => {
    const sub = join(dir, "restarts");
    await mkdir(sub);
    await writeFile(join(sub, "metrics.jsonl"), [1, 2, 3].map((s) => JSON.stringify({ step: s, loss: 1 / s })).join("\n") + "\n");
    const event = (over: Record<string, unknown>): string =>
      JSON.stringify({
        time: "2026-01-02T03:04:05.000Z",
        kind: "restart",
        step: 3,
        worker: "worker 0",
        role: "trainer",
        cause: "WORKER_DIED",
        exitCode: null,
        signal: "SIGKILL",
        stderrTail: "Killed",
        message: "worker 0 was killed by SIGKILL",
        attempt: 1,
        backoffMs: 1000,
        resumeStep: 2,
        ...over,
      });
    const lines = [
      event({}),
      event({ kind: "generator_failure", step: 5, worker: "worker <2>", role: "generator", signal: null, exitCode: 137, attempt: null, backoffMs: null, resumeStep: null }),
      JSON.stringify({ note: "not an event" }),
    ];
    await writeFile(join(sub, "events.jsonl"), lines.join("\n") + "\n");
    const html = await readFile(await writeReport(sub), "utf8");
    expect(html).toContain("<h2>Restarts and worker failures</h2>");
    expect(html).toContain("1 restart(s)");
    expect(html).toContain(
      "<tr><td>2026-01-02T03:04:05.000Z</td><td>3</td><td>worker 0 (trainer)</td><td>WORKER_DIED (SIGKILL)</td><td>1</td><td>restart from step 2</td></tr>",
    );
    expect(html).toContain("<td>worker &#60;2&#62; (generator)</td><td>WORKER_DIED (exit 137)</td><td>-</td><td>generator_failure</td>");
    expect(html.match(/<tr><td>2026/g)).toHaveLength(2);

    const none = await readFile(await writeReport(dir), "utf8");
    expect(none).not.toContain("Restarts and worker failures");
  });

  it("fails with a typed error when the directory has no metrics", async () => {
    const empty = await mkdtemp(join(tmpdir(), "posttrain-report-empty-"));
    await expect(writeReport(empty)).rejects.toSatisfy((e: unknown) => e instanceof ReportError && e.code === "REPORT_FAILED");
    await rm(empty, { recursive: true, force: true });
  });
});
