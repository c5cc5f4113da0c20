"""The Ray side of one pool: a placement group with one bundle per worker, one :class:`WorkerActor` per
bundle, and the watchers that turn actor deaths and restarts into events.

Each worker has a watcher thread that blocks on its actor's ``wait_exit`` (answered within a few tenths of a
second of the worker child's death) or on the actor's own death (a Ray error), emits ``worker_exit`` once per
incarnation, then polls the actor until Ray has restarted it (``worker_restarted``, incarnation + 1) or marks
it DEAD for good (``worker_lost``). One more thread polls ``ray.nodes()`` each second for ``node_lost``.
The incarnation is counted here, from the deaths the watcher sees (0 for the first one).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from posttrain_worker.placement.feasibility import NodeResources, check_feasible, describe
from posttrain_worker.placement.messages import (
    PLACEMENT_TIMEOUT,
    RESTART_TIMEOUT,
    RESTARTS_EXHAUSTED,
    WORKER_START_FAILED,
    BadRequest,
    CreateWorkersArgs,
    DriverError,
    WorkerSpec,
)
from posttrain_worker.placement.ray_actor import WorkerActor

log = logging.getLogger("posttrain_worker.placement")

ACTOR_CONCURRENCY = 4
"""Threads per actor: ``wait_exit`` blocks one while ``info``, ``kill_worker`` are served by the others."""
NODE_POLL_S = 1.0
RESTART_POLL_S = 0.1
KILL_CALL_TIMEOUT_S = 10.0
"""Longest wait for an actor's ``kill_worker`` reply (a dead or restarting actor answers with an error)."""

# The driver's worst-case times (docs/protocol.md, "Ray driver", "Worst-case times"; the TS side mirrors them)
START_GRACE_S = 30.0
"""Added to ``startTimeoutS`` for the actors themselves to be scheduled and their processes started."""
TEARDOWN_WAIT_S = 10.0
"""Longest wait, in a teardown, for the GCS to report every killed actor DEAD."""
PG_REMOVE_WAIT_S = 5.0
"""Longest further wait, in a teardown, for the GCS to report the placement group REMOVED."""
TEARDOWN_MAX_S = TEARDOWN_WAIT_S + PG_REMOVE_WAIT_S
"""A teardown (close, EOF, a signal, or a failed ``create_workers``) takes at most this long, plus
``ray.shutdown()`` when the driver started the cluster."""

Emit = Callable[[dict[str, Any]], None]


def alive_nodes(ray: Any) -> list[NodeResources]:
    return [
        NodeResources(n["NodeID"], n["NodeManagerAddress"], dict(n.get("Resources") or {}))
        for n in ray.nodes()
        if n.get("Alive")
    ]


def nodes_json(ray: Any) -> list[dict[str, Any]]:
    """The cluster's nodes as the contract's ``nodes`` list (dead ones included, ``alive`` false)."""
    return [
        {
            "nodeId": n["NodeID"],
            "address": n["NodeManagerAddress"],
            "alive": bool(n.get("Alive")),
            "resources": dict(n.get("Resources") or {}),
        }
        for n in ray.nodes()
    ]


def actor_state(ray: Any, actor_id: str) -> str | None:
    """The GCS state of an actor (ALIVE, RESTARTING, DEAD, ...); ``None`` when it cannot be read (for
    instance through Ray Client)."""
    try:
        from ray._private import state  # the GCS actor table: no dashboard needed

        return state.actors(actor_id=actor_id).get("State")
    except Exception:
        return None


@dataclass
class WorkerSlot:
    spec: WorkerSpec
    actor: Any
    actor_id: str
    incarnation: int = 0
    info: dict[str, Any] | None = None
    """The current incarnation's WorkerInfo; ``None`` while it is down (dead, restarting)."""
    lost: str | None = None
    """Set when the actor is dead for good: why."""
    last_node: str = "?"
    """The node of the latest incarnation (kept while it is down, for messages)."""


