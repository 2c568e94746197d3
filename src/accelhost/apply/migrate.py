"""Move a process's memory onto its device's node region by region, within a time budget.

Whole-process `migrate_pages(2)` stalled engines (vllm-ascend #17286: a 206 GiB pinned,
shared host table after warm-up). Here only the process's own private pages move, with
`move_pages(2)` in batches, the regions with most pages off the node first, and the time
budget is checked before every batch: a batch is at most BATCH_PAGES pages, so a bind
never runs past its budget by more than one batch. What must not move is skipped by rule
(`select_regions`, pure), and the step says so.
"""

from __future__ import annotations

import errno
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

from accelhost import formats
from accelhost.apply import memory
from accelhost.apply.steps import FAILED, NOOP, OK, Step, StepResult
from accelhost.formats import human_bytes

BATCH_PAGES = 1024  # 4 MiB of 4 KiB pages: a few milliseconds of copying at most

# Mappings the kernel makes for itself.
KERNEL_MAPPINGS = frozenset({"[vsyscall]", "[vvar]", "[vvar_vclock]", "[vdso]", "[uprobes]"})


@dataclass(frozen=True)
class Region:
    """A mapping chosen to move: its range, page size and resident pages off the target."""

    start: int
    end: int
    page_kb: int
    off_node: int
    path: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "start": hex(self.start),
            "end": hex(self.end),
            "page_bytes": self.page_kb * formats.KIB,
            "pages_off_node": self.off_node,
            "path": self.path,
        }


def skip_reason(area: memory.VmArea) -> str | None:
    """Why a mapping must not move, or None. Pure: the rules, one place."""
    if area.path in KERNEL_MAPPINGS:
        return "kernel mapping"
    if area.flags & {"io", "pf"}:
        return "I/O or PFN mapping"
    if area.path.startswith("/dev/") and not area.path.startswith("/dev/zero"):
        return "device mapping"
    if "lo" in area.flags or area.locked_kb:
        return "locked or pinned"
    if area.perms[3:4] == "s" or "sh" in area.flags:
        return "shared mapping"
    if area.path.startswith("/") and "w" not in area.perms:
        return "read-only file mapping (page cache other processes share)"
    return None


@dataclass(frozen=True)
class Selection:
    """What would move (largest first) and what is skipped, by reason: kB and count."""

    regions: tuple[Region, ...]
    skipped: tuple[tuple[str, int, int], ...]  # (reason, mappings, resident kB)


def select_regions(
    areas: Sequence[memory.VmArea],
    numa: dict[int, memory.NumaRegion],
    to_node: int,
    room_kb: int | None = None,
) -> Selection:
    """Pure: the process's own mappings with resident pages off `to_node`, most first, and
    no more than `room_kb` of them: move_pages(2) allocates on that node alone, reclaiming
    there (the page cache and pages of the processes there) when it is short of memory."""
    chosen: list[Region] = []
    skipped: dict[str, tuple[int, int]] = {}  # reason -> (mappings, kB)

    def skip(reason: str, kb: int) -> None:
        mappings, total = skipped.get(reason, (0, 0))
        skipped[reason] = (mappings + 1, total + kb)

    for area in areas:
        reason = skip_reason(area)
        info = numa.get(area.start)
        if reason is not None:
            skip(reason, area.rss_kb)
        elif info is not None:
            off = sum(n for node, n in info.pages.items() if node != to_node)
            if off:  # else every resident page is on the target already
                chosen.append(Region(area.start, area.end, info.page_kb, off, area.path))
    chosen.sort(key=lambda r: (-r.off_node, r.start))
    if room_kb is not None:
        fits = []
        for region in chosen:
            kb = region.off_node * region.page_kb
            if kb > room_kb:
                skip(f"no room on node {to_node}", kb)
                continue
            room_kb -= kb
            fits.append(region)
        chosen = fits
    return Selection(tuple(chosen), tuple((r, *counts) for r, counts in sorted(skipped.items())))


