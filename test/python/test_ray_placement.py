"""The Ray placement driver (``python -m posttrain_worker.placement.ray_driver``) driven over its stdin/stdout
protocol, against ONE simulated cluster for the whole file (``ray_cluster.py``: a head with no CPU and two
nodes with one CPU and a custom resource each, all on 127.0.0.1, Ray's token authentication on).

Real parts throughout: real Ray actors supervising real ``python -m posttrain_worker`` children, real SIGKILLs
(of the worker and of the actor's process), and real pyzmq CURVE clients doing the posttrain handshake, one of
them with a foreign CURVE key. Tests run in file order: bad requests and infeasible placements first on a
connected driver, then one pool of two workers shared by the supervision tests, then close and EOF.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import zmq
from posttrain_worker import PROTOCOL_VERSION
from ray_cluster import ClusterProcess, launch_cluster
from test_auth import Keys, curve_client, handshake, new_keys, no_reply, refused_send
from worker_harness import Client, ok

pytest.importorskip(
    "ray", reason="ray is not installed: npx posttrain setup --extras ray (the test extra has it)"
)


SPEC = {
    "head": {"num_cpus": 0},
    "nodes": [
        {"num_cpus": 1, "resources": {"slot_a": 1}},
        {"num_cpus": 1, "resources": {"slot_b": 1}},
    ],
}
REPLY_TIMEOUT_S = 120.0
EVENT_TIMEOUT_S = 60.0


# ---- the driver, over its pipes ------------------------------------------------------------------------


class Driver:
    """A real driver process; a reader thread queues its stdout lines (replies and events)."""

    def __init__(self, env: Mapping[str, str], python_path: str | None = None) -> None:
        full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **env}
        if python_path is not None:
            full_env["PYTHONPATH"] = python_path + os.pathsep + full_env.get("PYTHONPATH", "")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "posttrain_worker.placement.ray_driver"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=full_env,
            text=True,
            start_new_session=True,
        )
        self.lines: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.events: list[dict[str, Any]] = []
        self._next_id = 0
        threading.Thread(target=self._read, daemon=True).start()
        self.first = self._take(60.0)

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(json.loads(line))  # only protocol lines may appear: anything else fails here
        self.lines.put(None)

    def _take(self, timeout: float) -> dict[str, Any]:
        try:
            message = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"the driver said nothing within {timeout} s") from None
        if message is None:
            raise AssertionError(f"the driver's stdout closed (exit {self.proc.poll()})")
        return message

    def send_line(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def request(self, op: str, timeout: float = REPLY_TIMEOUT_S, **args: Any) -> dict[str, Any]:
        """Send ``{"id", "op", ...args}``; its reply (events that come first are kept in ``events``)."""
        self._next_id += 1
        self.send_line(json.dumps({"id": self._next_id, "op": op, **args}))
        return self.reply(self._next_id, timeout)

    def reply(self, request_id: int | None, timeout: float = REPLY_TIMEOUT_S) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            message = self._take(max(deadline - time.monotonic(), 0.01))
            if "event" in message:
                self.events.append(message)
                continue
            assert message["id"] == request_id, message
            return message

    def event(self, name: str, timeout: float = EVENT_TIMEOUT_S) -> dict[str, Any]:
        """The next ``name`` event (earlier kept ones first)."""
        deadline = time.monotonic() + timeout
        while True:
            for i, message in enumerate(self.events):
                if message["event"] == name:
                    return self.events.pop(i)
            message = self._take(max(deadline - time.monotonic(), 0.01))
            assert "event" in message, message
            self.events.append(message)

    def stop(self) -> int:
        """EOF on stdin (the driver cleans up and exits); killed if it does not exit within 60 s."""
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()
        try:
            return self.proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            raise AssertionError("the driver did not exit within 60 s of EOF") from None


def result(reply: dict[str, Any]) -> dict[str, Any]:
    assert reply["ok"] is True, reply
    return reply["result"]


def failure(reply: dict[str, Any], code: str) -> dict[str, Any]:
    assert reply["ok"] is False and reply["error"]["code"] == code, reply
    return reply["error"]


def auth_of(keys: Keys) -> dict[str, str]:
    return {
        "secret": keys.secret,
        "serverSecretKey": keys.server_secret.decode(),
        "clientPublicKey": keys.client_public.decode(),
    }


def worker(index: int, resources: dict[str, float], role: str = "trainer", **extra: Any) -> dict[str, Any]:
    return {"index": index, "role": role, "resources": resources, "args": [], "env": {}, **extra}


def create_args(keys: Keys, workers: list[dict[str, Any]], strategy: str = "STRICT_SPREAD") -> dict[str, Any]:
    return {
        "auth": auth_of(keys),
        "strategy": strategy,
        "workers": workers,
        "maxRestarts": -1,
        "startTimeoutS": 60,
        "placementTimeoutS": 20,
    }


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (not yet reaped by its parent) is dead for our purpose
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def wait_gone(pids: list[int], timeout: float = 15.0) -> list[int]:
    """The ``pids`` still alive after waiting up to ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = [p for p in pids if pid_alive(p)]
        if not alive:
            return []
        time.sleep(0.1)
    return [p for p in pids if pid_alive(p)]


