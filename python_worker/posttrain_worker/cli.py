"""Command line of the worker: ``python -m posttrain_worker --endpoint ipc:///tmp/d/worker-0.sock``."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from posttrain_worker import PROTOCOL_VERSION, __version__
from posttrain_worker.server.config import DEFAULT_MAX_PAYLOAD_BYTES, ServerConfig

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
        required=True,
        help="where to bind: ipc:///path/worker-0.sock, or tcp://127.0.0.1:0 (or :*) for an ephemeral port",
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
        help=f"largest sum of payload frame sizes in one request (default {DEFAULT_MAX_PAYLOAD_BYTES})",
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
    parser.add_argument("--version", action="version", version=f"posttrain-worker {__version__}")
    return parser


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


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    ns = parser.parse_args(argv)
    logging.basicConfig(
        stream=sys.stderr,
        level=getattr(logging, ns.log_level),
        format=f"%(asctime)s posttrain-worker[{ns.worker_id}] %(levelname)s %(name)s: %(message)s",
    )
    if ns.worker_id < 0:
        parser.error("--worker-id must be >= 0")
    if ns.max_payload_bytes < 0:
        parser.error("--max-payload-bytes must be >= 0")
    _check_device(parser, ns.device)

    from posttrain_worker.methods import default_registry
    from posttrain_worker.server.loop import WorkerServer

    config = ServerConfig(
        endpoint=ns.endpoint,
        worker_id=ns.worker_id,
        device=ns.device,
        max_payload_bytes=ns.max_payload_bytes,
        watch_stdin=not ns.no_stdin_watch,
    )
    try:
        server = WorkerServer(config, default_registry())
    except ValueError as exc:
        parser.error(str(exc))
    return server.run()
