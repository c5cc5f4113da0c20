// The sandbox holds (issue 14, point 5), with real parts: real workers (one ipc, one tcp) whose sockets the
// sandboxed code tries to reach by raw connects and pyzmq, a real `setsid`/`nohup`/double-forked daemon that
// must die with the sandbox, limits the code tries to raise, a bounded fork bomb, and writes outside the scratch
// directory. Each probe is also run where it must succeed (an unsandboxed interpreter, or while the sandbox
// runs) so that a failure inside the sandbox means isolation, not a broken probe.
import { execFile } from "node:child_process";
import { closeSync, existsSync, fstatSync, openSync, readdirSync, writeFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { homedir, tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { launchLocalWorkers, resolvePython, type LocalWorkers } from "../../bridge/index.js";
import { PythonSandbox, SandboxUnavailableError, sandboxSupport } from "../../sdk/envs/tools/index.js";
import { processesWith } from "./diagnostics.js";

const support = await sandboxSupport();
const python = resolvePython();
const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms));

/** Runs `code` in an unsandboxed `python -I` (the control run of a probe); resolves with its stdout. */
function runUnsandboxed(code: string): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(python, ["-I", "-c", code], { timeout: 20_000 }, (err, stdout, stderr) => {
      if (err !== null) reject(new Error(`${err.message}\n${stderr}`));
      else resolve(stdout);
    });
  });
}

/** A unique marker for the command lines and file names of one test. */
const marker = (what: string): string => `posttrain-${what}-${process.pid}-${Math.random().toString(36).slice(2, 10)}`;

