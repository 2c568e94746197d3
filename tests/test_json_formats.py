"""Every JSON document accelhost prints names its format (`accelhost-*/1`, from
`accelhost.formats`), gives memory in bytes and an exit status as `exit_code`: each
command run for real with --json, on recorded hosts or on this machine."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from accelhost import formats

ASCEND = "example:a2-192cpu-8npu-sees-npu0"  # npu-smi lists processes with their memory
# Units that are not bytes: a key naming one is a unit a reader must convert.
OTHER_UNITS = ("_kb", "_kib", "_mb", "_mib", "_gb", "_gib")


def _run(*args: str, ok: tuple[int, ...] = (0,)) -> dict[str, Any]:
    res = subprocess.run(
        [sys.executable, "-m", "accelhost", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert res.returncode in ok, f"{args}: rc {res.returncode}: {res.stderr}"
    data = json.loads(res.stdout)
    assert isinstance(data, dict)
    return data


def _keys(value: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        for k, v in value.items():
            yield f"{path}.{k}", v
            yield from _keys(v, f"{path}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _keys(v, f"{path}[{i}]")


def _check(command: str, doc: dict[str, Any]) -> list[tuple[str, Any]]:
    """The document's format, no other unit than bytes, one key for an exit status; the
    byte figures it holds, for the caller to look at."""
    assert doc["format"] == formats.PRINTED[command]
    keys = list(_keys(doc))
    names = {p.rsplit(".", 1)[-1] for p, _ in keys}
    assert not [n for n in names if n.endswith(OTHER_UNITS)], (command, names)
    assert "exit_status" not in names, command
    found = [(p, v) for p, v in keys if p.endswith("bytes") and not isinstance(v, dict)]
    assert all(v is None or (isinstance(v, int) and v >= 0) for _, v in found), found
    return found


@pytest.fixture
def worker(tmp_path: Path) -> Iterator[tuple[int, str]]:
    """A live process and a plan for this machine that binds it to the CPUs it has."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    cpus = sorted(os.sched_getaffinity(0))
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"devices": {"0": {"main": cpus, "numa_node": 0}}}))
    try:
        yield proc.pid, str(plan)
    finally:
        proc.kill()
        proc.wait()


def test_recorded_hosts_plan_topo_doctor_clean() -> None:
    _check("plan", _run("plan", "--json", "--snapshot", ASCEND))
    topo = _check("topo", _run("topo", "--json", "--snapshot", ASCEND))
    assert [v for p, v in topo if p.endswith("memory_bytes")][0] == 56630 * 2**20
    doctor = _run("doctor", "--json", "--snapshot", ASCEND, ok=(0, 1, 2))
    held = _check("doctor", doctor)
    assert any(p.endswith("device_memory_bytes") and v for p, v in held)
    assert isinstance(doctor["exit_code"], int)
    clean = _run("clean", "--json", "--snapshot", ASCEND)
    figures = _check("clean", clean)
    assert clean["before"]["device_memory_free_bytes"]["npu0"] == (65536 - 60030) * 2**20
    assert figures  # segment and file sizes are bytes too


def test_bind_exec_unbind_verify_on_this_machine(worker: tuple[int, str], tmp_path) -> None:
    pid, plan = worker
    common = ("--plan", plan, "--device", "0", "--no-irq")
    bind = _run("bind", *common, "--pid", str(pid), "--dry-run", "--json")
    _check("bind", bind)
    assert bind["exit_code"] == 0
    _check("exec", _run("exec", *common, "--dry-run", "--json", "--", "true"))
    state = str(tmp_path / "state")
    _check("unbind", _run("unbind", "--irq", "--state-dir", state, "--json"))
    verify = _run("verify", "--plan", plan, "--device", "0", "--pid", str(pid), "--json")
    _check("verify", verify)
    assert verify["exit_code"] == 0 and verify["ok"] is True
    memory = verify["memory"]
    resident = memory["resident_bytes"]
    # this process's resident memory, in bytes: whole pages, more than a page
    assert memory["node"] == 0 and sum(resident.values()) > 4096
    assert all(b % 4096 == 0 for b in resident.values())
    assert not any(line.startswith("memory:") for line in verify["info"])


def test_bench_bind_and_bench_pipeline() -> None:
    cpu = str(min(os.sched_getaffinity(0)))
    bench = _run("bench", "bind", "--cpus", cpu, "--repeats", "2", "--warmup", "0", "--json",
                 "--", "true")  # fmt: skip
    _check("bench bind", bench)
    pipe = _run("bench", "pipeline", "--items", "4", "--pre-time", "1ms", "--device-time",
                "1ms", "--post-time", "1ms", "--json")  # fmt: skip
    _check("bench pipeline", pipe)
    assert pipe["workload"]["items"] == 4 and pipe["workload"]["device_s"] == 0.001


def test_every_printed_format_is_tested_and_named_once() -> None:
    """Each command's format comes from the one table; every name there is distinct per
    kind of document and says accelhost and a version."""
    here = Path(__file__).read_text()
    for command, name in formats.PRINTED.items():
        assert f'_check("{command}"' in here, command
        assert re.fullmatch(r"accelhost-[a-z-]+/[1-9][0-9]*", name), name
    assert len(set(formats.PRINTED.values())) == 8  # bind, exec and unbind share one
