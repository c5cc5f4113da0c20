"""Sandbox jail: starts the sandbox driver inside private Linux namespaces, as an unprivileged user.

Started by the TypeScript ``PythonSandbox`` as ``python -I -u jail.py JAIL_CONFIG`` (standard library only,
like the driver). What it builds, each step reported (best effort; the TypeScript side refuses a missing step
when the user asked for ``isolation: "strict"``):

- **user namespace** (``unshare(CLONE_NEWUSER)``; a helper left outside writes the id maps): the jail gets the
  capabilities to build the rest, and the code runs as uid/gid 65534 inside. As real root the map is
  ``0 0 1`` + ``65534 65534 1`` so the code's real uid outside is 65534, not 0: the kernel does not enforce
  ``RLIMIT_NPROC`` for real root. As any other user it is ``65534 <uid> 1``.
- **pid namespace**: the jail's child is pid 1 (a reaper) and the driver runs under it; when pid 1 dies the
  kernel kills every process of the namespace, ``setsid`` and double-forked daemons included. pid 1 dies with
  the jail (``PR_SET_PDEATHSIG``) and with the process group that the TypeScript side kills.
- **mount namespace** and a **minimal root** (``pivot_root``): a read-only tmpfs holding read-only bind
  mounts of the system paths (``/usr``, ``/lib*``, ``/bin``, ``/sbin``, ``/etc``), of the Python installation
  and of the driver's directory, a few device nodes, a fresh ``/proc`` of the pid namespace, and the sandbox's
  scratch and capture directories read-write. Nothing else of the host filesystem is visible: not ``/tmp``,
  not the worker socket directories, not ``$HOME``, not the checkout.
- **ipc namespace** (System V IPC, POSIX message queues) and, unless the network is allowed, a **network
  namespace** whose only interface is a loopback that is down (no tcp, no abstract unix sockets of the host).
- **no privileges**: the driver runs as uid 65534 with no capabilities and ``PR_SET_NO_NEW_PRIVS`` (set-uid
  binaries and file capabilities grant nothing), so it cannot undo the mounts nor raise its hard limits.

Protocol: the jail writes one JSON line ``{"type": "isolation", ...}`` on stdout before the driver starts,
and pid 1 writes ``{"type": "exit", "exitCode": ..., "signal": ...}`` when the driver has ended (pid 1 itself
cannot die by the driver's signal, so it says how the driver ended). The rest of stdin/stdout is the driver's.
"""

from __future__ import annotations

import ctypes
import json
import os
import platform
import re
import signal
import sys
import traceback
from dataclasses import dataclass, field
from typing import Any

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_NOATIME = 1024
MS_NODIRATIME = 2048
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MS_RELATIME = 1 << 21
MNT_DETACH = 2

PR_SET_PDEATHSIG = 1
PR_SET_NO_NEW_PRIVS = 38

# The uid and gid the code runs as, inside the namespace ("nobody").
SANDBOX_ID = 65534

# pivot_root has no libc wrapper; its syscall number per architecture (else: chroot, reported).
PIVOT_ROOT_SYSCALL = {"x86_64": 155, "aarch64": 41, "arm64": 41, "riscv64": 41, "ppc64le": 203, "s390x": 217}

SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
DEVICES = ("null", "zero", "full", "random", "urandom")
DEVICE_LINKS = (
    ("fd", "/proc/self/fd"),
    ("stdin", "/proc/self/fd/0"),
    ("stdout", "/proc/self/fd/1"),
    ("stderr", "/proc/self/fd/2"),
)

# statvfs flags that a read-only remount must keep (the kernel refuses to drop locked ones).
_KEPT_FLAGS = ((os.ST_NOSUID, MS_NOSUID), (os.ST_NODEV, MS_NODEV), (os.ST_NOEXEC, MS_NOEXEC))
_ATIME_FLAGS = (
    (getattr(os, "ST_NOATIME", 1024), MS_NOATIME),
    (getattr(os, "ST_NODIRATIME", 2048), MS_NODIRATIME),
)
_ST_RELATIME = getattr(os, "ST_RELATIME", 4096)

