"""Real nvidia-smi output shapes (tests/gpu/smi/*.txt, each naming its public source) fed to
the parsers, the GPU reader, the planner and the doctor's device reader: each answer is true
or says it cannot tell; never a wrong pool, a traceback or a GPU dropped without a word.

A fixture's `# ` lines at the top are its sources (and `# rc: N`, the exit status); the rest
is the output byte for byte as the tool prints it (tab-separated matrices).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from gpu_hosts import QUERY, TOPO, FakeGpu, FakeHost, dgx_like, smt_pairs

from accelhost.cpulist import format_cpulist
from accelhost.errors import ParseError, PlanError
from accelhost.host.snapshot import SnapshotHost
from accelhost.hygiene.facts.devices import read_nvidia
from accelhost.parsers.nvidia_smi import (
    APPS_QUERY,
    GPU_QUERY,
    parse_compute_apps,
    parse_gpu_memory,
    parse_query_gpu,
    parse_topo_matrix,
)
from accelhost.planner.gpu import plan_gpus
from accelhost.readers.gpu import read_gpu_topology

SMI = Path(__file__).parent / "smi"
MEM = " ".join(GPU_QUERY)
APPS = " ".join(APPS_QUERY)


def load(name: str) -> tuple[str, int]:
    """(output, exit status) of a fixture: its leading `# ` lines are sources, not output."""
    lines = (SMI / name).read_text().splitlines(keepends=True)
    rc = 0
    while lines and lines[0].startswith("# "):
        if lines[0].startswith("# rc: "):
            rc = int(lines[0][6:])
        lines.pop(0)
    return "".join(lines), rc


def test_every_fixture_names_its_source() -> None:
    for path in sorted(SMI.glob("*.txt")):
        assert "# source: https://" in path.read_text().split("\n\n")[0], path.name


def _nodes(spec: dict[int, str]) -> dict[int, list[int]]:
    return {n: _cpus(text) for n, text in spec.items()}


def _cpus(text: str) -> list[int]:
    out: list[int] = []
    for part in filter(None, text.split(",")):
        lo, _, hi = part.partition("-")
        out += range(int(lo), int(hi or lo) + 1)
    return out


def _dgx_a100_nodes() -> dict[int, list[int]]:
    """AMD Rome NPS4, 2 x 64 cores x 2 threads: node n holds 16n.. and 128+16n.."""
    return {n: [*range(16 * n, 16 * n + 16), *range(128 + 16 * n, 144 + 16 * n)] for n in range(8)}


# fixture -> (nodes of the host it came from, each GPU's (CPU Affinity, NUMA Affinity))
TOPO_CASES: dict[str, tuple[dict[int, list[int]], list[tuple[str, str]]]] = {
    "topo_h100_8gpu_12nic.txt": (
        _nodes({0: "0-55,112-167", 1: "56-111,168-223"}),
        [("0-55,112-167", "0")] * 4 + [("56-111,168-223", "1")] * 4,
    ),
    "topo_dgx_a100_nps4.txt": (
        _dgx_a100_nodes(),
        [("48-63,176-191", "3")] * 2
        + [("16-31,144-159", "1")] * 2
        + [("112-127,240-255", "7")] * 2
        + [("80-95,208-223", "5")] * 2,
    ),
    "topo_a100_no_gpu_numa_id.txt": (
        _nodes({0: "0-47,96-143", 1: "48-95,144-191"}),
        [("0-47,96-143", "0")] * 4 + [("48-95,144-191", "1")] * 4,
    ),
    "topo_2x5090.txt": (_nodes({0: "0-63"}), [("0-63", "0")] * 2),
    "topo_gb200_4gpu.txt": (
        # Grace: CPUs on nodes 0 and 1, every other node is GPU memory without CPUs
        {0: _cpus("0-71"), 1: _cpus("72-143"), **{n: [] for n in range(2, 34)}},
        [("0-71", "0,3-9,11-17")] * 2 + [("72-143", "1,19-25,27-33")] * 2,
    ),
}


@pytest.mark.parametrize("name", sorted(TOPO_CASES))
def test_topo_matrix_of_real_hosts(name: str) -> None:
    text, _ = load(name)
    _, expected = TOPO_CASES[name]
    rows = parse_topo_matrix(text)
    assert sorted(rows) == list(range(len(expected)))  # NIC rows and legends are not GPUs
    for index, (cpus, nodes) in enumerate(expected):
        row = rows[index]
        assert row.cpus is not None and format_cpulist(row.cpus) == cpus
        assert row.numa_nodes is not None and format_cpulist(row.numa_nodes) == nodes


def _topo_only_host(name: str) -> FakeHost:
    """The host of a fixture, seen from a container without the host's PCI tree: the
    matrix is the only source of each GPU's node and CPUs."""
    nodes, expected = TOPO_CASES[name]
    gpus = [FakeGpu(i, f"0000:{0x10 + i:02x}:00.0", None) for i in range(len(expected))]
    return FakeHost(nodes=nodes, gpus=gpus, sysfs_pci=False)


def _snapshot_host(fake: FakeHost, commands: dict[str, Any]) -> SnapshotHost:
    snap = fake.snapshot()
    snap["commands"].update(commands)
    return SnapshotHost(snap, source="fixture")


@pytest.mark.parametrize("name", sorted(set(TOPO_CASES) - {"topo_gb200_4gpu.txt"}))
def test_pools_from_the_matrix_are_the_gpus_own_node(name: str) -> None:
    text, _ = load(name)
    nodes, expected = TOPO_CASES[name]
    facts = read_gpu_topology(_snapshot_host(_topo_only_host(name), {TOPO: text}))
    assert facts is not None
    plan = plan_gpus(facts, strategy="node")
    for index, (_, node) in enumerate(expected):
        assert plan.device(index).pool == tuple(nodes[int(node)])


