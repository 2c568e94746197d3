"""Files in the containers' own /dev/shm, listed to be judged like the host's (by
`posix_check`). Their holders name them by their own path (`/dev/shm/x`), not the host's
(`/proc/<pid>/root/dev/shm/x`), so each file is judged under both names.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from accelhost.hygiene.facts import HostFacts
from accelhost.readers.shmfiles import HeldScan, ShmFile

NOTE = "; in a container's own /dev/shm"


@dataclass(frozen=True)
class ShmListing:
    """Files to judge together: each as the host reaches it and as its holders name it,
    and what those holders hold."""

    files: tuple[tuple[ShmFile, ShmFile], ...]  # (host's path, holders' path)
    held: HeldScan
    note: str = ""


def container_listings(facts: HostFacts) -> list[ShmListing]:
    """One listing per container /dev/shm: held is what its processes hold, plus every
    process's mapped inodes and whatever names a file by the host's path."""
    cf = facts.containers
    everyone = facts.shm_held
    if cf is None or everyone is None:
        return []
    out = []
    for d in cf.shm_dirs:
        if d.files is None or d.held is None:
            continue
        held = HeldScan(
            paths=d.held.paths | {p for p in everyone.paths if p.startswith(d.path + "/")},
            inodes=d.held.inodes | everyone.inodes,
            unreadable=everyone.unreadable,
            privileged=everyone.privileged,
        )
        pairs = tuple((f, replace(f, path=f"/dev/shm/{f.name}")) for f in d.files)
        out.append(ShmListing(pairs, held, NOTE))
    return out