MECHANISMS = (
    "userNamespace",
    "pidNamespace",
    "mountNamespace",
    "ipcNamespace",
    "networkNamespace",
    "filesystem",
    "proc",
    "unprivilegedUser",
)


@dataclass
class JailConfig:
    """What the jail needs: the driver command, the paths to show, and whether to cut the network."""

    driver: str
    driver_config: str
    root: str
    writable: list[str]
    read_only: list[str]
    isolate_network: bool


@dataclass
class Report:
    """Which mechanisms are in place, and why the others are not."""

    applied: dict[str, bool] = field(default_factory=lambda: dict.fromkeys(MECHANISMS, False))
    missing: list[dict[str, str]] = field(default_factory=list)

    def fail(self, mechanism: str, reason: str) -> None:
        self.applied[mechanism] = False
        self.missing.append({"mechanism": mechanism, "reason": reason})

    def message(self) -> dict[str, Any]:
        return {"type": "isolation", **self.applied, "missing": self.missing}


def parse_config(text: str) -> JailConfig:
    """Reads the JSON configuration passed as the jail's only argument."""
    raw: dict[str, Any] = json.loads(text)

    def string(name: str) -> str:
        value = raw.get(name)
        if not isinstance(value, str) or value == "":
            raise ValueError(f"{name} must be a non-empty string")
        return value

    def paths(name: str) -> list[str]:
        value = raw.get(name, [])
        if not isinstance(value, list) or not all(isinstance(p, str) and os.path.isabs(p) for p in value):
            raise ValueError(f"{name} must be a list of absolute paths")
        return [os.path.normpath(p) for p in value]

    isolate_network = raw.get("isolateNetwork", True)
    if not isinstance(isolate_network, bool):
        raise ValueError("isolateNetwork must be a boolean")
    return JailConfig(
        driver=string("driver"),
        driver_config=string("driverConfig"),
        root=string("root"),
        writable=paths("writable"),
        read_only=paths("readOnly"),
        isolate_network=isolate_network,
    )


def _libc() -> ctypes.CDLL:
    # The interpreter's own symbols include libc's (ctypes.util.find_library would cost tens of ms).
    return ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def _enc(text: str | None) -> bytes | None:
    return None if text is None else text.encode()


def _mount(
    libc: ctypes.CDLL,
    source: str | None,
    target: str,
    fstype: str | None,
    flags: int,
    data: str | None = None,
) -> None:
    result = libc.mount(_enc(source), _enc(target), _enc(fstype), ctypes.c_ulong(flags), _enc(data))
    _check(result, f"mount {target}")


def _write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def write_id_maps(pid: int, uid: int, gid: int) -> None:
    """Writes the uid/gid maps of ``pid``'s new user namespace (run by a process left outside it)."""
    if uid == 0:
        # Real root keeps root (to read root-owned installs while setting up) and maps nobody to nobody.
        _write(f"/proc/{pid}/uid_map", f"0 0 1\n{SANDBOX_ID} {SANDBOX_ID} 1\n")
        _write(f"/proc/{pid}/gid_map", f"0 0 1\n{SANDBOX_ID} {SANDBOX_ID} 1\n")
        return
    _write(f"/proc/{pid}/uid_map", f"{SANDBOX_ID} {uid} 1\n")
    _write(f"/proc/{pid}/setgroups", "deny")
    _write(f"/proc/{pid}/gid_map", f"{SANDBOX_ID} {gid} 1\n")


