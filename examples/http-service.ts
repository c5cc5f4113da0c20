// Post-training inside a Node backend: `npx tsx examples/http-service.ts` serves training jobs over plain
// `node:http` (no framework) on PORT (default 8787):
//
//   POST /jobs               body: a GRPO run config as JSON (without runDir: the service picks one)
//                            → 201 { id, status }; a bad config → 400 { error, message } naming the field
//   GET  /jobs/:id           → { id, status, steps, last, runDir, reportPath, error }
//   GET  /jobs/:id/metrics   → NDJSON, one StepRecord per line: the steps so far, then each new one as it
//                              lands, until the job ends (a client that disconnects just stops following)
//   POST /jobs/:id/stop      → finishes the current step, saves a checkpoint and the report, answers the status
//
// Try it: curl -X POST localhost:8787/jobs -d '{"model":{"path":"tiny"},"task":{"type":"digit-sort"},"steps":50}'
// then curl -N localhost:8787/jobs/1/metrics, and curl -X POST localhost:8787/jobs/1/stop.
// `--quick` (or POSTTRAIN_QUICK=1): the script starts the service on a free port, acts as its own client (a bad
// config, then start a job, read a few metric lines, stop it, read its status) and exits — what CI runs.
import { existsSync } from "node:fs";
import { mkdir, mkdtemp, rm } from "node:fs/promises";
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { GRPOTrainer, GRPOTrainerConfigSchema, InvalidArgumentError, PosttrainError, type GRPOTrainerConfig, type StepRecord } from "../sdk/index.js";

const quick = process.argv.slice(2).includes("--quick") || process.env.POSTTRAIN_QUICK === "1";
const say = (line: string): void => {
  process.stdout.write(`${line}\n`);
};

/** Where a job is in its life. */
type JobStatus = "starting" | "running" | "stopping" | "finished" | "stopped" | "failed";

/** One training job: its trainer, the records so far, and the clients following them. */
interface Job {
  readonly id: string;
  readonly runDir: string;
  status: JobStatus;
  trainer: GRPOTrainer | undefined;
  readonly records: StepRecord[];
  error: string | undefined;
  /** Called on every new record and when the job ends. */
  readonly listeners: Set<() => void>;
  /** Settles when the job has ended and its trainer is closed. */
  ended: Promise<void>;
}

const isTerminal = (status: JobStatus): boolean => status === "finished" || status === "stopped" || status === "failed";

/** An error answered with an HTTP status (the body is `{ error, message }`). */
class HttpError extends PosttrainError {
  constructor(
    readonly status: number,
    code: string,
    message: string,
  ) {
    super(code, message);
  }
}

/** The service: jobs by id, each a GRPOTrainer training in the background of this process. */
class TrainingService {
  readonly #jobs = new Map<string, Job>();
  #nextId = 1;

  constructor(
    private readonly jobsDir: string,
    private readonly maxRunning: number,
  ) {}

