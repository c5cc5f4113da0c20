// The Python sandbox with real child interpreters: output capture, exceptions, the wall-clock timeout, crashes,
// the OS limits (memory, CPU, file size), truncation, isolation (environment, cwd, network) and the persistent mode.
import { existsSync } from "node:fs";
import { createServer, type Server } from "node:net";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { InvalidArgumentError, RequestAbortedError } from "../../sdk/index.js";
import { PythonSandbox, SandboxClosedError, SandboxStartError, SandboxUnavailableError, sandboxSupport } from "../../sdk/envs/tools/index.js";

const support = await sandboxSupport();
const MiB = 1024 * 1024;

describe("PythonSandbox (one-shot)", () => {
  const sandbox = new PythonSandbox({ timeoutMs: 5_000 });

  afterAll(async () => {
    await sandbox.close();
  });

  it("runs a block and captures its stdout, C-level and child-process output included", async () => {
    const r = await sandbox.run('import os, sys\nprint(6 * 7)\nos.write(1, b"raw\\n")\nos.system("echo from-child")\nprint("err", file=sys.stderr)');
    expect(r.status).toBe("ok");
    expect(r.stdout).toBe("42\nraw\nfrom-child\n");
    expect(r.stderr).toBe("err\n");
    expect(r).toMatchObject({ exception: null, exitCode: null, signal: null, detail: "", stateLost: false });
  });

  it("reports an exception as an error with the traceback of the user's code only", async () => {
    const r = await sandbox.run("def f(n):\n    return 10 // n\nprint('before')\nf(0)");
    expect(r.status).toBe("error");
    expect(r.exception).toBe("ZeroDivisionError");
    expect(r.stdout).toBe("before\n");
    expect(r.stderr).toMatch(/line 4, in <module>\n\s+f\(0\)/);
    expect(r.stderr).toMatch(/line 2, in f\n\s+return 10 \/\/ n/);
    expect(r.stderr).toMatch(/ZeroDivisionError: integer division or modulo by zero\n$/);
    expect(r.stderr).not.toContain("driver.py");
  });

  it("reports a syntax error, and counts sys.exit(0) as success but sys.exit(2) as an error", async () => {
    const syntax = await sandbox.run("def broken(:\n  pass");
    expect(syntax.status).toBe("error");
    expect(syntax.exception).toBe("SyntaxError");
    expect((await sandbox.run("import sys\nprint('x')\nsys.exit(0)")).status).toBe("ok");
    const two = await sandbox.run("import sys\nsys.exit(2)");
    expect(two.status).toBe("error");
    expect(two.stderr).toContain("SystemExit: 2");
  });

  // That every process it started dies too (setsid daemons included) is in tools.sandbox-isolation.test.ts.
  it("kills a block that runs past the timeout", async () => {
    const fast = new PythonSandbox({ timeoutMs: 1_500 });
    const code = 'import subprocess, time\np = subprocess.Popen(["sleep", "60"])\nprint(p.pid, flush=True)\ntime.sleep(60)';
    const started = performance.now();
    const r = await fast.run(code);
    const elapsed = performance.now() - started;
    expect(r.status).toBe("timeout");
    expect(r.detail).toBe("timed out after 1500 ms");
    expect(elapsed).toBeGreaterThanOrEqual(1_400);
    expect(elapsed).toBeLessThan(10_000);
    expect(Number(r.stdout.trim())).toBeGreaterThan(0); // the child had started
    const busy = await fast.run("while True:\n    pass");
    expect(busy.status).toBe("timeout");
    await fast.close();
  });

  it("reports a process that exits mid-block as crashed, keeping what it printed", async () => {
    const r = await sandbox.run("import os\nprint('partial')\nos._exit(3)");
    expect(r.status).toBe("crashed");
    expect(r.exitCode).toBe(3);
    expect(r.signal).toBeNull();
    expect(r.detail).toBe("exited with code 3");
    expect(r.stdout).toBe("partial\n");
  });

  it("reports a segmentation fault as a crash by SIGSEGV", async () => {
    const r = await sandbox.run("import ctypes\nctypes.string_at(0)");
    expect(r.status).toBe("crashed");
    expect(r.signal).toBe("SIGSEGV");
    expect(r.exitCode).toBeNull();
    expect(r.detail).toContain("segmentation fault");
  });

  it("enforces the memory limit (RLIMIT_AS): the same allocation fails under it and succeeds without it", async () => {
    const code = "b = bytearray(256 * 1024 * 1024)\nprint(len(b))";
    const limited = new PythonSandbox({ memoryBytes: 128 * MiB });
    const r = await limited.run(code);
    expect(r.status).toBe("error");
    expect(r.exception).toBe("MemoryError");
    const unlimited = new PythonSandbox({ memoryBytes: null });
    const ok = await unlimited.run(code);
    expect(ok.status).toBe("ok");
    expect(ok.stdout).toBe(`${256 * MiB}\n`);
    await Promise.all([limited.close(), unlimited.close()]);
  });

  it("enforces the CPU limit (RLIMIT_CPU) before the wall-clock timeout", async () => {
    const cpu = new PythonSandbox({ cpuSeconds: 1, timeoutMs: 30_000 });
    const r = await cpu.run("while True:\n    pass");
    expect(r.status).toBe("crashed");
    expect(r.signal).toBe("SIGXCPU");
    expect(r.detail).toContain("CPU time limit exceeded");
    expect(r.durationMs).toBeLessThan(20_000);
    await cpu.close();
  });

  it("enforces the file size limit (RLIMIT_FSIZE) as an OSError in the code", async () => {
    const small = new PythonSandbox({ maxFileBytes: MiB });
    const r = await small.run("with open('big.bin', 'wb') as f:\n    f.write(b'x' * (2 * 1024 * 1024))");
    expect(r.status).toBe("error");
    expect(r.exception).toBe("OSError");
    expect(r.stderr).toContain("File too large");
    expect((await small.run("open('ok.bin', 'wb').write(b'x' * 1000)")).status).toBe("ok");
    await small.close();
  });

  it("truncates long output to maxOutputBytes, keeping the head and the tail", async () => {
    const tiny = new PythonSandbox({ maxOutputBytes: 1024 });
    const r = await tiny.run("print('HEAD' + 'a' * 5000 + 'TAIL')");
    expect(r.status).toBe("ok");
    expect(r.truncated).toEqual({ stdout: true, stderr: false });
    expect(r.stdout.startsWith("HEAD")).toBe(true);
    expect(r.stdout.endsWith("TAIL\n")).toBe(true);
    const written = "HEAD".length + 5000 + "TAIL\n".length;
    expect(r.stdout).toContain(`[${written - 1024} bytes omitted]`);
    expect(r.stdout.length).toBeLessThan(1100);
    const short = await tiny.run("print('a' * 100)");
    expect(short.truncated.stdout).toBe(false);
    expect(short.stdout).toBe(`${"a".repeat(100)}\n`);
    await tiny.close();
  });

  it("isolates the interpreter: no parent environment, -I, its own temporary cwd removed afterwards", async () => {
    process.env.POSTTRAIN_SANDBOX_SECRET = "do-not-leak";
    process.env.PYTHONPATH = "/nonexistent-pythonpath";
    try {
      const withEnv = new PythonSandbox({ env: { GREETING: "hello" } });
      const code = [
        "import os, sys",
        "print(os.environ.get('POSTTRAIN_SANDBOX_SECRET'))",
        "print(os.environ.get('GREETING'))",
        "print(sys.flags.isolated, '/nonexistent-pythonpath' in sys.path)",
        "print(os.getcwd())",
        "open('scratch.txt', 'w').write('x')",
      ].join("\n");
      const r = await withEnv.run(code);
      expect(r.status).toBe("ok");
      const [secret, greeting, flags, cwd] = r.stdout.trim().split("\n");
      expect(secret).toBe("None");
      expect(greeting).toBe("hello");
      expect(flags).toBe("1 False");
      expect(cwd).toMatch(/posttrain-sandbox-[^/]+\/work$/);
      expect(existsSync(cwd!)).toBe(false);
      await withEnv.close();
    } finally {
      delete process.env.POSTTRAIN_SANDBOX_SECRET;
      delete process.env.PYTHONPATH;
    }
  });

  it("runs one-shot blocks concurrently in separate processes", async () => {
    // Each process has its own scratch directory (pids are namespaced: every driver may be pid 2).
    const results = await Promise.all([1, 2, 3].map((i) => sandbox.run(`import os\nprint(${i}, os.getcwd())`)));
    const pids = new Set(results.map((r) => r.stdout.split(" ")[1]));
    expect(results.map((r) => r.stdout.split(" ")[0])).toEqual(["1", "2", "3"]);
    expect(pids.size).toBe(3);
  });

  it("rejects with RequestAbortedError when the signal aborts, and kills the block", async () => {
    const controller = new AbortController();
    setTimeout(() => {
      controller.abort(new Error("stop"));
    }, 300);
    const started = performance.now();
    const err = await sandbox.run("import time\ntime.sleep(30)", { signal: controller.signal }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(RequestAbortedError);
    expect((err as RequestAbortedError).code).toBe("ABORTED");
    expect(performance.now() - started).toBeLessThan(5_000);
    await expect(sandbox.run("print(1)", { signal: AbortSignal.abort() })).rejects.toBeInstanceOf(RequestAbortedError);
  });
});

describe("PythonSandbox (persistent)", () => {
  let sandbox: PythonSandbox;

  beforeAll(() => {
    sandbox = new PythonSandbox({ persistent: true, timeoutMs: 2_000 });
  });

  afterAll(async () => {
    await sandbox.close();
  });

  it("keeps globals, imports and functions between blocks in one process", async () => {
    expect((await sandbox.run("import math\nx = 41\ndef inc(v):\n    return v + 1")).status).toBe("ok");
    const r = await sandbox.run("print(inc(x), math.floor(2.5))");
    expect(r.stdout).toBe("42 2\n");
    const info = await sandbox.info();
    expect(info?.python).toMatch(/^3\.\d+\.\d+$/);
    expect(info?.limits).toEqual({ memoryBytes: true, cpuSeconds: true, maxOpenFiles: true, maxFileBytes: true, maxProcesses: support.namespaces });
  });

  it("restarts after a crash with fresh globals, and says the state was lost", async () => {
    await sandbox.run("y = 'kept'");
    const before = (await sandbox.info())?.pid;
    const crash = await sandbox.run("import os\nos._exit(9)");
    expect(crash.status).toBe("crashed");
    expect(crash.stateLost).toBe(true);
    const after = await sandbox.run("print(y)");
    expect(after.status).toBe("error");
    expect(after.exception).toBe("NameError");
    expect(after.stateLost).toBe(false);
    const pid = (await sandbox.info())?.pid;
    expect(pid).toBeDefined();
    expect(pid).not.toBe(before);
  });

  it("restarts after a timeout, and keeps state after an ordinary exception", async () => {
    await sandbox.run("z = 1");
    const err = await sandbox.run("raise ValueError('no')");
    expect(err.status).toBe("error");
    expect(err.stateLost).toBe(false);
    expect((await sandbox.run("print(z)")).stdout).toBe("1\n");
    const timeout = await sandbox.run("import time\ntime.sleep(30)");
    expect(timeout.status).toBe("timeout");
    expect(timeout.stateLost).toBe(true);
    expect((await sandbox.run("print('z' in globals())")).stdout).toBe("False\n");
  });

  it("runs blocks one at a time, in call order", async () => {
    await sandbox.run("log = []");
    const runs = ["a", "b", "c"].map((s) => sandbox.run(`import time\ntime.sleep(0.05)\nlog.append('${s}')`));
    await Promise.all(runs);
    expect((await sandbox.run("print(''.join(log))")).stdout).toBe("abc\n");
  });

  it("starts a new interpreter after an abort killed the running one", async () => {
    await sandbox.run("v = 3");
    const controller = new AbortController();
    const pending = sandbox.run("import time\ntime.sleep(30)", { signal: controller.signal });
    setTimeout(() => {
      controller.abort();
    }, 200);
    await expect(pending).rejects.toBeInstanceOf(RequestAbortedError);
    const after = await sandbox.run("print('v' in globals())");
    expect(after.status).toBe("ok");
    expect(after.stdout).toBe("False\n");
  });

  it("reset() drops the globals", async () => {
    await sandbox.run("w = 5");
    await sandbox.reset();
    expect((await sandbox.run("print('w' in globals())")).stdout).toBe("False\n");
  });
});

describe("PythonSandbox network isolation", () => {
  let server: Server;
  let port = 0;

  beforeAll(async () => {
    server = createServer((socket) => socket.end("hello\n"));
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    port = (server.address() as { port: number }).port;
  });

  afterAll(async () => {
    await new Promise<void>((resolve) => {
      server.close(() => {
        resolve();
      });
    });
  });

  const connect = (): string =>
    `import socket\ntry:\n    s = socket.create_connection(("127.0.0.1", ${port}), timeout=3)\n    print("connected", s.recv(16).decode().strip())\nexcept OSError as e:\n    print("blocked", type(e).__name__)`;

  it("reaches a local server when the network is allowed (the probe works)", async () => {
    const open = new PythonSandbox({ network: "allowed" });
    const r = await open.run(connect());
    expect(r.stdout).toBe("connected hello\n");
    await open.close();
  });

  it.skipIf(!support.networkIsolation)(`blocks the network with a network namespace (${support.reason ?? "available"})`, async () => {
    const blocked = new PythonSandbox({ network: "blocked" });
    const r = await blocked.run(connect());
    expect(r.stdout).toMatch(/^blocked /);
    const auto = new PythonSandbox({ persistent: true });
    expect((await auto.run(connect())).stdout).toMatch(/^blocked /);
    expect((await auto.info())?.networkIsolated).toBe(true);
    await Promise.all([blocked.close(), auto.close()]);
  });

  it.skipIf(support.networkIsolation)("refuses network: \"blocked\" where unshare is not available", async () => {
    await expect(new PythonSandbox({ network: "blocked" }).run("print(1)")).rejects.toBeInstanceOf(SandboxUnavailableError);
  });
});

describe("PythonSandbox bad input", () => {
  it.each([
    [{ timeoutMs: -1 }, /PythonSandbox options\.timeoutMs:/],
    [{ memoryBytes: 1000 }, /PythonSandbox options\.memoryBytes:/],
    [{ network: "none" }, /PythonSandbox options\.network:/],
    [{ maxOutputBytes: 1.5 }, /PythonSandbox options\.maxOutputBytes:/],
    [{ env: { A: 1 } }, /PythonSandbox options\.env\.A:/],
    [{ timeout: 10 }, /PythonSandbox options\.timeout: unknown field/],
    [{ isolation: "paranoid" }, /PythonSandbox options\.isolation:/],
    [{ maxProcesses: 2 }, /PythonSandbox options\.maxProcesses:/],
    [{ readOnlyPaths: ["relative/dir"] }, /PythonSandbox options\.readOnlyPaths\.0: must be an absolute path/],
  ])("rejects %j with InvalidArgumentError naming the field", (options, pattern) => {
    const make = (): PythonSandbox => new PythonSandbox(options as never);
    expect(make).toThrow(InvalidArgumentError);
    expect(make).toThrow(pattern);
  });

  it("rejects code that is not a string", async () => {
    const sandbox = new PythonSandbox();
    await expect(sandbox.run(42 as never)).rejects.toThrow(/PythonSandbox\.run: code must be a string/);
  });

  it("fails to start with SandboxStartError for a missing interpreter", async () => {
    const sandbox = new PythonSandbox({ python: "/nonexistent/python3", network: "allowed" });
    const err = await sandbox.run("print(1)").catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SandboxStartError);
    expect((err as SandboxStartError).code).toBe("SANDBOX_START_FAILED");
  });

  it("rejects runs after close with SandboxClosedError", async () => {
    const sandbox = new PythonSandbox({ persistent: true });
    expect((await sandbox.run("print(1)")).stdout).toBe("1\n");
    await sandbox.close();
    await expect(sandbox.run("print(1)")).rejects.toBeInstanceOf(SandboxClosedError);
  });
});