def test_grace_matrix_lists_many_nodes_so_the_node_is_not_guessed() -> None:
    """GB200: NUMA Affinity holds the CPU node and the GPU memory nodes. No single node is
    read from it; the plan is refused with the way out, which then gives the right node."""
    text, _ = load("topo_gb200_4gpu.txt")
    facts = read_gpu_topology(_snapshot_host(_topo_only_host("topo_gb200_4gpu.txt"), {TOPO: text}))
    assert facts is not None
    assert all(g.numa_node is None for g in facts.accelerators)
    with pytest.raises(PlanError, match="its local CPUs are known"):
        plan_gpus(facts, strategy="node")
    plan = plan_gpus(facts, strategy="node", numa_from="local_cpulist")
    assert format_cpulist(plan.device(1).pool) == "0-71"
    assert format_cpulist(plan.device(2).pool) == "72-143"


def test_topo_affinity_of_a_cpuset_container_keeps_the_gpus_node() -> None:
    """In a container with a cpuset, `CPU Affinity` holds only the allowed CPUs near the
    GPU (as in https://github.com/sgl-project/sglang/issues/14972, `0,2,4,6,8,10`): the node
    taken from them is still the GPU's."""
    text = (
        "\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\n"
        "GPU0\t X \tNV18\t0,2,4,6,8,10\t0\t\tN/A\n"
        "GPU1\tNV18\t X \t1,3,5,7,9,11\t1\t\tN/A\n"
    )
    nodes = {0: list(range(0, 96, 2)), 1: list(range(1, 96, 2))}
    fake = FakeHost(
        nodes=nodes,
        gpus=[FakeGpu(0, "0000:18:00.0", None), FakeGpu(1, "0000:9a:00.0", None)],
        allowed=range(12),
        sysfs_pci=False,
    )
    facts = read_gpu_topology(_snapshot_host(fake, {TOPO: text}))
    assert facts is not None
    plan = plan_gpus(facts, strategy="node", numa_from="local_cpulist")
    assert format_cpulist(plan.device(0).pool) == "0,2,4,6,8,10"
    assert format_cpulist(plan.device(1).pool) == "1,3,5,7,9,11"


FAILURES = sorted(p.name for p in SMI.glob("fail_*.txt"))


@pytest.mark.parametrize("name", FAILURES)
def test_failing_nvidia_smi_says_cannot_tell(name: str) -> None:
    """Every failure shape: the planner's reader says "cannot tell" (unread, no GPU) or
    refuses with the tool's words; never a partial GPU list taken as the whole."""
    text, rc = load(name)
    result: Any = {"stdout": text, "rc": rc}
    host = _snapshot_host(dgx_like(), {QUERY: result, TOPO: result})
    try:
        facts = read_gpu_topology(host)
    except ParseError as exc:  # printed with exit status 0: the odd line is named
        assert rc == 0 and "expected 3 fields" in str(exc)
        return
    assert facts is not None and facts.accelerators == ()
    assert facts.unread and f"exit status {rc}" in facts.unread[0]
    with pytest.raises(PlanError, match="no GPU to plan: nvidia-smi failed"):
        plan_gpus(facts)


@pytest.mark.parametrize("name", FAILURES)
def test_failing_nvidia_smi_leaves_the_doctor_unknown(name: str) -> None:
    text, rc = load(name)
    result: Any = {"stdout": text, "rc": rc}
    host = _snapshot_host(dgx_like(), {MEM: result, APPS: result, QUERY: result})
    errors: dict[str, str] = {}
    assert read_nvidia(host, errors) == []
    assert errors["devices"]


def test_hyperv_bus_ids_place_processes_on_their_gpu() -> None:
    """Hyper-V GPUs print a 32-bit PCI domain (`03F8CFDD:00:00.0`). The bus-id map came from
    `--query-gpu` in full width and the compute apps' ids were cut to 4 digits, so the two
    never met and the GPU's processes vanished from the doctor without a word."""
    query, _ = load("query_gpu_hyperv.txt")
    apps, _ = load("apps_hyperv.txt")
    assert parse_compute_apps(apps)[0].bus_id == parse_query_gpu(query)[0].pci
    host = _snapshot_host(
        FakeHost(nodes={0: list(range(8))}, siblings=smt_pairs(4)),
        {MEM: "0, 1600, 16384\n", APPS: apps, QUERY: query},
    )
    errors: dict[str, str] = {}
    (gpu,) = read_nvidia(host, errors) or []
    assert errors == {}
    assert gpu.bus_id == "3f8cfdd:00:00.0"
    assert [(p.pid, p.memory_mib) for p in gpu.processes] == [(4242, 1536)]


def test_bare_na_is_unknown_for_that_gpu_not_a_blind_doctor() -> None:
    """A bare `N/A` cell (some fields, some drivers) failed the whole memory query, so no
    GPU was known; it is unknown like `[N/A]`, for that GPU or process alone."""
    memory, _ = load("memory_bare_na.txt")
    assert [(g.index, g.used_mib, g.total_mib) for g in parse_gpu_memory(memory)] == [
        (0, 7979, 7979),
        (1, None, None),
        (2, None, None),
    ]
    apps, _ = load("apps_bare_na.txt")
    (app,) = parse_compute_apps(apps)
    assert (app.pid, app.used_mib, app.bus_id) == (4242, None, "0000:1b:00.0")
    gb10, _ = load("memory_gb10_na.txt")
    assert [(g.used_mib, g.total_mib) for g in parse_gpu_memory(gb10)] == [(None, None)]