def pool_client(context: zmq.Context, keys: Keys, endpoint: str) -> Client:
    """The pool's own client: CURVE with the pool's client key, then the handshake with the secret."""
    client = curve_client(context, endpoint, keys.server_public, (keys.client_public, keys.client_secret))
    assert ok(handshake(client, keys.secret))["protocolVersion"] == PROTOCOL_VERSION
    return client


def assert_serves(context: zmq.Context, keys: Keys, info: dict[str, Any]) -> None:
    client = pool_client(context, keys, info["endpoint"])
    try:
        assert ok(client.call("ping")[0]) == {}
        assert ok(client.call("info")[0])["pid"] == info["pid"]
    finally:
        client.socket.close(linger=0)


def query_cluster(cluster: ClusterProcess) -> dict[str, Any]:
    """Placement groups and actors as the cluster's GCS reports them, read from a separate Ray driver process
    (so this test process holds no Ray state)."""
    script = (
        "import json, ray\n"
        f"ray.init(address={cluster.address!r}, log_to_driver=False)\n"
        "from ray._private import state\n"
        "pgs = {k: v['state'] for k, v in ray.util.placement_group_table().items()}\n"
        "actors = {k: v['State'] for k, v in state.actors().items()}\n"
        "print(json.dumps({'placementGroups': pgs, 'actors': actors}))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script],
        env={**os.environ, **cluster.env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ---- fixtures ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster() -> Iterator[ClusterProcess]:
    with launch_cluster(SPEC) as c:
        yield c
    leftover = subprocess.run(["pgrep", "-f", c.temp_dir], capture_output=True, text=True).stdout.split()
    assert c.proc.returncode == 0 and not leftover, f"Ray processes left: {leftover}"


@pytest.fixture(scope="module")
def driver(cluster: ClusterProcess) -> Iterator[Driver]:
    d = Driver(cluster.env)
    assert d.first["event"] == "driver_ready" and d.first["rayVersion"], d.first
    connected = result(d.request("connect", address=cluster.address, namespace="posttrain-test"))
    assert connected["started"] is False and connected["address"] == cluster.address
    yield d
    d.stop()


@pytest.fixture(scope="module")
def keys() -> Keys:
    return new_keys()


@pytest.fixture(scope="module")
def pool(driver: Driver, keys: Keys) -> dict[str, Any]:
    """Two trainer workers placed STRICT_SPREAD on the two custom-resource nodes."""
    workers = [worker(0, {"CPU": 1, "slot_a": 1, "GPU": 0}), worker(1, {"CPU": 1, "slot_b": 1})]
    return result(driver.request("create_workers", **create_args(keys, workers)))


# ---- requests the driver refuses -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "request_id", "expected"),
    [
        ("not json at all", None, "not JSON"),
        ('["a", "list"]', None, "JSON object"),
        ('{"op": "status"}', None, '"id"'),
        ('{"id": 7}', 7, '"op"'),
        ('{"id": 8, "op": "fly"}', 8, "unknown \"op\" 'fly'"),
        (
            '{"id": 9, "op": "kill_worker", "index": "zero", "signal": "SIGKILL"}',
            9,
            '"index" must be an integer',
        ),
        ('{"id": 10, "op": "restart", "timeoutS": 5}', 10, 'missing field "indices"'),
        ('{"id": 11, "op": "create_workers", "strategy": "PACK"}', 11, 'missing field "auth"'),
        ('{"id": 12, "op": "connect", "address": 5}', 12, '"address" must be a string or null'),
        (
            '{"id": 13, "op": "connect", "address": "ray://127.0.0.1:10001"}',
            13,
            "Ray Client address, which the Ray driver does not support: run on a node of the cluster",
        ),
        (
            '{"id": 14, "op": "kill_worker", "index": 0, "signal": "SIGKILL"}',
            14,
            'missing field "incarnation"',
        ),
        (
            '{"id": 15, "op": "restart", "indices": [0, 1], "timeoutS": 5, "incarnations": [0]}',
            15,
            '"incarnations" must have one entry per index (2), got 1',
        ),
        (
            '{"id": 16, "op": "restart", "indices": [0], "timeoutS": 5, "incarnations": [-1]}',
            16,
            '"incarnations" must be an array of integers >= 0',
        ),
    ],
)
def test_a_malformed_request_is_bad_request_and_the_driver_keeps_serving(
    driver: Driver, line: str, request_id: int | None, expected: str
) -> None:
    driver.send_line(line)
    error = failure(driver.reply(request_id), "BAD_REQUEST")
    assert expected in error["message"], error
    assert result(driver.request("status"))["nodes"]


def test_bad_worker_fields_name_the_field(driver: Driver, keys: Keys) -> None:
    cases = [
        ([worker(0, {"CPU": -1})], '"workers[0].resources.CPU" must be a number >= 0'),
        ([worker(0, {"CPU": 0})], '"workers[0].resources" must ask for at least one resource'),
        ([worker(0, {"CPU": 1}), worker(5, {"CPU": 1})], '"workers[1].index" must be 1'),
        ([worker(0, {"CPU": 1}, args="--x")], '"workers[0].args" must be an array of strings'),
    ]
    for workers, expected in cases:
        error = failure(driver.request("create_workers", **create_args(keys, workers)), "BAD_REQUEST")
        assert expected in error["message"], error
    bad_strategy = {**create_args(keys, [worker(0, {"CPU": 1})]), "strategy": "ANYWHERE"}
    assert (
        '"strategy" must be one of'
        in failure(driver.request("create_workers", **bad_strategy), "BAD_REQUEST")["message"]
    )


# ---- infeasible placements fail fast -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("workers", "strategy", "reason"),
    [
        ([worker(0, {"CPU": 1, "GPU": 1})], "PACK", "GPU: 1 asked in total, the cluster has 0"),
        (
            [worker(i, {"CPU": 0.5}) for i in range(3)],
            "STRICT_SPREAD",
            "needs a distinct node for each of the 3 bundles, only 2 node(s) can host them",
        ),
        (
            [worker(i, {"CPU": 0.5, "slot_a": 0.5}) for i in range(2)],
            "STRICT_SPREAD",
            "needs a distinct node for each of the 2 bundles, only 1 node(s) can host them",
        ),
        (
            [worker(0, {"slot_a": 1, "slot_b": 1})],
            "PACK",
            "bundle 0 {'slot_a': 1.0, 'slot_b': 1.0} fits on no node",
        ),
    ],
    ids=["gpu", "more-bundles-than-nodes", "one-node-for-two-bundles", "bundle-too-big"],
)
def test_an_infeasible_placement_fails_fast_naming_asked_and_available(
    driver: Driver, keys: Keys, workers: list[dict[str, Any]], strategy: str, reason: str
) -> None:
    started = time.monotonic()
    error = failure(
        driver.request("create_workers", **create_args(keys, workers, strategy)), "PLACEMENT_INFEASIBLE"
    )
    elapsed = time.monotonic() - started
    assert elapsed < 1.0, f"took {elapsed:.2f} s"
    message = error["message"]
    assert reason in message, message
    assert "asked" in message and "the cluster has 3 alive node(s)" in message and "available now" in message
    details = error["details"]
    assert details["asked"] == [{k: float(v) for k, v in w["resources"].items() if v} for w in workers]
    assert details["available"].get("CPU") == 2.0 and len(details["nodes"]) == 3
    status = result(driver.request("status"))  # still serving, nothing placed
    assert status["placementGroupId"] is None and status["workers"] == []


