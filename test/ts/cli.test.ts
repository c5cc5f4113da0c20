// The `posttrain` command line (sdk/cli/main.ts), run from source with tsx in a child process.
import { execFile } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { describe, expect, it } from "vitest";

const ROOT = resolve(import.meta.dirname, "..", "..");
const TSX = join(ROOT, "node_modules", ".bin", "tsx");
const CLI = join(ROOT, "sdk", "cli", "main.ts");

interface Run {
  readonly code: number | null;
  readonly stdout: string;
  readonly stderr: string;
}

function posttrain(...args: string[]): Promise<Run> {
  return new Promise((done) => {
    execFile(TSX, [CLI, ...args], { cwd: ROOT, timeout: 50_000 }, (err, stdout, stderr) => {
      const code = err === null ? 0 : typeof err.code === "number" ? err.code : null;
      done({ code, stdout, stderr });
    });
  });
}

describe("posttrain CLI", () => {
  it("--help prints the usage", async () => {
    const run = await posttrain("--help");
    expect(run.code).toBe(0);
    expect(run.stdout).toMatch(/^Usage: posttrain <command> \[options\]/);
    expect(run.stdout).toContain("info [--device cpu|cuda|auto]");
    expect(run.stderr).toBe("");
  });

  it("no command prints the usage too", async () => {
    const run = await posttrain();
    expect(run.code).toBe(0);
    expect(run.stdout).toMatch(/^Usage: posttrain/);
  });

  it("--version prints the version in package.json", async () => {
    const { version } = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")) as { version: string };
    const run = await posttrain("--version");
    expect(run.code).toBe(0);
    expect(run.stdout).toBe(`${version}\n`);
  });

  it("an unknown command exits 2 with a message and the usage", async () => {
    const run = await posttrain("frobnicate");
    expect(run.code).toBe(2);
    expect(run.stderr).toContain('posttrain: unknown command "frobnicate"');
    expect(run.stderr).toContain("Usage: posttrain");
    expect(run.stdout).toBe("");
  });

  it("an unknown option exits 2 with a message", async () => {
    const run = await posttrain("info", "--bogus");
    expect(run.code).toBe(2);
    expect(run.stderr).toContain("--bogus");
    expect(run.stderr).toContain("Usage: posttrain");
  });

  it("info --device gpu exits 1 naming the bad value", async () => {
    const run = await posttrain("info", "--device", "gpu");
    expect(run.code).toBe(1);
    expect(run.stderr).toMatch(/--device: expected cpu, cuda or auto, got gpu/);
    expect(run.stdout).toBe("");
  });

  it("info --device cpu starts a worker and prints its handshake as JSON", { timeout: 60_000 }, async () => {
    const run = await posttrain("info", "--device", "cpu");
    expect(run.code, run.stderr).toBe(0);
    const info = JSON.parse(run.stdout) as {
      protocolVersion: unknown;
      torch: unknown;
      devices: { type: string }[];
      capabilities: { methods: string[] };
    };
    expect(info.protocolVersion).toBe(1);
    expect(info.torch).toMatch(/^\d+\.\d+/);
    expect(info.devices.some((d) => d.type === "cpu")).toBe(true);
    expect(info.capabilities.methods).toEqual(expect.arrayContaining(["ping", "echo", "row_sums"]));
  });

  it("make-tiny-model writes a loadable model directory", { timeout: 60_000 }, async () => {
    const dir = mkdtempSync(join(tmpdir(), "posttrain-cli-"));
    try {
      const run = await posttrain("make-tiny-model", join(dir, "m"), "--seed", "7");
      expect(run.code, run.stderr).toBe(0);
      expect(run.stdout).toMatch(/\d+ parameters, vocabulary \d+/);
      for (const file of ["config.json", "model.safetensors", "tokenizer.json"]) {
        expect(existsSync(join(dir, "m", file))).toBe(true);
      }
      const bad = await posttrain("make-tiny-model", join(dir, "n"), "--num-layers", "two");
      expect(bad.code).toBe(1);
      expect(bad.stderr).toContain("--num-layers: expected an integer");
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