@dataclass(frozen=True)
class MoveRegions(Step):
    """Move the selected regions of `pid` to `to_node`, stopping when the budget is spent."""

    kind: ClassVar[str] = "memory"
    pid: int
    to_node: int
    budget_ms: int
    regions: tuple[Region, ...]
    skipped: tuple[tuple[str, int, int], ...]
    before_kb: tuple[tuple[int, int], ...]
    nodes: tuple[int, ...] = ()  # the host's memory nodes, when known

    def describe(self) -> str:
        if self.nodes == (self.to_node,):
            return (
                f"move pages of process {self.pid} to NUMA node {self.to_node} (only node "
                f"{self.to_node} has memory: nothing to move); resident now "
                f"{_per_node(self.before_kb)}"
            )
        pages = sum(r.off_node for r in self.regions)
        skip = "; ".join(
            f"{n} {reason} ({human_bytes(kb * formats.KIB)})" for reason, n, kb in self.skipped
        )
        return (
            f"move {len(self.regions)} regions of process {self.pid} ({pages} resident pages "
            f"off node {self.to_node}) to node {self.to_node} with move_pages(2), within "
            f"{self.budget_ms} ms; resident now {_per_node(self.before_kb)}"
            + (f"; skip {skip}" if skip else "")
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "description": self.describe(),
            "pid": self.pid,
            "to_node": self.to_node,
            "budget_ms": self.budget_ms,
            "regions": [r.to_dict() for r in self.regions],
            "skipped": [
                {"reason": r, "mappings": n, "bytes": kb * formats.KIB} for r, n, kb in self.skipped
            ],
            "resident_bytes_before": {str(n): kb * formats.KIB for n, kb in self.before_kb},
            "memory_nodes": list(self.nodes),
        }


def _per_node(pairs: Sequence[tuple[int, int]]) -> str:
    per_node = ", ".join(f"N{n} {human_bytes(kb * formats.KIB)}" for n, kb in pairs)
    return per_node or "nothing resident"


def build_move(
    pid: int, to_node: int, budget_ms: int, nodes: Sequence[int] = (), root: str = "/"
) -> MoveRegions | str:
    """The step for `pid`, or why there is none. The maps are read from this namespace's
    /proc, never under --host-root: move_pages(2) acts on this namespace's pids. At most
    half the node's free memory moves, so that the node's own users keep theirs."""
    numa_text = memory.read_proc(pid, "numa_maps")
    if tuple(nodes) == (to_node,) and numa_text is not None:
        # One node: nothing can be off it. Reading smaps walks every page table of the
        # process under its mmap lock; do not make the engine pay that for nothing.
        before = tuple(memory.kb_per_node(memory.parse_numa_regions(numa_text)).items())
        return MoveRegions(pid, to_node, budget_ms, (), (), before, tuple(nodes))
    smaps = memory.read_proc(pid, "smaps")
    if smaps is None or numa_text is None:
        return f"cannot read /proc/{pid}/smaps and /proc/{pid}/numa_maps"
    numa = memory.parse_numa_regions(numa_text)
    free = memory.node_free_kb(to_node, root)
    room = None if free is None else free // 2
    sel = select_regions(memory.parse_smaps(smaps), numa, to_node, room)
    before = tuple(memory.kb_per_node(numa).items())
    return MoveRegions(pid, to_node, budget_ms, sel.regions, sel.skipped, before, tuple(nodes))


@dataclass(frozen=True)
class Outcome:
    """What the budgeted run did: per-page statuses counted, and what was left untried.
    The field names are the keys of --json's "moved"."""

    batches: int = 0
    pages_on_node: int = 0
    pages_not_present: int = 0
    pages_refused: dict[str, int] = field(default_factory=dict)  # errno name -> pages
    regions_done: int = 0
    regions_left: int = 0
    pages_left: int = 0
    elapsed_ms: float = 0.0


