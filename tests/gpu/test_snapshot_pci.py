"""`accelhost snapshot --pci`: a host planned by PCI address can be recorded and replayed.

Without `--pci` the recorder never reads the named devices' sysfs (nothing else names
them), so a bug report from a `--pci` host could not be replayed: `plan --snapshot FILE
--pci ADDR` refused with "has no entry in /sys/bus/pci/devices".
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from gpu_hosts import dgx_like

import accelhost
import accelhost.host
from accelhost.cli.main import main
from accelhost.cpulist import format_cpulist
from accelhost.host.snapshot import SnapshotHost

ADDR = "0000:9d:00.0"  # GPU 4 of the DGX-like host: node 1


def test_snapshot_with_pci_records_what_the_plan_of_that_device_needs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    live = dgx_like(nvidia_smi=False, device_type=None).host()
    monkeypatch.setattr(accelhost.host, "live_host", lambda: live)
    out = tmp_path / "host.json"
    assert main(["snapshot", "--pci", ADDR, "-o", str(out)]) == 0
    replay = SnapshotHost(json.loads(out.read_text()))
    plan = accelhost.plan(replay, pci=[ADDR])
    assert plan.device_type == "pci"
    assert plan.device(0).pci == ADDR
    assert format_cpulist(plan.device(0).pool) == "56-111,168-223"
    capsys.readouterr()
    assert main(["plan", "--snapshot", str(out), "--pci", ADDR]) == 0
    assert "56-111,168-223" in capsys.readouterr().out


def test_snapshot_refuses_a_bad_pci_address_as_plan_does(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["snapshot", "--pci", "zz", "-o", "/dev/null"]) == 2
    assert capsys.readouterr().err.strip() == "accelhost snapshot: --pci: not a PCI address: 'zz'"
