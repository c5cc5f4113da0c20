"""Authenticated endpoints (docs/workers.md, "Security"): real ``python -m posttrain_worker --auth-stdin``
processes given a pool secret and CURVE keys on stdin, and foreign raw pyzmq clients.

- ipc: a client that reaches the socket file but lacks the secret gets ``UNAUTHENTICATED`` for every method
  (``shutdown``, ``save_checkpoint``, ``load_model``...), heartbeat and cancel, and the worker keeps serving;
  a wrong, missing or malformed secret is refused the same way. Admission belongs to the client's routing
  identity, so a reconnect with the same identity stays admitted.
- tcp: a client without the pool's CURVE client key (plain, or CURVE with another key) gets nothing at all,
  and the worker keeps serving the real client; worker-to-worker weight transfer over tcp uses the keys too.
- Start-up: a non-loopback tcp address without keys, or no secret without ``--insecure``, is an error raised
  before anything is bound; the secret and keys never appear in the worker's argv or environment.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch
import zmq
from posttrain_worker import PROTOCOL_VERSION
from posttrain_worker.curve import CurveKeys
from posttrain_worker.errors import WorkerFailure
from posttrain_worker.methods import default_registry
from posttrain_worker.server import ServerConfig, WorkerServer
from posttrain_worker.server.auth import (
    UNAUTHENTICATED,
    WorkerAuth,
    check_protection,
    parse_auth,
    read_auth_line,
)
from posttrain_worker.server.endpoint import parse_endpoint
from posttrain_worker.transfer import zmq_transfer
from worker_harness import READY_RE, Client, error, ok

REFUSAL_WAIT_S = 1.0
"""How long a refused client waits for a reply that must not come."""


@dataclass
class Keys:
    secret: str
    server_public: bytes
    server_secret: bytes
    client_public: bytes
    client_secret: bytes

    def line(self) -> bytes:
        curve = {
            "serverSecretKey": self.server_secret.decode(),
            "clientPublicKey": self.client_public.decode(),
        }
        return (json.dumps({"secret": self.secret, "curve": curve}) + "\n").encode()


def new_keys() -> Keys:
    server_public, server_secret = zmq.curve_keypair()
    client_public, client_secret = zmq.curve_keypair()
    return Keys(secrets.token_hex(32), server_public, server_secret, client_public, client_secret)


@dataclass
class AuthWorker:
    proc: subprocess.Popen[bytes]
    endpoint: str
    keys: Keys


def start_auth_worker(endpoint: str, keys: Keys) -> AuthWorker:
    """A worker given ``keys`` the SDK's way: ``--auth-stdin`` and one JSON line on its stdin pipe."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "posttrain_worker", "--endpoint", endpoint, "--auth-stdin"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(keys.line())
    proc.stdin.flush()  # stays open: its EOF would tell the worker that its parent died
    line = proc.stdout.readline().decode().rstrip("\n")
    match = READY_RE.match(line)
    if match is None:
        proc.kill()
        proc.wait()
        raise AssertionError(f"no READY line, got {line!r}")
    return AuthWorker(proc, match.group(1), keys)


def stop(worker: AuthWorker) -> None:
    if worker.proc.poll() is None:
        worker.proc.kill()
    worker.proc.wait()


@pytest.fixture(scope="module")
def ipc_worker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AuthWorker]:
    directory = tmp_path_factory.mktemp("auth")
    worker = start_auth_worker(f"ipc://{directory}/w.sock", new_keys())
    yield worker
    stop(worker)


@pytest.fixture(scope="module")
def tcp_worker() -> Iterator[AuthWorker]:
    worker = start_auth_worker("tcp://127.0.0.1:0", new_keys())
    yield worker
    stop(worker)


