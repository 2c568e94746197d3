"""What a caller already knows of a host's processes, handed to `read_facts` instead of
reading /proc again: a watch's incremental state (`accelhost.hygiene.incremental`) keeps it
from round to round. Its own module: `facts` and `incremental` both name it."""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass, field

from accelhost.containers.cgroup import CgroupContainer
from accelhost.readers.procs import ProcessInfo
from accelhost.readers.shmfiles import HeldScan, ShmFile


@dataclass(frozen=True)
class KnownProcesses:
    """The process-side facts an incremental round hands to `read_facts`."""

    processes: Mapping[int, ProcessInfo]
    device_fds: Mapping[int, tuple[str, ...]]
    hidden: frozenset[int]
    shm_files: Mapping[str, tuple[ShmFile, ...] | None]
    held: HeldScan
    # (pid, start ticks) -> its container by its cgroup: a process stays in its container,
    # so a watch reads each one's /proc/PID/cgroup once (again in each full look)
    cgroups: MutableMapping[tuple[int, int], CgroupContainer | None] = field(default_factory=dict)
