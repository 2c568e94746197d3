"""Which id an Ascend `--device`, `local_rank=` and the vLLM plugin take in a container that
mounts only some NPUs (issue 26, point 11).

Replayed: the A3 container of vllm-ascend #3963 (`info_a3_container_card2_24.1.rc3.7.txt`):
it sees card 2, whose dies are /dev/davinci4 and /dev/davinci5 (Phy-ID 4 and 5), and its
`npu-smi info -m` numbers them by logic id 0 and 1 there, the numbering the reference
slices by. A plan made inside keys them 0 and 1; one made on the host keys them 4 and 5.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from accelhost.api import plan
from accelhost.apply.identity import device_of_local_rank, device_of_pid
from accelhost.host.snapshot import SnapshotHost
from accelhost.plans import Plan

SMI = Path(__file__).resolve().parents[1] / "ascend_smi"
HEADER = "NPU ID", "Chip ID", "Chip Logic ID", "Chip Phy-ID", "Chip Name"
WORKER = 4242


def _map(rows: list[tuple[int, int, int, int]]) -> str:
    line = "        {:<31}{:<31}{:<31}{:<31}{}\n"
    return line.format(*HEADER) + "".join(line.format(*r, "Ascend910") for r in rows)


def _container(holds: str | None = None) -> SnapshotHost:
    info = "".join(
        line + "\n"
        for line in (SMI / "info_a3_container_card2_24.1.rc3.7.txt").read_text().splitlines()
        if not line.startswith("#")
    )
    data: dict[str, Any] = {
        "format": "accelhost-snapshot/1",
        "machine": "aarch64",
        "commands": {
            "npu-smi info": info,
            "npu-smi info -m": _map([(2, 0, 0, 4), (2, 1, 1, 5)]),
            "lscpu -e=CPU,NODE": "CPU NODE\n" + "".join(f"{c} {c // 20}\n" for c in range(40)),
            "lscpu": "Thread(s) per core:  1\n",
        },
        "files": {"/proc/self/status": "Cpus_allowed_list:\t0-39\n"},
        "dirs": {"/dev": ["davinci4", "davinci5", "davinci_manager", "devmm_svm", "hisi_hdc"]},
        "env": {},
    }
    if holds is not None:
        data["dirs"][f"/proc/{WORKER}/fd"] = ["0", "7", "8"]
        data["links"] = {
            f"/proc/{WORKER}/fd/0": "/dev/null",
            f"/proc/{WORKER}/fd/7": "/dev/davinci_manager",
            f"/proc/{WORKER}/fd/8": holds,
        }
    return SnapshotHost(data)


def _host_made() -> Plan:
    """The same dies in a plan made on the host, where they are devices 4 and 5."""
    return Plan.from_dict(
        {
            "device_type": "A3",
            "devices": {
                str(n): {"main": [n], "pci": f"0000:{0x91 + 2 * n:02x}:00.0"} for n in range(16)
            },
        }
    )


def test_a_plan_made_in_the_container_keys_its_npus_as_its_npu_smi_does() -> None:
    made = plan(_container(), devices=[0, 1])
    assert [(d.device, d.pci) for d in made.devices] == [(0, "0000:95:00.0"), (1, "0000:97:00.0")]


def test_a_workers_local_rank_names_the_key_of_either_plan() -> None:
    """vLLM's worker 0 runs on the container's first NPU, /dev/davinci4: device 0 of a plan
    made inside (it was 4, "not in the plan"), device 4 of one made on the host."""
    inside = plan(_container(), devices=[0, 1])
    for rank, key in ((0, 0), (1, 1)):
        found = device_of_local_rank(inside, rank, env={}, host=_container())
        assert found.device == key, found.how
    found = device_of_local_rank(_host_made(), 1, env={}, host=_container())
    assert found.device == 5 and "host 5" in found.how


def test_bind_without_device_names_the_plan_key_of_the_node_it_holds() -> None:
    inside = plan(_container(), devices=[0, 1])
    found = device_of_pid(WORKER, inside, host=_container("/dev/davinci5"))
    assert found.device == 1 and "/dev/davinci5" in found.how
    assert device_of_pid(WORKER, _host_made(), host=_container("/dev/davinci5")).device == 5