def test_a_worker_that_cannot_start_is_worker_start_failed_with_its_stderr(
    driver: Driver, keys: Keys
) -> None:
    workers = [worker(0, {"CPU": 1, "slot_a": 1}, args=["--extension", "/nonexistent/ext.py"])]
    error = failure(driver.request("create_workers", **create_args(keys, workers)), "WORKER_START_FAILED")
    assert "/nonexistent/ext.py" in error["message"] and "no such file" in error["message"], error
    assert result(driver.request("status"))["placementGroupId"] is None
    deadline = time.monotonic() + 5
    while result(driver.request("status"))["available"].get("slot_a") != 1.0:
        assert time.monotonic() < deadline, "its bundle was not given back"
        time.sleep(0.1)


# ---- a placed pool -------------------------------------------------------------------------------------


def test_strict_spread_places_one_worker_per_node_reachable_only_with_the_pool_keys(
    cluster: ClusterProcess, pool: dict[str, Any], keys: Keys, zctx: zmq.Context
) -> None:
    infos = pool["workers"]
    assert [w["index"] for w in infos] == [0, 1] and all(w["incarnation"] == 0 for w in infos)
    slot_nodes = {
        name: next(n["nodeId"] for n in cluster.nodes if name in n["resources"])
        for name in ("slot_a", "slot_b")
    }
    assert [w["nodeId"] for w in infos] == [slot_nodes["slot_a"], slot_nodes["slot_b"]]
    for info in infos:
        assert info["endpoint"].startswith("tcp://127.0.0.1:") and info["nodeAddress"] == "127.0.0.1"
        exposed = (
            Path(f"/proc/{info['pid']}/cmdline").read_bytes()
            + Path(f"/proc/{info['pid']}/environ").read_bytes()
        )
        assert keys.secret.encode() not in exposed and keys.server_secret not in exposed
        assert_serves(zctx, keys, info)
    # a foreign client: CURVE with another client key (and even the right secret) gets nothing at all
    foreign = curve_client(zctx, infos[0]["endpoint"], keys.server_public, zmq.curve_keypair())
    try:
        refused_send(foreign, "handshake", {"protocolVersion": PROTOCOL_VERSION, "secret": keys.secret})
        refused_send(foreign, "shutdown", {})
        assert no_reply(foreign)
    finally:
        foreign.socket.close(linger=0)
    assert_serves(zctx, keys, infos[0])  # and the worker still serves the pool's client