class WorkerGroup:
    """Creates the placement group and actors of a ``create_workers`` request, then supervises them."""

    def __init__(self, ray: Any, args: CreateWorkersArgs, emit: Emit) -> None:
        self.ray = ray
        self.args = args
        self.emit = emit
        self.pg: Any = None
        self.slots: list[WorkerSlot] = []
        self.closing = threading.Event()
        self.cond = threading.Condition()

    @property
    def placement_group_id(self) -> str | None:
        return self.pg.id.hex() if self.pg is not None else None

    def _worker_info(self, slot: WorkerSlot, raw: dict[str, Any]) -> dict[str, Any]:
        return {"index": slot.spec.index, "role": slot.spec.role, **raw, "incarnation": slot.incarnation}

    # ---- create ---------------------------------------------------------------------------------------

    def create(self) -> dict[str, Any]:
        """Place and start every worker; on any error remove what was created, then raise."""
        try:
            return self._create()
        except BaseException:
            self.teardown()
            raise

    def _create(self) -> dict[str, Any]:
        ray = self.ray
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        bundles = [w.resources for w in self.args.workers]
        check_feasible(bundles, self.args.strategy, alive_nodes(ray), ray.available_resources())
        self.pg = placement_group(bundles, strategy=self.args.strategy)
        try:
            ray.get(self.pg.ready(), timeout=self.args.placement_timeout_s)
        except ray.exceptions.GetTimeoutError:
            text, details = describe(bundles, self.args.strategy, alive_nodes(ray), ray.available_resources())
            raise DriverError(
                PLACEMENT_TIMEOUT,
                f"the placement group was not ready within {self.args.placement_timeout_s:g} s: {text}",
                details,
            ) from None
        actor_class = ray.remote(WorkerActor)
        for i, spec in enumerate(self.args.workers):
            res = dict(spec.resources)
            actor = actor_class.options(
                num_cpus=res.pop("CPU", 0),
                num_gpus=res.pop("GPU", 0),
                resources=res,
                max_restarts=self.args.max_restarts,
                max_concurrency=ACTOR_CONCURRENCY,
                scheduling_strategy=PlacementGroupSchedulingStrategy(self.pg, placement_group_bundle_index=i),
            ).remote(
                spec.index,
                self.args.auth,
                spec.args,
                spec.env,
                "cuda" if spec.resources.get("GPU", 0) > 0 else "cpu",
                self.args.start_timeout_s,
            )
            self.slots.append(WorkerSlot(spec, actor, actor._actor_id.hex()))
        refs = [slot.actor.info.remote() for slot in self.slots]
        try:
            raws = ray.get(refs, timeout=self.args.start_timeout_s + START_GRACE_S)
        except ray.exceptions.GetTimeoutError:
            raise DriverError(
                WORKER_START_FAILED,
                f"not every worker was READY within {self.args.start_timeout_s:g} s "
                f"(+{START_GRACE_S:g} s for its actor to start)",
            ) from None
        except ray.exceptions.RayActorError as exc:
            raise DriverError(WORKER_START_FAILED, f"a worker did not start: {exc.error_msg}") from None
        for slot, raw in zip(self.slots, raws, strict=True):
            slot.info = self._worker_info(slot, raw)
            slot.last_node = raw["nodeId"]
        for slot in self.slots:
            threading.Thread(
                target=self._watch, args=(slot,), name=f"watch-{slot.spec.index}", daemon=True
            ).start()
        # the nodes alive now: one that dies before the poller's first look must still be reported
        alive = {n.node_id: n.address for n in alive_nodes(ray)}
        threading.Thread(target=self._poll_nodes, args=(alive,), name="node-poll", daemon=True).start()
        return {"placementGroupId": self.placement_group_id, "workers": [s.info for s in self.slots]}

    # ---- supervision ----------------------------------------------------------------------------------

    def _watch(self, slot: WorkerSlot) -> None:
        ray = self.ray
        while not self.closing.is_set():
            info = slot.info
            assert info is not None
            exit_json: dict[str, Any] | None
            try:
                exit_json = ray.get(slot.actor.wait_exit.remote())
                cause = "worker_exited"
            except ray.exceptions.RayActorError as exc:
                exit_json = None
                cause = self._death_cause(info["nodeId"], exc)
            except Exception:
                if self.closing.is_set():
                    return
                log.exception("watching worker %d failed", slot.spec.index)
                time.sleep(RESTART_POLL_S)
                continue
            if self.closing.is_set():
                return
            with self.cond:
                slot.info = None
                self.cond.notify_all()
            self.emit(
                {
                    "event": "worker_exit",
                    "index": slot.spec.index,
                    "incarnation": info["incarnation"],
                    "exitCode": exit_json["exitCode"] if exit_json else None,
                    "signal": exit_json["signal"] if exit_json else None,
                    "stderrTail": exit_json["stderrTail"] if exit_json else "",
                    "nodeId": info["nodeId"],
                    "cause": cause,
                }
            )
            if not self._await_next_incarnation(slot, info):
                return

    def _death_cause(self, node_id: str, exc: Exception) -> str:
        text = str(exc).lower()
        if "node has died" in text or "node died" in text:
            return "node_lost"
        alive = {n.node_id for n in alive_nodes(self.ray)}
        return "actor_died" if node_id in alive else "node_lost"

    def _await_next_incarnation(self, slot: WorkerSlot, previous: dict[str, Any]) -> bool:
        """Poll until Ray restarted the actor with a new READY worker (True) or it is dead for good."""
        ray = self.ray
        while not self.closing.is_set():
            try:
                raw = ray.get(slot.actor.info.remote(), timeout=5.0)
            except ray.exceptions.GetTimeoutError:
                continue
            except ray.exceptions.RayActorError as exc:
                if actor_state(ray, slot.actor_id) == "DEAD" or (
                    isinstance(exc, ray.exceptions.ActorDiedError) and exc.actor_init_failed
                ):
                    self._mark_lost(slot, exc)
                    return False
                time.sleep(RESTART_POLL_S)
                continue
            if raw["actorPid"] == previous["actorPid"] and raw["pid"] == previous["pid"]:
                time.sleep(RESTART_POLL_S)  # the old actor process is still ending
                continue
            if self.closing.is_set():
                return False
            with self.cond:
                slot.incarnation += 1
                slot.info = self._worker_info(slot, raw)
                slot.last_node = raw["nodeId"]
                self.cond.notify_all()
            self.emit({"event": "worker_restarted", "worker": slot.info})
            return True
        return False

    def _mark_lost(self, slot: WorkerSlot, exc: Exception) -> None:
        node = slot.last_node
        message = (
            f"worker {slot.spec.index} ({slot.spec.role}) is dead for good: its actor has no restarts left "
            f"(maxRestarts {self.args.max_restarts}) or could not start again; last node {node}: "
            f"{getattr(exc, 'error_msg', exc)}"
        )
        with self.cond:
            slot.lost = message
            self.cond.notify_all()
        self.emit({"event": "worker_lost", "index": slot.spec.index, "message": message})

    def _poll_nodes(self, seen_alive: dict[str, str]) -> None:
        """Emit ``node_lost`` once per node seen alive (``seen_alive`` at the start) that is no longer."""
        while not self.closing.wait(NODE_POLL_S):
            try:
                nodes = self.ray.nodes()
            except Exception:
                continue
            for node in nodes:
                node_id, address = node["NodeID"], node["NodeManagerAddress"]
                if node.get("Alive"):
                    seen_alive[node_id] = address
                elif node_id in seen_alive:
                    del seen_alive[node_id]
                    self.emit({"event": "node_lost", "nodeId": node_id, "address": address})

    # ---- ops ------------------------------------------------------------------------------------------

    def slot(self, index: int, field: str) -> WorkerSlot:
        if not 0 <= index < len(self.slots):
            raise BadRequest(
                f'"{field}" {index} names no worker: the pool has indices 0..{len(self.slots) - 1}'
            )
        return self.slots[index]

    def kill_worker(self, index: int, signal_name: str, incarnation: int) -> bool:
        """Signal the worker of ``index`` only while ``incarnation`` is its current, READY one; True when
        the signal was sent."""
        slot = self.slot(index, "index")
        with self.cond:
            info = slot.info
            if info is None or slot.incarnation != incarnation:
                return False  # down, restarting, or already a newer incarnation: not the one meant
            expected_pid = info["pid"]
        try:
            # the actor checks the pid too: between our check and the call, Ray may have restarted it
            killed = self.ray.get(
                slot.actor.kill_worker.remote(signal_name, expected_pid), timeout=KILL_CALL_TIMEOUT_S
            )
        except (self.ray.exceptions.RayActorError, self.ray.exceptions.GetTimeoutError):
            return False  # it died meanwhile: the watcher reports it
        return bool(killed)

    def restart(
        self, indices: list[int], timeout_s: float, incarnations: list[int] | None = None
    ) -> list[dict[str, Any]]:
        """Give each listed worker an incarnation newer than ``incarnations`` (default: the current ones):
        one still at that incarnation and up is killed through Ray; one already newer, or restarting, is only
        waited for until READY."""
        slots = [self.slot(i, "indices") for i in indices]
        deadline = time.monotonic() + timeout_s
        with self.cond:
            for s in slots:
                if s.lost is not None:
                    raise DriverError(RESTARTS_EXHAUSTED, s.lost)
            if incarnations is None:
                held = {s.spec.index: s.incarnation for s in slots}
            else:
                held = dict(zip(indices, incarnations, strict=True))
                for s in slots:
                    if held[s.spec.index] > s.incarnation:
                        raise BadRequest(
                            f'restart: "incarnations" names incarnation {held[s.spec.index]} of worker '
                            f"{s.spec.index}, whose current incarnation is {s.incarnation}"
                        )
            to_kill = [s for s in slots if s.incarnation == held[s.spec.index] and s.info is not None]
        for s in to_kill:
            self.ray.kill(s.actor, no_restart=False)
        with self.cond:
            while True:
                for s in slots:
                    if s.lost is not None:
                        raise DriverError(RESTARTS_EXHAUSTED, s.lost)
                if all(s.incarnation > held[s.spec.index] and s.info is not None for s in slots):
                    return [dict(s.info) for s in slots if s.info is not None]
                left = deadline - time.monotonic()
                if left <= 0 or self.closing.is_set():
                    late = [
                        s.spec.index for s in slots if s.incarnation <= held[s.spec.index] or s.info is None
                    ]
                    raise DriverError(
                        RESTART_TIMEOUT,
                        f"worker(s) {late} had no new READY incarnation within {timeout_s:g} s",
                    )
                self.cond.wait(min(left, 0.5))

    def status_workers(self) -> list[dict[str, Any] | None]:
        with self.cond:
            return [dict(s.info) if s.info is not None else None for s in self.slots]

    # ---- teardown -------------------------------------------------------------------------------------

    def teardown(self) -> None:
        """Kill every actor for good and remove the placement group; waits (bounded) until Ray reports the
        actors dead. Idempotent."""
        self.closing.set()
        with self.cond:
            self.cond.notify_all()
        for slot in self.slots:
            try:
                self.ray.kill(slot.actor, no_restart=True)
            except Exception:
                log.warning("could not kill the actor of worker %d", slot.spec.index, exc_info=True)
        deadline = time.monotonic() + TEARDOWN_WAIT_S
        for slot in self.slots:
            while time.monotonic() < deadline and actor_state(self.ray, slot.actor_id) not in ("DEAD", None):
                time.sleep(0.05)
        if self.pg is not None:
            from ray.util.placement_group import remove_placement_group

            try:
                remove_placement_group(self.pg)  # asynchronous: wait (bounded) until the GCS says so
                while time.monotonic() < deadline + PG_REMOVE_WAIT_S and self._pg_state() not in (
                    "REMOVED",
                    None,
                ):
                    time.sleep(0.05)
            except Exception:
                log.warning("could not remove the placement group", exc_info=True)

    def _pg_state(self) -> str | None:
        from ray.util.placement_group import placement_group_table

        try:
            return placement_group_table(self.pg).get("state")
        except Exception:
            return None
