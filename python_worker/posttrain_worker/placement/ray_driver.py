"""The Ray driver the TS SDK runs per Ray pool: ``python -m posttrain_worker.placement.ray_driver``.

It reads one JSON request per line on stdin and writes JSON lines on stdout: replies
``{"id", "ok": true, "result"}`` / ``{"id", "ok": false, "error": {"code", "message", "details"?}}`` and
events ``{"event": ...}`` (the contract, every op, event and worst-case time: docs/protocol.md, "Ray driver").
Only protocol lines go to stdout: the real stdout is kept on a private descriptor and descriptor 1 points at
stderr before Ray is imported (Ray prints there). Its first line is ``driver_ready`` (or ``driver_failed``
with exit code 3 when Ray cannot be imported).

EOF on stdin, SIGTERM or SIGINT clean up exactly as ``close``: actors killed, placement group removed, and a
cluster this driver started is stopped, so no Ray process outlives it. A signal also interrupts the op that is
running (see :class:`Terminate`). Ops run one at a time on the main thread; events come from watcher threads
(``worker_group.py``) through the same locked writer.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import shutil
import signal
import sys
import tempfile
import threading
from collections.abc import Iterable
from typing import IO, Any

from posttrain_worker.placement.messages import (
    RAY_CONNECT_FAILED,
    RAY_UNAVAILABLE,
    BadRequest,
    DriverError,
    Request,
    connect_args,
    create_workers_args,
    kill_worker_args,
    parse_line,
    restart_args,
)

log = logging.getLogger("posttrain_worker.placement")

EXIT_RAY_UNAVAILABLE = 3
LOOPBACK = "127.0.0.1"


AUTH_ENV = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")


def prepare_loopback(temp_dir: str) -> dict[str, str]:
    """Make a Ray cluster started by this process stay on loopback and use a token of its own.

    Sets ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` (without it a node advertises, and binds, the machine's
    interface address) and, unless Ray's authentication is already configured in the environment, writes a
    fresh token to ``<temp_dir>/auth_token`` (mode 0600) and points ``RAY_AUTH_MODE``/``RAY_AUTH_TOKEN_PATH``
    at it (else Ray writes ``~/.ray/auth_token``). Works before or after ``import ray``: Ray reads these once
    at import, so an imported Ray is made to see them. Returns the variables a second process (another
    driver joining the cluster) needs in its environment. Used by the driver for ``connect`` without an
    address, and by the tests' simulated cluster (test/python/ray_cluster.py)."""
    env = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    wrote_token = False
    if any(k in os.environ for k in AUTH_ENV):
        env.update({k: os.environ[k] for k in AUTH_ENV if k in os.environ})
    else:
        token_path = os.path.join(temp_dir, "auth_token")
        fd = os.open(token_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))
        env.update({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": token_path})
        wrote_token = True
    os.environ.update(env)
    if "ray" in sys.modules:
        from ray._private import ray_constants

        ray_constants.ENABLE_RAY_CLUSTER = False
        if wrote_token:
            from ray._raylet import AuthenticationTokenLoader, Config

            Config.initialize("")
            AuthenticationTokenLoader.instance().reset_cache()
    return env


class Output:
    """The protocol's stdout: one JSON object per line, written whole under a lock (watchers write too)."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream
        self._lock = threading.Lock()

    def write(self, obj: dict[str, Any]) -> None:
        line = json.dumps(obj, separators=(",", ":")) + "\n"
        with self._lock:
            try:
                self._stream.write(line)
                self._stream.flush()
            except (BrokenPipeError, ValueError):
                pass  # the TS side is gone; EOF on stdin ends the driver


def protocol_stdout() -> IO[str]:
    """Keep the real stdout for protocol lines and point descriptor 1 (and ``sys.stdout``) at stderr."""
    real = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return real


class Terminate(KeyboardInterrupt):
    """Raised in the main thread by SIGTERM/SIGINT: clean up as for ``close``.

    A KeyboardInterrupt on purpose: it also interrupts a running op blocked in ``ray.get`` (waiting for the
    placement group, the actors, a restart), where Ray checks for signals and turns whatever the handler
    raised into a plain KeyboardInterrupt, which :meth:`Driver.serve` treats the same way."""


class Driver:
    def __init__(self, ray: Any, out: Output) -> None:
        self.ray = ray
        self.out = out
        self.connected = False
        self.started = False
        self.temp_dir: str | None = None
        self.created_temp_dir = False
        self.group: Any = None  # WorkerGroup, imported lazily with Ray's placement modules
        self.closed = False

    # ---- loop -----------------------------------------------------------------------------------------

    def serve(self, lines: Iterable[str]) -> int:
        try:
            for line in lines:
                if not line.strip():
                    continue
                if self.handle(line):
                    return 0
        except KeyboardInterrupt:  # Terminate, or what Ray made of it inside ray.get
            log.info("signal received: cleaning up")
        self.cleanup()
        return 0

    def handle(self, line: str) -> bool:
        """Answer one request line; True when it was ``close``."""
        request_id: int | None = None
        try:
            request = parse_line(line)
            request_id = request.id
            if request.op == "close":
                stopped = self.cleanup()
                self.reply(request, {"stoppedCluster": stopped})
                return True
            self.reply(request, self.dispatch(request))
        except DriverError as exc:
            if isinstance(exc, BadRequest) and exc.request_id is not None:
                request_id = exc.request_id
            self.out.write({"id": request_id, "ok": False, "error": exc.as_json()})
        except Exception as exc:
            log.exception("request failed")
            self.out.write(
                {
                    "id": request_id,
                    "ok": False,
                    "error": {"code": "INTERNAL", "message": f"{type(exc).__name__}: {exc}"},
                }
            )
        return False

    def reply(self, request: Request, result: dict[str, Any]) -> None:
        self.out.write({"id": request.id, "ok": True, "result": result})

    def dispatch(self, request: Request) -> dict[str, Any]:
        if request.op == "connect":
            return self.connect(request)
        # arguments first, so a malformed request is named as such whatever the driver's state
        create = create_workers_args(request) if request.op == "create_workers" else None
        restart = restart_args(request) if request.op == "restart" else None
        kill = kill_worker_args(request) if request.op == "kill_worker" else None
        if not self.connected:
            raise BadRequest(f'{request.op}: connect first (op "connect")', request.id)
        if request.op == "status":
            return self.status()
        if create is not None:
            if self.group is not None:
                raise BadRequest(
                    "create_workers: this driver already holds a pool; close it first", request.id
                )
            from posttrain_worker.placement.worker_group import WorkerGroup

            group = WorkerGroup(self.ray, create, self.out.write)
            self.group = group
            try:
                return group.create()
            except BaseException:
                self.group = None
                raise
        if self.group is None:
            raise BadRequest(f'{request.op}: no workers yet (op "create_workers" first)', request.id)
        if restart is not None:
            return {"workers": self.group.restart(restart.indices, restart.timeout_s, restart.incarnations)}
        if kill is not None:
            return {"killed": self.group.kill_worker(kill.index, kill.signal, kill.incarnation)}
        raise BadRequest(f'unknown "op" {request.op!r}', request.id)  # parse_line already refused it

    # ---- ops ------------------------------------------------------------------------------------------

    def connect(self, request: Request) -> dict[str, Any]:
        args = connect_args(request)
        if self.connected:
            raise BadRequest("connect: already connected", request.id)
        ray = self.ray
        common: dict[str, Any] = {
            "namespace": args.namespace,
            "runtime_env": args.runtime_env,
            "log_to_driver": False,
        }
        try:
            if args.address is None:
                self._prepare_local(args.temp_dir)
                ray.init(
                    address="local",
                    include_dashboard=False,
                    _node_ip_address=LOOPBACK,
                    _temp_dir=self.temp_dir,
                    num_cpus=args.num_cpus,
                    **common,
                )
                self.started = True
            else:
                ray.init(address=args.address, **common)
        except Exception as exc:
            install_signal_handlers()
            self._remove_temp_dir()
            shown = args.address if args.address is not None else "a local cluster on 127.0.0.1"
            raise DriverError(
                RAY_CONNECT_FAILED, f"could not connect to {shown}: {type(exc).__name__}: {exc}"
            ) from None
        install_signal_handlers()  # ray.init put its own SIGTERM handler (sys.exit) in place of ours
        self.connected = True
        address = ray.get_runtime_context().gcs_address
        return {"address": address, "started": self.started, **self._cluster()}

    def _prepare_local(self, temp_dir: str | None) -> None:
        if temp_dir is None:
            temp_dir = tempfile.mkdtemp(prefix="ptray-", dir="/tmp")
            self.created_temp_dir = True
        self.temp_dir = temp_dir
        prepare_loopback(temp_dir)

    def _cluster(self) -> dict[str, Any]:
        from posttrain_worker.placement.worker_group import nodes_json

        return {
            "nodes": nodes_json(self.ray),
            "available": self.ray.available_resources(),
            "total": self.ray.cluster_resources(),
        }

    def status(self) -> dict[str, Any]:
        group = self.group
        return {
            **self._cluster(),
            "workers": group.status_workers() if group is not None else [],
            "placementGroupId": group.placement_group_id if group is not None else None,
        }

    # ---- cleanup --------------------------------------------------------------------------------------

    def cleanup(self) -> bool:
        """Kill the actors, remove the placement group, stop a cluster this driver started; idempotent.
        True when a cluster was stopped."""
        if self.closed:
            return False
        self.closed = True
        # a second signal during cleanup must not cut it short
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, signal.SIG_IGN)
        if self.group is not None:
            self.group.teardown()
        if self.connected:
            with contextlib.suppress(Exception):
                self.ray.shutdown()
        self._remove_temp_dir()
        return self.started

    def _remove_temp_dir(self) -> None:
        if self.created_temp_dir and self.temp_dir is not None:
            shutil.rmtree(self.temp_dir, ignore_errors=True)


_terminating = threading.Event()


def _terminate(_signum: int, _frame: Any) -> None:
    # once only: a second signal must not cut short the teardown the first one started (an interrupted
    # create_workers tears its own actors down before cleanup() runs)
    if _terminating.is_set():
        return
    _terminating.set()
    raise Terminate()


def install_signal_handlers() -> None:
    """SIGTERM and SIGINT clean up as ``close`` (through :class:`Terminate` in the main thread)."""
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _terminate)


def main() -> int:
    out = Output(protocol_stdout())
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.INFO,
        format="%(asctime)s posttrain-ray-driver %(levelname)s %(message)s",
    )
    try:
        import ray
    except ImportError as exc:
        log.error("import ray failed: %s", exc)
        message = f"ray is not installed in {sys.executable}: npx posttrain setup --extras ray"
        out.write({"event": "driver_failed", "code": RAY_UNAVAILABLE, "message": message})
        return EXIT_RAY_UNAVAILABLE
    install_signal_handlers()
    driver = Driver(ray, out)
    out.write({"event": "driver_ready", "pid": os.getpid(), "rayVersion": ray.__version__})
    return driver.serve(sys.stdin)


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    os._exit(code)  # Ray's non-daemon threads must not keep a closed driver alive
