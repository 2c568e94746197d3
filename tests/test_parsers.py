"""Parsers against the variants real hosts print, and against garbage."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from accelhost.cpulist import cpu_mask, format_cpulist, parse_cpu_mask, parse_cpulist
from accelhost.errors import ParseError
from accelhost.host.snapshot import SnapshotHost
from accelhost.parsers.lscpu import parse_cpu_nodes, parse_threads_per_core
from accelhost.parsers.npusmi import (
    board_command,
    parse_board_pci,
    parse_npu_map,
    parse_npu_smi_info,
    parse_npu_topo,
)
from accelhost.parsers.procstat import find_allowed_cpus
from accelhost.parsers.ps import keep_thread_lines, parse_thread_ids
from accelhost.parsers.sysvipc import parse_sysvipc_shm
from accelhost.readers.topology import read_topology
from ascend_hosts import AscendHost, even_nodes

# ---- CPU lists and masks -------------------------------------------------------------


def test_cpulist_ranges_singletons_and_spaces() -> None:
    assert parse_cpulist("0-3,8,10-11") == [0, 1, 2, 3, 8, 10, 11]
    assert parse_cpulist("0-3, 8, 10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    assert parse_cpulist("") == [] and parse_cpulist(" \n") == []
    assert parse_cpulist("5,1") == [5, 1]  # written order kept


@pytest.mark.parametrize("bad", ["a", "1-", "3-1", "1,,2", "-1", "0x3", "1-2-3"])
def test_cpulist_garbage_is_a_parse_error(bad: str) -> None:
    with pytest.raises(ParseError):
        parse_cpulist(bad)


def test_format_cpulist() -> None:
    assert format_cpulist([5, 0, 1, 2, 7, 8]) == "0-2,5,7-8"
    assert format_cpulist([]) == ""


@pytest.mark.parametrize(
    ("cpus", "mask"),
    [
        ([3], "00000008"),
        ([8], "00000100"),
        ([35], "00000008,00000000"),
        ([40], "00000100,00000000"),
        ([0, 1], "00000003"),
        ([64], "00000001,00000000,00000000"),
    ],
)
def test_irq_masks_match_the_spec(cpus: list[int], mask: str) -> None:
    assert cpu_mask(cpus) == mask
    assert parse_cpu_mask(mask) == cpus


@given(st.sets(st.integers(0, 700), min_size=1))
def test_cpulist_and_mask_round_trip(cpus: set[int]) -> None:
    assert parse_cpulist(format_cpulist(cpus)) == sorted(cpus)
    assert parse_cpu_mask(cpu_mask(cpus)) == sorted(cpus)


# ---- /proc/self/status ---------------------------------------------------------------


def test_allowed_cpus() -> None:
    text = "Name:\tpython3\nCpus_allowed:\tff\nCpus_allowed_list:\t0-3,8\nMems_allowed_list:\t0\n"
    assert find_allowed_cpus(text) == [0, 1, 2, 3, 8]
    assert find_allowed_cpus("Cpus_allowed_list:   0-1, 4\n") == [0, 1, 4]
    assert find_allowed_cpus("Name:\tpython3\n") is None


def test_allowed_cpus_line_missing_is_the_reference_error() -> None:
    data = AscendHost("A2", 1, 8, even_nodes(192, 4), range(192), running=[0]).snapshot()
    data["files"]["/proc/self/status"] = "Name:\tpython3\n"
    with pytest.raises(ParseError) as err:
        read_topology(SnapshotHost(data))
    assert "Can not found specific 'Cpus_allowed_list' in the '/proc/self/status' file." in str(
        err.value
    )


# ---- lscpu ---------------------------------------------------------------------------


def test_lscpu_nodes_padded_and_offline_rows() -> None:
    text = "CPU NODE\n  0    0\n  1    1\n  2    0\n  3    -\n 10    1\n"
    cpu_node, node_cpus = parse_cpu_nodes(text)
    assert cpu_node == {0: 0, 1: 1, 2: 0, 10: 1}
    assert node_cpus == {0: (0, 2), 1: (1, 10)}
    assert parse_cpu_nodes("") == ({}, {})
    assert parse_cpu_nodes("CPU NODE\n") == ({}, {})


def test_lscpu_nodes_dense_shape_behaves_as_a_dict() -> None:
    text = "CPU NODE\n  0    0\n  1    0\n  2    1\n  3    1\n  4    0\n"
    cpu_node, node_cpus = parse_cpu_nodes(text)
    assert cpu_node == {0: 0, 1: 0, 2: 1, 3: 1, 4: 0}
    assert dict(cpu_node) == {0: 0, 1: 0, 2: 1, 3: 1, 4: 0} and len(cpu_node) == 5
    assert node_cpus == {0: (0, 1, 4), 1: (2, 3)}
    assert cpu_node[2] == 1 and cpu_node.get(9) is None and cpu_node.get(9, -1) == -1
    assert 4 in cpu_node and 5 not in cpu_node and -1 not in cpu_node and True not in cpu_node
    with pytest.raises(KeyError):
        cpu_node[5]
    assert list(cpu_node) == [0, 1, 2, 3, 4]
    # the same rows written sparsely parse to an equal mapping
    assert parse_cpu_nodes("CPU NODE\n0 0\n1 0\n2 1\n3 1\n4 0\n")[0] == cpu_node


def test_lscpu_nodes_unreadable_row_is_quoted_not_the_blank_line_before_it() -> None:
    with pytest.raises(ParseError, match=r"cannot read row '0:x'"):
        parse_cpu_nodes("CPU NODE\n\n0:x\n")


def test_lscpu_threads_per_core() -> None:
    assert parse_threads_per_core("Thread(s) per core:              2\n") == 2
    assert parse_threads_per_core("Thread(s) per core: n/a\n") is None
    assert parse_threads_per_core("Architecture: x86_64\n") is None


# ---- npu-smi info -m -----------------------------------------------------------------

A3_MAP = """\tNPU ID                         Chip ID                        Chip Logic ID                  Chip Phy-ID                    Chip Name
\t0                              0                              0                              0                              Ascend910
\t0                              1                              1                              1                              Ascend910
\t0                              2                              -                              -                              Mcu
\t1                              0                              2                              2                              Ascend910
\t1                              1                              3                              3                              Ascend910

