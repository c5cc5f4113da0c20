"""The Ray actor that runs one posttrain worker: a thin supervisor of ONE ``python -m posttrain_worker``
child.

All compute stays in the child, so every worker feature works unchanged under Ray. The driver applies
``ray.remote`` with the options of each worker (resources, bundle, ``max_restarts``, ``max_concurrency``), so
this module imports nothing of Ray at import time except inside methods.

Life cycle: ``__init__`` starts the child on ``tcp://<node ip>:*`` with ``--auth-stdin`` and the pool's keys
on its stdin, and returns once it is READY (a child that never gets READY fails the actor's creation with its
stderr tail). A monitor thread ends the actor process (``os._exit(1)``) when the child exits, so Ray restarts
the actor, which starts a fresh child in the same bundle, while restarts are left. The child exits on EOF of
its stdin, so an actor killed by SIGKILL takes its worker with it.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from posttrain_worker.placement.worker_child import ChildExit, WorkerChild

EXIT_REPORT_GRACE_S = 0.3
"""How long the actor outlives its child once ``wait_exit`` returned: time for Ray to carry the reply."""
EXIT_REPORT_MAX_WAIT_S = 2.0
"""How long it waits for a ``wait_exit`` call to take the exit before ending anyway."""


class WorkerActor:
    """Supervises one worker child; see the module docstring."""

    def __init__(
        self,
        index: int,
        auth: Mapping[str, str],
        worker_args: Sequence[str],
        env: Mapping[str, str],
        device: str,
        start_timeout_s: float,
    ) -> None:
        import ray

        self._node_ip = ray.util.get_node_ip_address()
        self._node_id = ray.get_runtime_context().get_node_id()
        self._actor_id = ray.get_runtime_context().get_actor_id()
        auth_line = json.dumps(
            {
                "secret": auth["secret"],
                "curve": {
                    "serverSecretKey": auth["serverSecretKey"],
                    "clientPublicKey": auth["clientPublicKey"],
                },
            }
        )
        argv = [
            "--endpoint",
            f"tcp://{self._node_ip}:*",
            "--auth-stdin",
            "--worker-id",
            str(index),
            "--device",
            device,
            *worker_args,
        ]
        self._child = WorkerChild.start(argv, auth_line, {**os.environ, **env}, start_timeout_s)
        self._exit: ChildExit | None = None
        self._exited = threading.Event()
        self._reported = threading.Event()
        threading.Thread(target=self._monitor, name="worker-monitor", daemon=True).start()

    def _monitor(self) -> None:
        self._exit = self._child.wait()
        self._exited.set()
        # give a pending wait_exit the chance to carry the exit status to the driver, then end this actor
        # process so that Ray restarts it with a fresh worker
        self._reported.wait(EXIT_REPORT_MAX_WAIT_S)
        time.sleep(EXIT_REPORT_GRACE_S)
        os._exit(1)

    def info(self) -> dict[str, Any]:
        """Where this incarnation's worker listens, who it is (the driver adds index, role, incarnation)."""
        return {
            "endpoint": self._child.endpoint,
            "pid": self._child.pid,
            "actorPid": os.getpid(),
            "nodeId": self._node_id,
            "nodeAddress": self._node_ip,
            "actorId": self._actor_id,
        }

    def wait_exit(self, timeout_s: float | None = None) -> dict[str, Any] | None:
        """Block until the worker child exits (or ``timeout_s`` passes: ``None``); its exit status and
        stderr tail."""
        if not self._exited.wait(timeout_s):
            return None
        assert self._exit is not None
        self._reported.set()
        return self._exit.as_json()

    def kill_worker(self, signal_name: str, expected_pid: int | None = None) -> bool:
        """Send ``signal_name`` (``SIGKILL`` or ``SIGTERM``) to the worker child; ``False`` when it already
        exited, or when ``expected_pid`` is not its pid: Ray delivers a call made to a restarting actor to its
        NEW incarnation, which must not die for a kill meant for the old one."""
        if self._exited.is_set():
            return False
        if expected_pid is not None and expected_pid != self._child.pid:
            return False
        self._child.kill(signal.Signals[signal_name])
        return True

    def stderr_tail(self) -> str:
        return self._child.stderr_tail()
