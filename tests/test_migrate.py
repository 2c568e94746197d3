"""Region-by-region migration: the skip rules, the budget and the per-node accounting.

This machine has one NUMA node: the real runs move pages "to node 0" (they are there
already, so the kernel reports each present page on node 0), which still exercises the
system call, the batching, the budget and the accounting. A second node is faked only in
the pure region selection.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import pytest

from accelhost.apply import memory
from accelhost.apply.migrate import (
    MoveRegions,
    Region,
    build_move,
    move_within_budget,
    run_move,
    select_regions,
    skip_reason,
)
from accelhost.apply.steps import NOOP, OK

MIB = 1 << 20

# A child with one mapping of each kind, each touched so its pages are resident; it prints
# their start addresses and waits for stdin to close.
CHILD = r"""
import ctypes, mmap, sys
libc = ctypes.CDLL(None, use_errno=True)
def addr(m):
    return ctypes.addressof(ctypes.c_char.from_buffer(m))
def touch(m):
    for off in range(0, len(m), 4096):
        m[off] = 1
own = mmap.mmap(-1, 8 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
touch(own)
shared = mmap.mmap(-1, 2 << 20, flags=mmap.MAP_SHARED | mmap.MAP_ANONYMOUS)
touch(shared)
locked = mmap.mmap(-1, 2 << 20, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
touch(locked)
assert libc.mlock(ctypes.c_void_p(addr(locked)), ctypes.c_size_t(len(locked))) == 0
print(addr(own), addr(shared), addr(locked), flush=True)
sys.stdin.read()
"""


class Child:
    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert self.proc.stdout is not None
        own, shared, locked = (int(x) for x in self.proc.stdout.readline().split())
        self.own, self.shared, self.locked = own, shared, locked

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
            self.proc.wait(timeout=10)
        except (subprocess.TimeoutExpired, OSError):
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def child() -> Iterator[Child]:
    c = Child()
    try:
        yield c
    finally:
        c.stop()


def areas_of(pid: int) -> dict[int, memory.VmArea]:
    text = memory.read_proc(pid, "smaps")
    assert text is not None
    return {a.start: a for a in memory.parse_smaps(text)}


def test_skip_rules_on_a_real_process(child: Child) -> None:
    areas = areas_of(child.pid)
    assert skip_reason(areas[child.own]) is None
    assert skip_reason(areas[child.shared]) == "shared mapping"
    assert skip_reason(areas[child.locked]) == "locked or pinned"
    vdso = next(a for a in areas.values() if a.path == "[vdso]")
    assert skip_reason(vdso) == "kernel mapping"
    text = next(a for a in areas.values() if a.path == sys.executable or "libc" in a.path)
    readonly = next(a for a in areas.values() if a.path == text.path and "w" not in a.perms)
    assert skip_reason(readonly).startswith("read-only file mapping")


def test_selection_with_a_faked_second_node(child: Child) -> None:
    # The real mappings, with numa_maps rewritten as if half of each lived on node 1.
    areas = list(areas_of(child.pid).values())
    numa = {
        a.start: memory.NumaRegion({0: 10, 1: 10 + i}, 4, "default") for i, a in enumerate(areas)
    }
    sel = select_regions(areas, numa, to_node=0)
    starts = [r.start for r in sel.regions]
    assert child.own in starts
    assert child.shared not in starts and child.locked not in starts
    reasons = {reason for reason, _, _ in sel.skipped}
    assert {"shared mapping", "locked or pinned", "kernel mapping"} <= reasons
    # Most pages off the node first.
    offs = [r.off_node for r in sel.regions]
    assert offs == sorted(offs, reverse=True)
    # Towards node 1 the node-1 pages are in place; only the node-0 ones count.
    to1 = select_regions(areas, numa, to_node=1)
    assert all(r.off_node == 10 for r in to1.regions)


def test_device_and_io_mappings_are_skipped() -> None:
    def area(path: str, perms: str = "rw-p", flags: str = "rd wr mr mw me ac") -> memory.VmArea:
        return memory.VmArea(0x1000, 0x3000, perms, path, frozenset(flags.split()), 8)

    assert skip_reason(area("/dev/davinci0")) == "device mapping"
    assert skip_reason(area("", flags="rd wr io pf")) == "I/O or PFN mapping"
    assert skip_reason(area("/dev/zero (deleted)", perms="rw-p")) is None
    assert skip_reason(area("[heap]")) is None
    assert skip_reason(area("", flags="rd wr lo")) == "locked or pinned"
    numa = {0x1000: memory.NumaRegion({1: 2}, 4, "default")}
    sel = select_regions([area("/dev/nvidia0")], numa, 0)
    assert sel.regions == () and sel.skipped == (("device mapping", 1, 8),)


def test_parse_numa_regions_counts_huge_pages_at_their_size() -> None:
    text = (
        "7f0000000000 default anon=3 dirty=3 N0=2 N1=1 kernelpagesize_kB=4\n"
        "7f0000200000 bind:1 huge anon=2 N1=2 kernelpagesize_kB=2048\n"
        "7f0000600000 default file=/lib/x.so\n"
    )
    regions = memory.parse_numa_regions(text)
    assert regions[0x7F0000200000].page_kb == 2048
    assert memory.kb_per_node(regions) == {0: 8, 1: 4 + 4096}
    assert regions[0x7F0000600000].pages == {}


def forced_step(child: Child, budget_ms: int) -> MoveRegions:
    """The child's own 8 MiB mapping as a region to move to node 0 (where it already is)."""
    area = areas_of(child.pid)[child.own]
    region = Region(area.start, area.end, 4, (area.end - area.start) // 4096, "")
    return MoveRegions(child.pid, 0, budget_ms, (region,), (), ((0, area.rss_kb),))


def test_real_move_pages_reports_every_present_page(child: Child) -> None:
    step = forced_step(child, budget_ms=60_000)
    result = run_move(step)
    assert result.status == OK, result.detail
    assert result.outcome is not None
    assert result.outcome.pages_on_node == 8 * MIB // 4096  # every page touched, all on node 0
    assert result.outcome.regions_done == 1 and result.outcome.regions_left == 0
    assert result.outcome.batches == 2  # 2048 pages in batches of 1024
    data = result.to_dict()
    assert data["resident_bytes_before"] == {"0": step.before_kb[0][1] * 1024}  # bytes
    assert set(data["resident_bytes_after"]) == {"0"}


class StepClock:
    """Advances 1 ms each time it is read: the budget is counted in reads, not in time."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 0.001
        return self.now


def test_budget_stops_between_batches(child: Child) -> None:
    calls: list[int] = []

    def counting(pid: int, addresses: list[int], node: int) -> list[int]:
        calls.append(len(addresses))
        return memory.move_pages(pid, addresses, node)

    step = forced_step(child, budget_ms=3)
    out = move_within_budget(step, mover=counting, clock=StepClock(), batch_pages=256)
    # Reads: start (1 ms), then one before each batch: 2 ms and 3 ms allow a batch, the
    # read at 4 ms is past the 3 ms budget (deadline at 1 + 3 = 4 ms).
    assert calls == [256, 256]
    assert out.batches == 2 and out.regions_done == 0 and out.regions_left == 1
    assert out.pages_on_node == 512


def test_zero_budget_moves_nothing(child: Child) -> None:
    calls: list[int] = []

    def counting(pid: int, addresses: list[int], node: int) -> list[int]:
        calls.append(len(addresses))
        return memory.move_pages(pid, addresses, node)

    result = run_move(forced_step(child, budget_ms=0), mover=counting)
    assert calls == []
    assert result.status == OK and "stopped at the 0 ms budget" in result.detail


def test_one_node_host_has_nothing_to_move_and_says_where_memory_is(child: Child) -> None:
    step = build_move(child.pid, 0, 1000)
    assert isinstance(step, MoveRegions)
    assert step.regions == ()
    reasons = {reason for reason, _, _ in step.skipped}
    assert {"shared mapping", "locked or pinned"} <= reasons
    assert dict(step.before_kb)[0] >= 8 * 1024  # the 8 MiB touched mapping at least
    result = run_move(step)
    assert result.status == NOOP and result.to_dict()["resident_bytes_after"]["0"] > 0


def test_a_process_that_is_gone_fails_the_step() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    region = Region(0x10000, 0x11000, 4, 1, "")
    result = run_move(MoveRegions(proc.pid, 0, 1000, (region,), (), ()))
    assert result.status == "failed" and "exited" in result.detail


def test_one_node_host_does_not_read_smaps(child: Child) -> None:
    # With the host's memory nodes known to be just the target, nothing can be off it:
    # the step reports where memory is without walking every mapping.
    step = build_move(child.pid, 0, 1000, nodes=[0])
    assert isinstance(step, MoveRegions)
    assert step.regions == () and step.skipped == ()
    assert dict(step.before_kb)[0] >= 8 * 1024
    assert "only node 0 has memory: nothing to move" in step.describe()
