"""The method registry: name -> handler, the thread it runs on, its argument and payload rules.

The server knows nothing about what methods do: ``cli.py`` (or a test) registers them. A handler gets a
:class:`CallContext` (decoded payloads, cancellation, worker facts) and the arguments its ``parse_args``
returned, and returns a JSON-able ``dict`` or a :class:`MethodOutcome` when it sends payloads back.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from posttrain_worker.codec.types import TensorBatch
from posttrain_worker.protocol.args import no_args
from posttrain_worker.protocol.envelope import PayloadDescriptor, PayloadKind
from posttrain_worker.protocol.errors import BAD_PAYLOAD, UNKNOWN_METHOD, WorkerFailure, cancelled

Thread = Literal["io", "compute"]
"""``io``: answered inline by the I/O thread (must be cheap); ``compute``: queued, FIFO, one at a time."""


@dataclass(frozen=True)
class RawTensor:
    """An unbatched tensor sent as a raw ``tensor`` payload (dtype and shape go in the envelope)."""

    tensor: torch.Tensor
    name: str | None = None


InputPayload = TensorBatch | RawTensor | memoryview
"""A decoded payload: ``tensordict`` -> TensorBatch, ``tensor`` -> RawTensor, ``bytes`` -> memoryview."""

OutputPayload = TensorBatch | RawTensor | bytes | bytearray | memoryview
"""What a handler may send back; encoded on the thread that ran the handler."""


@dataclass
class MethodOutcome:
    result: dict[str, Any] = field(default_factory=dict)
    payloads: list[Any] = field(default_factory=list)  # list[OutputPayload | zmq.Frame]


@dataclass(frozen=True)
class WorkerFacts:
    """What a method may want to know about the worker it runs in."""

    worker_id: int
    device: torch.device
    max_payload_bytes: int


@dataclass
class CallContext:
    method: str
    request_id: int
    payloads: list[InputPayload]
    worker: WorkerFacts
    registry: MethodRegistry
    cancel_event: threading.Event = field(default_factory=threading.Event)
    request_shutdown: Callable[[], None] = lambda: None

    def cancelled(self) -> bool:
        """True once the client cancelled this request or the worker is shutting down."""
        return self.cancel_event.is_set()

    def check_cancelled(self) -> None:
        """Raise ``CANCELLED`` if :meth:`cancelled`; long methods call this between steps."""
        if self.cancel_event.is_set():
            raise cancelled(f"{self.method} (request {self.request_id}) was cancelled while running")


Handler = Callable[[CallContext, Any], MethodOutcome | dict[str, Any]]
ArgParser = Callable[[str, dict[str, Any]], Any]
PayloadRule = Literal["any"] | tuple[PayloadKind, ...]


@dataclass(frozen=True)
class MethodSpec:
    name: str
    handler: Handler
    thread: Thread
    parse_args: ArgParser = no_args
    """Validates ``args`` (raising ``BAD_ARGUMENTS``) and returns what the handler gets."""
    payloads: PayloadRule = ()
    """``"any"``, or the exact sequence of payload kinds the method takes."""


class MethodRegistry:
    def __init__(self) -> None:
        self._methods: dict[str, MethodSpec] = {}

    def register(self, spec: MethodSpec) -> None:
        if spec.name in self._methods:
            raise ValueError(f"method {spec.name!r} is already registered")
        if spec.thread not in ("io", "compute"):
            raise ValueError(f"method {spec.name!r}: thread must be 'io' or 'compute', got {spec.thread!r}")
        self._methods[spec.name] = spec

    def add(
        self,
        name: str,
        handler: Handler,
        *,
        thread: Thread,
        parse_args: ArgParser = no_args,
        payloads: PayloadRule = (),
    ) -> None:
        self.register(MethodSpec(name, handler, thread, parse_args, payloads))

    @property
    def names(self) -> list[str]:
        return list(self._methods)

    def lookup(self, name: str) -> MethodSpec:
        spec = self._methods.get(name)
        if spec is None:
            known = ", ".join(self._methods)
            raise WorkerFailure(
                UNKNOWN_METHOD, f"unknown method {name!r}; known methods: {known}", {"known": self.names}
            )
        return spec

    @staticmethod
    def check_payloads(spec: MethodSpec, descriptors: Sequence[PayloadDescriptor]) -> None:
        """``BAD_PAYLOAD`` unless the payload kinds fit the method's rule."""
        if spec.payloads == "any":
            return
        got = [d.kind for d in descriptors]
        if tuple(got) != spec.payloads:
            expected = ", ".join(spec.payloads) if spec.payloads else "none"
            raise WorkerFailure(
                BAD_PAYLOAD,
                f"{spec.name} takes payloads [{expected}], got [{', '.join(got) or 'none'}]",
                {"expected": list(spec.payloads), "got": got},
            )