def enter_namespaces(libc: ctypes.CDLL, isolate_network: bool) -> None:
    """Unshares user, mount, pid, ipc (and network) namespaces; a forked helper writes the id maps."""
    uid, gid, me = os.geteuid(), os.getegid(), os.getpid()
    go_r, go_w = os.pipe()
    helper = os.fork()
    if helper == 0:
        os.close(go_w)
        ok = os.read(go_r, 1) == b"1"
        try:
            if ok:
                write_id_maps(me, uid, gid)
        except OSError as exc:
            print(f"sandbox jail: writing the id maps failed: {exc}", file=sys.stderr)
            os._exit(1)
        os._exit(0 if ok else 1)
    os.close(go_r)
    flags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC
    if isolate_network:
        flags |= CLONE_NEWNET
    unshared = libc.unshare(flags)
    err = ctypes.get_errno()
    os.write(go_w, b"1" if unshared == 0 else b"0")
    os.close(go_w)
    _pid, status = os.waitpid(helper, 0)
    if unshared != 0:
        raise OSError(err, f"unshare: {os.strerror(err)}")
    if os.waitstatus_to_exitcode(status) != 0:
        raise OSError(0, "the id maps could not be written")


def _mount_flags(path: str) -> int:
    """The flags of the mount holding ``path`` that a remount must keep."""
    st = os.statvfs(path).f_flag
    flags = 0
    for st_flag, ms_flag in _KEPT_FLAGS + _ATIME_FLAGS:
        if st & st_flag:
            flags |= ms_flag
    if st & _ST_RELATIME:
        flags |= MS_RELATIME
    return flags


def _make_mount_point(target: str, is_dir: bool) -> None:
    if is_dir:
        os.makedirs(target, exist_ok=True)
        return
    os.makedirs(os.path.dirname(target), exist_ok=True)
    if not os.path.exists(target):
        open(target, "w").close()


def _bind(libc: ctypes.CDLL, path: str, root: str, writable: bool, nodev: bool = True) -> None:
    target = root + path
    _make_mount_point(target, os.path.isdir(path))
    _mount(libc, path, target, None, MS_BIND | MS_REC)
    flags = MS_REMOUNT | MS_BIND | MS_NOSUID | _mount_flags(path)
    flags |= (MS_NODEV if nodev else 0) | (0 if writable else MS_RDONLY)
    _mount(libc, None, target, None, flags)


def read_only_paths(config: JailConfig) -> list[str]:
    """The paths shown read-only: system paths, the Python installation, the driver's directory, extras."""
    candidates = list(SYSTEM_PATHS)
    for prefix in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix):
        candidates += [prefix, os.path.realpath(prefix)]
    candidates += [os.path.dirname(sys.executable), os.path.dirname(os.path.realpath(sys.executable))]
    candidates += [os.path.dirname(os.path.realpath(config.driver)), *config.read_only]
    chosen: list[str] = []
    for path in sorted({os.path.normpath(p) for p in candidates}, key=len):
        if not os.path.lexists(path) or any(path == c or path.startswith(c + "/") for c in chosen):
            continue
        chosen.append(path)
    return chosen


def build_root(libc: ctypes.CDLL, config: JailConfig, report: Report) -> None:
    """Builds the minimal root under ``config.root`` and pivots into it (this process is pid 1 by now)."""
    root = config.root
    _mount(libc, None, "/", None, MS_REC | MS_PRIVATE)
    _mount(libc, "tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=1m")
    for path in read_only_paths(config):
        if os.path.islink(path):
            # /bin -> usr/bin on merged-/usr systems: keep the link, its target is shown on its own.
            os.makedirs(os.path.dirname(root + path), exist_ok=True)
            if not os.path.lexists(root + path):
                os.symlink(os.readlink(path), root + path)
            continue
        _bind(libc, path, root, writable=False)
    shown = read_only_paths(config)
    for path in config.writable:
        if any(path == r or path.startswith(r + "/") for r in shown):
            raise OSError(0, f"the scratch directory {path} lies inside a read-only path")
        _bind(libc, path, root, writable=True)
    os.makedirs(root + "/dev")
    _mount(libc, "tmpfs", root + "/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755,size=64k")
    for name in DEVICES:
        if os.path.exists(f"/dev/{name}"):
            _bind(libc, f"/dev/{name}", root, writable=True, nodev=False)
    for name, target in DEVICE_LINKS:
        os.symlink(target, f"{root}/dev/{name}")
    _mount(libc, None, root + "/dev", None, MS_REMOUNT | MS_NOSUID | MS_NOEXEC | MS_RDONLY)
    _lock_submounts(libc, root, {root + p for p in config.writable})
    os.makedirs(root + "/proc")
    try:
        _mount(libc, "proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        report.applied["proc"] = True
        _forbid_nested_user_namespaces(root + "/proc")
    except OSError as exc:
        report.fail("proc", f"mounting a /proc for the pid namespace was refused ({exc.strerror}); no /proc")
    _mount(libc, None, root, None, MS_REMOUNT | MS_NOSUID | MS_NODEV | MS_RDONLY)
    _pivot(libc, root, report)
    report.applied["filesystem"] = True


def _forbid_nested_user_namespaces(proc: str) -> None:
    """No user namespaces inside this one: the code cannot become root of a nested one, which keeps the
    kernel's large user-namespace surface out of its reach (the mounts would stay locked anyway)."""
    try:
        _write(f"{proc}/sys/user/max_user_namespaces", "0")
    except OSError:
        pass  # an older kernel without per-namespace limits: nested namespaces stay possible


def _mount_points() -> list[str]:
    with open("/proc/self/mountinfo") as f:
        # Field 5 is the mount point, with spaces and the like written as octal escapes.
        return [re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), line.split()[4]) for line in f]