Mover = Callable[[int, list[int], int], list[int]]


def move_within_budget(
    step: MoveRegions,
    *,
    mover: Mover = memory.move_pages,
    clock: Callable[[], float] = time.monotonic,
    batch_pages: int = BATCH_PAGES,
) -> Outcome:
    """Move the step's regions, checking the budget before every batch."""
    start = clock()
    deadline = start + step.budget_ms / 1000.0
    batches = on_node = absent = done = 0
    refused: dict[str, int] = {}

    def outcome(left: Sequence[Region]) -> Outcome:
        return Outcome(
            batches, on_node, absent, dict(sorted(refused.items())), done, len(left),
            sum(r.off_node for r in left), (clock() - start) * 1000.0,
        )  # fmt: skip

    for index, region in enumerate(step.regions):
        size = region.page_kb * 1024
        addr = region.start
        while addr < region.end:
            if clock() >= deadline:
                return outcome(step.regions[index:])
            count = min(batch_pages, (region.end - addr) // size)
            if count <= 0:  # a tail shorter than one page: nothing addressable left
                break
            statuses = mover(step.pid, [addr + i * size for i in range(count)], step.to_node)
            batches += 1
            for s in statuses:
                if s == step.to_node:
                    on_node += 1
                elif s in (-errno.ENOENT, -errno.EFAULT):
                    absent += 1
                elif s < 0:
                    name = errno.errorcode.get(-s, str(-s))
                    refused[name] = refused.get(name, 0) + 1
            addr += count * size
        done += 1
    return outcome(())


@dataclass(slots=True)
class MoveResult(StepResult):
    """A StepResult that also carries the per-node memory before and after, for --json."""

    outcome: Outcome | None = None
    after_kb: tuple[tuple[int, int], ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out = StepResult.to_dict(self)
        out["resident_bytes_after"] = {str(n): kb * formats.KIB for n, kb in self.after_kb}
        if self.outcome is not None:
            out["moved"] = {**asdict(self.outcome), "elapsed_ms": round(self.outcome.elapsed_ms, 1)}
        return out


def run_move(step: MoveRegions, mover: Mover = memory.move_pages) -> MoveResult:
    """Run the step; never raises: a process that exits or a kernel without the call fails it."""
    if not step.regions:
        # a one-node host's step says why already (`describe`): not twice in one line
        one = len(step.nodes) == 1
        why = "one-node host" if one else f"every movable page is on node {step.to_node} already"
        return MoveResult(step, NOOP, why, after_kb=step.before_kb)
    try:
        outcome = move_within_budget(step, mover=mover)
    except ProcessLookupError:
        return MoveResult(step, FAILED, f"process {step.pid} has exited")
    except OSError as exc:
        return MoveResult(step, FAILED, f"move_pages(2): {exc.strerror or exc}")
    text = memory.read_proc(step.pid, "numa_maps")
    after = tuple(memory.kb_per_node(memory.parse_numa_regions(text)).items()) if text else ()
    parts = [
        f"{outcome.regions_done} of {len(step.regions)} regions done in "
        f"{outcome.elapsed_ms:.0f} ms ({outcome.pages_on_node} pages now on node {step.to_node}, "
        f"{outcome.pages_not_present} not present)"
    ]
    if outcome.pages_refused:
        kept = ", ".join(f"{n} pages ({name})" for name, n in outcome.pages_refused.items())
        parts.append("the kernel kept " + kept)
    if outcome.regions_left:
        parts.append(
            f"stopped at the {step.budget_ms} ms budget: {outcome.regions_left} regions "
            f"({outcome.pages_left} pages off node) left; raise --migrate-budget-ms to move more"
        )
    parts.append(f"resident before {_per_node(step.before_kb)}; after {_per_node(after)}")
    return MoveResult(step, OK, "; ".join(parts), outcome, after)
