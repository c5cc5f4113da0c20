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


class DriverError(Exception):
    """A failed op: its ``code`` (one of the constants above), message and optional details."""

    def __init__(self, code: str, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.details = details

    def as_json(self) -> dict[str, Any]:
        error: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.details is not None:
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
    address = a.optional_string("address")
    if address is not None and address.strip().lower().startswith("ray://"):
        # Ray Client proxies the driver's calls; the GCS tables the driver reads (actor states, placement
        # groups, the GCS address) are not served through it, so supervision would silently degrade
        raise a.bad(
            f'"address" {address!r} is a Ray Client address, which the Ray driver does not support: run on a '
            'node of the cluster with "auto", or give the head\'s GCS "host:port" (e.g. "10.0.0.1:6379")'
        )
    return ConnectArgs(
        address=address,
        namespace=a.optional_string("namespace"),
        runtime_env=a.optional_object("runtimeEnv"),
        temp_dir=a.optional_string("tempDir"),
        num_cpus=a.optional_number("numCpus", minimum=0),
    )


def create_workers_args(request: Request) -> CreateWorkersArgs:
    a = _Fields(request)
    auth = a.object("auth")
    for key in ("secret", "serverSecretKey", "clientPublicKey"):
        if not isinstance(auth.get(key), str) or not auth[key]:
            raise a.bad(f'"auth.{key}" must be a non-empty string, got {_shown(auth.get(key))}')
    strategy = a.string("strategy")
    if strategy not in STRATEGIES:
        raise a.bad(f'"strategy" must be one of {list(STRATEGIES)}, got {strategy!r}')
    raw_workers = a.value("workers")
    if not isinstance(raw_workers, list) or not raw_workers:
        raise a.bad(f'"workers" must be a non-empty array, got {_shown(raw_workers)}')
    workers = [_worker_spec(a, i, w) for i, w in enumerate(raw_workers)]
    max_restarts = a.value("maxRestarts")
    if not isinstance(max_restarts, int) or isinstance(max_restarts, bool) or max_restarts < -1:
        raise a.bad(f'"maxRestarts" must be an integer >= -1 (-1 = unlimited), got {_shown(max_restarts)}')
    return CreateWorkersArgs(
        auth={k: auth[k] for k in ("secret", "serverSecretKey", "clientPublicKey")},
        strategy=strategy,
        workers=workers,
        max_restarts=max_restarts,
        start_timeout_s=a.number("startTimeoutS", minimum=0, exclusive=True),
        placement_timeout_s=a.number("placementTimeoutS", minimum=0, exclusive=True),
    )


def _worker_spec(a: _Fields, i: int, w: Any) -> WorkerSpec:
    where = f"workers[{i}]"
    if not isinstance(w, dict):
        raise a.bad(f'"{where}" must be an object {{index, role, resources, args, env}}, got {_shown(w)}')
    index = w.get("index")
    if index != i or isinstance(index, bool):
        raise a.bad(f'"{where}.index" must be {i} (workers are listed in index order), got {_shown(index)}')
    role = w.get("role")
    if not isinstance(role, str) or not role:
        raise a.bad(f'"{where}.role" must be a non-empty string, got {_shown(role)}')
    resources = w.get("resources")
    if not isinstance(resources, dict):
        raise a.bad(f'"{where}.resources" must be an object {{name: amount}}, got {_shown(resources)}')
    bundle: dict[str, float] = {}
    for name, amount in resources.items():
        if not _is_number(amount) or amount < 0:
            raise a.bad(f'"{where}.resources.{name}" must be a number >= 0, got {_shown(amount)}')
        if amount > 0:  # zero entries are dropped: Ray refuses them in a bundle
            bundle[name] = float(amount)
    if not bundle:
        raise a.bad(f'"{where}.resources" must ask for at least one resource > 0 (Ray refuses empty bundles)')
    args = w.get("args", [])
    if not isinstance(args, list) or not all(isinstance(x, str) for x in args):
        raise a.bad(f'"{where}.args" must be an array of strings, got {_shown(args)}')
    env = w.get("env", {})
    if env is None:
        env = {}
    if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
        raise a.bad(f'"{where}.env" must be an object of strings, got {_shown(env)}')
    return WorkerSpec(i, role, bundle, list(args), dict(env))


def restart_args(request: Request) -> RestartArgs:
    a = _Fields(request)
    indices = a.value("indices")
    if (
        not isinstance(indices, list)
        or not indices
        or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in indices)
    ):
        raise a.bad(f'"indices" must be a non-empty array of integers >= 0, got {_shown(indices)}')
    if len(set(indices)) != len(indices):
        raise a.bad(f'"indices" must not repeat an index, got {indices}')
    timeout_s = a.number("timeoutS", minimum=0, exclusive=True)
    incarnations = a.args.get("incarnations")
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
    index = a.value("index")
    if not isinstance(index, int) or isinstance(index, bool) or index < 0:
        raise a.bad(f'"index" must be an integer >= 0, got {_shown(index)}')
    sig = a.string("signal")
    if sig not in SIGNALS:
        raise a.bad(f'"signal" must be one of {list(SIGNALS)}, got {sig!r}')
    incarnation = a.value("incarnation")
    if not _is_count(incarnation):
        raise a.bad(f'"incarnation" must be an integer >= 0, got {_shown(incarnation)}')
    return KillWorkerArgs(index, sig, incarnation)


# ---- helpers -------------------------------------------------------------------------------------------


class _Fields:
    """Typed access to a request's args; every failure is a :class:`BadRequest` naming the op and field."""

    def __init__(self, request: Request) -> None:
        self.request = request
        self.args = request.args

    def bad(self, message: str) -> BadRequest:
        return BadRequest(f"{self.request.op}: {message}", self.request.id)

    def value(self, name: str) -> Any:
        if name not in self.args:
            raise self.bad(f'missing field "{name}"')
        return self.args[name]

    def string(self, name: str) -> str:
        value = self.value(name)
        if not isinstance(value, str):
            raise self.bad(f'"{name}" must be a string, got {_shown(value)}')
        return value

    def object(self, name: str) -> dict[str, Any]:
        value = self.value(name)
        if not isinstance(value, dict):
            raise self.bad(f'"{name}" must be an object, got {_shown(value)}')
        return value

    def number(self, name: str, minimum: float, exclusive: bool = False) -> float:
        value = self.value(name)
        if not _is_number(value) or value < minimum or (exclusive and value == minimum):
            relation = ">" if exclusive else ">="
            raise self.bad(f'"{name}" must be a number {relation} {minimum:g}, got {_shown(value)}')
        return float(value)

    def optional_string(self, name: str) -> str | None:
        value = self.args.get(name)
        if value is not None and not isinstance(value, str):
            raise self.bad(f'"{name}" must be a string or null, got {_shown(value)}')
        return value

    def optional_object(self, name: str) -> dict[str, Any] | None:
        value = self.args.get(name)
        if value is not None and not isinstance(value, dict):
            raise self.bad(f'"{name}" must be an object or null, got {_shown(value)}')
        return value

    def optional_number(self, name: str, minimum: float) -> float | None:
        value = self.args.get(name)
        if value is None:
            return None
        if not _is_number(value) or value < minimum:
            raise self.bad(f'"{name}" must be a number >= {minimum:g} or null, got {_shown(value)}')
        return float(value)


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