def _lock_submounts(libc: ctypes.CDLL, root: str, writable: set[str]) -> None:
    """Makes read-only every mount under ``root`` except the scratch ones: a recursive bind brings the host's
    submounts along (``/etc/hosts`` in containers, say) with their own, writable, flags."""
    for point in _mount_points():
        if point.startswith(root + "/") and point not in writable and not point.startswith(root + "/dev/"):
            _mount(libc, None, point, None, MS_REMOUNT | MS_BIND | MS_RDONLY | _mount_flags(point))


def _pivot(libc: ctypes.CDLL, root: str, report: Report) -> None:
    os.chdir(root)
    number = PIVOT_ROOT_SYSCALL.get(platform.machine())
    if number is not None and libc.syscall(number, b".", b".") == 0:
        # The old root is stacked under the new one: detach it so that nothing of it stays reachable.
        _check(libc.umount2(b".", MNT_DETACH), "umount2 old root")
        os.chdir("/")
        return
    # No pivot_root here: chroot, which a process without capabilities cannot leave either.
    os.chroot(".")
    os.chdir("/")
    reason = "pivot_root unavailable; used chroot (the host mounts stay in the namespace, unreachable)"
    report.missing.append({"mechanism": "pivotRoot", "reason": reason})


def drop_privileges(libc: ctypes.CDLL, report: Report) -> None:
    """Becomes uid/gid 65534 with no capabilities after exec, and no way to gain any (no_new_privs)."""
    try:
        if os.getuid() != SANDBOX_ID:
            os.setgroups([])
            os.setresgid(SANDBOX_ID, SANDBOX_ID, SANDBOX_ID)
            os.setresuid(SANDBOX_ID, SANDBOX_ID, SANDBOX_ID)
        _check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)")
    except OSError as exc:
        print(f"sandbox jail: could not drop privileges: {exc}", file=sys.stderr)
        os._exit(71)


def _driver_argv(config: JailConfig, driver_config: str) -> list[str]:
    # The driver runs on this very interpreter, by the path it was started with (a venv's bin/python).
    return [sys.executable, "-I", "-u", config.driver, driver_config]


def _send(message: dict[str, Any]) -> None:
    os.write(1, json.dumps(message).encode() + b"\n")


def without_process_limit(driver_config: str) -> str:
    """The driver configuration without ``maxProcesses``: outside a user namespace RLIMIT_NPROC would count
    every process of the user on the machine (and is not enforced for root), so it is not set."""
    raw = json.loads(driver_config)
    limits = dict(raw.get("limits", {}))
    limits["maxProcesses"] = None
    return json.dumps({**raw, "limits": limits})


