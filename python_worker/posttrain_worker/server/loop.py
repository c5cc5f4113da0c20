"""The worker server: the I/O loop on the main thread, owning the ROUTER socket.

It answers heartbeats, cancels and I/O-thread methods inline, queues compute methods on the
:class:`ComputeExecutor` (or runs an ``inline`` one itself when the executor is idle: the same order, two
thread hand-offs fewer), and sends the replies the compute thread queues for it. It stops
on a ``shutdown`` request, SIGTERM/SIGINT, or EOF on stdin (the parent died), closing its sockets and
removing the ipc socket file.

What the methods started outside the process is stopped by ``atexit`` handlers (vLLM engines: the models
package registers one, vLLM its finalizers), also when a hung compute thread makes the worker leave with
``os._exit``, which skips them: the loop runs them itself first, bounded by ``EXIT_HANDLERS_TIMEOUT_S``.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import json
import logging
import os
import signal
import stat
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

import torch
import zmq

from posttrain_worker import PROTOCOL_VERSION
from posttrain_worker.curve import ZapHandler
from posttrain_worker.protocol.envelope import (
    Cancel,
    Heartbeat,
    Request,
    heartbeat_reply,
    parse_envelope,
    response_error,
)
from posttrain_worker.protocol.errors import (
    BAD_ENVELOPE,
    BAD_PAYLOAD,
    CANCELLED,
    OVERLOADED,
    ProtocolViolation,
    WorkerFailure,
)
from posttrain_worker.server.auth import UNAUTHENTICATED, SecretGate, check_protection
from posttrain_worker.server.config import ServerConfig
from posttrain_worker.server.endpoint import Endpoint, parse_endpoint
from posttrain_worker.server.executor import ComputeExecutor, Job, internal_failure, run_call
from posttrain_worker.server.payloads import check_frames
from posttrain_worker.server.registry import MethodRegistry, WorkerFacts

log = logging.getLogger("posttrain_worker.server")

READY_PREFIX = "POSTTRAIN_READY "
MAX_MESSAGES_PER_WAKE = 64
_COPY_BELOW_BYTES = 64 * 1024  # reply frames below this are sent as copies (pyzmq's own copy threshold)
# I/O-thread methods are short and cannot be cancelled: they share one event that is never set.
_NEVER_CANCELLED = threading.Event()
ZAP_DOMAIN = "posttrain"
_WAKE_SHUTDOWN = 0  # byte written to the wake-up pipe by request_shutdown (no signal has number 0)
EXIT_HANDLERS_TIMEOUT_S = 20.0


class WorkerServer:
    def __init__(self, config: ServerConfig, registry: MethodRegistry) -> None:
        self.config = config
        self.registry = registry
        self.endpoint: Endpoint = parse_endpoint(config.endpoint)
        # Before anything is bound: an endpoint the keys cannot protect is a start-up error, not a warning.
        check_protection(self.endpoint, config.auth, config.insecure)
        self._gate = SecretGate(config.auth.secret) if config.auth is not None else None
        self.facts = WorkerFacts(
            worker_id=config.worker_id,
            device=torch.device(config.device),
            max_payload_bytes=config.max_payload_bytes,
        )
        self.bound_endpoint: str | None = None
        self._stop_reason: str | None = None
        self._graceful = False
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)

    # ---- stopping ------------------------------------------------------------------------------------

    def request_shutdown(self, reason: str = "shutdown request", graceful: bool = True) -> None:
        """Ask the loop to stop; safe from any thread."""
        if self._stop_reason is None:
            self._stop_reason = reason
            self._graceful = graceful
        if self._wake_w >= 0:
            with contextlib.suppress(OSError):
                os.write(self._wake_w, bytes([_WAKE_SHUTDOWN]))

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        self.request_shutdown(signal.Signals(signum).name, graceful=False)

    # ---- main ----------------------------------------------------------------------------------------

    def run(self) -> int:
        """Bind, announce, serve until stopped; returns the process exit code."""
        context = zmq.Context()
        router = context.socket(zmq.ROUTER)
        router.setsockopt(zmq.SNDHWM, 0)  # never drop a reply
        router.setsockopt(zmq.LINGER, 0)
        # Per frame: libzmq reads a frame's size from its header and disconnects a sender whose frame is
        # larger, so an oversized payload is never buffered whole (the payload-sum check comes after receipt).
        router.setsockopt(zmq.MAXMSGSIZE, self.config.max_frame_bytes)
        try:
            self._protect(context, router)
            router.bind(self.endpoint.bind_address)
        except (zmq.ZMQError, RuntimeError) as exc:
            log.error("cannot bind %s: %s", self.endpoint.requested, exc)
            router.close(linger=0)
            context.term()
            self._close_pipe()
            return 1
        self.bound_endpoint = router.getsockopt_string(zmq.LAST_ENDPOINT)
        if self._gate is None:
            log.warning("serving %s WITHOUT authentication (--insecure)", self.bound_endpoint)

        executor = ComputeExecutor(
            self.facts,
            self.registry,
            lambda: self.request_shutdown("compute thread failed", graceful=False),
            self.config.max_in_flight,
        )
        executor.start()
        restore_signals = self._install_signal_handlers()
        stdin_fd = self._stdin_to_watch()
        exit_code = 0
        try:
            if self.config.announce:
                self._announce()
            log.info(
                "worker %d serving on %s (device %s, pid %d)",
                self.config.worker_id,
                self.bound_endpoint,
                self.facts.device,
                os.getpid(),
            )
            # Everything imported so far (torch and co: ~10^5 objects) lives as long as the process: out of
            # the collector's reach, a full collection no longer walks it (tens of ms, a latency spike on
            # whichever call triggers it).
            gc.freeze()
            self._serve(router, executor, stdin_fd)
        except Exception:
            log.exception("the I/O loop failed")
            self.request_shutdown("I/O loop failed", graceful=False)
            exit_code = 1
        finally:
            joined = self._close(context, router, executor)
            restore_signals()
            self._close_pipe()
        log.info("worker %d stopped (%s)", self.config.worker_id, self._stop_reason)
        if not joined:
            # The compute thread is stuck in a method that never checks cancellation: do not wait for it.
            log.warning("the running compute method did not stop; exiting without waiting for it")
            run_exit_handlers(EXIT_HANDLERS_TIMEOUT_S)
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(exit_code)
        return exit_code

    def _protect(self, context: zmq.Context, router: zmq.Socket) -> None:
        """CURVE on tcp: this socket is the server, and its ZAP handler admits only the pool's client key."""
        auth = self.config.auth
        if not self.endpoint.is_tcp or auth is None or auth.curve is None:
            return
        ZapHandler(context).allow(ZAP_DOMAIN, [auth.curve.client_public_key])
        router.setsockopt(zmq.ZAP_DOMAIN, ZAP_DOMAIN.encode())
        router.setsockopt(zmq.CURVE_SERVER, 1)
        router.setsockopt(zmq.CURVE_SECRETKEY, auth.curve.server_secret_key)

    def _announce(self) -> None:
        ready = {"endpoint": self.bound_endpoint, "pid": os.getpid(), "protocolVersion": PROTOCOL_VERSION}
        sys.stdout.write(READY_PREFIX + json.dumps(ready) + "\n")
        sys.stdout.flush()
        # Everything else goes to stderr, even from C extensions: the client reads stdout for READY only.
        os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
        sys.stdout = sys.stderr

    def _serve(self, router: zmq.Socket, executor: ComputeExecutor, stdin_fd: int | None) -> None:
        poller = zmq.Poller()
        poller.register(router, zmq.POLLIN)
        replies = executor.reply_fd
        poller.register(replies, zmq.POLLIN)
        poller.register(self._wake_r, zmq.POLLIN)
        if stdin_fd is not None:
            poller.register(stdin_fd, zmq.POLLIN)
        while self._stop_reason is None:
            events = dict(poller.poll())
            if replies in events:
                self._send_replies(router, executor)
            if router in events:
                for count in range(MAX_MESSAGES_PER_WAKE):
                    # The poll said the first message is there (multipart messages arrive whole): only the
                    # later ones need the EVENTS check, one getsockopt less on the path of every request.
                    if count and not router.getsockopt(zmq.EVENTS) & zmq.POLLIN:
                        break
                    received = _receive(router)
                    if received is None:
                        break
                    identity, head, payload_frames = received
                    try:
                        self._handle(router, executor, identity, head, payload_frames)
                    except Exception:  # a bug in the server itself: log it and keep serving
                        log.exception("failed to handle a message")
                    if self._stop_reason is not None:
                        break
            if self._wake_r in events:
                self._drain_wake_pipe()
            if stdin_fd is not None and stdin_fd in events:
                try:
                    data = os.read(stdin_fd, 65536)
                except OSError as exc:
                    log.info("reading stdin failed (%s): treating it as closed", exc)
                    data = b""
                if not data:
                    self.request_shutdown("stdin closed (the parent process is gone)", graceful=False)

    def _send_replies(self, router: zmq.Socket, executor: ComputeExecutor) -> None:
        for frames in executor.take_replies():
            self._send(router, frames)

    @staticmethod
    def _send(router: zmq.Socket, frames: list[Any]) -> None:
        # send_multipart's own loop, minus its checks: this is on the path of every reply. Small ``bytes``
        # (identity, envelope) are copied: a zero-copy Frame around them costs more than the copy. Anything
        # else goes copy=False: pyzmq still copies a buffer under its copy threshold (64 KiB), shares a larger
        # one with libzmq, and sends a ``zmq.Frame`` as that message.
        try:
            last = len(frames) - 1
            for i, frame in enumerate(frames):
                small = type(frame) is bytes and len(frame) < _COPY_BELOW_BYTES
                router.send(frame, zmq.SNDMORE if i < last else 0, copy=small)
        except zmq.ZMQError as exc:
            log.warning("could not send a reply: %s", exc)

    # ---- one client message --------------------------------------------------------------------------

    def _handle(
        self,
        router: zmq.Socket,
        executor: ComputeExecutor,
        identity: bytes,
        head: bytes | None,
        payload_frames: list[zmq.Frame],
    ) -> None:
        if head is None:
            return  # a ROUTER always gets at least one frame after the identity

        def reply_error(request_id: int | None, failure: WorkerFailure) -> None:
            self._send(
                router, [identity, response_error(request_id, failure.code, failure.message, failure.details)]
            )

        try:
            envelope = parse_envelope(head)
        except ProtocolViolation as violation:
            log.info("rejected an envelope: %s", violation)
            reply_error(violation.request_id, violation)
            return
        if self._gate is not None and not self._gate.admitted(identity):
            refusal = self._refusal(identity, envelope)
            if refusal is not None:
                reply_error(envelope.id, refusal)
                return

        if isinstance(envelope, (Heartbeat, Cancel)) and payload_frames:
            kind = "heartbeat" if isinstance(envelope, Heartbeat) else "cancel"
            reply_error(
                envelope.id,
                WorkerFailure(BAD_PAYLOAD, f"a {kind} carries no payload frames, got {len(payload_frames)}"),
            )
            return
        if isinstance(envelope, Heartbeat):
            busy, queued = executor.stats()
            self._send(router, [identity, heartbeat_reply(envelope.id, busy, queued)])
            return
        if isinstance(envelope, Cancel):
            job = executor.cancel(identity, envelope.id)
            if job is not None:
                log.info("cancelled %s (request %d) before it started", job.spec.name, job.request_id)
                message = f"{job.spec.name} (request {job.request_id}) was cancelled before it started"
                reply_error(job.request_id, WorkerFailure(CANCELLED, message))
            return
        assert isinstance(envelope, Request)
        self._handle_request(router, executor, identity, envelope, payload_frames, reply_error)

    def _refusal(self, identity: bytes, envelope: Request | Heartbeat | Cancel) -> WorkerFailure | None:
        """Why a message from a not yet admitted identity is refused; None for a handshake with the secret.

        Heartbeats and cancels are refused too: an outsider learns nothing, not even whether it is busy.
        """
        assert self._gate is not None
        if isinstance(envelope, Request) and envelope.method == "handshake":
            reason = self._gate.check_handshake(identity, envelope.args)
            if reason is None:
                return None
            log.warning("refused a handshake: %s", reason)
            return WorkerFailure(UNAUTHENTICATED, reason)
        what = f"{envelope.method} (request {envelope.id})" if isinstance(envelope, Request) else "a message"
        return WorkerFailure(UNAUTHENTICATED, f"{what} refused: handshake with the pool secret first")

    def _handle_request(
        self,
        router: zmq.Socket,
        executor: ComputeExecutor,
        identity: bytes,
        request: Request,
        payload_frames: list[zmq.Frame],
        reply_error: Callable[[int | None, WorkerFailure], None],
    ) -> None:
        try:
            check_frames(request.payloads, payload_frames, self.config.max_payload_bytes)
            spec = self.registry.lookup(request.method)
            try:
                args = spec.parse_args(spec.name, request.args)
            except WorkerFailure:
                raise
            except Exception as exc:
                raise internal_failure(exc) from exc
            self.registry.check_payloads(spec, request.payloads)
        except WorkerFailure as failure:
            log.info("rejected %s (request %d): %s", request.method, request.id, failure)
            reply_error(request.id, failure)
            return

        # An inline method runs here when the executor is idle (nothing running, queued or unsent), so its
        # reply keeps its place among the compute replies; otherwise it queues like any compute method.
        if spec.thread == "io" or (spec.inline and executor.idle()):
            reply = run_call(
                spec,
                request.id,
                args,
                request.payloads,
                payload_frames,
                facts=self.facts,
                registry=self.registry,
                cancel_event=_NEVER_CANCELLED,
                request_shutdown=self.request_shutdown,
            )
            self._send(router, [identity, *reply])
            return

        if executor.in_flight(identity, request.id):
            message = f'"id" {request.id} is already in flight; ids must be unique among requests in flight'
            reply_error(request.id, WorkerFailure(BAD_ENVELOPE, message))
            return
        job = Job(
            identity=identity,
            request_id=request.id,
            spec=spec,
            args=args,
            descriptors=request.payloads,
            frames=payload_frames,
        )
        if not executor.submit(job):
            limit = executor.max_in_flight
            message = (
                f"{request.method} (request {request.id}) was not queued: this worker already holds {limit} "
                "compute requests (its --max-in-flight); retry once some have been answered"
            )
            log.info("overloaded: %s", message)
            reply_error(request.id, WorkerFailure(OVERLOADED, message, {"maxInFlight": limit}))

    # ---- setup and teardown --------------------------------------------------------------------------

    def _install_signal_handlers(self) -> Callable[[], None]:
        if threading.current_thread() is not threading.main_thread():
            return lambda: None
        previous = {sig: signal.signal(sig, self._on_signal) for sig in (signal.SIGTERM, signal.SIGINT)}
        previous_fd = signal.set_wakeup_fd(self._wake_w, warn_on_full_buffer=False)

        def restore() -> None:
            signal.set_wakeup_fd(previous_fd)
            for sig, handler in previous.items():
                signal.signal(sig, handler)

        return restore

    def _stdin_to_watch(self) -> int | None:
        """fd 0 when it is a pipe or socket from the parent (not a terminal, not /dev/null)."""
        if not self.config.watch_stdin:
            return None
        try:
            mode = os.fstat(0).st_mode
        except OSError:
            return None
        if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
            return 0
        log.info("stdin is not a pipe: not watching it for the parent's exit")
        return None

    def _drain_wake_pipe(self) -> None:
        try:
            data = os.read(self._wake_r, 512)
        except BlockingIOError:
            return
        for byte in data:
            if byte != _WAKE_SHUTDOWN and self._stop_reason is None:
                # A signal arrived; its Python-level handler may not have run yet.
                try:
                    name = signal.Signals(byte).name
                except ValueError:
                    name = f"signal {byte}"
                self.request_shutdown(name, graceful=False)

    def _close(self, context: zmq.Context, router: zmq.Socket, executor: ComputeExecutor) -> bool:
        """Stop the executor, flush the last replies, close everything; False if the compute thread hung."""
        for job in executor.stop():
            message = f"{job.spec.name} (request {job.request_id}) was cancelled: the worker is shutting down"
            failure = WorkerFailure(CANCELLED, message)
            self._send(router, [job.identity, response_error(job.request_id, failure.code, failure.message)])
        joined = executor.join(self.config.stop_join_timeout_s)
        if joined:
            self._send_replies(router, executor)
            executor.close()
        linger = self.config.shutdown_linger_ms if self._graceful else 0
        router.close(linger=linger)
        if joined:
            context.term()
        self._remove_socket_file()
        return joined

    def _remove_socket_file(self) -> None:
        path = self.endpoint.ipc_path
        if path is None:
            return
        try:
            if stat.S_ISSOCK(os.lstat(path).st_mode):
                os.unlink(path)
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.warning("could not remove the socket file %s: %s", path, exc)

    def _close_pipe(self) -> None:
        fds = (self._wake_r, self._wake_w)
        self._wake_r = self._wake_w = -1
        for fd in fds:
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)


