// report.html in a real browser: a short real GRPO run (tiny model, digit-sort, one local CPU worker) writes its run
// directory, and headless Chromium (playwright-core, /usr/bin/chromium) opens the report from file:// with every
// other request blocked and recorded (the test fails if the page asks for anything), takes a screenshot, and checks
// that each SVG chart is laid out with a non-zero box and draws its polylines inside it. Skipped, with the reason,
// when no Chromium is installed (`apt-get install chromium`; CI installs it in .ci/run).
import { existsSync } from "node:fs";
import { mkdtemp, readFile, rm, stat } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { chromium, type Browser, type Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { GRPOTrainer } from "../../sdk/index.js";

const CHROMIUM = process.env.POSTTRAIN_CHROMIUM ?? "/usr/bin/chromium";
const found = existsSync(CHROMIUM);
if (!found) {
  console.warn(`report.browser.test.ts skipped: no Chromium at ${CHROMIUM} (install the Debian package "chromium" or set POSTTRAIN_CHROMIUM)`);
}

const VIEWPORT = { width: 1280, height: 900 };

/** Opens a page that lets only file:// requests through; every other URL it asks for lands in `blocked`. */
async function guardedPage(browser: Browser, blocked: string[]): Promise<Page> {
  const context = await browser.newContext({ viewport: VIEWPORT });
  await context.route("**/*", async (route) => {
    const url = route.request().url();
    if (url.startsWith("file://")) {
      await route.continue();
      return;
    }
    blocked.push(url);
    await route.abort("blockedbyclient");
  });
  return context.newPage();
}

interface Box {
  readonly x: number;
  readonly y: number;
  readonly width: number;
  readonly height: number;
}

/** The laid-out box of every chart (its `aria-label`) and of each of its polylines (with their `points`). */
async function layout(page: Page): Promise<(Box & { label: string; lines: (Box & { points: string })[] })[]> {
  const zero = { x: 0, y: 0, width: 0, height: 0 };
  const svgs = page.locator("svg");
  const out = [];
  for (let i = 0; i < (await svgs.count()); i++) {
    const svg = svgs.nth(i);
    const polylines = svg.locator("polyline");
    const lines = [];
    for (let j = 0; j < (await polylines.count()); j++) {
      const line = polylines.nth(j);
      lines.push({ ...((await line.boundingBox()) ?? zero), points: (await line.getAttribute("points")) ?? "" });
    }
    out.push({ ...((await svg.boundingBox()) ?? zero), label: (await svg.getAttribute("aria-label")) ?? "", lines });
  }
  return out;
}

/** Width and height of a PNG, from its IHDR chunk (after checking the signature). */
function pngSize(png: Buffer): { width: number; height: number } {
  expect([...png.subarray(0, 8)]).toEqual([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
  expect(png.subarray(12, 16).toString("latin1")).toBe("IHDR");
  return { width: png.readUInt32BE(16), height: png.readUInt32BE(20) };
}

describe.skipIf(!found)("report.html in headless Chromium", () => {
  let dir: string;
  let runDir: string;
  let browser: Browser;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "posttrain-report-browser-"));
    runDir = join(dir, "run");
    const [, launched] = await Promise.all([
      (async () => {
        await using trainer = await GRPOTrainer.create({
          model: { path: "tiny", tiny: { hiddenSize: 64, numLayers: 2, numHeads: 4, numKvHeads: 2, intermediateSize: 128 }, device: "cpu" },
          task: { type: "digit-sort" },
          groupSize: 4,
          promptsPerStep: 4,
          maxNewTokens: 6,
          optimizer: { lr: 3e-4 },
          steps: 4,
          eval: { every: 2, prompts: 8 },
          runDir,
        });
        await trainer.train();
      })(),
      chromium.launch({ executablePath: CHROMIUM, headless: true, args: ["--no-sandbox"] }),
    ]);
    browser = launched;
  }, 240_000);

  afterAll(async () => {
    await browser?.close();
    if (dir !== undefined) await rm(dir, { recursive: true, force: true });
  });

  it("renders the run's report offline: screenshot, laid-out charts, polylines inside them", { timeout: 60_000 }, async () => {
    const reportPath = join(runDir, "report.html");
    const html = await readFile(reportPath, "utf8");
    const charts = html.match(/<svg /g)?.length ?? 0;
    expect(charts).toBeGreaterThanOrEqual(6); // reward, per-reward, loss terms, KL, entropy, ... of a real run

    const blocked: string[] = [];
    const page = await guardedPage(browser, blocked);
    const response = await page.goto(pathToFileURL(reportPath).href, { waitUntil: "load" });
    expect(response?.ok() ?? true).toBe(true);
    expect(await page.title()).toBe(`posttrain run: ${runDir}`);

    const shot = join(dir, "report.png");
    await page.screenshot({ path: shot, fullPage: true });
    const png = await readFile(shot);
    const size = pngSize(png);
    expect(size.width).toBe(VIEWPORT.width);
    expect(size.height).toBeGreaterThanOrEqual(VIEWPORT.height);
    expect((await stat(shot)).size).toBeGreaterThan(20_000); // charts and text, not a blank page

    const boxes = await layout(page);
    expect(boxes.length).toBe(charts);
    let polylines = 0;
    for (const box of boxes) {
      expect(box.width, box.label).toBeGreaterThan(100);
      expect(box.height, box.label).toBeGreaterThan(100);
      for (const line of box.lines) {
        polylines++;
        const coords = line.points.trim().split(/[\s,]+/).map(Number);
        expect(coords.length, `${box.label}: ${line.points}`).toBeGreaterThanOrEqual(4);
        expect(coords.every(Number.isFinite), `${box.label}: ${line.points}`).toBe(true);
        expect(line.width + line.height, box.label).toBeGreaterThan(0);
        expect(line.x, box.label).toBeGreaterThanOrEqual(box.x - 1);
        expect(line.y, box.label).toBeGreaterThanOrEqual(box.y - 1);
        expect(line.x + line.width, box.label).toBeLessThanOrEqual(box.x + box.width + 1);
        expect(line.y + line.height, box.label).toBeLessThanOrEqual(box.y + box.height + 1);
      }
    }
    expect(polylines).toBeGreaterThanOrEqual(charts);
    const rewardChart = boxes.find((b) => b.label.startsWith("Reward"));
    expect(rewardChart?.lines.length ?? 0).toBeGreaterThanOrEqual(1);
    expect(await page.locator("table tr").count()).toBeGreaterThan(2); // summary and sample completions
    expect(blocked).toEqual([]);
    await page.context().close();
  });

  it("the request guard catches a page that reaches for the network (so the check above can fail)", { timeout: 30_000 }, async () => {
    const blocked: string[] = [];
    const page = await guardedPage(browser, blocked);
    await page.setContent('<img src="https://example.com/pixel.png"><link rel="stylesheet" href="http://example.com/a.css">');
    await page.waitForLoadState("load");
    expect(blocked.sort()).toEqual(["http://example.com/a.css", "https://example.com/pixel.png"]);
    await page.context().close();
  });
});
