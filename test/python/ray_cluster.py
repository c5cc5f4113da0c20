"""A simulated multi-node Ray cluster on this machine, on loopback only, for the Ray placement tests.

As a script (what the TS end-to-end test runs)::

    python test/python/ray_cluster.py '{"head": {"num_cpus": 1},
        "nodes": [{"num_cpus": 1, "resources": {"trainer_slot": 1}}, ...]}'

(the JSON spec on argv, or on stdin's first line when argv has none) starts a head node and one node per entry
of ``nodes`` with ``ray.cluster_utils.Cluster``, prints ONE JSON line
``{"address": GCS address, "env": {...}, "nodes": [...], "tempDir": ..., "pid": ...}`` on stdout, then waits
for EOF on stdin (or SIGTERM/SIGINT) and shuts every Ray process of the cluster down.

While it runs, it serves JSON lines on stdin, each answered by one JSON line on stdout:

- ``{"op": "remove_node", "index": i}`` kills every process of the i-th entry of ``nodes`` (spec order) at
  once (``Cluster.remove_node(node, allow_graceful=False)``: a node lost, not drained) and answers
  ``{"ok": true, "op": "remove_node", "index": i, "nodeId": ...}``;
- anything else (not JSON, an unknown op, an index naming no live node) is answered
  ``{"ok": false, "error": "..."}`` and the cluster keeps running.

The head runs with a fast node health check (:data:`HEALTH_CHECK`: a dead node is marked dead in ~1-2 s
instead of Ray's default ~30 s); this is a setting of this test cluster only, never of the driver.

``env`` holds what a second process (a Ray driver) needs in its environment to join: Ray 2.60's token
authentication is on by default, and this cluster's token lives in a file of its own temp dir
(``RAY_AUTH_MODE=token``, ``RAY_AUTH_TOKEN_PATH``), so nothing is written to ``~/.ray``; and
``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``, which makes Ray take 127.0.0.1 as the node address (otherwise it
advertises the machine's interface address).

Imported, :func:`launch_cluster` runs this script as a subprocess (so the test process holds no Ray state) and
yields a :class:`ClusterProcess`.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from posttrain_worker.placement.ray_driver import prepare_loopback

LOOPBACK = "127.0.0.1"
START_TIMEOUT_S = 90.0
"""Longest wait for the cluster's JSON line (a cold Ray import plus the nodes take ~10 s here)."""
HEALTH_CHECK = {
    "health_check_initial_delay_ms": 1000,
    "health_check_period_ms": 300,
    "health_check_timeout_ms": 500,
    "health_check_failure_threshold": 4,
}
"""The head's GCS health check of the nodes: 4 missed checks 300 ms apart mark a node dead (~1.2-2 s after
it died); the 500 ms timeout leaves room for a busy 2-core CI machine."""


# ---- in the cluster's own process ----------------------------------------------------------------------


def _node_args(entry: Mapping[str, Any], temp_dir: Path) -> dict[str, Any]:
    args: dict[str, Any] = {
        "num_cpus": entry.get("num_cpus", 1),
        "num_gpus": entry.get("num_gpus", 0),
        "resources": dict(entry.get("resources") or {}),
        "node_ip_address": LOOPBACK,
        "temp_dir": str(temp_dir),
        "include_dashboard": False,
        "object_store_memory": int(entry.get("object_store_memory", 80 * 1024 * 1024)),
    }
    return args


def serve(spec: Mapping[str, Any]) -> int:
    """Start the cluster of ``spec``, print its JSON line, and stop it on stdin EOF or a signal."""
    temp_dir = Path(tempfile.mkdtemp(prefix="ptray-", dir="/tmp"))
    env = prepare_loopback(str(temp_dir))  # the driver's own loopback and token setup, before Ray's import
    # Ray prints to stdout while starting: the JSON line goes to the real stdout, everything else to stderr
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    stop = threading.Event()

    import ray
    from ray.cluster_utils import Cluster

    head = dict(spec.get("head") or {"num_cpus": 0})
    head_args = {**_node_args(head, temp_dir), "_system_config": HEALTH_CHECK}
    cluster = Cluster(initialize_head=True, head_node_args=head_args)
    try:
        added = [cluster.add_node(**_node_args(entry, temp_dir)) for entry in spec.get("nodes") or []]
        cluster.wait_for_nodes()
        # after the nodes: each ray Node put its own SIGTERM handler (drain, then sys.exit) in place
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        nodes = [
            {"nodeId": n["NodeID"], "address": n["NodeManagerAddress"], "resources": n["Resources"]}
            for n in cluster.global_state.node_table()
            if n["Alive"]
        ]
        line = {
            "address": cluster.address,
            "env": env,
            "nodes": nodes,
            "tempDir": str(temp_dir),
            "pid": os.getpid(),
        }
        out.write(json.dumps(line) + "\n")
        out.flush()
        threading.Thread(target=_serve_stdin, args=(cluster, added, out, stop), daemon=True).start()
        stop.wait()
    finally:
        cluster.shutdown()
        with contextlib.suppress(Exception):
            ray.shutdown()
        shutil.rmtree(temp_dir, ignore_errors=True)
    return 0


