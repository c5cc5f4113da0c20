"""The compute executor: one thread running compute methods in arrival order.

The I/O thread submits :class:`Job`s; the compute thread decodes their payloads, runs the handler, encodes
the reply and queues the reply frames ``[identity, envelope, *payloads]`` for the I/O thread, waking it
through a pipe that its poll watches (zmq sockets are not thread-safe: only the I/O thread touches the
ROUTER). A reply crosses as the Python objects the compute thread made: no inproc socket, no ``zmq.Frame``
per frame and no second message on the way; the I/O thread sends each frame once.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import zmq

from posttrain_worker.protocol.envelope import PayloadDescriptor, response_error, response_ok
from posttrain_worker.protocol.errors import CANCELLED, INTERNAL, WorkerFailure
from posttrain_worker.server.config import DEFAULT_MAX_IN_FLIGHT
from posttrain_worker.server.payloads import decode_payloads, encode_payloads
from posttrain_worker.server.registry import CallContext, MethodRegistry, MethodSpec, WorkerFacts

log = logging.getLogger("posttrain_worker.executor")

TRACEBACK_TAIL_CHARS = 4000


@dataclass
class Job:
    identity: bytes
    request_id: int
    spec: MethodSpec
    args: Any
    descriptors: tuple[PayloadDescriptor, ...]
    frames: list[zmq.Frame]
    received_at: float = field(default_factory=time.monotonic)
    cancel_event: threading.Event = field(default_factory=threading.Event)

    @property
    def key(self) -> tuple[bytes, int]:
        return (self.identity, self.request_id)


def internal_failure(exc: BaseException) -> WorkerFailure:
    """``INTERNAL`` with the exception type and the traceback tail."""
    tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    if len(tb) > TRACEBACK_TAIL_CHARS:
        tb = "..." + tb[-TRACEBACK_TAIL_CHARS:]
    return WorkerFailure(
        INTERNAL, f"{type(exc).__name__}: {exc}", {"type": type(exc).__qualname__, "traceback": tb}
    )


def run_call(
    spec: MethodSpec,
    request_id: int,
    args: Any,
    descriptors: tuple[PayloadDescriptor, ...],
    frames: list[Any],
    *,
    facts: WorkerFacts,
    registry: MethodRegistry,
    cancel_event: threading.Event,
    request_shutdown: Callable[[], None],
) -> list[Any]:
    """Decode, run, encode: the reply frames ``[envelope, *payloads]``. Never raises for a method's fault."""
    try:
        # A call without payloads (most control calls) skips the codec glue both ways.
        inputs = decode_payloads(descriptors, frames) if descriptors or frames else []
        ctx = CallContext(
            method=spec.name,
            request_id=request_id,
            payloads=inputs,
            worker=facts,
            registry=registry,
            cancel_event=cancel_event,
            request_shutdown=request_shutdown,
        )
        outcome = spec.handler(ctx, args)
        if isinstance(outcome, dict):
            result, outputs = outcome, []
        else:
            result, outputs = outcome.result, outcome.payloads
        out_descriptors, out_frames = encode_payloads(outputs) if outputs else ([], [])
        try:
            envelope = response_ok(request_id, result, out_descriptors)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"{spec.name} returned a result that is not JSON: {exc}") from exc
        return [envelope, *out_frames]
    except WorkerFailure as failure:
        if failure.code != CANCELLED:
            log.info("%s (request %d) failed: %s", spec.name, request_id, failure)
        return [response_error(request_id, failure.code, failure.message, failure.details)]
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as exc:
        # BaseException too: some libraries raise subclasses of it (torch.distributed.checkpoint's
        # CheckpointException), which would otherwise end the compute thread and leave the caller without a
        # reply.
        log.exception("%s (request %d) raised", spec.name, request_id)
        failure = internal_failure(exc)
        return [response_error(request_id, failure.code, failure.message, failure.details)]