def curve_client(
    context: zmq.Context, endpoint: str, server_public: bytes, pair: tuple[bytes, bytes]
) -> Client:
    client = Client.__new__(Client)
    client.socket = context.socket(zmq.DEALER)
    client.socket.setsockopt(zmq.LINGER, 0)
    client.socket.curve_serverkey = server_public
    client.socket.curve_publickey, client.socket.curve_secretkey = pair
    client.socket.connect(endpoint)
    client.sent = []
    return client


def handshake(client: Client, secret: Any) -> dict[str, Any]:
    args: dict[str, Any] = {"protocolVersion": PROTOCOL_VERSION}
    if secret is not None:
        args["secret"] = secret
    return client.call("handshake", args)[0]


def real_client(context: zmq.Context, worker: AuthWorker) -> Client:
    """The pool's own client: CURVE with the pool's client key on tcp, then the handshake with the secret."""
    keys = worker.keys
    if worker.endpoint.startswith("tcp://"):
        client = curve_client(
            context, worker.endpoint, keys.server_public, (keys.client_public, keys.client_secret)
        )
    else:
        client = Client(context, worker.endpoint)
    assert ok(handshake(client, keys.secret))["protocolVersion"] == PROTOCOL_VERSION
    return client


def no_reply(*clients: Client) -> bool:
    """True when none of ``clients`` gets a message within ``REFUSAL_WAIT_S`` (waited out together)."""
    poller = zmq.Poller()
    for client in clients:
        poller.register(client.socket, zmq.POLLIN)
    return not poller.poll(int(REFUSAL_WAIT_S * 1000))


def refused_send(client: Client, method: str, args: dict[str, Any]) -> None:
    """Send unless the refused connection is already gone: libzmq then has no pipe to queue the message on."""
    client.socket.setsockopt(zmq.SNDTIMEO, 200)
    try:
        client.request(method, args)
    except zmq.Again:
        pass


# ---- ipc: the secret -----------------------------------------------------------------------------------


def test_secret_and_keys_are_not_in_argv_or_environment(ipc_worker: AuthWorker) -> None:
    pid = ipc_worker.proc.pid
    exposed = Path(f"/proc/{pid}/cmdline").read_bytes() + Path(f"/proc/{pid}/environ").read_bytes()
    keys = ipc_worker.keys
    assert b"--auth-stdin" in exposed
    for secret in (keys.secret.encode(), keys.server_secret, keys.client_public):
        assert secret not in exposed


@pytest.mark.parametrize(
    ("method", "args"),
    [
        ("shutdown", {}),
        ("save_checkpoint", {"model": "policy", "path": "/tmp/x"}),
        ("load_model", {"name": "policy", "path": "/tmp/x"}),
        ("info", {}),
        ("ping", {}),
    ],
)
def test_ipc_client_without_the_secret_gets_unauthenticated(
    zctx: zmq.Context, ipc_worker: AuthWorker, method: str, args: dict[str, Any]
) -> None:
    foreign = Client(zctx, ipc_worker.endpoint)
    try:
        message = error(foreign.call(method, args)[0], UNAUTHENTICATED)
        assert "handshake with the pool secret first" in message
    finally:
        foreign.close()
    real = real_client(zctx, ipc_worker)
    assert ok(real.call("ping")[0]) == {}
    real.close()
    assert ipc_worker.proc.poll() is None


def test_ipc_heartbeat_and_cancel_from_an_outsider_learn_nothing(
    zctx: zmq.Context, ipc_worker: AuthWorker
) -> None:
    foreign = Client(zctx, ipc_worker.endpoint)
    try:
        for kind in ("heartbeat", "cancel"):
            foreign.send({"v": PROTOCOL_VERSION, "type": kind, "id": 7})
            reply, _ = foreign.recv()
            assert reply["type"] == "response" and reply["id"] == 7, reply
            error(reply, UNAUTHENTICATED)
            assert "busy" not in reply
    finally:
        foreign.close()


