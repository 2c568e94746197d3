"""A corrupt or hostile recorded host is refused quickly, with a clear error and little memory.

Peak memory is measured with tracemalloc around the refusal: every bound below is a few
MB, where expanding `0-99999999` would take gigabytes.
"""

from __future__ import annotations

import json
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import accelhost
from accelhost.errors import AccelhostError, ParseError, SnapshotError
from accelhost.host.snapshot import MAX_SNAPSHOT_BYTES, SnapshotHost, load_snapshot
from accelhost.readers.topology import read_topology
from ascend_hosts import AscendHost, even_nodes
from fakehost import FakeMachine
from gpu.gpu_hosts import dgx_like

FEW_MB = 4 * 1024 * 1024


def peak_of(action: Callable[[], object]) -> tuple[BaseException | None, int]:
    """(the exception `action` raised or None, its peak traced memory in bytes)."""
    tracemalloc.start()
    error: BaseException | None = None
    try:
        action()
    except Exception as exc:  # the caller checks the kind
        error = exc
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    return error, peak


def _ascend(**files: str) -> dict[str, Any]:
    data = AscendHost("A2", 1, 8, even_nodes(192, 4), range(192), running=[0, 1]).snapshot()
    return data


def _with(data: dict[str, Any], section: str, key: str, value: Any) -> dict[str, Any]:
    data[section][key] = value
    return data


def _without(data: dict[str, Any], path: str) -> dict[str, Any]:
    del data["files"][path]
    return data


GIANT_LSCPU = "CPU NODE\n" + "".join(f"{i} 0\n" for i in range(200_000))
GIANT_MAP = "\tNPU ID  Chip ID  Chip Logic ID  Chip Name\n" + "".join(
    f"\t{i}       0        {i}        910B3\n" for i in range(20_000)
)

HOSTILE: dict[str, Callable[[], dict[str, Any]]] = {
    "Cpus_allowed_list 0-99999999 (Ascend)": lambda: _with(
        _ascend(), "files", "/proc/self/status", "Cpus_allowed_list:\t0-99999999\n"
    ),
    "Cpus_allowed_list 0-99999999 (NVIDIA)": lambda: _with(
        dgx_like().snapshot(), "files", "/proc/self/status", "Cpus_allowed_list:\t0-99999999\n"
    ),
    "cgroup cpuset 0-99999999": lambda: _with(
        dgx_like().snapshot(), "files", "/sys/fs/cgroup/cpuset.cpus.effective", "0-99999999\n"
    ),
    "node possible 0-99999999": lambda: _with(
        dgx_like().snapshot(), "files", "/sys/devices/system/node/possible", "0-99999999\n"
    ),
    "huge node id in sysfs": lambda: _with(
        _with(dgx_like().snapshot(), "files", "/sys/devices/system/node/possible", "0"),
        "files",
        "/sys/bus/pci/devices/0000:1b:00.0/numa_node",
        "99999999999\n",
    ),
    "huge node id in a sysfs listing": lambda: _without(
        _with(
            dgx_like().snapshot(),
            "dirs",
            "/sys/devices/system/node",
            ["node0", "node4294967296", "possible"],
        ),
        "/sys/devices/system/node/possible",
    ),
    "huge node id in lscpu": lambda: _with(
        _ascend(), "commands", "lscpu -e=CPU,NODE", "CPU NODE\n0 0\n1 99999999\n"
    ),
    "a thousand-digit CPU id in lscpu": lambda: _with(
        _ascend(), "commands", "lscpu -e=CPU,NODE", "CPU NODE\n0 0\n" + "9" * 5000 + " 0\n"
    ),
    "giant lscpu table": lambda: _with(_ascend(), "commands", "lscpu -e=CPU,NODE", GIANT_LSCPU),
    "giant npu-smi map": lambda: _with(_ascend(), "commands", "npu-smi info -m", GIANT_MAP),
    "huge NPU id": lambda: _with(
        _ascend(),
        "commands",
        "npu-smi info -t topo",
        "NPU99999999999999999999 X 0-3\n",
    ),
    "huge GPU index": lambda: _with(
        dgx_like().snapshot(),
        "commands",
        "nvidia-smi --query-gpu=index,pci.bus_id,uuid --format=csv,noheader",
        "99999999999, 00000000:1B:00.0, GPU-1\n",
    ),
    "giant local_cpulist": lambda: _with(
        dgx_like().snapshot(),
        "files",
        "/sys/bus/pci/devices/0000:1b:00.0/local_cpulist",
        ",".join(str(i) for i in range(0, 8000)) + ",0-7000",
    ),
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_recorded_host_is_refused_with_little_memory(name: str) -> None:
    host = SnapshotHost(HOSTILE[name]())
    error, peak = peak_of(lambda: accelhost.plan(host, devices=[0, 1]))
    assert isinstance(error, ParseError), (name, error)
    assert "\n" not in str(error) and len(str(error)) < 300
    assert peak < FEW_MB, (name, peak)


def test_stride_in_recorded_lists_reads_like_the_kernel() -> None:
    data = dgx_like().snapshot()
    data["files"]["/proc/self/status"] = "Cpus_allowed_list:\t0-223:2\n"
    topo = read_topology(SnapshotHost(data))
    assert topo.allowed_cpus == tuple(range(0, 224, 2))


def test_oversized_snapshot_is_refused_unread(tmp_path: Path) -> None:
    path = tmp_path / "huge.json"
    with path.open("wb") as fh:  # sparse: costs no disk, reads as zeros
        fh.truncate(MAX_SNAPSHOT_BYTES + 1)
    error, peak = peak_of(lambda: load_snapshot(str(path)))
    assert isinstance(error, SnapshotError)
    assert str(error).startswith(f"snapshot {path}: ") and "refused unread" in str(error)
    assert peak < FEW_MB


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        (b"\xff\xfe{}", "not UTF-8 text"),
    ],
)
def test_corrupt_snapshot_files_are_one_line_errors(
    tmp_path: Path, content: str | bytes, problem: str
) -> None:
    path = tmp_path / "bad.json"
    if isinstance(content, str):
        path.write_text(content)
    else:
        path.write_bytes(content)
    with pytest.raises(SnapshotError, match=problem):
        load_snapshot(str(path))


