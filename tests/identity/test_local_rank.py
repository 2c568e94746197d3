"""Inside a worker: local rank -> entry of the visible-devices list -> host id."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from accelhost.apply.identity import device_of_rank
from accelhost.errors import UsageError
from accelhost.parsers.devnodes import parse_nvidia_information

# Runs bind_current_process in a fresh process (so pinning never touches pytest) and
# prints the report's device and the CPUs every thread of that process ended on.
WORKER = r"""
import json, os, sys
import accelhost
report = accelhost.bind_current_process(
    sys.argv[1], local_rank=int(sys.argv[2]), migrate_memory=False, irq=False, strict=True
)
cpus = {tid: sorted(os.sched_getaffinity(int(tid))) for tid in os.listdir("/proc/self/task")}
print(json.dumps({"device": report.device, "cpus": sorted({c for v in cpus.values() for c in v})}))
"""

VISIBLE = (
    "ASCEND_RT_VISIBLE_DEVICES",
    "CUDA_VISIBLE_DEVICES",
    "HIP_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "NEURON_RT_VISIBLE_CORES",
)


def run_worker(plan: Path, rank: int, **env: str) -> dict[str, object]:
    clean = {k: v for k, v in os.environ.items() if k not in VISIBLE}
    out = subprocess.run(
        [sys.executable, "-c", WORKER, str(plan), str(rank)],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    result: dict[str, object] = json.loads(out.stdout)
    return result


@pytest.fixture
def plan(tmp_path: Path) -> Path:
    """Devices 4 and 5 on different CPUs, so the CPUs say which one was bound."""
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({"devices": {"4": {"main": [0]}, "5": {"main": [1]}}}))
    return path


@pytest.mark.parametrize("var", ["ASCEND_RT_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"])
def test_local_rank_1_binds_the_second_visible_device(plan: Path, var: str) -> None:
    got = run_worker(plan, 1, **{var: "4,5"})
    assert got == {"device": 5, "cpus": [1]}
    got = run_worker(plan, 0, **{var: "4,5"})
    assert got == {"device": 4, "cpus": [0]}


def test_a_rank_beyond_the_list_is_refused(plan: Path) -> None:
    with pytest.raises(subprocess.CalledProcessError) as info:
        run_worker(plan, 2, ASCEND_RT_VISIBLE_DEVICES="4,5")
    assert "local rank 2 but ASCEND_RT_VISIBLE_DEVICES=4,5 lists 2 devices" in info.value.stderr


def test_pure_resolution_rules() -> None:
    env = {"ASCEND_RT_VISIBLE_DEVICES": "4,5", "CUDA_VISIBLE_DEVICES": "1,0"}
    # An Ascend plan reads only the Ascend variable, a GPU plan only CUDA's.
    assert device_of_rank(env, 1, family="A3").device == 5
    assert device_of_rank(env, 1, family="nvidia").device == 0
    # A hand-written plan: the first one set.
    assert device_of_rank(env, 1).device == 5
    # Nothing set: the local rank is the entry.
    found = device_of_rank({}, 3)
    assert found.device == 3 and "no visible-devices variable" in found.how


def test_container_namespace_maps_ordinals_to_host_ids() -> None:
    # Host NPUs 3-7 mounted in a container: the runtime numbers them 0-4.
    env = {"ASCEND_RT_VISIBLE_DEVICES": "0,2"}
    found = device_of_rank(env, 1, family="A2", namespace_ids=[3, 4, 5, 6, 7])
    assert found.device == 5 and "host 5" in found.how
    # Outside a container (nodes 0..n-1) the entry is the host id.
    assert device_of_rank(env, 1, family="A2", namespace_ids=list(range(8))).device == 2
    with pytest.raises(UsageError, match="only 2 devices"):
        device_of_rank({"ASCEND_RT_VISIBLE_DEVICES": "3"}, 0, namespace_ids=[6, 7])


def test_gpu_uuids() -> None:
    env = {"CUDA_VISIBLE_DEVICES": "GPU-aaaa1111,GPU-bbbb"}
    uuids = {"GPU-aaaa1111-2222": 3, "GPU-bbbb2222-3333": 6}
    assert device_of_rank(env, 0, uuids=uuids).device == 3
    assert device_of_rank(env, 1, uuids=uuids).device == 6
    with pytest.raises(UsageError, match="cannot map GPU UUIDs"):
        device_of_rank(env, 0)
    with pytest.raises(UsageError, match="matches no GPU"):
        device_of_rank({"CUDA_VISIBLE_DEVICES": "GPU-cccc"}, 0, uuids=uuids)


def test_rocm_and_neuron() -> None:
    env = {"ROCR_VISIBLE_DEVICES": "2,3,6", "HIP_VISIBLE_DEVICES": "2,0"}
    assert device_of_rank(env, 0).device == 6
    assert device_of_rank(env, 1).device == 2
    assert device_of_rank({"NEURON_RT_VISIBLE_CORES": "4-7"}, 2).device == 6
    with pytest.raises(UsageError, match="bad range"):
        device_of_rank({"NEURON_RT_VISIBLE_CORES": "0-99999"}, 0)


def test_nvidia_information_file() -> None:
    text = (
        "Model: \t\t NVIDIA H200\nIRQ:   \t\t 123\nGPU UUID: \t GPU-8f3e0c1a-aaaa\n"
        "Video BIOS: \t 96.00.99.00.01\nBus Type: \t PCIe\nDevice Minor: \t 5\n"
    )
    gpu = parse_nvidia_information("0000:41:00.0", text)
    assert (gpu.pci, gpu.minor, gpu.uuid) == ("0000:41:00.0", 5, "GPU-8f3e0c1a-aaaa")
