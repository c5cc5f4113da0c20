"""The method registry: name -> handler, the thread it runs on, its argument and payload rules.

The server knows nothing about what methods do: ``methods/`` (and worker extensions, ``--extension``)
register them. A handler gets a :class:`CallContext` (decoded payloads, cancellation, worker facts) and
what its :class:`~posttrain_worker.protocol.args.ArgsSchema` built from ``args``, and returns a JSON-able
``dict`` or a :class:`MethodOutcome` when it sends payloads back. :meth:`MethodRegistry.describe` lists
every method with its thread, payload rule and argument fields (``--describe-methods``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from posttrain_worker.codec.types import TensorBatch
from posttrain_worker.protocol.args import NO_ARGS, ArgsSchema
from posttrain_worker.protocol.envelope import PayloadDescriptor, PayloadKind
from posttrain_worker.protocol.errors import BAD_PAYLOAD, UNKNOWN_METHOD, WorkerFailure, cancelled

Thread = Literal["io", "compute"]
"""``io``: answered inline by the I/O thread (must be cheap); ``compute``: queued, FIFO, one at a time (an
``inline`` compute method runs on the I/O thread when nothing is running or queued: :class:`MethodSpec`)."""


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
PayloadRule = Literal["any"] | tuple[PayloadKind, ...]


@dataclass(frozen=True)
class MethodSpec:
    name: str
    handler: Handler
    thread: Thread
    args: ArgsSchema = NO_ARGS
    """The arguments the method takes; parsing them (``BAD_ARGUMENTS`` on a mistake) gives the handler's."""
    payloads: PayloadRule = ()
    """``"any"``, or the exact sequence of payload kinds the method takes."""
    inline: bool = False
    """A compute method that the I/O thread may run itself when the compute thread is idle (nothing running,
    queued or unsent), saving the two thread hand-offs; otherwise it queues as usual, so the compute order
    holds either way. Only for methods that are short (they hold up heartbeats while they run) and rely on no
    thread-bound torch state: no autocast, CUDA stream or grad mode left from another call (``echo``, which
    decodes and re-encodes its payloads; ``control_act``, a small CPU MLP forward that sets its own
    ``inference_mode``). Such a call cannot be cancelled once it runs inline."""

    def parse_args(self, method: str, args: dict[str, Any]) -> Any:
        """What the handler gets for ``args``; mistakes are ``BAD_ARGUMENTS`` naming ``method``."""
        return self.args.parse(method, args)

    def describe(self) -> dict[str, Any]:
        payloads: str | list[str] = "any" if self.payloads == "any" else list(self.payloads)
        described = {"thread": self.thread, "payloads": payloads, "args": self.args.describe()}
        return {**described, "inline": True} if self.inline else described


class MethodRegistry:
    def __init__(self) -> None:
        self._methods: dict[str, MethodSpec] = {}

    def register(self, spec: MethodSpec) -> None:
        if spec.name in self._methods:
            raise ValueError(f"method {spec.name!r} is already registered")
        if spec.thread not in ("io", "compute"):
            raise ValueError(f"method {spec.name!r}: thread must be 'io' or 'compute', got {spec.thread!r}")
        if spec.inline and spec.thread != "compute":
            raise ValueError(
                f"method {spec.name!r}: inline is for compute methods, got thread {spec.thread!r}"
            )
        if not isinstance(spec.args, ArgsSchema):
            raise ValueError(f"method {spec.name!r}: args must be an ArgsSchema, got {spec.args!r}")
        self._methods[spec.name] = spec

    def add(
        self,
        name: str,
        handler: Handler,
        *,
        thread: Thread,
        args: ArgsSchema = NO_ARGS,
        payloads: PayloadRule = (),
        inline: bool = False,
    ) -> None:
        """Register ``handler`` as ``name``, e.g. ``registry.add("unload_model", unload, thread="compute",
        args=ArgsSchema((Arg("name", "string"),), build=itemgetter("name")))``."""
        self.register(MethodSpec(name, handler, thread, args, payloads, inline))

    @property
    def names(self) -> list[str]:
        """The registered method names, in registration order (the handshake's ``capabilities.methods``)."""
        return list(self._methods)

    def describe(self) -> dict[str, Any]:
        """Every method as JSON: ``{"methods": {name: {"thread", "payloads", "args": {argName: {"type",
        "required", "nullable"}}}}}``, names sorted; ``payloads`` is ``"any"`` or the list of kinds; an
        ``inline`` compute method also has ``"inline": true``."""
        return {"methods": {name: self._methods[name].describe() for name in sorted(self._methods)}}

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
        if spec.payloads == "any" or (not descriptors and not spec.payloads):
            return  # anything goes, or none taken and none given
        got = [d.kind for d in descriptors]
        if tuple(got) != spec.payloads:
            expected = ", ".join(spec.payloads) if spec.payloads else "none"
            raise WorkerFailure(
                BAD_PAYLOAD,
                f"{spec.name} takes payloads [{expected}], got [{', '.join(got) or 'none'}]",
                {"expected": list(spec.payloads), "got": got},
            )