def test_kill_worker_sigkill_is_reported_then_ray_restarts_it(
    driver: Driver, pool: dict[str, Any], keys: Keys, zctx: zmq.Context
) -> None:
    old = result(driver.request("status"))["workers"][0]
    started = time.monotonic()
    killed = driver.request("kill_worker", index=0, signal="SIGKILL", incarnation=old["incarnation"])
    assert result(killed) == {"killed": True}
    exit_event = driver.event("worker_exit", timeout=10)
    reported_after = time.monotonic() - started
    assert reported_after < 2.0, f"worker_exit came {reported_after:.2f} s after the kill"
    assert exit_event["index"] == 0 and exit_event["incarnation"] == old["incarnation"]
    assert exit_event["signal"] == "SIGKILL" and exit_event["exitCode"] is None
    assert exit_event["cause"] == "worker_exited" and exit_event["nodeId"] == old["nodeId"]
    assert "serving on tcp://127.0.0.1" in exit_event["stderrTail"]
    new = driver.event("worker_restarted")["worker"]
    assert new["incarnation"] == old["incarnation"] + 1 and new["index"] == 0
    assert new["nodeId"] == old["nodeId"] and new["actorId"] == old["actorId"]  # same bundle, same actor
    assert new["pid"] != old["pid"] and new["actorPid"] != old["actorPid"]
    assert wait_gone([old["pid"], old["actorPid"]]) == []
    assert_serves(zctx, keys, new)
    # a kill meant for the old incarnation never reaches the new one
    stale = driver.request("kill_worker", index=0, signal="SIGKILL", incarnation=old["incarnation"])
    assert result(stale) == {"killed": False}
    assert result(driver.request("status"))["workers"][0]["pid"] == new["pid"]
    assert_serves(zctx, keys, new)
    assert not [e for e in driver.events if e["event"] == "worker_exit"]


