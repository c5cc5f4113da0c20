import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
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
  });

  it("fails with a typed error when the directory has no metrics", async () => {
    const empty = await mkdtemp(join(tmpdir(), "posttrain-report-empty-"));
    await expect(writeReport(empty)).rejects.toSatisfy((e: unknown) => e instanceof ReportError && e.code === "REPORT_FAILED");
    await rm(empty, { recursive: true, force: true });
  });
});
