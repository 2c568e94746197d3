"""`bind`, `exec` and `verify` that plan this host run each host command at most once.

Real executables on PATH (`fakehost.fake_tools`) answer as nvidia-smi / npu-smi / lscpu and
log every call, so the count is of what really ran; the worker is a real process.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from apply_helpers import CliResult

from accelhost.host.snapshot import load_snapshot
from fakehost import ToolLog, fake_tools
from gpu.gpu_hosts import QUERY, TOPO


def _path(monkeypatch: pytest.MonkeyPatch, tools: Path) -> None:
    monkeypatch.setenv("PATH", f"{tools}:/bin:/usr/bin")
    for name in ("CUDA_VISIBLE_DEVICES", "ASCEND_RT_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)


def _nvidia_tools(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ToolLog:
    # GPU 0 at a PCI address this machine really has, so sysfs answers for it
    pci = sorted(p.name for p in Path("/sys/bus/pci/devices").iterdir())[0]
    log = fake_tools(tmp_path / "bin", {QUERY: f"0, {pci}, GPU-0000\n", TOPO: ""}, ["lscpu"])
    _path(monkeypatch, tmp_path / "bin")
    return log


def _commands(pid: int) -> dict[str, list[str]]:
    return {
        "bind": ["bind", "--dry-run", "--json", "--pid", str(pid), "--device", "0"],
        "verify": ["verify", "--json", "--pid", str(pid), "--device", "0"],
        "exec": ["exec", "--dry-run", "--json", "--device", "0", "--", "true"],
    }


@pytest.mark.parametrize("command", ["bind", "verify", "exec"])
def test_planning_a_gpu_host_runs_nvidia_smi_once(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    spawn: Callable[..., Any],
    cli: Callable[..., CliResult],
    command: str,
) -> None:
    child = spawn("worker")
    log = _nvidia_tools(tmp_path, monkeypatch)
    res = cli(*_commands(child.pid)[command])
    assert res.rc in (0, 1), res.err  # verify: 1 when the unbound worker drifts
    out = json.loads(res.out)
    if command == "verify":
        assert out["checked_threads"] >= 1
    else:
        assert out["steps"], out  # a plan was made and turned into steps
    calls = log.calls()
    assert calls[QUERY] == 1 and calls[TOPO] == 1
    assert max(calls.values()) == 1, calls


@pytest.mark.parametrize("command", ["bind", "verify", "exec"])
def test_planning_an_ascend_host_runs_each_npu_smi_query_once(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    spawn: Callable[..., Any],
    cli: Callable[..., CliResult],
    command: str,
) -> None:
    """The recorded A3 host runs no engine on device 0, so the first plan fails and the
    planner tries again for `--device 0`: the second try reads nothing again."""
    child = spawn("worker")
    recorded = load_snapshot("example:a3-640cpu-16npu")
    outputs = {key: res.stdout for key, res in recorded._commands.items()}
    log = fake_tools(tmp_path / "bin", outputs, tools=["nvidia-smi"])
    _path(monkeypatch, tmp_path / "bin")
    cli(*_commands(child.pid)[command])  # may refuse: this machine is not that host
    calls = log.calls()
    assert calls["npu-smi info -m"] == 1 and calls["npu-smi info"] == 1
    assert max(calls.values()) == 1, calls
