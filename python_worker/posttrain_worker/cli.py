"""Command line of the worker: ``python -m posttrain_worker --endpoint ipc:///tmp/d/worker-0.sock``.

``--extension PATH`` (repeatable) adds the methods a Python file registers (its ``register(registry)``, called
after the default methods); ``--describe-methods`` prints every method as JSON and exits without binding.
``--auth-stdin`` reads the pool secret and CURVE keys from stdin (the SDK's way); by hand, ``--insecure``
serves ipc or loopback tcp without them, for development (docs/workers.md, "Security").
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import logging
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from posttrain_worker import PROTOCOL_VERSION, __version__
from posttrain_worker.server.auth import WorkerAuth, read_auth_line
from posttrain_worker.server.config import (
    DEFAULT_MAX_IN_FLIGHT,
    DEFAULT_MAX_PAYLOAD_BYTES,
    MIN_FRAME_LIMIT_BYTES,
    ServerConfig,
)

if TYPE_CHECKING:
    from posttrain_worker.server.registry import MethodRegistry

log = logging.getLogger("posttrain_worker")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m posttrain_worker",
        description=(
            "posttrain Python worker: serves tensor compute to the posttrain TypeScript SDK over ZeroMQ "
            f"(protocol version {PROTOCOL_VERSION}, docs/protocol.md). Once bound it prints one line "
            '`POSTTRAIN_READY {"endpoint": ..., "pid": ..., "protocolVersion": ...}` to stdout; '
            "logs go to stderr. It exits on a `shutdown` request, SIGTERM/SIGINT, or EOF on stdin."
        ),
    )
    parser.add_argument(
        "--endpoint",
        help="where to bind: ipc:///path/worker-0.sock, or tcp://127.0.0.1:0 (or :*) for an ephemeral port "
        "(required unless --describe-methods)",
    )
    parser.add_argument(
        "--worker-id", type=int, default=0, help="this worker's index in its pool (default 0)"
    )
    parser.add_argument(
        "--device", default="cpu", help="torch device for compute: cpu, cuda, cuda:1 (default cpu)"
    )
    parser.add_argument(
        "--max-payload-bytes",
        type=int,
        default=DEFAULT_MAX_PAYLOAD_BYTES,
        help=f"largest sum of payload frame sizes in one request (default {DEFAULT_MAX_PAYLOAD_BYTES}); also "
        f"the largest single frame the socket accepts (at least {MIN_FRAME_LIMIT_BYTES}): a larger frame "
        "disconnects its sender before it is received whole",
    )
    parser.add_argument(
        "--max-in-flight",
        type=int,
        default=DEFAULT_MAX_IN_FLIGHT,
        help="compute requests held at once (running + queued, all clients together); more are answered "
        f"OVERLOADED at once (default {DEFAULT_MAX_IN_FLIGHT})",
    )
    parser.add_argument(
        "--auth-stdin",
        action="store_true",
        help='read one JSON line {"secret": HEX, "curve": {"serverSecretKey", "clientPublicKey"}} from stdin '
        "before binding (how the SDK passes the pool secret and CURVE keys: never in argv or environment); "
        "every client must then handshake with the secret, and tcp uses CURVE",
    )
    parser.add_argument(
        "--insecure",
        action="store_true",
        help="development only: serve without a secret on ipc or loopback tcp (refused on other addresses); "
        "without --auth-stdin or --insecure the worker refuses to start",
    )
    parser.add_argument(
        "--no-stdin-watch",
        action="store_true",
        help="keep running when stdin reaches EOF (by default a worker whose stdin is a pipe exits then)",
    )
    parser.add_argument(
        "--log-level",
        default="INFO",
        choices=["DEBUG", "INFO", "WARNING", "ERROR"],
        help="stderr log level (default INFO)",
    )
    parser.add_argument(
        "--extension",
        action="append",
        default=[],
        metavar="PATH",
        help="a Python file whose register(registry) adds methods after the default ones (repeatable)",
    )
    parser.add_argument(
        "--describe-methods",
        action="store_true",
        help='print {"methods": {name: {thread, payloads, args}}} as JSON to stdout and exit (binds nothing)',
    )
    parser.add_argument("--version", action="version", version=f"posttrain-worker {__version__}")
    return parser


def load_extension(path: str, index: int) -> Callable[[MethodRegistry], None]:
    """The ``register`` function of the Python file at ``path``; ``ValueError`` saying what is wrong."""
    file = Path(path)
    if not file.is_file():
        raise ValueError("no such file")
    name = f"posttrain_worker_extension_{index}_{''.join(c if c.isalnum() else '_' for c in file.stem)}"
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:
        raise ValueError("not an importable Python file")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look their module up there
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[name]
        raise ValueError(f"import failed: {type(exc).__name__}: {exc}") from exc
    register = getattr(module, "register", None)
    if not callable(register):
        raise ValueError("defines no register(registry) function")
    return register


def build_registry(parser: argparse.ArgumentParser, extensions: Sequence[str]) -> MethodRegistry:
    """The default methods, then each extension's; a bad extension is a usage error naming its path."""
    from posttrain_worker.methods import default_registry

    registry = default_registry()
    for index, path in enumerate(extensions):
        try:
            load_extension(path, index)(registry)
        except ValueError as exc:
            parser.error(f"--extension {path!r}: {exc}")
        except Exception as exc:
            parser.error(f"--extension {path!r}: register(registry) failed: {type(exc).__name__}: {exc}")
    return registry