def run_exit_handlers(timeout_s: float) -> bool:
    """Runs the ``atexit`` handlers now (each runs once: the interpreter's exit then finds none), in a daemon
    thread given ``timeout_s``; False when they did not finish in time."""
    thread = threading.Thread(target=atexit._run_exitfuncs, name="exit-handlers", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        log.warning("the exit handlers did not finish within %.0f s", timeout_s)
    return not thread.is_alive()


def _receive(router: zmq.Socket) -> tuple[bytes, bytes | None, list[zmq.Frame]] | None:
    """One message: (identity, envelope, payload frames), or None when none is waiting. The identity is copied
    (cheaper than a Frame object); the envelope and payload frames come as ``zmq.Frame``s, whose ``more`` flag
    is read without a getsockopt(RCVMORE) per frame (the envelope is then copied out as bytes)."""
    try:
        identity = router.recv(zmq.NOBLOCK)
    except zmq.Again:
        return None
    # A ROUTER prepends the identity to a message of at least one frame and marks it MORE (libzmq's
    # router.cpp), so the envelope is part of the same message and already here; NOBLOCK only keeps the loop
    # from ever blocking on a frame libzmq does not deliver (the caller ignores a missing envelope).
    try:
        frame = router.recv(zmq.NOBLOCK, copy=False)
    except zmq.Again:
        return identity, None, []
    head = frame.bytes
    payloads: list[zmq.Frame] = []
    while frame.more:
        frame = router.recv(copy=False)
        payloads.append(frame)
    return identity, head, payloads
