"""Reading GPU hosts into a `Topology` through the host door: sources, fallbacks, recording."""

from __future__ import annotations

import contextlib
import io
import sys
import types
from collections.abc import Sequence
from typing import Any

import pytest
from gpu_hosts import QUERY, TOPO, FakeGpu, FakeHost, dgx_like

from accelhost.api import plan as make_plan
from accelhost.cpulist import format_cpulist
from accelhost.errors import ParseError, PlanError
from accelhost.host.base import CommandResult
from accelhost.host.record import RecordingHost
from accelhost.host.snapshot import SnapshotHost
from accelhost.planner.gpu import plan_gpus
from accelhost.readers.gpu import read_gpu_topology
from accelhost.readers.topology import read_topology
from accelhost.topology import Accelerator


def test_no_nvidia_smi_and_no_pci_means_no_gpu() -> None:
    host = dgx_like(nvidia_smi=False).host()
    assert read_gpu_topology(host) is None


def test_gpu_facts_of_a_dgx_like_host() -> None:
    facts = read_gpu_topology(dgx_like().host())
    assert facts is not None
    assert facts.family == "nvidia"
    assert [g.index for g in facts.accelerators] == list(range(8))
    gpu4 = facts.accelerators[4]
    assert (gpu4.pci, gpu4.numa_node, gpu4.numa_source) == ("0000:9d:00.0", 1, "sysfs")
    assert gpu4.msi_irqs == tuple(range(260, 268))
    assert format_cpulist(facts.affinity[4]) == "56-111,168-223"
    assert facts.cpu.siblings[5] == (5, 117)
    assert facts.cpu.caches[5] == facts.cpu.caches[117]
    assert facts.cpu.packages == {0: 0, 56: 1}
    assert facts.cpuset == tuple(range(224))
    assert facts.notes == ()


def test_nvidia_smi_commands_run_together() -> None:
    seen: list[str] = []

    class Spy(SnapshotHost):
        def run_many(self, argvs: Sequence[Sequence[str]]) -> list[CommandResult | None]:
            seen.extend(" ".join(a) for a in argvs)
            return [SnapshotHost.run(self, a) for a in argvs]

        def run(self, argv: Sequence[str]) -> CommandResult | None:
            raise AssertionError("nvidia-smi must be run through run_many")

    read_gpu_topology(Spy(dgx_like().snapshot()))
    assert seen == [QUERY, TOPO]


def test_recording_keeps_exactly_what_was_read_and_replays_the_same() -> None:
    original = dgx_like(l3=None).snapshot()
    recorder = RecordingHost(SnapshotHost(original))
    facts = read_gpu_topology(recorder)
    recorded = recorder.to_snapshot(device_type="nvidia")
    assert set(recorded["commands"]) == {QUERY, TOPO}
    # one sibling file per core, one package id per node: small snapshots of big hosts
    sibling_files = [p for p in recorded["files"] if p.endswith("thread_siblings_list")]
    assert len(sibling_files) == 112
    assert sum(p.endswith("physical_package_id") for p in recorded["files"]) == 2
    assert read_gpu_topology(SnapshotHost(recorded)) == facts


def test_failing_nvidia_smi_is_reported_and_refuses_plans() -> None:
    host = dgx_like(
        smi_failure="NVIDIA-SMI has failed because it couldn't communicate "
        "with the NVIDIA driver.\n"
    )
    facts = read_gpu_topology(host.host())
    assert facts is not None and facts.accelerators == ()
    # unread, not a note: no GPU known is not no GPU (`topo` says "cannot tell", exit 1)
    assert "nvidia-smi failed (exit status 9): NVIDIA-SMI has failed" in facts.unread[0]
    with pytest.raises(PlanError, match="no GPU to plan: nvidia-smi failed"):
        plan_gpus(facts)
    assert facts.node_cpus[1] == tuple([*range(56, 112), *range(168, 224)])


def test_topo_matrix_fills_in_when_sysfs_has_no_pci_tree() -> None:
    facts = read_gpu_topology(dgx_like(sysfs_pci=False).host())
    assert facts is not None
    gpu6 = facts.accelerators[6]
    assert (gpu6.numa_node, gpu6.numa_source) == (1, "nvidia-smi topo -m")
    assert gpu6.cpus_source == "nvidia-smi topo -m"
    plan = plan_gpus(facts)
    assert format_cpulist(plan.device(6).pool) == "84-97,196-209"


def test_no_source_for_a_node_refuses_instead_of_guessing() -> None:
    facts = read_gpu_topology(dgx_like(sysfs_pci=False, with_topo=False).host())
    assert facts is not None
    with pytest.raises(PlanError, match="has no entry in /sys/bus/pci/devices"):
        plan_gpus(facts)


def test_pci_devices_are_read_from_sysfs_alone() -> None:
    host = dgx_like(nvidia_smi=False, env={"CUDA_VISIBLE_DEVICES": "0"})
    facts = read_gpu_topology(host.host(), pci=["00000000:9D:00.0,1b:00.0"])
    assert facts is not None
    assert facts.family == "pci"
    assert [(g.index, g.pci) for g in facts.accelerators] == [
        (0, "0000:9d:00.0"),
        (1, "0000:1b:00.0"),
    ]
    plan = plan_gpus(facts, strategy="node")
    assert plan.device_type == "pci"
    assert plan.visible == (0, 1)  # CUDA_VISIBLE_DEVICES does not apply to --pci
    assert format_cpulist(plan.device(0).pool) == "56-111,168-223"