def _serve_stdin(cluster: Any, added: list[Any], out: IO[str], stop: threading.Event) -> None:
    """The stdin ops of the module docstring, one line each, until EOF (which stops the cluster)."""
    removed: set[int] = set()
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            request = json.loads(line)
            op = request.get("op") if isinstance(request, dict) else None
            if op != "remove_node":
                raise ValueError(f'unknown op {op!r}: expected "remove_node"')
            index = request.get("index")
            if not isinstance(index, int) or not 0 <= index < len(added) or index in removed:
                raise ValueError(f'"index" {index!r} names no live node (nodes 0..{len(added) - 1})')
            node = added[index]
            cluster.remove_node(node, allow_graceful=False)
            removed.add(index)
            reply: dict[str, Any] = {"ok": True, "op": op, "index": index, "nodeId": node.node_id}
        except Exception as exc:
            reply = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        out.write(json.dumps(reply) + "\n")
        out.flush()
    stop.set()


def main(argv: list[str]) -> int:
    raw = argv[1] if len(argv) > 1 else sys.stdin.readline()
    try:
        spec = json.loads(raw)
    except json.JSONDecodeError as exc:
        print(f"ray_cluster.py: the spec is not JSON: {exc}", file=sys.stderr)
        return 2
    if not isinstance(spec, dict):
        print("ray_cluster.py: the spec must be a JSON object {head, nodes}", file=sys.stderr)
        return 2
    return serve(spec)


# ---- from a test process -------------------------------------------------------------------------------


@dataclass
class ClusterProcess:
    """A running ``ray_cluster.py``: its GCS ``address``, the ``env`` a driver needs, its ``nodes``."""

    proc: subprocess.Popen[bytes]
    address: str
    env: dict[str, str]
    nodes: list[dict[str, Any]]
    temp_dir: str

    def remove_node(self, index: int, timeout: float = 60.0) -> dict[str, Any]:
        """Kill the ``index``-th node of the spec's ``nodes`` at once (a node lost); the script's reply."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps({"op": "remove_node", "index": index}).encode() + b"\n")
        self.proc.stdin.flush()
        readable, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not readable:
            raise RuntimeError(f"ray_cluster.py did not answer remove_node within {timeout} s")
        reply: dict[str, Any] = json.loads(self.proc.stdout.readline())
        return reply

    def stop(self, timeout: float = 60.0) -> int:
        """Close its stdin (it shuts the cluster down) and wait; kill it when it does not exit in time."""
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


@contextlib.contextmanager
def launch_cluster(spec: Mapping[str, Any]) -> Iterator[ClusterProcess]:
    """Run this script with ``spec``; the cluster is up inside the block and fully stopped after it."""
    proc = subprocess.Popen(
        [sys.executable, __file__, json.dumps(spec)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert proc.stdout is not None
    deadline = time.monotonic() + START_TIMEOUT_S
    line = b""
    while not line and time.monotonic() < deadline and proc.poll() is None:
        readable, _, _ = select.select([proc.stdout], [], [], 0.5)
        if readable:
            line = proc.stdout.readline()
            break
    if not line:
        proc.kill()
        proc.wait()
        raise RuntimeError(f"ray_cluster.py printed no line within {START_TIMEOUT_S} s (exit {proc.poll()})")
    info = json.loads(line)
    cluster = ClusterProcess(proc, info["address"], info["env"], info["nodes"], info["tempDir"])
    try:
        yield cluster
    finally:
        cluster.stop()


if __name__ == "__main__":
    status = main(sys.argv)
    sys.stderr.flush()
    os._exit(status)  # not sys.exit: a daemon thread blocked reading stdin would abort the exit