@pytest.mark.parametrize(
    ("secret", "reason"),
    [
        ("00" * 32, "is not this worker's pool secret"),
        (None, 'lacks "secret"'),
        ("zz" * 32, "must be hex digits"),
        ("ab" * 8, "at least 32 bytes"),
        (12345, "must be a string"),
    ],
)
def test_a_wrong_secret_is_refused_and_the_worker_keeps_serving(
    zctx: zmq.Context, ipc_worker: AuthWorker, secret: Any, reason: str
) -> None:
    foreign = Client(zctx, ipc_worker.endpoint)
    try:
        assert reason in error(handshake(foreign, secret), UNAUTHENTICATED)
        error(foreign.call("shutdown")[0], UNAUTHENTICATED)  # still not admitted
    finally:
        foreign.close()
    real = real_client(zctx, ipc_worker)
    assert ok(real.call("ping")[0]) == {}
    real.close()


def test_admission_is_per_client(zctx: zmq.Context, ipc_worker: AuthWorker) -> None:
    real = real_client(zctx, ipc_worker)
    foreign = Client(zctx, ipc_worker.endpoint)
    try:
        assert ok(real.call("ping")[0]) == {}
        error(foreign.call("shutdown")[0], UNAUTHENTICATED)
        assert ok(real.call("info")[0])["workerId"] == 0
    finally:
        foreign.close()
        real.close()


def client_as(context: zmq.Context, endpoint: str, identity: bytes) -> Client:
    """A raw client whose DEALER sets ``ZMQ_ROUTING_ID`` (as the SDK's does, to 32 random hex characters)."""
    client = Client.__new__(Client)
    client.socket = context.socket(zmq.DEALER)
    client.socket.setsockopt(zmq.LINGER, 0)
    client.socket.setsockopt(zmq.ROUTING_ID, identity)
    client.socket.connect(endpoint)
    client.sent = []
    return client


def test_an_admitted_identity_stays_admitted_across_a_reconnect(
    zctx: zmq.Context, ipc_worker: AuthWorker
) -> None:
    identity = secrets.token_hex(16).encode()
    first = client_as(zctx, ipc_worker.endpoint, identity)
    assert ok(handshake(first, ipc_worker.keys.secret))["protocolVersion"] == PROTOCOL_VERSION
    first.close()
    # A ROUTER ignores a peer claiming an identity it still holds: retry until it has seen the old one go.
    for _ in range(10):
        time.sleep(0.1)  # ZeroMQ's own reconnect interval
        again = client_as(zctx, ipc_worker.endpoint, identity)
        again.request("ping")
        if again.socket.poll(1000):
            break
        again.close()
    else:
        raise AssertionError("the reconnected client got no reply")
    try:
        assert ok(again.recv()[0]) == {}  # no second handshake
    finally:
        again.close()
    other = client_as(zctx, ipc_worker.endpoint, secrets.token_hex(16).encode())
    try:
        error(other.call("ping")[0], UNAUTHENTICATED)
    finally:
        other.close()


# ---- tcp: CURVE ----------------------------------------------------------------------------------------


def test_tcp_client_without_the_key_is_refused_and_the_worker_keeps_serving(
    zctx: zmq.Context, tcp_worker: AuthWorker
) -> None:
    keys = tcp_worker.keys
    plain = Client(zctx, tcp_worker.endpoint)
    other = curve_client(zctx, tcp_worker.endpoint, keys.server_public, zmq.curve_keypair())
    real = real_client(zctx, tcp_worker)
    try:
        for foreign in (plain, other):
            # Even with the right secret: the ZeroMQ handshake fails first, so nothing reaches the worker.
            refused_send(foreign, "handshake", {"protocolVersion": PROTOCOL_VERSION, "secret": keys.secret})
            refused_send(foreign, "shutdown", {})
        assert no_reply(plain, other)
        assert ok(real.call("ping")[0]) == {}
        assert tcp_worker.proc.poll() is None
    finally:
        for client in (plain, other, real):
            client.socket.close(linger=0)