def run_init(libc: ctypes.CDLL, config: JailConfig, report: Report) -> None:
    """pid 1 of the namespace: builds the root, starts the driver, reaps orphans, reports the driver's end."""
    for path in config.writable:
        os.chown(path, SANDBOX_ID, SANDBOX_ID)
    try:
        build_root(libc, config, report)
    except OSError as exc:
        reason = f"building the private root failed ({exc.strerror or exc}); the host filesystem is visible"
        report.fail("filesystem", reason)
        # The code then reaches its directories by their host paths: let uid 65534 through their parent.
        for parent in {os.path.dirname(p) for p in config.writable}:
            os.chmod(parent, 0o711)
    report.applied["unprivilegedUser"] = True
    _send(report.message())
    workdir = config.writable[0] if config.writable else "/"
    driver = os.fork()
    if driver == 0:
        drop_privileges(libc, report)
        try:
            os.chdir(workdir)
            os.execv(sys.executable, _driver_argv(config, config.driver_config))
        except OSError as exc:
            # Without the private root, uid 65534 sees the host's permissions (a Python under /root, say).
            missing = [m["mechanism"] for m in report.missing]
            message = f"sandbox jail: uid {SANDBOX_ID} cannot start the driver ({exc}); missing: {missing}"
            print(message, file=sys.stderr)
            os._exit(71)
    # Reap everything: orphans of the code are re-parented here, and unreaped ones would count against
    # the process limit. When the driver ends, so does the namespace (the kernel kills the rest).
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            os._exit(70)
        if pid == driver:
            break
    sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
    exit_code = None if sig is not None else os.WEXITSTATUS(status)
    _send({"type": "exit", "exitCode": exit_code, "signal": signal.Signals(sig).name if sig else None})
    os._exit(0)


def probe() -> dict[str, Any]:
    """Whether this machine lets the jail create its namespaces, tried in a throwaway child process."""
    if sys.platform != "linux":
        return {"namespaces": False, "reason": f"namespaces need Linux (this is {sys.platform})"}
    r, w = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(r)
        try:
            enter_namespaces(_libc(), isolate_network=True)
            os._exit(0)
        except OSError as exc:
            os.write(w, f"creating user namespaces was refused ({exc.strerror or exc})".encode())
            os._exit(1)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        reason = f.read().decode()
    _pid, status = os.waitpid(child, 0)
    ok = os.waitstatus_to_exitcode(status) == 0
    return {"namespaces": ok, "reason": None if ok else reason or "the probe failed"}


def main(argv: list[str]) -> int:
    if argv[1:] == ["--probe"]:
        print(json.dumps(probe()))
        return 0
    if len(argv) != 2:
        print("usage: jail.py CONFIG_JSON | --probe", file=sys.stderr)
        return 2
    try:
        config = parse_config(argv[1])
    except (ValueError, json.JSONDecodeError) as exc:
        print(f"sandbox jail: bad configuration: {exc}", file=sys.stderr)
        return 2
    report = Report()
    libc = None
    reason = ""
    if sys.platform != "linux":
        reason = f"namespaces need Linux (this is {sys.platform})"
    else:
        try:
            libc = _libc()
            enter_namespaces(libc, config.isolate_network)
        except OSError as exc:
            reason = f"creating user namespaces was refused ({exc.strerror or exc})"
    if libc is None or reason != "":
        for mechanism in MECHANISMS:
            report.fail(mechanism, reason)
        _send(report.message())
        os.execv(sys.executable, _driver_argv(config, without_process_limit(config.driver_config)))
    for mechanism in ("userNamespace", "pidNamespace", "mountNamespace", "ipcNamespace"):
        report.applied[mechanism] = True
    report.applied["networkNamespace"] = config.isolate_network
    init = os.fork()
    if init == 0:
        # pid 1 dies with the jail; the TypeScript side also kills the process group, pid 1 included.
        libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        try:
            run_init(libc, config, report)
        finally:  # a forked pid 1 never returns into the jail's code, even on an error
            traceback.print_exc()
            os._exit(70)
    _pid, status = os.waitpid(init, 0)
    return os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 70


if __name__ == "__main__":
    sys.exit(main(sys.argv))
