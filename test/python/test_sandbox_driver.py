"""The sandbox driver (``posttrain_worker/sandbox/driver.py``) and jail (``jail.py``): their configuration
parsing, the code-block runner, the hard limits, and the JSON-lines protocol of real driver and jail processes
started the way ``PythonSandbox`` starts them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from posttrain_worker.sandbox import driver, jail

DRIVER = Path(driver.__file__)
JAIL = Path(jail.__file__)


def _namespaces() -> bool:
    command = [sys.executable, "-I", str(JAIL), "--probe"]
    probe = subprocess.run(command, capture_output=True, text=True, check=True)
    return bool(json.loads(probe.stdout)["namespaces"])


NAMESPACES = sys.platform == "linux" and _namespaces()


def test_parse_config_reads_limits_and_rejects_bad_values() -> None:
    config = driver.parse_config(
        json.dumps({"ioDir": "/tmp/x", "limits": {"memoryBytes": 1 << 30, "cpuSeconds": None}})
    )
    assert config.io_dir == "/tmp/x"
    assert config.limits == driver.Limits(
        memory_bytes=1 << 30, cpu_seconds=None, max_open_files=None, max_file_bytes=None, max_processes=None
    )
    assert config.persistent is False
    both = driver.parse_config(json.dumps({"ioDir": "/x", "limits": {"maxProcesses": 8}, "persistent": True}))
    assert (both.limits.max_processes, both.persistent) == (8, True)
    with pytest.raises(ValueError, match=r"limits\.maxProcesses must be a positive integer"):
        driver.parse_config(json.dumps({"ioDir": "/tmp/x", "limits": {"maxProcesses": 0}}))
    with pytest.raises(ValueError, match="persistent must be a boolean"):
        driver.parse_config(json.dumps({"ioDir": "/tmp/x", "persistent": "yes"}))
    with pytest.raises(ValueError, match=r"limits\.cpuSeconds must be a positive integer"):
        driver.parse_config(json.dumps({"ioDir": "/tmp/x", "limits": {"cpuSeconds": -1}}))
    with pytest.raises(ValueError, match=r"limits\.maxOpenFiles"):
        driver.parse_config(json.dumps({"ioDir": "/tmp/x", "limits": {"maxOpenFiles": True}}))
    with pytest.raises(ValueError, match="ioDir must be a non-empty string"):
        driver.parse_config(json.dumps({"limits": {}}))


def test_run_block_keeps_globals_and_reports_exceptions(capsys: pytest.CaptureFixture[str]) -> None:
    namespace: dict[str, Any] = {"__name__": "__main__"}
    assert driver.run_block("x = 2\nprint(x * 21)", namespace) == ("ok", None)
    assert driver.run_block("print(x + 1)", namespace, "<code block 2>") == ("ok", None)
    assert driver.run_block("raise KeyError('k')", namespace, "<code block 3>") == ("error", "KeyError")
    assert driver.run_block("import sys\nsys.exit(0)", namespace) == ("ok", None)
    assert driver.run_block("import sys\nsys.exit('bye')", namespace) == ("error", "SystemExit")
    out = capsys.readouterr()
    assert out.out == "42\n3\n"
    assert 'File "<code block 3>", line 1, in <module>' in out.err
    assert "raise KeyError('k')" in out.err
    assert "driver.py" not in out.err
    assert "SystemExit: bye" in out.err


def test_a_driver_process_speaks_the_protocol(tmp_path: Path) -> None:
    io_dir = tmp_path / "io"
    io_dir.mkdir()
    config = json.dumps({"ioDir": str(io_dir), "limits": {"memoryBytes": 512 << 20, "cpuSeconds": 5}})
    requests = [
        {"type": "run", "id": 1, "code": "value = input() if False else 7\nprint(value)"},
        {"type": "run", "id": 2, "code": "import sys\nprint(value * 6)\nprint('e', file=sys.stderr)"},
        {"type": "ping"},
    ]
    stdin = "".join(json.dumps(r) + "\n" for r in requests)
    proc = subprocess.run(
        [sys.executable, "-I", "-u", str(DRIVER), config],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
        check=True,
    )
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert lines[0]["type"] == "ready"
    assert lines[0]["limits"] == {
        "memoryBytes": True,
        "cpuSeconds": True,
        "maxOpenFiles": False,
        "maxFileBytes": False,
        "maxProcesses": False,
    }
    assert lines[1:] == [
        {"type": "done", "id": 1, "status": "ok", "exception": None},
        {"type": "done", "id": 2, "status": "ok", "exception": None},
        {"type": "fail", "id": None, "message": "malformed request"},
    ]
    # The capture files hold the last block's output; the protocol stream holds none of it.
    assert (io_dir / "stdout").read_text() == "42\n"
    assert (io_dir / "stderr").read_text() == "e\n"


def test_a_driver_with_a_bad_configuration_exits_with_code_2() -> None:
    proc = subprocess.run(
        [sys.executable, "-I", str(DRIVER), "{not json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert "bad configuration" in proc.stderr


def test_the_driver_sets_hard_limits_the_code_cannot_raise(tmp_path: Path) -> None:
    io_dir = tmp_path / "io"
    io_dir.mkdir()
    config = json.dumps({"ioDir": str(io_dir), "limits": {"cpuSeconds": 3, "maxOpenFiles": 64}})
    code = (
        "import resource\n"
        "print(resource.getrlimit(resource.RLIMIT_CPU), resource.getrlimit(resource.RLIMIT_NOFILE))\n"
        "resource.setrlimit(resource.RLIMIT_CPU, (100, 100))"
    )
    proc = subprocess.run(
        [sys.executable, "-I", "-u", str(DRIVER), config],
        input=json.dumps({"type": "run", "id": 1, "code": code}) + "\n",
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
        check=True,
    )
    done = json.loads(proc.stdout.splitlines()[1])
    assert (done["status"], done["exception"]) == ("error", "ValueError")
    # One-shot: the soft CPU limit one second under the hard one (SIGXCPU first), both near the 3 s asked.
    assert (io_dir / "stdout").read_text() == "(4, 5) (64, 64)\n"
    assert "not allowed to raise maximum limit" in (io_dir / "stderr").read_text()


def test_jail_config_parsing_and_the_paths_it_shows(tmp_path: Path) -> None:
    raw = {
        "driver": str(DRIVER),
        "driverConfig": "{}",
        "root": "/r/root",
        "writable": ["/r/work/"],
        "readOnly": ["/opt/data"],
        "isolateNetwork": False,
    }
    config = jail.parse_config(json.dumps(raw))
    assert (config.writable, config.read_only, config.isolate_network) == (["/r/work"], ["/opt/data"], False)
    with pytest.raises(ValueError, match="readOnly must be a list of absolute paths"):
        jail.parse_config(json.dumps({**raw, "readOnly": ["relative"]}))
    with pytest.raises(ValueError, match="driverConfig must be a non-empty string"):
        jail.parse_config(json.dumps({**raw, "driverConfig": ""}))
    with pytest.raises(ValueError, match="isolateNetwork must be a boolean"):
        jail.parse_config(json.dumps({**raw, "isolateNetwork": 1}))
    extra = tmp_path / "extra"
    (extra / "nested").mkdir(parents=True)
    nested = {**raw, "readOnly": [str(extra), str(extra / "nested")]}
    shown = jail.read_only_paths(jail.parse_config(json.dumps(nested)))
    assert str(extra) in shown and str(extra / "nested") not in shown  # nested paths come with their parent
    assert "/usr" in shown and os.path.realpath(sys.base_prefix) in [os.path.realpath(p) for p in shown]
    assert all(os.path.lexists(p) for p in shown)
    with_limit = json.dumps({"ioDir": "/x", "limits": {"maxProcesses": 9}})
    limited = json.loads(jail.without_process_limit(with_limit))
    assert limited == {"ioDir": "/x", "limits": {"maxProcesses": None}}


@pytest.mark.skipif(not NAMESPACES, reason="user namespaces are not available here")
def test_a_jailed_driver_runs_in_a_minimal_root_and_reports_how_it_ended(tmp_path: Path) -> None:
    work, io_dir, root = tmp_path / "work", tmp_path / "io", tmp_path / "root"
    for d in (work, io_dir, root):
        d.mkdir()
    secret = tmp_path / "secret.txt"
    secret.write_text("s")
    driver_config = json.dumps({"ioDir": str(io_dir), "limits": {"maxProcesses": 8, "cpuSeconds": 5}})
    config = {
        "driver": str(DRIVER),
        "driverConfig": driver_config,
        "root": str(root),
        "writable": [str(work), str(io_dir)],
        "readOnly": [],
        "isolateNetwork": True,
    }
    code = (
        "import os, resource\n"
        f"print(os.getuid(), os.getpid(), os.getcwd() == {str(work)!r}, os.path.exists({str(secret)!r}),"
        " resource.getrlimit(resource.RLIMIT_NPROC))\n"
        "import ctypes\nctypes.string_at(0)"
    )
    proc = subprocess.run(
        [sys.executable, "-I", "-u", str(JAIL), json.dumps(config)],
        input=json.dumps({"type": "run", "id": 1, "code": code}) + "\n",
        capture_output=True,
        text=True,
        cwd=work,
        timeout=60,
        check=True,
    )
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [m["type"] for m in lines] == ["isolation", "ready", "exit"]
    assert lines[0]["missing"] == [] and lines[0]["filesystem"] and lines[0]["pidNamespace"]
    assert lines[1]["limits"]["maxProcesses"] is True
    # The segfault killed the driver; pid 1 of the namespace says so (it cannot die by that signal itself).
    assert lines[2] == {"type": "exit", "exitCode": None, "signal": "SIGSEGV"}
    # The driver is pid 2 under the namespace's pid 1; the rest of tmp_path is not visible.
    assert (io_dir / "stdout").read_text() == "65534 2 True False (8, 8)\n"