  /** Validates `body` as a run config and starts a job (at most `maxRunning` at once: a CPU has few cores). */
  start(body: unknown): Job {
    if (typeof body !== "object" || body === null || Array.isArray(body)) {
      throw new HttpError(400, "INVALID_ARGUMENT", "job config: expected a JSON object (a GRPO run config)");
    }
    if ("runDir" in body) throw new HttpError(400, "INVALID_ARGUMENT", "job config.runDir: chosen by the service; leave it out");
    const running = [...this.#jobs.values()].filter((j) => !isTerminal(j.status)).length;
    if (running >= this.maxRunning) throw new HttpError(409, "TOO_MANY_JOBS", `${running} job(s) already running (the most is ${this.maxRunning})`);
    const id = String(this.#nextId);
    const runDir = join(this.jobsDir, `job-${id}`);
    const config = { ...body, runDir };
    // Validate now, so a bad config is a 400 naming the field rather than a failed job.
    const parsed = GRPOTrainerConfigSchema.safeParse(config);
    if (!parsed.success) {
      const problems = parsed.error.issues.map((issue) => `job config${issue.path.map((p) => `.${String(p)}`).join("")}: ${issue.message}`);
      throw new HttpError(400, "INVALID_ARGUMENT", problems.join("; "));
    }
    this.#nextId++;
    const job: Job = { id, runDir, status: "starting", trainer: undefined, records: [], error: undefined, listeners: new Set(), ended: Promise.resolve() };
    this.#jobs.set(id, job);
    job.ended = this.#train(job, parsed.data);
    return job;
  }

  async #train(job: Job, config: GRPOTrainerConfig): Promise<void> {
    const notify = (): void => {
      for (const listener of job.listeners) listener();
    };
    try {
      job.trainer = await GRPOTrainer.create(config);
      if (job.status === "starting") job.status = "running";
      for await (const record of job.trainer.run()) {
        job.records.push(record);
        notify();
      }
      job.status = job.status === "stopping" ? "stopped" : "finished";
    } catch (err) {
      job.status = "failed";
      job.error = err instanceof Error ? `${err.name}: ${err.message}` : String(err);
    } finally {
      await job.trainer?.close();
      notify();
    }
  }

  /** The job `id`, or a 404. */
  get(id: string): Job {
    const job = this.#jobs.get(id);
    if (job === undefined) throw new HttpError(404, "NOT_FOUND", `no job ${JSON.stringify(id)}`);
    return job;
  }

  /** The job's records so far, then each new one, until the job ends or `signal` aborts. */
  async *follow(job: Job, signal: AbortSignal): AsyncGenerator<StepRecord> {
    let sent = 0;
    while (!signal.aborted) {
      while (sent < job.records.length) yield job.records[sent++]!;
      if (isTerminal(job.status)) return;
      await new Promise<void>((wake) => {
        const listener = (): void => {
          job.listeners.delete(listener);
          signal.removeEventListener("abort", listener);
          wake();
        };
        job.listeners.add(listener);
        signal.addEventListener("abort", listener, { once: true });
      });
    }
  }

  /** Stops the job: the current step finishes, a checkpoint and the report are written. */
  async stop(job: Job): Promise<void> {
    if (isTerminal(job.status)) return;
    job.status = "stopping";
    // A job still starting has no trainer yet: it stops as soon as run() yields control (see #train).
    while (job.trainer === undefined && !isTerminal(job.status)) await new Promise((r) => setTimeout(r, 50));
    await job.trainer?.stop();
    await job.ended;
  }

  /** What GET /jobs/:id answers. */
  describe(job: Job): Record<string, unknown> {
    const reportPath = join(job.runDir, "report.html");
    return {
      id: job.id,
      status: job.status,
      steps: job.records.length,
      last: job.records.at(-1) ?? null,
      runDir: job.runDir,
      reportPath: existsSync(reportPath) ? reportPath : null,
      error: job.error ?? null,
    };
  }

  /** Stops every job still running. */
  async close(): Promise<void> {
    await Promise.all([...this.#jobs.values()].map((job) => this.stop(job)));
  }
}

async function readJson(req: IncomingMessage, limitBytes = 1 << 20): Promise<unknown> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > limitBytes) throw new HttpError(413, "PAYLOAD_TOO_LARGE", `request body over ${limitBytes} bytes`);
    chunks.push(chunk);
  }
  try {
    return JSON.parse(Buffer.concat(chunks).toString("utf8")) as unknown;
  } catch (err) {
    throw new HttpError(400, "BAD_JSON", `request body is not JSON: ${err instanceof Error ? err.message : String(err)}`);
  }
}

function sendJson(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(body));
}

/** Routes one request. */
async function handle(service: TrainingService, req: IncomingMessage, res: ServerResponse): Promise<void> {
  const path = new URL(req.url ?? "/", "http://localhost").pathname;
  const method = req.method ?? "GET";
  if (path === "/jobs" && method === "POST") {
    const job = service.start(await readJson(req));
    sendJson(res, 201, { id: job.id, status: job.status });
    return;
  }
  const match = /^\/jobs\/([^/]+)(\/metrics|\/stop)?$/.exec(path);
  if (match === null) throw new HttpError(404, "NOT_FOUND", `no route ${method} ${path}`);
  const job = service.get(match[1]!);
  const action = match[2] ?? "";
  if (action === "" && method === "GET") {
    sendJson(res, 200, service.describe(job));
  } else if (action === "/metrics" && method === "GET") {
    const closed = new AbortController();
    res.on("close", () => {
      closed.abort();
    });
    res.writeHead(200, { "content-type": "application/x-ndjson", "cache-control": "no-store" });
    for await (const record of service.follow(job, closed.signal)) res.write(`${JSON.stringify(record)}\n`);
    res.end();
  } else if (action === "/stop" && method === "POST") {
    await service.stop(job);
    sendJson(res, 200, service.describe(job));
  } else {
    throw new HttpError(405, "METHOD_NOT_ALLOWED", `${method} ${path} is not allowed`);
  }
}

