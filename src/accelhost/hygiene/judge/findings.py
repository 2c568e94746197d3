"""What the rules (`accelhost.hygiene.judge.rules`) find in one reading of a host: its orphans,
its segments and /dev/shm files judged, and whose each is (`Attribution`). Judged once
and handed to the checks, the clean plan, the figures and the watch's metrics, so what
the doctor reports is what the plan removes, and 3,000 files are judged once a round.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

from accelhost.hygiene.facts.host import HostFacts
from accelhost.hygiene.judge.attribution import Attribution
from accelhost.hygiene.judge.rules import (
    LeakVerdict,
    Orphan,
    ShmVerdict,
    find_orphans,
    judge_segment,
    judge_shm_file,
)
from accelhost.hygiene.options import HygieneOptions
from accelhost.parsers.sysvipc import ShmSegment

IN_CONTAINER = "; in a container's own /dev/shm"


@dataclass(frozen=True)
class Findings:
    """What the rules find in `facts`, each kind judged at most once, when first asked (a
    watch round that reads the host again before it reports judges only the second)."""

    facts: HostFacts
    options: HygieneOptions
    attribution: Attribution

    @cached_property
    def orphans(self) -> tuple[Orphan, ...] | None:
        """None: no process table."""
        f = self.facts
        if f.processes is None:
            return None
        return tuple(find_orphans(f.processes, f.self_pid, self.options))

    @cached_property
    def segments(self) -> tuple[tuple[ShmSegment, LeakVerdict], ...] | None:
        """Every segment with its verdict; None: the segment or the process table unread."""
        f, min_age = self.facts, self.options.shm_min_age_s
        if f.segments is None or f.processes is None:
            return None
        return tuple((s, judge_segment(s, f.alive, f.now_epoch, min_age)) for s in f.segments)

    @cached_property
    def shm(self) -> tuple[ShmVerdict, ...] | None:
        """Every file of the shm dirs, then of each container's own /dev/shm, judged; None:
        the processes' open files were not read. A container's files are judged under both
        names: the host's path and the one its holders use (`/dev/shm/x`); its holders are
        its namespace's processes, plus every process's mapped inodes."""
        facts, held = self.facts, self.facts.shm_held
        if held is None:
            return None
        naming_of, now = self.options.catalog.shm_naming, facts.now_epoch
        age = self.options.shm_min_age_s
        out = [
            judge_shm_file(f, held, now, age, naming_of(f.name))
            for files in facts.shm_files.values()
            for f in sorted(files or (), key=lambda f: f.path)
        ]
        for d in facts.containers.shm_dirs if facts.containers else ():
            if d.files is None or d.held is None:
                continue
            scan = replace(
                held,
                paths=d.held.paths | {p for p in held.paths if p.startswith(d.path + "/")},
                inodes=d.held.inodes | held.inodes,
            )
            for f in sorted(d.files, key=lambda f: f.path):
                inside = replace(f, path=f"/dev/shm/{f.name}")
                out.append(
                    judge_shm_file(f, scan, now, age, naming_of(f.name), inside, IN_CONTAINER)
                )
        return tuple(out)

    @property
    def leaks(self) -> list[tuple[ShmSegment, LeakVerdict]] | None:
        """The leaked segments (None: cannot tell)."""
        return None if self.segments is None else [(s, v) for s, v in self.segments if v.leaked]

    @property
    def shm_known(self) -> bool:
        """The holders and at least one shm dir were read: a count of 0 means none."""
        return self.shm is not None and any(f is not None for f in self.facts.shm_files.values())

    @property
    def leaked_files(self) -> list[ShmVerdict] | None:
        """The leaked /dev/shm files (None: cannot tell)."""
        return [v for v in self.shm or () if v.leaked] if self.shm_known else None


def find(
    facts: HostFacts, options: HygieneOptions, attribution: Attribution | None = None
) -> Findings:
    """`facts`, to be judged once. `attribution`: this round's, knowing what a watch
    remembers (by default one that knows only these facts)."""
    return Findings(facts, options, attribution or Attribution(facts, options.catalog))
