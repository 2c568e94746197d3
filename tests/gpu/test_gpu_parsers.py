"""nvidia-smi and sysfs parsers: real-looking text in, typed facts out, ParseError on garbage."""

from __future__ import annotations

import pytest

from accelhost.errors import ParseError
from accelhost.parsers.nvidia_smi import GpuRow, parse_query_gpu, parse_topo_matrix
from accelhost.parsers.sysfs import (
    cache_indices_from_dir,
    cgroup_cpuset_candidates,
    node_ids_from_dir,
    normalize_pci_address,
    parse_numa_node,
)

QUERY = """\
0, 00000000:18:00.0, GPU-5e2f1c0a-8b1d-4c3e-9f00-1a2b3c4d5e60
1, 00000000:2A:00.0, GPU-0b6c7d8e-1f20-4a5b-8c9d-0e1f2a3b4c5d
"""

# as an 8-GPU H100 host prints it: underlined header, tabs, an empty cell before GPU NUMA ID
TOPO_H100 = (
    "\t\x1b[4mGPU0\tGPU1\tNIC0\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\n"
    "GPU0\t X \tNV18\tPIX\t0-55,112-167\t0\t\tN/A\n"
    "GPU1\tNV18\t X \tSYS\t56-111,168-223\t1\t\tN/A\n"
    "NIC0\tPIX\tSYS\t X \t\t\t\t\n"
    "\n"
    "Legend:\n"
    "\n"
    "  X    = Self\n"
    "  NV#  = Connection traversing a bonded set of # NVLinks\n"
    "\n"
    "NIC Legend:\n"
    "\n"
    "  NIC0: mlx5_0\n"
)


def test_query_gpu_rows_are_normalised_to_sysfs_form() -> None:
    assert parse_query_gpu(QUERY) == [
        GpuRow(0, "0000:18:00.0", "GPU-5e2f1c0a-8b1d-4c3e-9f00-1a2b3c4d5e60"),
        GpuRow(1, "0000:2a:00.0", "GPU-0b6c7d8e-1f20-4a5b-8c9d-0e1f2a3b4c5d"),
    ]


def test_query_gpu_rows_in_any_order_come_back_by_index() -> None:
    lines = QUERY.splitlines()
    assert parse_query_gpu("\n".join(reversed(lines))) == parse_query_gpu(QUERY)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("0, 00000000:18:00.0\n", "expected 3 fields"),
        ("x, 00000000:18:00.0, GPU-1\n", "GPU index 'x' is not a number"),
        ("0, 18-00, GPU-1\n", "not a PCI address"),
        ("0, 0000:18:00.0, GPU-1\n0, 0000:19:00.0, GPU-2\n", "GPU 0 listed twice"),
    ],
)
def test_query_gpu_garbage_names_the_source(text: str, problem: str) -> None:
    with pytest.raises(ParseError) as err:
        parse_query_gpu(text)
    assert err.value.source.startswith("nvidia-smi")
    assert problem in err.value.problem


def test_topo_matrix_reads_cpu_and_numa_affinity_columns() -> None:
    rows = parse_topo_matrix(TOPO_H100)
    assert sorted(rows) == [0, 1]
    assert rows[0].cpus == tuple([*range(0, 56), *range(112, 168)])
    assert rows[0].numa_nodes == (0,)
    assert rows[1].numa_nodes == (1,)


def test_topo_matrix_without_tabs_or_numa_column_and_with_na() -> None:
    text = (
        "        GPU0    GPU1    CPU Affinity\n"
        "GPU0     X      PHB     0-7\n"
        "GPU1    PHB      X      N/A\n"
    )
    rows = parse_topo_matrix(text)
    assert rows[0].cpus == tuple(range(8))
    assert rows[0].numa_nodes is None
    assert rows[1].cpus is None


def test_topo_matrix_without_affinity_column_gives_nothing() -> None:
    assert parse_topo_matrix("\tGPU0\nGPU0\t X \n") == {}
    assert parse_topo_matrix("") == {}


def test_topo_matrix_garbage_affinity_is_a_parse_error() -> None:
    with pytest.raises(ParseError, match="not a CPU or node list"):
        parse_topo_matrix("\tGPU0\tCPU Affinity\nGPU0\t X \tlots\n")


@pytest.mark.parametrize(
    ("raw", "sysfs"),
    [
        ("00000000:1B:00.0", "0000:1b:00.0"),
        ("0000:3b:00.0", "0000:3b:00.0"),
        ("3b:00.0", "0000:3b:00.0"),
        ("00010000:01:00.0", "10000:01:00.0"),  # VMD domains keep their width
        (" 0009:01:00.1 ", "0009:01:00.1"),
    ],
)
def test_pci_addresses(raw: str, sysfs: str) -> None:
    assert normalize_pci_address(raw) == sysfs


@pytest.mark.parametrize("raw", ["", "3b:00", "zz:00.0", "0000:3b:40.0", "0000:3b:00.8"])
def test_bad_pci_addresses(raw: str) -> None:
    with pytest.raises(ParseError):
        normalize_pci_address(raw, "--pci")


def test_numa_node_minus_one_is_unknown() -> None:
    assert parse_numa_node("-1\n", "numa_node") is None
    assert parse_numa_node("3\n", "numa_node") == 3
    with pytest.raises(ParseError, match="numa_node"):
        parse_numa_node("node0", "numa_node")


def test_listing_parsers_sort_and_filter() -> None:
    assert node_ids_from_dir(["possible", "node10", "node2", "has_cpu"]) == [2, 10]
    assert cache_indices_from_dir(["uevent", "index3", "index0"]) == [0, 3]


def test_cgroup_candidates_v2_v1_and_hybrid() -> None:
    v2 = cgroup_cpuset_candidates("0::/kubepods/pod1/abc\n")
    assert v2[0] == "/sys/fs/cgroup/kubepods/pod1/abc/cpuset.cpus.effective"
    assert v2[-2:] == [
        "/sys/fs/cgroup/cpuset.cpus.effective",
        "/sys/fs/cgroup/cpuset/cpuset.effective_cpus",
    ]
    v1 = cgroup_cpuset_candidates("4:memory:/x\n3:cpuset,cpu:/docker/abc\n0::/\n")
    assert "/sys/fs/cgroup/cpuset/docker/abc/cpuset.effective_cpus" in v1
    assert v1[0] == "/sys/fs/cgroup/cpuset.cpus.effective"
