"""One ``python -m posttrain_worker`` child process, as a Ray actor supervises it: started with the pool's
keys on its stdin (never argv or environment), its ``POSTTRAIN_READY`` line awaited, its stderr tail kept.

The stdin pipe stays open for the child's life: the worker exits on EOF, so when the supervising process dies
(even by SIGKILL) the kernel closes the pipe and the worker follows it.
"""

from __future__ import annotations

import collections
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

READY_PREFIX = "POSTTRAIN_READY "
STDERR_TAIL_LINES = 40


class WorkerStartFailed(RuntimeError):
    """The child never printed its READY line (it exited, or the start timeout passed); the message holds its
    exit status and stderr tail."""


@dataclass(frozen=True)
class ChildExit:
    """How the child ended: ``exit_code`` for a normal exit, ``signal`` (a name such as ``SIGKILL``) for a
    signal death."""

    exit_code: int | None
    signal: str | None
    stderr_tail: str

    def as_json(self) -> dict[str, Any]:
        return {"exitCode": self.exit_code, "signal": self.signal, "stderrTail": self.stderr_tail}


def exit_of(returncode: int, stderr_tail: str) -> ChildExit:
    """A ``Popen.returncode`` as a :class:`ChildExit` (negative = killed by that signal)."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return ChildExit(None, name, stderr_tail)
    return ChildExit(returncode, None, stderr_tail)


class WorkerChild:
    """A started worker child: :meth:`start` returns once it is READY (or raises WorkerStartFailed)."""

    def __init__(self, proc: subprocess.Popen[bytes], endpoint: str) -> None:
        self.proc = proc
        self.endpoint = endpoint
        self._tail: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL_LINES)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stderr_tail(self) -> str:
        return "".join(self._tail)

    @classmethod
    def start(
        cls,
        argv: Sequence[str],
        auth_line: str,
        env: Mapping[str, str],
        timeout_s: float,
    ) -> WorkerChild:
        """Spawn ``python -m posttrain_worker *argv`` (which must include ``--auth-stdin``), write
        ``auth_line`` to its stdin and wait up to ``timeout_s`` for READY."""
        proc = subprocess.Popen(
            [sys.executable, "-m", "posttrain_worker", *argv],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=dict(env),
        )
        child = cls(proc, "")
        threading.Thread(target=child._read_stderr, name="worker-stderr", daemon=True).start()
        assert proc.stdin is not None and proc.stdout is not None
        try:
            proc.stdin.write(auth_line.encode() + b"\n")
            proc.stdin.flush()  # and kept open: its EOF tells the worker that we are gone
        except BrokenPipeError:
            pass  # it died at once: reported below with its stderr
        child.endpoint = child._await_ready(timeout_s)
        threading.Thread(target=child._drain_stdout, name="worker-stdout", daemon=True).start()
        return child

    def _await_ready(self, timeout_s: float) -> str:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout_s
        buffer = b""
        while b"\n" not in buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill(signal.SIGKILL)
                self.proc.wait()
                raise WorkerStartFailed(
                    f"the worker printed no READY line within {timeout_s:g} s; stderr tail:\n"
                    + self._settled_tail()
                )
            readable, _, _ = select.select([self.proc.stdout], [], [], min(left, 0.5))
            if not readable:
                continue
            chunk = os.read(self.proc.stdout.fileno(), 65536)
            if not chunk:
                code = self.proc.wait()
                raise WorkerStartFailed(
                    f"the worker exited ({exit_of(code, '').signal or f'code {code}'}) before READY; "
                    "stderr tail:\n" + self._settled_tail()
                )
            buffer += chunk
        line = buffer.split(b"\n", 1)[0].decode(errors="replace")
        if not line.startswith(READY_PREFIX):
            self.kill(signal.SIGKILL)
            self.proc.wait()
            raise WorkerStartFailed(
                f"unexpected first stdout line {line!r}; stderr tail:\n{self._settled_tail()}"
            )
        ready = json.loads(line[len(READY_PREFIX) :])
        return str(ready["endpoint"])

    def _settled_tail(self) -> str:
        time.sleep(0.1)  # let the stderr reader take the last lines of a child that just died
        return self.stderr_tail()

    def _read_stderr(self) -> None:
        assert self.proc.stderr is not None
        for raw in iter(self.proc.stderr.readline, b""):
            line = raw.decode(errors="replace")
            self._tail.append(line)
            sys.stderr.write(line)  # into the actor's log (Ray's worker log files) as well

    def _drain_stdout(self) -> None:
        # the worker points its stdout at stderr after READY; drain anyway so a stray print never blocks it
        assert self.proc.stdout is not None
        while self.proc.stdout.read(65536):
            pass

    def kill(self, sig: int) -> None:
        """Send ``sig`` to the child unless it already exited."""
        if self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, sig)
            except ProcessLookupError:
                pass

    def wait(self) -> ChildExit:
        """Block until the child exits; how it ended."""
        code = self.proc.wait()
        return exit_of(code, self._settled_tail())
