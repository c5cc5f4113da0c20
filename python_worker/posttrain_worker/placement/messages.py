"""The Ray driver's request lines, parsed and validated (the contract: docs/protocol.md, "Ray driver").

Every request is one JSON object ``{"id": int, "op": str, ...args}``; a line that is not one, an unknown op,
or an argument of the wrong shape raises :class:`BadRequest`, whose message names the field and what was
expected (the driver answers it ``BAD_REQUEST`` and keeps serving).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from posttrain_worker.errors import WorkerFailure
from posttrain_worker.validation import FieldReader

BAD_REQUEST = "BAD_REQUEST"
RAY_CONNECT_FAILED = "RAY_CONNECT_FAILED"
PLACEMENT_INFEASIBLE = "PLACEMENT_INFEASIBLE"
PLACEMENT_TIMEOUT = "PLACEMENT_TIMEOUT"
WORKER_START_FAILED = "WORKER_START_FAILED"
RESTARTS_EXHAUSTED = "RESTARTS_EXHAUSTED"
RESTART_TIMEOUT = "RESTART_TIMEOUT"
RAY_UNAVAILABLE = "RAY_UNAVAILABLE"

OPS = ("connect", "create_workers", "restart", "kill_worker", "status", "close")
STRATEGIES = ("PACK", "SPREAD", "STRICT_SPREAD")
SIGNALS = ("SIGKILL", "SIGTERM")


class DriverError(WorkerFailure):
    """A failed op: the package's failure type, its ``code`` one of the constants above."""

    def as_json(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.details:
            error["details"] = self.details
        return error


class BadRequest(DriverError):
    """A malformed request; ``request_id`` is its id when one could be read."""

    def __init__(self, message: str, request_id: int | None = None) -> None:
        super().__init__(BAD_REQUEST, message)
        self.request_id = request_id


@dataclass(frozen=True)
class Request:
    id: int
    op: str
    args: dict[str, Any]


def parse_line(line: str) -> Request:
    """One request line as a :class:`Request` (the op's args still unchecked)."""
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise BadRequest(f"the line is not JSON ({exc.msg} at column {exc.colno})") from None
    if not isinstance(obj, dict):
        raise BadRequest(f"a request must be a JSON object, got a JSON {_kind(obj)}")
    request_id = obj.get("id")
    if not isinstance(request_id, int) or isinstance(request_id, bool):
        raise BadRequest(f'"id" must be an integer, got {_shown(request_id)}')
    op = obj.get("op")
    if not isinstance(op, str):
        raise BadRequest(f'"op" must be a string, one of {list(OPS)}, got {_shown(op)}', request_id)
    if op not in OPS:
        raise BadRequest(f'unknown "op" {op!r}: expected one of {list(OPS)}', request_id)
    args = {k: v for k, v in obj.items() if k not in ("id", "op")}
    return Request(request_id, op, args)


# ---- op arguments --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ConnectArgs:
    address: str | None
    namespace: str | None
    runtime_env: dict[str, Any] | None
    temp_dir: str | None
    num_cpus: float | None


@dataclass(frozen=True)
class WorkerSpec:
    index: int
    role: str
    resources: dict[str, float]
    args: list[str]
    env: dict[str, str]


@dataclass(frozen=True)
class CreateWorkersArgs:
    auth: dict[str, str]
    strategy: str
    workers: list[WorkerSpec]
    max_restarts: int
    start_timeout_s: float
    placement_timeout_s: float


@dataclass(frozen=True)
class RestartArgs:
    indices: list[int]
    timeout_s: float
    incarnations: list[int] | None
    """Per index, the incarnation the caller last held (``None``: the current ones)."""


@dataclass(frozen=True)
class KillWorkerArgs:
    index: int
    signal: str
    incarnation: int
    """Signal the worker only while this is its current incarnation (never a newer one)."""


def connect_args(request: Request) -> ConnectArgs:
    a = _Fields(request)
    address = a.string("address", default=None, nullable=True)
    if address is not None and address.strip().lower().startswith("ray://"):
        # Ray Client proxies the driver's calls; the GCS tables the driver reads (actor states, placement
        # groups, the GCS address) are not served through it, so supervision would silently degrade
        raise a.bad(
            f'"address" {address!r} is a Ray Client address, which the Ray driver does not support: run on a '
            'node of the cluster with "auto", or give the head\'s GCS "host:port" (e.g. "10.0.0.1:6379")'
        )
    num_cpus = a.number("numCpus", default=None, nullable=True, minimum=0)
    return ConnectArgs(
        address=address,
        namespace=a.string("namespace", default=None, nullable=True),
        runtime_env=a.object("runtimeEnv", default=None, nullable=True),
        temp_dir=a.string("tempDir", default=None, nullable=True),
        num_cpus=num_cpus,
    )


def create_workers_args(request: Request) -> CreateWorkersArgs:
    a = _Fields(request)
    auth = _Fields(request, a.object("auth"), "auth")
    keys = ("secret", "serverSecretKey", "clientPublicKey")
    auth_values = {key: auth.string(key, non_empty=True) for key in keys}
    strategy = a.choice("strategy", STRATEGIES)
    raw_workers = a.json("workers")
    if not isinstance(raw_workers, list) or not raw_workers:
        raise a.bad(f'"workers" must be a non-empty array, got {_shown(raw_workers)}')
    workers = [_worker_spec(request, i, w) for i, w in enumerate(raw_workers)]
    return CreateWorkersArgs(
        auth=auth_values,
        strategy=strategy,
        workers=workers,
        max_restarts=a.integer("maxRestarts", minimum=-1),
        start_timeout_s=a.number("startTimeoutS", greater_than=0),
        placement_timeout_s=a.number("placementTimeoutS", greater_than=0),
    )


def _worker_spec(request: Request, i: int, w: Any) -> WorkerSpec:
    f = _Fields(request, w, f"workers[{i}]")
    index = f.integer("index")
    if index != i:
        raise f.fail("index", f"must be {i} (workers are listed in index order), got {index}")
    role = f.string("role", non_empty=True)
    resources = f.object("resources")
    bundle: dict[str, float] = {}
    for name, amount in resources.items():
        if not _is_number(amount) or amount < 0:
            raise f.fail(f"resources.{name}", f"must be a number >= 0, got {_shown(amount)}")
        if amount > 0:  # zero entries are dropped: Ray refuses them in a bundle
            bundle[name] = float(amount)
    if not bundle:
        raise f.fail("resources", "must ask for at least one resource > 0 (Ray refuses empty bundles)")
    args = f.strings("args", default=[])
    env = f.object("env", default={}, nullable=True) or {}
    if not all(isinstance(v, str) for v in env.values()):
        raise f.fail("env", f"must be an object of strings, got {_shown(env)}")
    return WorkerSpec(i, role, bundle, args, dict(env))


def restart_args(request: Request) -> RestartArgs:
    a = _Fields(request)
    indices = a.json("indices")
    if not isinstance(indices, list) or not indices or not all(_is_count(i) for i in indices):
        raise a.bad(f'"indices" must be a non-empty array of integers >= 0, got {_shown(indices)}')
    if len(set(indices)) != len(indices):
        raise a.bad(f'"indices" must not repeat an index, got {indices}')
    timeout_s = a.number("timeoutS", greater_than=0)
    incarnations = a.json("incarnations", default=None)
    if incarnations is not None:
        if not isinstance(incarnations, list) or not all(_is_count(i) for i in incarnations):
            raise a.bad(
                f'"incarnations" must be an array of integers >= 0 or absent, got {_shown(incarnations)}'
            )
        if len(incarnations) != len(indices):
            raise a.bad(
                f'"incarnations" must have one entry per index ({len(indices)}), got {len(incarnations)}'
            )
        incarnations = list(incarnations)
    return RestartArgs(list(indices), timeout_s, incarnations)


def kill_worker_args(request: Request) -> KillWorkerArgs:
    a = _Fields(request)
    return KillWorkerArgs(
        index=a.integer("index", minimum=0),
        signal=a.choice("signal", SIGNALS),
        incarnation=a.integer("incarnation", minimum=0),
    )


# ---- helpers -------------------------------------------------------------------------------------------


_ARGS: Any = object()
"""The default of :class:`_Fields`'s ``raw``: the request's own args."""


class _Fields(FieldReader):
    """The package's field reader over a request's args, or over one of their values (``raw``, the field
    ``section``); every failure is a :class:`BadRequest` naming the op and the field."""

    def __init__(self, request: Request, raw: Any = _ARGS, section: str = "") -> None:
        self.request = request
        super().__init__(request.args if raw is _ARGS else raw, section)

    def bad(self, message: str) -> BadRequest:
        return BadRequest(f"{self.request.op}: {message}", self.request.id)

    def failure(self, name: str, message: str) -> BadRequest:
        return self.bad(f'"{name}" {message}')

    def missing(self, name: str) -> BadRequest:
        return self.bad(f'missing field "{name}"')


def _is_count(value: Any) -> bool:
    """An integer >= 0 (not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _shown(value: Any) -> str:
    """A value for an error message: its JSON kind, and the value when short."""
    if value is None:
        return "null"
    text = json.dumps(value) if not isinstance(value, (dict, list)) else ""
    return f"{_kind(value)} {text}" if text and len(text) <= 40 else _kind(value)
