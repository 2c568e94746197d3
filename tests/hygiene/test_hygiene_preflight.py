"""Preflight on the recorded A2 host: NPU 0 has 60030 of 65536 MB in use, 56630 of them held
by a vLLM worker (the other chips 3400, idle)."""

from __future__ import annotations

import json
import subprocess
import sys

from accelhost.host.snapshot import load_snapshot
from accelhost.hygiene import preflight

A2 = "example:a2-192cpu-8npu-sees-npu0"


def test_a2_fails_at_095_in_vllms_words() -> None:
    report = preflight(load_snapshot(A2), 0.95, device=0)
    assert report.status == "FAIL" and not report.ok
    (dev,) = report.devices
    assert dev.free_mib == 65536 - 60030 and dev.total_mib == 65536
    assert dev.message == (
        "Free memory on device (5.38/64.0 GiB) on startup is less than desired GPU memory "
        "utilization (0.95, 60.8 GiB). Decrease GPU memory utilization or reduce GPU memory "
        "used by other processes."
    )
    # who holds the rest: npu-smi's process table for NPU 0
    assert [(h.pid, h.memory_mib) for h in dev.holders] == [(2290107, 56630)]
    assert dev.max_util == 0.08


def test_a2_passes_at_008() -> None:
    report = preflight(load_snapshot(A2), 0.08, device=0)
    assert report.status == "OK" and report.ok
    assert report.devices[0].requested_mib == 65536 * 0.08


def test_every_device_when_none_is_named() -> None:
    report = preflight(load_snapshot(A2), 0.95)
    assert len(report.devices) == 8 and report.status == "FAIL"


def test_unknown_device_is_unknown_not_ok() -> None:
    report = preflight(load_snapshot(A2), 0.5, device=42)
    assert report.status == "UNKNOWN" and "device 42 not found" in report.reason


def _doctor(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "accelhost.cli.main", "doctor", "--snapshot", A2, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_doctor_preflight_exit_codes() -> None:
    bad = _doctor("--expect-util", "0.95", "--device", "0", "--check", "preflight", "--json")
    assert bad.returncode == 1
    (check,) = json.loads(bad.stdout)["checks"]
    assert check["status"] == "FAIL"
    (dev,) = check["evidence"]
    assert dev["kind"] == "device" and dev["index"] == 0
    assert dev["message"].startswith("Free memory on device (5.38/64.0 GiB)")
    assert [h["pid"] for h in dev["holders"]] == [2290107]
    good = _doctor("--expect-util", "0.08", "--device", "0", "--check", "preflight")
    assert good.returncode == 0, good.stdout
    table = _doctor("--expect-util", "0.95", "--device", "0")
    assert "Free memory on device (5.38/64.0 GiB)" in table.stdout
    assert "(0.95, 60.8 GiB)" in table.stdout and "pid 2290107" in table.stdout


def test_snapshot_without_proc_is_unknown_exit_2() -> None:
    res = _doctor("--check", "orphan_engines", "--check", "shared_memory")
    assert res.returncode == 2


def test_user_mistakes_are_one_line_and_exit_2_never_1() -> None:
    """For a monitor 1 means "a problem on this node": a typo must never say that."""
    for args in (
        ["--expect-util", "1.5"],
        ["--device", "0"],
        ["--engine-child", "("],
        ["--engine-frontend", "[a"],
        ["--device", "x", "--expect-util", "0.5"],
        ["--idle-baseline-mib", "-1"],
        ["--shm-min-age", "-5"],
        ["--brief", "--hugepages-threshold", "2"],
    ):
        res = _doctor(*args)
        assert res.returncode == 2, (args, res.stdout, res.stderr)
        assert "Traceback" not in res.stderr
        # ours: one line; argparse's own (a bad --device list): usage, then one line
        assert res.stderr.splitlines()[-1].startswith("accelhost doctor: ")
    missing = subprocess.run(
        [sys.executable, "-m", "accelhost.cli.main", "doctor", "--snapshot", "/nonexistent.json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert missing.returncode == 2 and "no such file" in missing.stderr