def _check_device(parser: argparse.ArgumentParser, device: str) -> None:
    import torch

    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError) as exc:
        parser.error(f"--device {device!r}: {exc}")
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            parser.error(f"--device {device!r}: CUDA is not available in this environment")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            parser.error(f"--device {device!r}: only {torch.cuda.device_count()} CUDA device(s) present")
    elif dev.type != "cpu":
        parser.error(f"--device {device!r}: expected cpu or cuda[:N]")


def _read_auth(parser: argparse.ArgumentParser) -> WorkerAuth:
    """The auth line from stdin; the CURVE keys also protect worker-to-worker weight transfers."""
    try:
        auth = read_auth_line()
    except ValueError as exc:
        parser.error(str(exc))
    from posttrain_worker.transfer import zmq_transfer

    zmq_transfer.configure_keys(auth.curve)
    return auth


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    ns = parser.parse_args(argv)
    if ns.describe_methods:
        print(json.dumps(build_registry(parser, ns.extension).describe(), indent=2, sort_keys=True))
        return 0
    if ns.endpoint is None:
        parser.error("the following arguments are required: --endpoint")
    logging.basicConfig(
        stream=sys.stderr,
        level=getattr(logging, ns.log_level),
        format=f"%(asctime)s posttrain-worker[{ns.worker_id}] %(levelname)s %(name)s: %(message)s",
    )
    if ns.worker_id < 0:
        parser.error("--worker-id must be >= 0")
    if ns.max_payload_bytes < 0:
        parser.error("--max-payload-bytes must be >= 0")
    if ns.max_in_flight < 1:
        parser.error(f"--max-in-flight must be >= 1, got {ns.max_in_flight}")
    _check_device(parser, ns.device)
    registry = build_registry(parser, ns.extension)

    from posttrain_worker.server.loop import WorkerServer

    config = ServerConfig(
        endpoint=ns.endpoint,
        worker_id=ns.worker_id,
        device=ns.device,
        max_payload_bytes=ns.max_payload_bytes,
        max_in_flight=ns.max_in_flight,
        watch_stdin=not ns.no_stdin_watch,
        auth=_read_auth(parser) if ns.auth_stdin else None,
        insecure=ns.insecure,
    )
    try:
        server = WorkerServer(config, registry)
    except ValueError as exc:
        parser.error(str(exc))
    return server.run()
