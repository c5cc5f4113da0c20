"""The sandbox driver (``posttrain_worker/sandbox/driver.py``): its configuration parsing, the code-block
runner, and the JSON-lines protocol of a real driver process started the way ``PythonSandbox`` starts it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from posttrain_worker.sandbox import driver

DRIVER = Path(driver.__file__)


def test_parse_config_reads_limits_and_rejects_bad_values() -> None:
    config = driver.parse_config(
        json.dumps({"ioDir": "/tmp/x", "limits": {"memoryBytes": 1 << 30, "cpuSeconds": None}})
    )
    assert config.io_dir == "/tmp/x"
    assert config.limits == driver.Limits(
        memory_bytes=1 << 30, cpu_seconds=None, max_open_files=None, max_file_bytes=None
    )
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