/** Starts the service on `port` (0 = a free one). */
function serve(service: TrainingService, port: number): Promise<Server> {
  const server = createServer((req, res) => {
    handle(service, req, res).catch((err: unknown) => {
      const status = err instanceof HttpError ? err.status : err instanceof InvalidArgumentError ? 400 : 500;
      const code = err instanceof PosttrainError ? err.code : "INTERNAL";
      if (res.headersSent) res.end();
      else sendJson(res, status, { error: code, message: err instanceof Error ? err.message : String(err) });
    });
  });
  return new Promise((resolve) => {
    server.listen(port, "127.0.0.1", () => {
      resolve(server);
    });
  });
}

/** The run config the quick client posts: the tiny model on the built-in digit-sort task, a long run to stop. */
const QUICK_CONFIG = {
  model: { path: "tiny", device: "cpu" },
  task: { type: "digit-sort" },
  groupSize: 4,
  promptsPerStep: 2,
  maxNewTokens: 6,
  optimizer: { lr: 3e-4 },
  steps: 1000,
};

/** The quick mode's client: a bad config, then a job started, followed for a few steps, stopped, described. */
async function selfClient(base: string): Promise<void> {
  const post = (path: string, body?: unknown): Promise<Response> =>
    fetch(`${base}${path}`, { method: "POST", ...(body === undefined ? {} : { body: JSON.stringify(body), headers: { "content-type": "application/json" } }) });

  const bad = await post("/jobs", { ...QUICK_CONFIG, groupSize: 0 });
  say(`POST /jobs (groupSize 0) → ${bad.status} ${JSON.stringify(await bad.json())}`);

  const created = await post("/jobs", QUICK_CONFIG);
  const { id } = (await created.json()) as { id: string };
  say(`POST /jobs → ${created.status}, job ${id}`);

  const stream = await fetch(`${base}/jobs/${id}/metrics`);
  say(`GET /jobs/${id}/metrics → ${stream.status} ${stream.headers.get("content-type") ?? ""}`);
  const reader = stream.body!.pipeThrough(new TextDecoderStream()).getReader();
  let buffered = "";
  let lines = 0;
  while (lines < 3) {
    const { value, done } = await reader.read();
    if (done) break;
    buffered += value;
    let newline: number;
    while ((newline = buffered.indexOf("\n")) >= 0 && lines < 3) {
      const record = JSON.parse(buffered.slice(0, newline)) as StepRecord;
      buffered = buffered.slice(newline + 1);
      lines++;
      say(`  step ${record.step}: reward_mean ${record.reward_mean?.toFixed(3) ?? "null"}, tokens/s ${record.tokens_per_s?.toFixed(0) ?? "null"}`);
    }
  }
  await reader.cancel();

  const stopped = await post(`/jobs/${id}/stop`);
  const after = (await stopped.json()) as { status: string; steps: number; reportPath: string | null };
  say(`POST /jobs/${id}/stop → ${stopped.status}, status ${after.status} after ${after.steps} steps, report ${after.reportPath ?? "missing"}`);
  const status = (await (await fetch(`${base}/jobs/${id}`)).json()) as { status: string };
  say(`GET /jobs/${id} → ${status.status}`);
}

// Quick mode: a temporary directory; otherwise runs/http-service/jobs-<random>/ (one per service start; runs/ is git-ignored).
const jobsRoot = quick ? tmpdir() : join(process.cwd(), "runs", "http-service");
await mkdir(jobsRoot, { recursive: true });
const jobsDir = await mkdtemp(join(jobsRoot, quick ? "posttrain-jobs-" : "jobs-"));
const service = new TrainingService(jobsDir, 1);
const server = await serve(service, quick ? 0 : Number(process.env.PORT ?? 8787));
const address = server.address();
const base = `http://127.0.0.1:${typeof address === "object" && address !== null ? address.port : 0}`;
say(`training service on ${base} (jobs in ${jobsDir})`);

const shutdown = async (): Promise<void> => {
  await service.close();
  const closed = new Promise((r) => server.close(r));
  server.closeAllConnections();
  await closed;
};
if (quick) {
  try {
    await selfClient(base);
  } finally {
    await shutdown();
    await rm(jobsDir, { recursive: true, force: true });
  }
  say("service stopped");
} else {
  // Ctrl-C: stop the jobs cleanly (a second Ctrl-C exits at once, the default).
  process.once("SIGINT", () => {
    say("stopping jobs (each saves a checkpoint and its report)...");
    void shutdown().then(() => {
      say("service stopped");
      process.exit(0);
    });
  });
}