"""

MAP_950 = """    NPU ID    Slot ID    Chip ID    Chip Phy-ID    Chip Name
    4         4          0          4              Ascend950PR
    7         7          0          7              Ascend950PR
"""


def test_map_dual_die_a3_with_mcu_rows() -> None:
    entries = parse_npu_map(A3_MAP)
    assert [(e.npu_id, e.chip_id, e.logical_id) for e in entries] == [
        (0, 0, 0),
        (0, 1, 1),
        (1, 0, 2),
        (1, 1, 3),
    ]
    assert entries[0].name == "Ascend910"


def test_map_950_without_chip_logic_id_uses_npu_id() -> None:
    entries = parse_npu_map(MAP_950)
    assert [(e.npu_id, e.chip_id, e.logical_id) for e in entries] == [(4, 0, 4), (7, 0, 7)]


def test_map_without_chip_id_column_is_chip_0() -> None:
    entries = parse_npu_map("NPU ID    Chip Logic ID\n3         5\n")
    assert [(e.npu_id, e.chip_id, e.logical_id) for e in entries] == [(3, 0, 5)]


def test_map_without_npu_id_header_is_a_parse_error() -> None:
    with pytest.raises(ParseError, match="npu-smi info -m"):
        parse_npu_map("Error: no device found\n0 0 0\n")
    assert parse_npu_map("") == [] and parse_npu_map("\n\n") == []


# ---- npu-smi info --------------------------------------------------------------------

INFO_A2 = """+------------------------------------------------------------------------------------------------+
| npu-smi 23.0.rc3                 Version: 23.0.rc3                                             |
+---------------------------+---------------+----------------------------------------------------+
| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|
| Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |
+===========================+===============+====================================================+
| 0     910B3               | OK            | 97.1        37                0    / 0             |
| 0                         | 0000:C1:00.0  | 0           0    / 0          3160 / 65536         |
+===========================+===============+====================================================+
| 1     910B3               | OK            | 93.5        36                0    / 0             |
| 0                         | 0000:01:00.0  | 0           0    / 0          45000/ 65536         |
+===========================+===============+====================================================+
+---------------------------+---------------+----------------------------------------------------+
| NPU     Chip              | Process id    | Process name             | Process memory(MB)      |
+===========================+===============+====================================================+
| No running processes found in NPU 0                                                            |
+===========================+===============+====================================================+
| 1       0                 | 4242          | VLLM::EngineCore         | 41000                   |
| 1       0                 | 4243          | python3                  | 800                     |
+===========================+===============+====================================================+
"""


def test_info_chips_and_processes() -> None:
    info = parse_npu_smi_info(INFO_A2)
    assert info.id_column == "NPU Chip"
    assert [(c.npu_id, c.chip_id, c.bus_id, c.hbm_used_mb, c.hbm_total_mb) for c in info.chips] == [
        (0, 0, "0000:c1:00.0", 3160, 65536),
        (1, 0, "0000:01:00.0", 45000, 65536),
    ]
    assert info.names == ("910B3",)
    assert [(p.npu_id, p.chip_id, p.pid, p.name, p.memory_mb) for p in info.processes] == [
        (1, 0, 4242, "VLLM::EngineCore", 41000),
        (1, 0, 4243, "python3", 800),
    ]


def test_info_950_process_table_by_npu_id_and_tab_led_lines() -> None:
    text = (
        "\t| NPU ID                    | Process id    | Process name  | Process memory(MB) |\n"
        "\t| 3                         | 77            | worker        | 100                |\n"
        "\t| x                         | 78            | junk          | 1                  |\n"
    )
    info = parse_npu_smi_info(text)
    assert info.id_column == "NPU ID"
    assert [(p.npu_id, p.chip_id, p.pid) for p in info.processes] == [(3, None, 77)]


def test_info_rows_with_extra_padding_still_count() -> None:
    text = (
        "| NPU     Chip      | Process id    | Process name  | Process memory(MB) |\n"
        "|   12      1       | 4242          | worker        | 100                |\n"
        "|   No running processes found in NPU 13                                  |\n"
    )
    info = parse_npu_smi_info(text)
    assert [(p.npu_id, p.chip_id, p.pid, p.memory_mb) for p in info.processes] == [
        (12, 1, 4242, 100)
    ]


def test_info_without_process_section_or_text() -> None:
    assert parse_npu_smi_info("").processes == ()
    assert parse_npu_smi_info("npu-smi: command failed\n").id_column is None


# ---- npu-smi info -t topo ------------------------------------------------------------


def test_topo_with_legend_and_indented_header() -> None:
    text = (
        "\t   NPU0       NPU1       CPU Affinity\n"
        "NPU0       X          HCCS       144-167\n"
        "NPU1       HCCS       X          0-23,48-71\n"
        "\nLegend:\n\n  X    = Self\n  NPU  = not a row\n"
    )
    assert parse_npu_topo(text) == {
        0: tuple(range(144, 168)),
        1: tuple(range(0, 24)) + tuple(range(48, 72)),
    }


def test_topo_matrix_without_affinity_column_gives_nothing() -> None:
    text = "\t   NPU0    NPU1\nNPU0   X      HCCS\nNPU1   HCCS   X\n"
    assert parse_npu_topo(text) == {}
    assert parse_npu_topo(None) == {}
    assert parse_npu_topo("NPUx  X  0-3\n NPU2 X 0-3\n") == {}


# ---- board, ps, sysvipc --------------------------------------------------------------


def test_board_pci_and_command() -> None:
    text = "        NPU ID                         : 0\n        PCIe Bus Info                  : 0000:C1:00.0\n"
    assert parse_board_pci(text) == "0000:c1:00.0"
    assert parse_board_pci("nothing") is None
    assert board_command(5, "A3") == ["npu-smi", "info", "-t", "board", "-i", "2", "-c", "1"]
    assert board_command(5, "A2") == ["npu-smi", "info", "-t", "board", "-i", "5"]


def test_ps_uvb_threads() -> None:
    text = (
        "  PID  SPID TTY          TIME CMD\n"
        "  812   815 ?        00:00:00 uvb_poll_window_thread\n"
        "  812   816 ?        00:00:00 python3\n"
        "  812   xx  ?        00:00:00 uvb_poll_window_thread\n"
    )
    assert parse_thread_ids(text) == [815]
    assert keep_thread_lines(text).splitlines() == text.splitlines()[:2] + [text.splitlines()[3]]


def test_sysvipc_shm() -> None:
    text = (
        "       key      shmid perms                  size  cpid  lpid nattch   uid   gid  cuid  cgid      atime      dtime      ctime                   rss                  swap\n"
        "-1965219822          5  1600              2097152  4242  4243      0     0     0     0     0 1700000000 1700000001 1699999999               2097152                     0\n"
    )
    (seg,) = parse_sysvipc_shm(text)
    assert (seg.key, seg.shmid, seg.size, seg.cpid, seg.lpid, seg.nattch) == (
        -1965219822,
        5,
        2097152,
        4242,
        4243,
        0,
    )
    assert seg.marked_for_destruction and seg.key_hex == "0x8add2012"
    with pytest.raises(ParseError):
        parse_sysvipc_shm("key shmid\n1 2 3\n")


def test_cgroup_cpuset_candidates_walk_up_to_the_roots() -> None:
    from accelhost.parsers.sysfs import cgroup_cpuset_candidates

    paths = cgroup_cpuset_candidates("0::/a/b\n")
    assert (
        paths.index("/sys/fs/cgroup/a/b/cpuset.cpus.effective")
        < paths.index("/sys/fs/cgroup/a/cpuset.cpus.effective")
        < paths.index("/sys/fs/cgroup/cpuset.cpus.effective")
    )
    v1 = cgroup_cpuset_candidates("5:cpuset:/docker/c1\n")
    assert v1[:3] == [
        "/sys/fs/cgroup/cpuset/docker/c1/cpuset.effective_cpus",
        "/sys/fs/cgroup/cpuset/docker/cpuset.effective_cpus",
        "/sys/fs/cgroup/cpuset/cpuset.effective_cpus",
    ]