def test_pci_device_absent_from_sysfs_is_refused() -> None:
    facts = read_gpu_topology(dgx_like().host(), pci=["0000:3b:00.0"])
    assert facts is not None
    with pytest.raises(PlanError, match=r"device 0 \(0000:3b:00.0\) has no entry"):
        plan_gpus(facts)


@pytest.mark.parametrize(
    ("pci", "problem"), [(["0000:3b:00.0", "3b:00.0"], "twice"), ([""], "no PCI")]
)
def test_bad_pci_lists(pci: list[str], problem: str) -> None:
    with pytest.raises(ParseError, match=problem):
        read_gpu_topology(dgx_like().host(), pci=pci)


def test_allowed_cpus_fall_back_to_the_cpuset_and_report_differences() -> None:
    host = dgx_like(allowed=list(range(8)), cpuset=list(range(16)))
    facts = read_gpu_topology(host.host())
    assert facts is not None
    assert facts.allowed_cpus == tuple(range(8))
    assert any("differ from the cgroup cpuset 0-15" in n for n in facts.notes)
    data = host.snapshot()
    del data["files"]["/proc/self/status"]
    facts = read_gpu_topology(SnapshotHost(data))
    assert facts is not None
    assert facts.allowed_cpus == tuple(range(16))
    assert facts.cpu.allowed_source == "cgroup cpuset"


def test_gpu_topology_for_the_topo_table() -> None:
    host = dgx_like(env={"CUDA_VISIBLE_DEVICES": "GPU-00000004"})
    topo = read_gpu_topology(host.host())
    assert topo is not None
    assert topo.family == "nvidia"
    assert sorted(a.index for a in topo.accelerators) == list(range(8))
    assert topo.accelerator(3) is not None and topo.accelerator(3).pci == "0000:61:00.0"  # type: ignore[union-attr]
    assert topo.node_cpus[1][:2] == (56, 57)
    assert topo.cpu_node[200] == 1
    assert topo.threads_per_core == 2
    assert topo.visible_env == "GPU-00000004"
    assert topo.affinity[0] == tuple([*range(0, 56), *range(112, 168)])
    assert topo.accelerator(0) == Accelerator(
        index=0,
        pci="0000:1b:00.0",
        numa_node=0,
        uuid=host.gpus[0].uuid_text(),
        msi_irqs=topo.accelerators[0].msi_irqs,
    )
    assert topo.accelerators[0].msi_irqs


def test_minus_one_node_shows_as_unknown_in_the_topology() -> None:
    host = FakeHost(nodes={0: list(range(8))}, gpus=[FakeGpu(0, "0000:00:1e.0", -1)])
    topo = read_gpu_topology(host.host())
    assert topo is not None
    assert topo.accelerators[0].numa_node is None
    assert topo.affinity[0] == tuple(range(8))


def test_topology_of_a_host_without_accelerators() -> None:
    data = FakeHost(
        nodes={0: list(range(4)), 1: list(range(4, 8)), 2: []},
        nvidia_smi=False,
        allowed=[0, 1, 2, 3, 4],
    ).snapshot()
    del data["device_type"]  # nothing recorded: the family is told from what is installed
    topo = read_topology(SnapshotHost(data))
    assert topo.family is None
    assert topo.accelerators == ()
    assert topo.allowed_cpus == (0, 1, 2, 3, 4)
    assert topo.node_cpus == {0: (0, 1, 2, 3), 1: (4, 5, 6, 7), 2: ()}
    assert topo.cpu_node[5] == 1
    assert topo.cpuset == (0, 1, 2, 3, 4)
    assert topo.threads_per_core == 1
    assert topo.notes == ()


def test_topology_of_this_machine_shows_cpus_and_nodes() -> None:
    from accelhost.host.live import LiveHost

    host = LiveHost()
    topo = read_topology(host)
    assert topo.allowed_cpus
    assert topo.node_cpus
    assert set(topo.allowed_cpus) <= {c for cpus in topo.node_cpus.values() for c in cpus}
    if read_gpu_topology(host) is None:  # this machine has no GPU: `topo` still shows CPUs
        from accelhost.cli.main import main

        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert main(["topo"]) == 0
        assert "none found" in out.getvalue()
        assert format_cpulist(topo.allowed_cpus) in out.getvalue()


def test_nvml_is_a_last_resort_on_live_hosts_only(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    def handle(index: int) -> int:
        calls.append(f"handle {index}")
        return index

    fake: Any = types.SimpleNamespace(
        nvmlInit=lambda: calls.append("init"),
        nvmlShutdown=lambda: calls.append("shutdown"),
        nvmlDeviceGetHandleByIndex=handle,
        nvmlDeviceGetNumaNodeId=lambda h: 1,
        # CPUs 56-63 and 64 as 64-bit words
        nvmlDeviceGetCpuAffinityWithinScope=lambda h, n, scope: [0xFF << 56, 1],
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    data = dgx_like(sysfs_pci=False, with_topo=False).snapshot()

    class Live(SnapshotHost):
        @property
        def is_live(self) -> bool:
            return True

    facts = read_gpu_topology(Live(data))
    assert facts is not None
    assert (facts.accelerators[0].numa_node, facts.accelerators[0].numa_source) == (1, "nvml")
    assert facts.affinity[0] == tuple(range(56, 65))
    assert calls[0] == "init" and calls[-1] == "shutdown"
    calls.clear()
    replayed = read_gpu_topology(SnapshotHost(data))
    assert replayed is not None and replayed.accelerators[0].numa_node is None
    assert calls == []


def test_pci_family_without_addresses_says_what_is_missing() -> None:
    with pytest.raises(
        PlanError, match=r"no GPU to plan: no PCI device given \(name them with --pci\)"
    ):
        make_plan(dgx_like().host(), device_type="pci")