def test_tcp_with_the_key_still_needs_the_secret(zctx: zmq.Context, tcp_worker: AuthWorker) -> None:
    keys = tcp_worker.keys
    client = curve_client(
        zctx, tcp_worker.endpoint, keys.server_public, (keys.client_public, keys.client_secret)
    )
    try:
        error(client.call("shutdown")[0], UNAUTHENTICATED)
        error(handshake(client, "11" * 32), UNAUTHENTICATED)
    finally:
        client.socket.close(linger=0)
    assert tcp_worker.proc.poll() is None


@pytest.fixture
def transfer_keys() -> Iterator[CurveKeys]:
    """The pool's keys configured for this process's weight transfers (as ``--auth-stdin`` does)."""
    auth = parse_auth(json.loads(new_keys().line()))
    assert auth.curve is not None
    zmq_transfer.configure_keys(auth.curve)
    yield auth.curve
    zmq_transfer.configure_keys(None)


def run_transfer(
    listener: zmq_transfer.Listener, pairs: list[tuple[str, torch.Tensor]], timeout_s: float
) -> tuple[dict[str, torch.Tensor], BaseException | None]:
    """Receive on ``listener`` while the sender runs here; what arrived and the sender's failure."""
    received: dict[str, torch.Tensor] = {}
    specs_ok = threading.Event()

    def receive() -> None:
        deadline = zmq_transfer.Deadline(timeout_s, lambda: None, "receive")
        listener.receive(lambda _s: specs_ok.set(), lambda n, t: received.__setitem__(n, t.clone()), deadline)

    thread = threading.Thread(target=lambda: _swallow(receive), daemon=True)
    thread.start()
    failure: BaseException | None = None
    try:
        zmq_transfer.send(
            listener.endpoint, pairs, 1, 1024, zmq_transfer.Deadline(timeout_s, lambda: None, "send")
        )
    except WorkerFailure as exc:
        failure = exc
    thread.join(timeout_s + 2)
    return received, failure


def _swallow(fn: Any) -> None:
    try:
        fn()
    except WorkerFailure:
        pass


def test_weight_transfer_over_tcp_uses_the_pool_keys(transfer_keys: CurveKeys) -> None:
    pairs = [("a", torch.arange(600, dtype=torch.float32)), ("b", torch.ones(3, 4, dtype=torch.bfloat16))]
    listener = zmq_transfer.Listener("tcp", "127.0.0.1")
    try:
        assert listener.zap_domain is not None  # CURVE server with a ZAP domain of its own
        received, failure = run_transfer(listener, pairs, 10.0)
        assert failure is None
        assert torch.equal(received["a"], pairs[0][1]) and torch.equal(received["b"], pairs[1][1])
    finally:
        listener.close()


def test_weight_transfer_over_tcp_refuses_a_sender_without_the_keys(transfer_keys: CurveKeys) -> None:
    listener = zmq_transfer.Listener("tcp", "127.0.0.1")
    zmq_transfer.configure_keys(None)  # this process now sends as an outsider without the pool's keys
    try:
        received, failure = run_transfer(listener, [("a", torch.zeros(4))], 1.5)
        assert isinstance(failure, WorkerFailure) and "did not answer" in failure.message
        assert received == {}
    finally:
        listener.close()


def test_weight_transfer_without_keys_refuses_a_non_loopback_host_before_binding() -> None:
    zmq_transfer.configure_keys(None)
    with pytest.raises(WorkerFailure, match="non-loopback address needs the pool's CURVE keys") as raised:
        zmq_transfer.Listener("tcp", "0.0.0.0")  # raises before a socket exists: nothing is bound
    assert raised.value.code == "BAD_ARGUMENTS"