def test_sigkill_of_the_actor_takes_its_worker_and_ray_restarts_both(
    driver: Driver, pool: dict[str, Any], keys: Keys, zctx: zmq.Context
) -> None:
    old = result(driver.request("status"))["workers"][1]
    os.kill(old["actorPid"], signal.SIGKILL)
    started = time.monotonic()
    exit_event = driver.event("worker_exit", timeout=10)
    assert time.monotonic() - started < 3.0
    assert exit_event["index"] == 1 and exit_event["incarnation"] == old["incarnation"]
    assert exit_event["cause"] == "actor_died"
    assert wait_gone([old["pid"]], timeout=5) == [], "the worker outlived its SIGKILLed actor"
    new = driver.event("worker_restarted")["worker"]
    assert new["incarnation"] == old["incarnation"] + 1 and new["pid"] != old["pid"]
    assert_serves(zctx, keys, new)


def test_restart_gives_every_listed_worker_a_new_incarnation(
    driver: Driver, pool: dict[str, Any], keys: Keys, zctx: zmq.Context
) -> None:
    before = result(driver.request("status"))["workers"]
    held = [before[1]["incarnation"], before[0]["incarnation"]]
    restarted = result(driver.request("restart", indices=[1, 0], timeoutS=90, incarnations=held))["workers"]
    assert [w["index"] for w in restarted] == [1, 0]
    for new in restarted:
        old = before[new["index"]]
        assert new["incarnation"] == old["incarnation"] + 1 and new["pid"] != old["pid"]
        assert_serves(zctx, keys, new)
    assert wait_gone([w["pid"] for w in before]) == []
    exits = [driver.event("worker_exit") for _ in restarted]
    assert sorted(e["index"] for e in exits) == [0, 1]
    assert "RESTARTS_EXHAUSTED" not in json.dumps(driver.events)
    error = failure(driver.request("restart", indices=[2], timeoutS=5), "BAD_REQUEST")
    assert '"indices" 2 names no worker' in error["message"]


def test_restart_of_an_incarnation_already_replaced_only_waits_for_the_newer_one(
    driver: Driver, pool: dict[str, Any], keys: Keys, zctx: zmq.Context
) -> None:
    current = result(driver.request("status"))["workers"][0]
    assert current["incarnation"] >= 1
    # the caller held an older incarnation (Ray restarted it meanwhile): nothing is killed
    again = driver.request("restart", indices=[0], timeoutS=30, incarnations=[current["incarnation"] - 1])
    assert result(again)["workers"] == [current]
    assert_serves(zctx, keys, current)
    time.sleep(0.5)
    assert not [e for e in driver.events if e["event"] == "worker_exit"]
    future = driver.request("restart", indices=[0], timeoutS=5, incarnations=[current["incarnation"] + 1])
    assert "whose current incarnation is" in failure(future, "BAD_REQUEST")["message"]


def test_close_kills_the_actors_and_removes_the_placement_group(
    cluster: ClusterProcess, driver: Driver, pool: dict[str, Any]
) -> None:
    status = result(driver.request("status"))
    pids = [p for w in status["workers"] for p in (w["pid"], w["actorPid"])]
    assert result(driver.request("close")) == {"stoppedCluster": False}
    assert driver.proc.wait(30) == 0
    assert wait_gone(pids) == []
    seen = query_cluster(cluster)
    assert seen["placementGroups"][status["placementGroupId"]] == "REMOVED"
    actor_ids = {w["actorId"] for w in status["workers"]}
    assert {seen["actors"][a] for a in actor_ids} == {"DEAD"}


