"""A device tool that fails is "cannot tell", never "none" (the sweep of topo, plan,
doctor, watch and clean for answers given about what was not read)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from accelhost.cli.main import main
from ascend_hosts import AscendHost, even_nodes

BROKEN_NPU_SMI = {"stdout": "", "rc": 127}  # its driver library missing: all on stderr


def _ascend(tmp_path: Path, broken: tuple[str, ...]) -> str:
    """An A3 host with NPU 0 running, the named npu-smi commands failing; its file name."""
    snap: dict[str, Any] = AscendHost(
        "A3", 2, 2, even_nodes(32, 2), list(range(32)), running=[0]
    ).snapshot()
    del snap["device_type"]  # the family told from the chip names, as on a live host
    for key in broken:
        snap["commands"][key] = BROKEN_NPU_SMI
    path = tmp_path / "host.json"
    path.write_text(json.dumps(snap))
    return str(path)


def test_topo_with_a_failing_npu_smi_cannot_tell(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """npu-smi installed but failing (no driver): topo said `accelerators: none found (no
    npu-smi, ...)`, `accelerators: []` in JSON with no note, and exit 0."""
    snap = _ascend(tmp_path, ("npu-smi info -m", "npu-smi info"))
    assert main(["topo", "--snapshot", snap]) == 1
    out = capsys.readouterr().out
    assert "accelerators: cannot tell" in out and "none found" not in out
    assert "cannot tell: `npu-smi info -m` failed with status 127" in out
    assert main(["topo", "--snapshot", snap, "--json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["accelerators"] == [] and data["unread"] == [
        "`npu-smi info -m` failed with status 127",
        "`npu-smi info` failed with status 127",
    ]
    assert main(["plan", "--snapshot", snap, "--device", "0"]) == 1
    err = capsys.readouterr().err
    assert "cannot tell which accelerators" in err and "not installed" not in err


def test_a_failing_process_table_is_not_no_process(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`npu-smi info -m` answers, `npu-smi info` fails: the NPUs are known, whether they run
    anything is not (topo's in-use column `?`, not `no`; plan does not say none runs)."""
    snap = _ascend(tmp_path, ("npu-smi info",))
    assert main(["topo", "--snapshot", snap]) == 1
    out = capsys.readouterr().out
    assert "accelerators: 4 (A3)" in out
    rows = [ln.split() for ln in out.splitlines() if ln.startswith(("0 ", "1 ", "2 ", "3 "))]
    assert [r[-1] for r in rows[-4:]] == ["?"] * 4
    assert main(["plan", "--snapshot", snap]) == 1
    err = capsys.readouterr().err
    assert "cannot tell: `npu-smi info` failed with status 127" in err
    assert "no process runs" not in err
    # named NPUs need no process table: the plan is made
    assert main(["plan", "--snapshot", snap, "--device", "0"]) == 0


def test_clean_figures_say_unknown_when_the_device_tool_failed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """clean's before line said `device memory free no device source` (JSON `{}`) when
    npu-smi was there and failed."""
    snap = _ascend(tmp_path, ("npu-smi info",))
    assert main(["clean", "--snapshot", snap]) == 0
    assert "device memory free unknown" in capsys.readouterr().out
    main(["clean", "--snapshot", snap, "--json"])
    assert json.loads(capsys.readouterr().out)["before"]["device_memory_free_bytes"] is None