def test_a_failed_transfer_bind_leaks_neither_its_socket_nor_its_zap_domain(transfer_keys: CurveKeys) -> None:
    zap = zmq_transfer._zap_handler()  # started first: its own socket is not a leak
    context = zmq_transfer.context()
    before = {s for s in context._sockets if not s.closed}
    with pytest.raises(zmq.ZMQError) as raised:
        zmq_transfer.Listener("tcp", "192.0.2.1")  # TEST-NET-1, on no interface: the bind fails after allow()
    # ``raised`` holds the failed Listener alive, so a leaked socket would still be open here.
    assert raised.value.errno == zmq.EADDRNOTAVAIL
    assert {s for s in context._sockets if not s.closed} <= before
    assert not [d for d in zap._allowed if d.startswith(zmq_transfer.ZAP_DOMAIN_PREFIX.encode())]


# ---- start-up ------------------------------------------------------------------------------------------


def test_non_loopback_tcp_without_keys_is_an_error_before_any_bind() -> None:
    auth_without_curve = WorkerAuth(secrets.token_bytes(32), None)
    for endpoint in ("tcp://0.0.0.0:*", "tcp://*:5555", "tcp://10.1.2.3:0"):
        for auth in (None, auth_without_curve):
            # WorkerServer refuses in its constructor: run() (which binds) is never reached.
            with pytest.raises(ValueError, match="non-loopback tcp address needs CURVE keys"):
                WorkerServer(ServerConfig(endpoint=endpoint, insecure=True, auth=auth), default_registry())


def test_the_cli_refuses_0_0_0_0_without_keys() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "posttrain_worker", "--endpoint", "tcp://0.0.0.0:0", "--insecure"],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert "non-loopback tcp address needs CURVE keys" in proc.stderr


def test_without_a_secret_only_insecure_serves(tmp_path: Path) -> None:
    ipc = parse_endpoint(f"ipc://{tmp_path}/w.sock")
    loopback = parse_endpoint("tcp://127.0.0.1:*")
    with pytest.raises(ValueError, match="no pool secret"):
        check_protection(ipc, None, insecure=False)
    with pytest.raises(ValueError, match="tcp endpoints need CURVE keys"):
        check_protection(loopback, None, insecure=False)
    with pytest.raises(ValueError, match="tcp endpoints need CURVE keys"):
        check_protection(loopback, WorkerAuth(secrets.token_bytes(32), None), insecure=False)
    check_protection(ipc, None, insecure=True)
    check_protection(loopback, None, insecure=True)
    check_protection(ipc, WorkerAuth(secrets.token_bytes(32), None), insecure=False)


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (b"not json\n", "not valid JSON"),
        (b"[1]\n", "must be a JSON object"),
        (b'{"curve": null}\n', 'lacks "secret"'),
        (b'{"secret": "abcd"}\n', "at least 32 bytes"),
        (b'{"secret": "' + b"ab" * 32 + b'", "curve": {"serverSecretKey": "x"}}\n', "curve.serverSecretKey"),
        (b'{"secret": "' + b"ab" * 32 + b'", "extra": 1}\n', "unknown field"),
        (b'{"secret": "' + b"ab" * 32 + b'"}', "stdin closed before a complete auth line"),
    ],
)
def test_a_bad_auth_line_names_the_problem(line: bytes, reason: str) -> None:
    read_fd, write_fd = os.pipe()
    try:
        os.write(write_fd, line)
        os.close(write_fd)
        write_fd = -1
        with pytest.raises(ValueError, match=reason) as raised:
            read_auth_line(read_fd, timeout_s=5)
        assert "ab" * 32 not in str(raised.value)  # a secret is never echoed
    finally:
        os.close(read_fd)
        if write_fd >= 0:
            os.close(write_fd)


def test_the_auth_line_is_read_up_to_its_newline_only() -> None:
    keys = new_keys()
    read_fd, write_fd = os.pipe()
    try:
        os.write(write_fd, keys.line() + b"after")
        auth = read_auth_line(read_fd, timeout_s=5)
        assert auth.secret == bytes.fromhex(keys.secret)
        assert auth.curve is not None and auth.curve.server_public_key == keys.server_public
        assert keys.secret not in repr(auth)
        assert os.read(read_fd, 16) == b"after"  # left for the stdin watch
    finally:
        os.close(read_fd)
        os.close(write_fd)
