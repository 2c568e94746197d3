"""meminfo, HugePages sysfs and nvidia-smi memory parsers."""

from __future__ import annotations

import pytest

from accelhost.errors import ParseError
from accelhost.parsers.meminfo import parse_meminfo
from accelhost.parsers.nvidia_smi import (
    normalize_bus_id,
    parse_compute_apps,
    parse_gpu_memory,
)
from accelhost.parsers.sysfs import HugePagePool, parse_int_file, parse_size_dir

MEMINFO = """MemTotal:       1056467200 kB
MemAvailable:   900000000 kB
HugePages_Total:   20480
HugePages_Free:        0
HugePages_Rsvd:        0
HugePages_Surp:        0
Hugepagesize:       2048 kB
Hugetlb:        41943040 kB
"""


def test_meminfo() -> None:
    m = parse_meminfo(MEMINFO)
    assert (m.hugepages_total, m.hugepages_free, m.hugepagesize_kb) == (20480, 0, 2048)
    assert m.hugetlb_kb == 41943040 and m.fields["MemTotal"] == 1056467200
    with pytest.raises(ParseError, match="/proc/meminfo"):
        parse_meminfo("garbage line\n")


def test_hugepage_pool() -> None:
    assert parse_size_dir("hugepages-2048kB") == 2048
    assert parse_size_dir("hugepages-1048576kB") == 1048576
    assert parse_size_dir("something") is None
    assert parse_int_file("42\n", "x") == 42
    with pytest.raises(ParseError):
        parse_int_file("lots", "/sys/x")
    pool = HugePagePool(2048, None, total=100, free=10, reserved=5)
    assert pool.used == 95 and pool.used_fraction == 0.95 and pool.size_label == "2048kB"
    assert HugePagePool(2048, 0, 0, 0).used_fraction is None


def test_nvidia_smi() -> None:
    mem = parse_gpu_memory("0, 40000, 81559\n1, [N/A], 81559\n")
    assert [(g.index, g.used_mib, g.total_mib) for g in mem] == [
        (0, 40000, 81559),
        (1, None, 81559),
    ]
    apps = parse_compute_apps("4242, 38000, 00000000:3B:00.0\n99, [Not Supported], 0000:5e:00.0\n")
    assert [(a.pid, a.used_mib, a.bus_id) for a in apps] == [
        (4242, 38000, "0000:3b:00.0"),
        (99, None, "0000:5e:00.0"),
    ]
    assert normalize_bus_id("0000:3b:00.0") == normalize_bus_id("00000000:3B:00.0")
    assert parse_compute_apps("") == []
    with pytest.raises(ParseError, match="expected 3"):
        parse_gpu_memory("0, 1\n")
    with pytest.raises(ParseError, match="not a number"):
        parse_gpu_memory("0, lots, 2\n")