def test_a_device_file_is_not_read_as_a_snapshot() -> None:
    error, peak = peak_of(lambda: load_snapshot("/dev/zero"))
    assert isinstance(error, SnapshotError) and "not a regular file" in str(error)
    assert peak < FEW_MB


# Recorded on hosts without accelerators (the real-engine suite's vLLM CPU servers).
CPU_ONLY_EXAMPLES = {"vllm-cpu-orphaned-engine", "docker-vllm-leak", "docker-seed-leak"}


def test_bundled_examples_still_replay_and_plan() -> None:
    from accelhost.host.snapshot import example_names

    for name in example_names():
        host = load_snapshot(f"example:{name}")
        try:
            plan = accelhost.plan(host)
        except AccelhostError as exc:
            # some examples see no running NPU yet; the real-engine recording has no
            # accelerator at all (vLLM's CPU build)
            expected = "no accelerator found" if name in CPU_ONLY_EXAMPLES else "--device"
            assert expected in str(exc), (name, exc)
            continue
        assert plan.devices, name
        assert json.loads(json.dumps(plan.to_dict()))["format"] == "accelhost-plan/1"


def test_plain_host_with_hostile_allowed_list_is_refused() -> None:
    machine = FakeMachine(
        files={"/proc/self/status": "Cpus_allowed_list:\t0-4000000000\n"},
        commands={"lscpu -e=CPU,NODE": "CPU NODE\n0 0\n"},
    )
    error, peak = peak_of(lambda: read_topology(machine.host()))
    assert isinstance(error, ParseError) and "Cpus_allowed_list" in str(error)
    assert peak < FEW_MB


def test_hostile_snapshot_through_the_cli_is_one_line_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from accelhost.cli.main import main

    path = tmp_path / "hostile.json"
    path.write_text(json.dumps(HOSTILE["Cpus_allowed_list 0-99999999 (Ascend)"]()))
    for command in (["plan", "--device", "0"], ["topo"]):
        assert main([*command, "--snapshot", str(path)]) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err
        assert "/proc/self/status Cpus_allowed_list: id 99999999" in err