class ComputeExecutor:
    """One worker thread, a bounded FIFO queue, cancellation of queued jobs, a busy flag for heartbeats.

    At most ``max_in_flight`` jobs (the running one included) are held: :meth:`submit` refuses more, so a
    flood of requests costs the worker a bounded amount of memory and each refused one gets an answer at once.
    """

    def __init__(
        self,
        facts: WorkerFacts,
        registry: MethodRegistry,
        request_shutdown: Callable[[], None],
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
    ) -> None:
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight must be >= 1, got {max_in_flight}")
        self.max_in_flight = max_in_flight
        self._facts = facts
        self._registry = registry
        self._request_shutdown = request_shutdown
        self._cond = threading.Condition()
        self._queue: deque[Job] = deque()
        self._running: Job | None = None
        self._stopping = False
        # Replies made and not yet taken by the I/O thread, in the order they were made; a byte on the pipe
        # wakes the I/O thread's poll when the first one arrives (it takes them all at once).
        self._replies: deque[list[Any]] = deque()
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._thread = threading.Thread(target=self._main, name="posttrain-compute", daemon=True)

    # ---- called from the I/O thread ------------------------------------------------------------------

    def start(self) -> None:
        self._thread.start()

    def submit(self, job: Job) -> bool:
        """Queue ``job``; False (not queued) when ``max_in_flight`` jobs are already held."""
        with self._cond:
            if len(self._queue) + (self._running is not None) >= self.max_in_flight:
                return False
            self._queue.append(job)
            self._cond.notify()
        return True

    @property
    def reply_fd(self) -> int:
        """The file descriptor the I/O thread polls: readable once replies wait in :meth:`take_replies`."""
        return self._wake_r

    def take_replies(self) -> list[list[Any]]:
        """The replies made since the last call, oldest first: each ``[identity, envelope, *payloads]``."""
        with contextlib.suppress(BlockingIOError):
            os.read(self._wake_r, 4096)  # before taking: a reply queued after this read wakes the next poll
        with self._cond:
            replies = list(self._replies)
            self._replies.clear()
        return replies

    def idle(self) -> bool:
        """Nothing running, queued or waiting to be sent: a job run now on the calling thread keeps every
        reply of this executor in request order."""
        with self._cond:
            return self._running is None and not self._queue and not self._replies

    def stats(self) -> tuple[bool, int]:
        """(busy, queued): whether a job is running, and how many wait behind it."""
        with self._cond:
            return self._running is not None, len(self._queue)

    def in_flight(self, identity: bytes, request_id: int) -> bool:
        key = (identity, request_id)
        with self._cond:
            return (self._running is not None and self._running.key == key) or any(
                job.key == key for job in self._queue
            )

    def cancel(self, identity: bytes, request_id: int) -> Job | None:
        """Remove a queued job and return it; a running one is only told to stop (returns None)."""
        key = (identity, request_id)
        with self._cond:
            for job in self._queue:
                if job.key == key:
                    self._queue.remove(job)
                    return job
            if self._running is not None and self._running.key == key:
                self._running.cancel_event.set()
        return None

    def stop(self) -> list[Job]:
        """Stop taking jobs: returns the queued ones (not run) and tells the running one to stop."""
        with self._cond:
            self._stopping = True
            dropped = list(self._queue)
            self._queue.clear()
            if self._running is not None:
                self._running.cancel_event.set()
            self._cond.notify_all()
        return dropped

    def join(self, timeout: float) -> bool:
        if self._thread.is_alive():
            self._thread.join(timeout)
        return not self._thread.is_alive()

    def close(self) -> None:
        """Close the wake-up pipe, after :meth:`join` returned True."""
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._wake_r = self._wake_w = -1

    # ---- the compute thread --------------------------------------------------------------------------

    def _next(self) -> Job | None:
        with self._cond:
            while not self._queue and not self._stopping:
                self._cond.wait()
            if self._stopping:
                return None
            self._running = self._queue.popleft()
            return self._running

    def _reply(self, frames: list[Any]) -> None:
        with self._cond:
            # Not busy once the reply is on its way (heartbeats after it agree).
            self._running = None
            first = not self._replies
            self._replies.append(frames)
        if first:
            with contextlib.suppress(OSError):  # BlockingIOError: the pipe is full, so the poll wakes anyway
                os.write(self._wake_w, b"\x00")

    def _main(self) -> None:
        try:
            while (job := self._next()) is not None:
                started = time.monotonic()
                frames = run_call(
                    job.spec,
                    job.request_id,
                    job.args,
                    job.descriptors,
                    job.frames,
                    facts=self._facts,
                    registry=self._registry,
                    cancel_event=job.cancel_event,
                    request_shutdown=self._request_shutdown,
                )
                job.frames = []  # release the request's frames before the reply goes out
                done = time.monotonic()
                self._reply([job.identity, *frames])
                log.debug(
                    "%s (request %d) done in %.1f ms (%.1f ms queued)",
                    job.spec.name,
                    job.request_id,
                    (done - started) * 1e3,
                    (started - job.received_at) * 1e3,
                )
        except Exception:  # pragma: no cover - a bug in the executor itself, not in a method
            log.exception("the compute thread failed")
            self._request_shutdown()
        finally:
            with self._cond:
                self._running = None
