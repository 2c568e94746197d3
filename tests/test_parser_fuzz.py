"""Every parser module, fed garbage, raises ParseError or answers: never another exception.

The garbage mixes the tokens real tools print with what corrupt or hostile recordings hold
(non-ASCII digits, thousand-digit numbers, `inf`/`nan`, huge ranges), and a meta-test
checks that every module of `accelhost.parsers` is in the list.
"""

from __future__ import annotations

import contextlib
import importlib
import pkgutil
from collections.abc import Callable

from hypothesis import given, settings
from hypothesis import strategies as st

import accelhost.parsers
from accelhost import cpulist
from accelhost.errors import ParseError
from accelhost.parsers import (
    devnodes,
    lscpu,
    meminfo,
    npusmi,
    nvidia_smi,
    procstat,
    ps,
    sysfs,
    sysvipc,
)

Parser = Callable[[str], object]

PARSERS: dict[str, list[Parser]] = {
    "accelhost.cpulist": [
        cpulist.parse_cpulist,
        cpulist.parse_cpu_mask,
        cpulist.parse_device_list,
        lambda t: cpulist.parse_id(t, "fuzz", cpulist.MAX_CPUS),
    ],
    "accelhost.parsers.lscpu": [lscpu.parse_cpu_nodes, lscpu.parse_threads_per_core],
    "accelhost.parsers.meminfo": [meminfo.parse_meminfo],
    "accelhost.parsers.npusmi": [
        npusmi.parse_board_pci,
        npusmi.parse_npu_smi_info,
        npusmi.parse_npu_map,
        npusmi.parse_npu_topo,
    ],
    "accelhost.parsers.nvidia_smi": [
        nvidia_smi.parse_query_gpu,
        nvidia_smi.parse_topo_matrix,
        nvidia_smi.parse_gpu_memory,
        nvidia_smi.parse_compute_apps,
        nvidia_smi.normalize_bus_id,
    ],
    "accelhost.parsers.procstat": [
        procstat.parse_proc_stat,
        lambda t: procstat.parse_status_field(t, "Pid"),
        procstat.find_allowed_cpus,
    ],
    "accelhost.parsers.ps": [ps.parse_thread_ids, ps.keep_thread_lines],
    "accelhost.parsers.sysfs": [
        lambda t: sysfs.normalize_pci_address(t),
        lambda t: sysfs.parse_int_file(t, "fuzz"),
        lambda t: sysfs.parse_numa_node(t, "fuzz"),
        lambda t: sysfs.node_ids_from_dir(t.split()),
        lambda t: sysfs.cache_indices_from_dir(t.split()),
        sysfs.cgroup_cpuset_candidates,
        sysfs.parse_size_dir,
    ],
    "accelhost.parsers.sysvipc": [sysvipc.parse_sysvipc_shm],
    "accelhost.parsers.devnodes": [
        devnodes.node_kind,
        lambda t: devnodes.node_kind("/dev/davinci" + t),
        lambda t: devnodes.node_numbers(t.split(), "nvidia"),
        lambda t: devnodes.parse_nvidia_information("0000:01:00.0", t),
    ],
}
EVERY = [f for fs in PARSERS.values() for f in fs]

TOKENS = [
    *"NPU ID Chip|-+0123456789\t\n:,/xX.()[]%",
    "²",
    "٣",
    "inf",
    "nan",
    "1e999",
    "9" * 5000,
    "0-99999999",
    "0-10:2",
    "GPU",
    "node",
    "index",
    "kB",
    "hugepages-",
    "Cpus_allowed_list:",
    "CPU Affinity",
    "NUMA Affinity",
    "Process id",
    "| NPU",
    "0000:1b:00.0",
    "MiB",
    "N/A",
]
GARBAGE = st.one_of(
    st.lists(st.sampled_from(TOKENS), max_size=80).map("".join),
    st.text(max_size=200),
)


@settings(max_examples=600, deadline=None)
@given(text=GARBAGE, index=st.integers(0, len(EVERY) - 1))
def test_parsers_raise_only_parse_errors_on_garbage(text: str, index: int) -> None:
    # any other exception (IndexError, ValueError, OverflowError...) fails the test
    with contextlib.suppress(ParseError):
        EVERY[index](text)


def test_every_parser_module_is_fuzzed() -> None:
    modules = {
        f"accelhost.parsers.{m.name}" for m in pkgutil.iter_modules(accelhost.parsers.__path__)
    }
    assert modules <= set(PARSERS), sorted(modules - set(PARSERS))
    for name in modules:
        assert importlib.import_module(name)


BIG = "9" * 5000
HOSTILE_TEXTS = [
    f"hugepages-{BIG}kB",
    f"node{BIG}",
    f"index{BIG}",
    f"GPU{BIG}\t0-3\t0",
    f"NPU{BIG} X 0-3",
    f"{BIG}, 0000:1b:00.0, GPU-1",
    f"| {BIG} 910B3 | OK | 1 / 2 |",
    f"| {BIG} {BIG} | {BIG} | x | {BIG} |",
    f"\tNPU ID  Chip ID  Chip Logic ID  Chip Name\n\t{BIG}  0  0  910B3\n",
    f"CPU NODE\n0 {BIG}\n",
    f"Cpus_allowed_list:\t0-{BIG}\n",
    f"Pid:\t{BIG}\nCpus_allowed_list:\t0-99999999\n",
    f"1 (x) S {BIG} 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 {BIG} 0 0",
    f"MemTotal: {BIG} kB\n",
    "1e999, 2, 0000:1b:00.0\n",
    "inf, nan, 0000:1b:00.0\n",
    f"  812 {BIG} ?  00:00:00 uvb_poll_window_thread\n",
    "0-4294967295",
    "NCPU Affinity",  # found by the fuzz property: the words inside another cell
    "²,٣",
]


def test_parsers_refuse_hostile_texts_with_parse_errors_only() -> None:
    for text in HOSTILE_TEXTS:
        for parse in EVERY:
            with contextlib.suppress(ParseError):
                parse(text)