describe.skipIf(!support.namespaces)(`PythonSandbox isolation (${support.reason ?? "namespaces available"})`, () => {
  let ipc: LocalWorkers | undefined;
  let tcp: LocalWorkers | undefined;
  const sandbox = new PythonSandbox({ timeoutMs: 10_000, isolation: "strict" });

  beforeAll(async () => {
    [ipc, tcp] = await Promise.all([
      launchLocalWorkers({ workers: 1, device: "cpu", heartbeatIntervalMs: 0 }),
      launchLocalWorkers({ workers: 1, device: "cpu", transport: "tcp", heartbeatIntervalMs: 0 }),
    ]);
  }, 120_000);

  afterAll(async () => {
    await Promise.all([sandbox.close(), ipc?.close(), tcp?.close()]);
  });

  it("reports every mechanism in place, and runs as uid 65534 without capabilities nor nested namespaces", async () => {
    const r = await sandbox.run(
      "import os, subprocess\nstatus = dict(l.split(':\\t', 1) for l in open('/proc/self/status').read().splitlines() if ':\\t' in l)\n" +
        "nested = subprocess.run(['unshare', '--user', '--map-root-user', 'true'], capture_output=True).returncode\n" +
        "print(os.getuid(), os.getgid(), status['CapEff'].strip(), status['NoNewPrivs'].strip(), nested != 0)",
    );
    expect(r.status, r.stderr).toBe("ok");
    expect(r.stdout).toBe("65534 65534 0000000000000000 1 True\n");
    const info = await sandbox.info();
    expect(info?.isolation).toEqual({
      userNamespace: true,
      pidNamespace: true,
      mountNamespace: true,
      ipcNamespace: true,
      networkNamespace: true,
      filesystem: true,
      proc: true,
      unprivilegedUser: true,
      missing: [],
    });
    expect(info?.limits.maxProcesses).toBe(true);
  });

  it("cannot reach a real worker's ipc socket (raw unix connect, pyzmq) nor a tcp worker's loopback port", async () => {
    const socketDir = ipc!.socketDir;
    const socketPath = join(socketDir, "worker-0.sock");
    const tcpEndpoint = tcp!.connections[0]!.process!.ready.endpoint;
    const port = Number(/:(\d+)$/.exec(tcpEndpoint)?.[1]);
    expect(existsSync(socketPath)).toBe(true);
    const probe = [
      "import json, os, socket",
      "out = {'exists': os.path.exists(%PATH%)}",
      "try:\n    os.listdir(%DIR%)\n    out['listdir'] = 'listed'\nexcept OSError as e:\n    out['listdir'] = type(e).__name__",
      "try:\n    s = socket.socket(socket.AF_UNIX)\n    s.settimeout(2)\n    s.connect(%PATH%)\n    out['unix'] = 'connected'\nexcept OSError as e:\n    out['unix'] = type(e).__name__",
      "try:\n    socket.create_connection(('127.0.0.1', %PORT%), timeout=2)\n    out['tcp'] = 'connected'\nexcept OSError as e:\n    out['tcp'] = type(e).__name__",
      "try:\n    import zmq\nexcept ImportError:\n    zmq = None",
      "if zmq is not None:",
      "    d = zmq.Context.instance().socket(zmq.DEALER)",
      "    d.setsockopt(zmq.LINGER, 0)",
      "    d.connect('ipc://' + %PATH%)",
      "    d.send(json.dumps({'v': 1, 'type': 'request', 'id': 1, 'method': 'ping', 'args': {}, 'payloads': []}).encode())",
      "    out['zmq'] = 'reply' if d.poll(1500) else 'none'",
      "print(json.dumps(out))",
    ]
      .join("\n")
      .replaceAll("%PATH%", JSON.stringify(socketPath))
      .replaceAll("%DIR%", JSON.stringify(socketDir))
      .replaceAll("%PORT%", String(port));
    // The control: outside the sandbox the same probe reaches both workers (the ipc one answers, refusing).
    const outside = JSON.parse(await runUnsandboxed(probe)) as Record<string, string | boolean>;
    expect(outside).toMatchObject({ exists: true, listdir: "listed", unix: "connected", tcp: "connected" });
    const r = await sandbox.run(probe);
    expect(r.status, r.stderr).toBe("ok");
    const inside = JSON.parse(r.stdout) as Record<string, string | boolean>;
    expect(inside).toMatchObject({ exists: false, listdir: "FileNotFoundError", unix: "FileNotFoundError" });
    expect(["ConnectionRefusedError", "OSError"]).toContain(inside.tcp);
    if ("zmq" in outside) {
      expect(outside.zmq).toBe("reply");
      expect(inside.zmq).toBe("none");
    }
  }, 30_000);

  it("leaves no process behind: a setsid, nohup, double-forked daemon dies at the timeout", async () => {
    const tag = marker("daemon");
    const code = [
      "import subprocess, sys, time",
      "daemon = 'import os, sys, time\\nif os.fork() > 0:\\n    os._exit(0)\\nf = open(sys.argv[1], \"a\")\\nwhile True:\\n    f.write(\"x\")\\n    f.flush()\\n    time.sleep(0.05)'",
      `subprocess.Popen(["nohup", sys.executable, "-c", daemon, "heartbeat-${tag}"], start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)`,
      "time.sleep(60)",
    ].join("\n");
    const fast = new PythonSandbox({ timeoutMs: 3_000 });
    const pending = fast.run(code);
    // While it runs: the daemon exists on the host and its heartbeat grows (so the checks below can fail).
    let heartbeat: string | undefined;
    for (let i = 0; i < 100 && heartbeat === undefined; i++) {
      await sleep(50);
      heartbeat = readdirSync(tmpdir())
        .filter((d) => d.startsWith("posttrain-sandbox-"))
        .map((d) => join(tmpdir(), d, "work", `heartbeat-${tag}`))
        .find((p) => existsSync(p));
    }
    expect(heartbeat).toBeDefined();
    const fd = openSync(heartbeat!, "r"); // stays readable after the directory is removed
    try {
      await sleep(300);
      expect(processesWith(tag).length).toBeGreaterThan(0);
      const growing = fstatSync(fd).size;
      await sleep(300);
      expect(fstatSync(fd).size).toBeGreaterThan(growing);
      const r = await pending;
      expect(r.status).toBe("timeout");
      await sleep(200);
      const after = fstatSync(fd).size;
      await sleep(500);
      expect(fstatSync(fd).size).toBe(after);
      expect(processesWith(tag)).toEqual([]);
    } finally {
      closeSync(fd);
      await fast.close();
    }
  }, 20_000);

  it("leaves no process behind when a persistent sandbox is closed", async () => {
    const tag = marker("persistent");
    const persistent = new PythonSandbox({ persistent: true, timeoutMs: 5_000 });
    const r = await persistent.run(
      `import subprocess, sys\nsubprocess.Popen(["setsid", sys.executable, "-c", "import time\\nwhile True: time.sleep(1)", "${tag}"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)`,
    );
    expect(r.status, r.stderr).toBe("ok");
    let alive: number[] = [];
    for (let i = 0; i < 40 && alive.length === 0; i++) {
      await sleep(50);
      alive = processesWith(tag);
    }
    expect(alive.length).toBeGreaterThan(0);
    await persistent.close();
    expect(processesWith(tag)).toEqual([]);
  }, 20_000);

  it("cannot raise its hard limits, and a fork bomb stops at the process limit", async () => {
    const limited = new PythonSandbox({ maxProcesses: 16, cpuSeconds: 5, timeoutMs: 10_000 });
    const code = [
      "import json, os, resource, time",
      "out = {}",
      "for name in ('RLIMIT_CPU', 'RLIMIT_NPROC', 'RLIMIT_AS', 'RLIMIT_NOFILE', 'RLIMIT_FSIZE'):",
      "    which = getattr(resource, name)",
      "    soft, hard = resource.getrlimit(which)",
      "    out[name] = [soft, hard]",
      "    try:",
      "        resource.setrlimit(which, (hard + 1, hard + 1))",
      "        out[name].append('raised')",
      "    except (ValueError, OSError) as e:",
      "        out[name].append(type(e).__name__)",
      "children, failures = [], []",
      "for _ in range(200):",
      "    try:",
      "        pid = os.fork()",
      "    except OSError as e:",
      "        failures.append(type(e).__name__)",
      "        continue",
      "    if pid == 0:",
      "        time.sleep(5)",
      "        os._exit(0)",
      "    children.append(pid)",
      "out['forked'] = len(children)",
      "out['failures'] = sorted(set(failures))",
      "out['failed'] = len(failures)",
      "print(json.dumps(out))",
    ].join("\n");
    const r = await limited.run(code);
    await limited.close();
    expect(r.status, r.stderr).toBe("ok");
    const out = JSON.parse(r.stdout) as Record<string, unknown>;
    for (const name of ["RLIMIT_NPROC", "RLIMIT_AS", "RLIMIT_NOFILE", "RLIMIT_FSIZE"]) {
      const [soft, hard, attempt] = out[name] as [number, number, string];
      expect(soft, name).toBe(hard);
      expect(attempt, name).toBe("ValueError");
    }
    const [cpuSoft, cpuHard, cpuAttempt] = out.RLIMIT_CPU as [number, number, string];
    expect(cpuHard - cpuSoft).toBe(1); // SIGXCPU at the soft limit, the kernel's SIGKILL a second later
    expect(cpuHard).toBeLessThanOrEqual(7);
    expect(cpuAttempt).toBe("ValueError");
    expect((out.RLIMIT_NPROC as number[])[0]).toBe(16);
    expect(out.forked).toBeLessThan(16);
    expect(out.failed).toBe(200 - (out.forked as number));
    expect(out.failures).toEqual(["BlockingIOError"]);
  }, 30_000);

  it("cannot write outside its scratch directory, nor read a run directory; sees no secrets in its environment", async () => {
    const tag = marker("escape");
    const runDir = await mkdtemp(join(tmpdir(), "posttrain-run-"));
    writeFileSync(join(runDir, "metrics.jsonl"), "{}\n");
    process.env.POSTTRAIN_POOL_SECRET = "must-not-leak";
    try {
      const targets = {
        checkout: join(process.cwd(), tag),
        tmp: join("/tmp", tag),
        home: join(homedir(), tag),
        runDir: join(runDir, tag),
        usr: join("/usr", tag),
        python: join(python, "..", tag),
      };
      const code = [
        "import json, os",
        `targets = ${JSON.stringify(targets)}`,
        "out = {}",
        "for key, path in targets.items():",
        "    try:",
        "        with open(path, 'w') as f:",
        "            f.write('x')",
        "        out[key] = 'written'",
        "    except OSError as e:",
        "        out[key] = type(e).__name__",
        "try:",
        `    out['readRunDir'] = open(${JSON.stringify(join(runDir, "metrics.jsonl"))}).read()`,
        "except OSError as e:",
        "    out['readRunDir'] = type(e).__name__",
        "with open('scratch.txt', 'w') as f:",
        "    f.write('ok')",
        "out['scratch'] = open('scratch.txt').read()",
        "out['env'] = sorted(os.environ)",
        "print(json.dumps(out))",
      ].join("\n");
      const r = await sandbox.run(code);
      expect(r.status, r.stderr).toBe("ok");
      const out = JSON.parse(r.stdout) as Record<string, unknown>;
      expect(out.scratch).toBe("ok");
      expect(out.readRunDir).toBe("FileNotFoundError");
      for (const key of Object.keys(targets)) expect(["FileNotFoundError", "OSError", "PermissionError"], key).toContain(out[key]);
      for (const path of Object.values(targets)) expect(existsSync(path), path).toBe(false);
      expect(out.env).toEqual(["HOME", "LANG", "LC_ALL", "MKL_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "PATH", "TMPDIR"]);
    } finally {
      delete process.env.POSTTRAIN_POOL_SECRET;
      await rm(runDir, { recursive: true, force: true });
    }
  });
});

describe.skipIf(!support.namespaces)("PythonSandbox isolation: a mechanism the OS refuses", () => {
  // The interpreter is started through a wrapper that runs it in a user namespace whose limit on nested user
  // namespaces is 0: the jail's unshare is refused, as on kernels or containers that forbid user namespaces.
  let dir: string;
  let wrapper: string;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), "posttrain-nouserns-"));
    wrapper = join(dir, "python");
    const inner = `echo 0 > /proc/sys/user/max_user_namespaces && exec "$0" "$@"`;
    writeFileSync(wrapper, `#!/bin/sh\nexec unshare -r sh -c '${inner}' ${JSON.stringify(python)} "$@"\n`, { mode: 0o755 });
  });

  afterAll(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('refuses to run code with isolation: "strict", naming what is missing and why', async () => {
    const strict = new PythonSandbox({ python: wrapper, isolation: "strict" });
    const err = await strict.run("print(1)").catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SandboxUnavailableError);
    expect((err as SandboxUnavailableError).code).toBe("SANDBOX_UNAVAILABLE");
    expect((err as Error).message).toMatch(/isolation "strict" but these mechanisms are missing: userNamespace \(creating user namespaces was refused \(unshare: No space left on device\)\); pidNamespace/);
    await strict.close();
  });

  it("runs best-effort with the report on info() and one warning", async () => {
    expect((await sandboxSupport(wrapper)).namespaces).toBe(false);
    const warnings: Error[] = [];
    const onWarning = (w: Error): void => {
      if (w.name === "PosttrainSandboxWarning") warnings.push(w);
    };
    process.on("warning", onWarning);
    const lax = new PythonSandbox({ python: wrapper });
    try {
      expect((await lax.run("print(1)")).stdout).toBe("1\n");
      expect((await lax.run("print(2)")).stdout).toBe("2\n");
      await sleep(50); // warnings are emitted on the next tick
      const info = await lax.info();
      expect(info?.isolation.missing.map((m) => m.mechanism)).toEqual([
        "userNamespace",
        "pidNamespace",
        "mountNamespace",
        "ipcNamespace",
        "networkNamespace",
        "filesystem",
        "proc",
        "unprivilegedUser",
      ]);
      expect(info?.isolation.pidNamespace).toBe(false);
      expect(info?.networkIsolated).toBe(false);
      expect(info?.limits.maxProcesses).toBe(false); // RLIMIT_NPROC would count the user's every process
      expect(warnings).toHaveLength(1);
      expect(warnings[0]!.message).toContain("incomplete isolation: these mechanisms are missing: userNamespace (");
    } finally {
      process.off("warning", onWarning);
      await lax.close();
    }
  });
});

describe.skipIf(support.namespaces)(`PythonSandbox without namespaces (${support.reason ?? ""})`, () => {
  it("reports every mechanism missing, and strict mode refuses", async () => {
    const lax = new PythonSandbox({ network: "allowed" });
    expect((await lax.run("print(1)")).stdout).toBe("1\n");
    expect((await lax.info())?.isolation.missing.length).toBeGreaterThan(0);
    await lax.close();
    await expect(new PythonSandbox({ isolation: "strict", network: "allowed" }).run("print(1)")).rejects.toBeInstanceOf(SandboxUnavailableError);
  });
});