def test_no_restarts_left_is_worker_lost_then_restarts_exhausted_and_eof_cleans_up(
    cluster: ClusterProcess, keys: Keys
) -> None:
    d = Driver(cluster.env)
    try:
        result(d.request("connect", address=cluster.address))
        no_restarts = {
            **create_args(keys, [worker(0, {"CPU": 1}, role="generator")], "PACK"),
            "maxRestarts": 0,
        }
        placed = result(d.request("create_workers", **no_restarts))
        killed = d.request("kill_worker", index=0, signal="SIGTERM", incarnation=0)
        assert result(killed) == {"killed": True}
        exit_event = d.event("worker_exit", timeout=10)
        assert (
            exit_event["exitCode"] == 0 and exit_event["signal"] is None
        )  # SIGTERM: the worker stops cleanly
        lost = d.event("worker_lost")
        assert lost["index"] == 0 and "generator" in lost["message"]
        error = failure(d.request("restart", indices=[0], timeoutS=10), "RESTARTS_EXHAUSTED")
        assert "worker 0 (generator)" in error["message"]
        assert placed["workers"][0]["nodeId"] in error["message"]
        assert result(d.request("status"))["workers"] == [None]
    finally:
        code = d.stop()  # EOF on stdin: cleaned up as for close
    assert code == 0
    info = placed["workers"][0]
    assert wait_gone([info["pid"], info["actorPid"]]) == []
    seen = query_cluster(cluster)
    assert seen["placementGroups"][placed["placementGroupId"]] == "REMOVED"
    assert seen["actors"][info["actorId"]] == "DEAD"


def test_sigterm_is_close(cluster: ClusterProcess) -> None:
    d = Driver(cluster.env)
    result(d.request("connect", address=cluster.address))
    d.proc.send_signal(signal.SIGTERM)
    assert d.proc.wait(30) == 0


SLOW_IMPORT = """
import os, pathlib, time
pathlib.Path(os.environ["PT_TEST_PID_FILE"]).write_text(str(os.getpid()))
time.sleep(120)  # a worker that never gets READY
"""


def test_sigterm_during_create_workers_interrupts_it_and_tears_everything_down(
    cluster: ClusterProcess, keys: Keys, tmp_path: Path
) -> None:
    extension = tmp_path / "slow_import.py"
    extension.write_text(SLOW_IMPORT)
    pid_file = tmp_path / "worker.pid"
    d = Driver(cluster.env)
    try:
        result(d.request("connect", address=cluster.address))
        slow = worker(0, {"CPU": 1, "slot_a": 1}, args=["--extension", str(extension)])
        slow["env"] = {"PT_TEST_PID_FILE": str(pid_file)}
        d.send_line(
            json.dumps({"id": 99, "op": "create_workers", **create_args(keys, [slow]), "startTimeoutS": 600})
        )
        deadline = time.monotonic() + 60
        while not pid_file.exists() or not pid_file.read_text():
            assert time.monotonic() < deadline, "the worker child never started"
            time.sleep(0.1)
        worker_pid = int(pid_file.read_text())
        started = time.monotonic()
        d.proc.send_signal(signal.SIGTERM)
        assert d.proc.wait(30) == 0
        took = time.monotonic() - started
    finally:
        if d.proc.poll() is None:
            d.stop()
    assert took < 8.0, f"the driver took {took:.1f} s to exit after SIGTERM"
    assert wait_gone([worker_pid], timeout=10) == [], "the never-ready worker outlived the driver"
    seen = query_cluster(cluster)
    assert set(seen["placementGroups"].values()) == {"REMOVED"}, seen
    assert set(seen["actors"].values()) == {"DEAD"}, seen


# ---- a cluster of the driver's own ---------------------------------------------------------------------


