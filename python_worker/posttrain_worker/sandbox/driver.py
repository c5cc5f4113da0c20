"""Sandbox driver: runs Python code blocks sent by the TypeScript ``PythonSandbox``, under resource limits.

Started as ``python -I -u driver.py CONFIG_JSON`` (optionally under ``unshare -rn`` for no network), in a
fresh process group, with a private working directory as its cwd. Standard library only.

Protocol (JSON lines). The driver keeps private duplicates of its original stdin/stdout for the protocol,
points fd 0 at ``/dev/null`` and, for each code block, fd 1 and fd 2 at the files ``<ioDir>/stdout`` and
``<ioDir>/stderr`` (truncated first), so everything the code prints, C extensions and child processes
included, lands in those files; the TypeScript side reads them, truncated to its output limit, also after a
crash.

- driver → TS, once limits are set: ``{"type": "ready", "pid": ..., "python": "3.11.7", "limits": {...}}``
- TS → driver: ``{"type": "run", "id": 1, "code": "print(1)"}``
- driver → TS: ``{"type": "done", "id": 1, "status": "ok" | "error", "exception": "ValueError" | null}``

Globals persist between code blocks of one driver process (the persistent mode); the one-shot mode runs one
block per process. The driver exits on EOF of its protocol input, or when its parent process goes away.
"""

from __future__ import annotations

import json
import linecache
import os
import signal
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Any, BinaryIO

try:
    import resource
except ImportError:  # not on Windows: the sandbox then runs without OS limits
    resource = None  # type: ignore[assignment]


@dataclass(frozen=True)
class Limits:
    """Resource limits; ``None`` leaves a limit as inherited."""

    memory_bytes: int | None
    cpu_seconds: int | None
    max_open_files: int | None
    max_file_bytes: int | None
    max_processes: int | None = None


@dataclass(frozen=True)
class Config:
    io_dir: str
    limits: Limits
    # Persistent mode: the hard CPU limit is a budget for the interpreter's life (see arm_cpu_limit).
    persistent: bool = False


def parse_config(text: str) -> Config:
    """Reads the JSON configuration passed as the driver's only argument."""
    raw: dict[str, Any] = json.loads(text)
    limits = raw.get("limits", {})

    def opt_int(name: str) -> int | None:
        value = limits.get(name)
        if value is None:
            return None
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise ValueError(f"limits.{name} must be a positive integer or null, got {value!r}")
        return value

    io_dir = raw.get("ioDir")
    if not isinstance(io_dir, str) or io_dir == "":
        raise ValueError("ioDir must be a non-empty string")
    persistent = raw.get("persistent", False)
    if not isinstance(persistent, bool):
        raise ValueError(f"persistent must be a boolean, got {persistent!r}")
    return Config(
        io_dir=io_dir,
        limits=Limits(
            memory_bytes=opt_int("memoryBytes"),
            cpu_seconds=opt_int("cpuSeconds"),
            max_open_files=opt_int("maxOpenFiles"),
            max_file_bytes=opt_int("maxFileBytes"),
            max_processes=opt_int("maxProcesses"),
        ),
        persistent=persistent,
    )


def _set_limit(which: int, value: int) -> None:
    assert resource is not None
    _soft, hard = resource.getrlimit(which)
    if hard != resource.RLIM_INFINITY and value > hard:
        value = hard
    resource.setrlimit(which, (value, value))


# Persistent mode: the interpreter's lifetime CPU budget, in code blocks' worth of ``cpu_seconds``.
PERSISTENT_CPU_BLOCKS = 100


def apply_limits(limits: Limits, persistent: bool = False) -> dict[str, bool]:
    """Sets the process-wide limits (hard = soft, so the code cannot raise them) and the hard CPU limit (its
    soft limit is armed per code block); returns which ones the OS accepted."""
    keys = ("memoryBytes", "cpuSeconds", "maxOpenFiles", "maxFileBytes", "maxProcesses")
    applied = dict.fromkeys(keys, False)
    if resource is None:
        return applied
    # No core files from crashing code blocks.
    try:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    except (ValueError, OSError):
        pass
    # Writing past RLIMIT_FSIZE then fails with EFBIG (an OSError in the code) instead of killing the process.
    if hasattr(signal, "SIGXFSZ"):
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    pairs = [
        ("memoryBytes", "RLIMIT_AS", limits.memory_bytes),
        ("maxOpenFiles", "RLIMIT_NOFILE", limits.max_open_files),
        ("maxFileBytes", "RLIMIT_FSIZE", limits.max_file_bytes),
        # Counts the processes and threads of the sandbox's uid in its user namespace (the jail gives it one).
        ("maxProcesses", "RLIMIT_NPROC", limits.max_processes),
    ]
    for key, name, value in pairs:
        which = getattr(resource, name, None)
        if value is None or which is None:
            continue
        try:
            _set_limit(which, value)
            applied[key] = True
        except (ValueError, OSError):
            applied[key] = False
    applied["cpuSeconds"] = _set_cpu_hard_limit(limits.cpu_seconds, persistent)
    return applied