def listeners(pids: set[int]) -> list[str]:
    """``address:port`` of every TCP socket listening in ``pids`` (from ``ss``)."""
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, check=True).stdout
    found = []
    for line in out.splitlines():
        if any(f"pid={pid}," in line for pid in pids):
            found.append(line.split()[3])
    return found


def with_descendants(pids: set[int]) -> set[int]:
    """``pids`` and every process below them (Ray's agents rename themselves ``ray::...``)."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    found = set(pids)
    while True:
        more = {pid for pid, parent in parents.items() if parent in found and pid not in found}
        if not more:
            return found
        found |= more


def test_connect_without_address_starts_a_loopback_cluster_and_close_stops_it() -> None:
    temp_dir = tempfile.mkdtemp(prefix="ptr-", dir="/tmp")
    home_token = Path.home() / ".ray" / "auth_token"
    had_home_token = home_token.exists()
    # no RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER here: the driver keeps a cluster of its own on loopback by itself
    d = Driver({})
    try:
        connected = result(d.request("connect", address=None, tempDir=temp_dir, numCpus=1))
        assert connected["started"] is True and connected["address"].startswith("127.0.0.1:")
        assert [n["address"] for n in connected["nodes"]] == ["127.0.0.1"]
        assert connected["total"]["CPU"] == 1.0
        in_temp_dir = subprocess.run(["pgrep", "-f", temp_dir], capture_output=True, text=True).stdout.split()
        ray_pids = with_descendants({int(p) for p in in_temp_dir}) - {d.proc.pid}
        assert len(ray_pids) >= 3  # at least the GCS server, the raylet and its agents
        bound = listeners(ray_pids)
        assert bound and all(a.rsplit(":", 1)[0] in ("127.0.0.1", "[::ffff:127.0.0.1]") for a in bound), bound
        assert (Path(temp_dir) / "auth_token").stat().st_mode & 0o077 == 0  # its own token, private
        assert home_token.exists() == had_home_token  # and nothing written to ~/.ray
        assert result(d.request("close")) == {"stoppedCluster": True}
        assert d.proc.wait(30) == 0
        assert wait_gone(sorted(ray_pids)) == []
    finally:
        if d.proc.poll() is None:
            d.stop()
        subprocess.run(["rm", "-rf", temp_dir], check=False)


def test_without_ray_the_driver_says_ray_unavailable(tmp_path: Path) -> None:
    fake = tmp_path / "ray"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise ImportError('no ray in this test')\n")
    d = Driver({}, python_path=str(tmp_path))
    assert d.first == {
        "event": "driver_failed",
        "code": "RAY_UNAVAILABLE",
        "message": f"ray is not installed in {sys.executable}: npx posttrain setup --extras ray",
    }
    assert d.proc.wait(30) == 3


# ---- last: it removes a node of the shared cluster ------------------------------------------------------


def test_a_removed_node_is_node_lost_and_its_worker_exit_names_it(
    cluster: ClusterProcess, keys: Keys
) -> None:
    d = Driver(cluster.env)
    try:
        result(d.request("connect", address=cluster.address))
        placed = result(
            d.request("create_workers", **create_args(keys, [worker(0, {"CPU": 1, "slot_b": 1})]))
        )
        info = placed["workers"][0]
        removed = cluster.remove_node(1)  # the node with slot_b
        started = time.monotonic()
        assert removed["ok"] is True and removed["nodeId"] == info["nodeId"], removed
        lost = d.event("node_lost", timeout=15)
        exit_event = d.event("worker_exit", timeout=15)
        took = time.monotonic() - started
        assert lost["nodeId"] == info["nodeId"] and lost["address"] == "127.0.0.1"
        assert exit_event["index"] == 0 and exit_event["incarnation"] == 0
        assert exit_event["cause"] == "node_lost" and exit_event["nodeId"] == info["nodeId"]
        assert took < 8.0, f"node_lost and worker_exit came {took:.1f} s after the node was removed"
        assert wait_gone([info["pid"], info["actorPid"]]) == []
    finally:
        assert d.stop() == 0