def _set_cpu_hard_limit(cpu_seconds: int | None, persistent: bool) -> bool:
    """Sets the hard RLIMIT_CPU that the code cannot raise: one block's worth plus a second (one-shot: the
    soft limit then sends SIGXCPU a second before the kernel's SIGKILL at the hard one), or a lifetime budget
    of ``PERSISTENT_CPU_BLOCKS`` blocks for a persistent interpreter, whose soft limit moves per block."""
    if resource is None or cpu_seconds is None or not hasattr(resource, "RLIMIT_CPU"):
        return False
    budget = cpu_seconds * (PERSISTENT_CPU_BLOCKS if persistent else 1) + 1
    hard = int(cpu_seconds_used()) + budget + 1
    _soft, current = resource.getrlimit(resource.RLIMIT_CPU)
    if current != resource.RLIM_INFINITY:
        hard = min(hard, current)
    try:
        resource.setrlimit(resource.RLIMIT_CPU, (hard, hard))
    except (ValueError, OSError):
        return False
    return True


def cpu_seconds_used() -> float:
    """CPU time (user + system) this process has used so far."""
    if resource is None:
        return 0.0
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def arm_cpu_limit(cpu_seconds: int | None) -> None:
    """Lets the next code block use ``cpu_seconds`` more CPU seconds: SIGXCPU (which kills) past that.

    RLIMIT_CPU counts the whole life of the process, so in the persistent mode the soft limit moves forward
    before each block, up to the hard limit set by ``apply_limits`` (past it the kernel sends SIGKILL).
    """
    if resource is None or cpu_seconds is None or not hasattr(resource, "RLIMIT_CPU"):
        return
    _soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
    target = int(cpu_seconds_used()) + cpu_seconds + 1
    if hard != resource.RLIM_INFINITY:
        target = min(target, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (target, hard))


def _redirect_output(io_dir: str) -> None:
    """Points fd 1 and fd 2 at fresh (truncated) capture files for the next code block."""
    _flush_quietly()
    for fd, name in ((1, "stdout"), (2, "stderr")):
        target = os.open(os.path.join(io_dir, name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(target, fd)
        os.close(target)


def run_block(code: str, namespace: dict[str, Any], filename: str = "<code>") -> tuple[str, str | None]:
    """Executes one code block in ``namespace``; returns ``(status, exception type name)``.

    Exceptions are printed to stderr as a traceback without the driver's own frame; ``filename`` names the
    block in tracebacks, which show its source lines. ``SystemExit`` with code 0 or ``None`` counts as
    success, like a script that exits cleanly.
    """
    linecache.cache[filename] = (len(code), None, code.splitlines(keepends=True), filename)
    try:
        compiled = compile(code, filename, "exec")
        exec(compiled, namespace)
    except SystemExit as exc:
        if exc.code in (None, 0):
            return "ok", None
        print(f"SystemExit: {exc.code}", file=sys.stderr)
        return "error", "SystemExit"
    except BaseException as exc:
        # Drop this frame: the user sees their code's frames only (a SyntaxError has none).
        tb = exc.__traceback__.tb_next if exc.__traceback__ is not None else None
        traceback.print_exception(type(exc), exc, tb, file=sys.stderr)
        return "error", type(exc).__name__
    finally:
        _flush_quietly()
    return "ok", None


def _flush_quietly() -> None:
    """Flushes ``sys.stdout``/``sys.stderr``, which a code block may have replaced or closed."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass


def _watch_parent(parent: int) -> None:
    """Exits when the process that started the driver is gone (stdin EOF is not seen while a block runs)."""
    while True:
        time.sleep(0.5)
        if os.getppid() != parent:
            os._exit(70)


def _send(out: BinaryIO, message: dict[str, Any]) -> None:
    out.write(json.dumps(message).encode() + b"\n")
    out.flush()


def serve(config: Config) -> int:
    """Sets up fds and limits, announces readiness, then runs code blocks until EOF."""
    proto_in = os.fdopen(os.dup(0), "rb")
    proto_out = os.fdopen(os.dup(1), "wb")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    threading.Thread(target=_watch_parent, args=(os.getppid(),), daemon=True).start()
    applied = apply_limits(config.limits, config.persistent)
    version = ".".join(str(v) for v in sys.version_info[:3])
    _send(proto_out, {"type": "ready", "pid": os.getpid(), "python": version, "limits": applied})
    namespace: dict[str, Any] = {"__name__": "__main__", "__builtins__": __builtins__}
    for line in proto_in:
        request = json.loads(line)
        if request.get("type") != "run" or not isinstance(request.get("code"), str):
            _send(proto_out, {"type": "fail", "id": request.get("id"), "message": "malformed request"})
            continue
        _redirect_output(config.io_dir)
        arm_cpu_limit(config.limits.cpu_seconds)
        status, exception = run_block(request["code"], namespace, f"<code block {request.get('id')}>")
        _send(proto_out, {"type": "done", "id": request.get("id"), "status": status, "exception": exception})
    return 0


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: driver.py CONFIG_JSON", file=sys.stderr)
        return 2
    try:
        config = parse_config(argv[1])
    except (ValueError, json.JSONDecodeError) as exc:
        print(f"sandbox driver: bad configuration: {exc}", file=sys.stderr)
        return 2
    return serve(config)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
