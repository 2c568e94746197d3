"""The shm files a watch keeps from round to round (`rounds.IncrementalState`'s file side):
each dir's names with their inode numbers and stats, the engine-named files a holder scan
confirmed as held by nobody (stat'ed afresh every round, judged on that stat), and when the
next unheld engine file reaches --shm-min-age. Who holds them is the process side's.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from operator import attrgetter
from typing import TYPE_CHECKING

from accelhost.host.base import Host
from accelhost.hygiene.options import HygieneOptions
from accelhost.readers.shmfiles import HeldScan, ShmFile, list_shm_files, stat_shm_file

if TYPE_CHECKING:
    from accelhost.host.base import InodeLister

# name -> (inode, the file or None when it is no regular file)
Entries = dict[str, tuple[int, ShmFile | None]]


@dataclass
class ShmState:
    options: HygieneOptions
    # dir -> its entries (None: it could not be listed)
    by_dir: dict[str, Entries | None] = field(default_factory=dict)
    # engine-named files a holder scan found held by nobody, as (path, inode)
    confirmed: set[tuple[str, int]] = field(default_factory=set)
    listed: frozenset[str] = frozenset()  # the shm files' paths, as last listed

    def relist(self, host: Host, lister: InodeLister | None, restat: bool) -> None:
        """Bring the shm listing up to date: stat only what appeared or was replaced, or
        with `restat` (a full look) every file; without a `lister`, the host's listing
        with every stat and birth it holds."""
        for directory in self.options.shm_dirs:
            if lister is None:
                files = list_shm_files(host, [directory])[directory]
                self.by_dir[directory] = (
                    None if files is None else {f.name: (f.inode, f) for f in files}
                )
                continue
            names = lister.list_dir_inodes(directory)
            if names is None:
                self.by_dir[directory] = None
                continue
            old = self.by_dir.get(directory) or {}
            base = directory.rstrip("/")
            new: dict[str, tuple[int, ShmFile | None]] = {}
            for name, ino in names.items():
                seen = old.get(name)
                if seen is not None and seen[0] == ino and not restat:
                    new[name] = seen
                else:
                    new[name] = (ino, stat_shm_file(f"{base}/{name}", host))
            self.by_dir[directory] = new
        self.listed = frozenset(f.path for f in self.every())
        self.confirmed &= {(f.path, f.inode) for f in self.every()}

    def read_births(self, lister: InodeLister, held: HeldScan) -> None:
        """The birth of each file no process holds, once: only such a file's birth is ever
        asked (it names the container that left it: `Attribution.left_at`),
        and a statx is as dear as the stat itself, so the thousands held go without."""
        for entries, name, ino, f in self._entries():
            if f.birth is None and not held.holds(f):
                entries[name] = (ino, replace(f, birth=lister.birth_time(f.path)))

    def every(self) -> list[ShmFile]:
        return [f for d in self.by_dir.values() for _, f in (d or {}).values() if f is not None]

    def _entries(self) -> list[tuple[Entries, str, int, ShmFile]]:
        """(its dir's entries, name, listed inode, file) of every file, to update in place."""
        return [
            (d, name, ino, f)
            for d in self.by_dir.values()
            if d
            for name, (ino, f) in d.items()
            if f is not None
        ]

    def maps_tokens(self) -> tuple[str, ...]:
        """What a maps line of a shm file contains: its tmpfs's device or its dir's path."""
        devs = {f.dev for f in self.every()}
        tokens = [f" {os.major(d):02x}:{os.minor(d):02x} " for d in sorted(devs)]
        tokens += [d.rstrip("/") + "/" for d in self.options.shm_dirs]
        return tuple(tokens)

    def restat_confirmed(self, host: Host) -> None:
        """Stat afresh each file a holder scan confirmed as held by nobody (it is judged on
        this stat); one written since is confirmed again by a scan once old enough again."""
        if not self.confirmed:
            return
        for entries, name, ino, f in self._entries():
            if (f.path, f.inode) in self.confirmed:
                fresh = _restat(host, entries, name, ino, f)
                if fresh is None or (fresh.inode, fresh.mtime) != (f.inode, f.mtime):
                    self.confirmed.discard((f.path, f.inode))

    def candidates(self, host: Host, now_epoch: float, held: HeldScan) -> bool:
        """Whether some engine-named file, held by nobody we know of and old enough by its
        last stat, was not yet confirmed by a holder scan (stat'ed afresh first)."""
        naming_of = self.options.catalog.shm_naming
        min_age = self.options.shm_min_age_s
        found = False
        for entries, name, ino, f in self._entries():
            if (f.path, f.inode) in self.confirmed or held.holds(f):
                continue
            age = f.age_s(now_epoch)
            if age is None or age < min_age or naming_of(name) is None:
                continue
            fresh = _restat(host, entries, name, ino, f)
            if fresh is not None and (fresh.age_s(now_epoch) or 0.0) >= min_age:
                found = True
        return found

    def _unheld_named(self, held: HeldScan) -> list[ShmFile]:
        naming_of = self.options.catalog.shm_naming
        return [f for f in self.every() if not held.holds(f) and naming_of(f.name) is not None]

    def confirm(self, now_epoch: float, held: HeldScan) -> None:
        """Remember the engine-named files held by nobody and old enough: only those can
        be removed."""
        min_age = self.options.shm_min_age_s
        old = [f for f in self._unheld_named(held) if (f.age_s(now_epoch) or 0.0) >= min_age]
        self.confirmed = {(f.path, f.inode) for f in old}

    def due(self, now_epoch: float, held: HeldScan) -> float | None:
        """Seconds until the next engine-named file, held by nobody we know of, reaches
        --shm-min-age (it is judged then, not at the next round); None when none will."""
        min_age = self.options.shm_min_age_s
        ages = [f.age_s(now_epoch) for f in self._unheld_named(held)]
        waits = [min_age - age for age in ages if age is not None and age < min_age]
        return max(0.0, min(waits)) if waits else None

    def snapshot(self) -> dict[str, tuple[ShmFile, ...] | None]:
        """dir -> its files by path (None: it could not be listed)."""
        return {
            d: None
            if e is None
            else tuple(sorted((f for _, f in e.values() if f), key=attrgetter("path")))
            for d, e in self.by_dir.items()
        }


def _restat(host: Host, entries: Entries, name: str, ino: int, f: ShmFile) -> ShmFile | None:
    """`f` stat'ed afresh, its listing entry brought up to date (dropped when it is gone;
    kept under its listed inode, so the next listing compares with what it listed)."""
    fresh = stat_shm_file(f.path, host)
    if fresh is not None and fresh.inode == f.inode:
        fresh = replace(fresh, birth=f.birth)  # the same file: born when it was
    if fresh is None:
        del entries[name]
    else:
        entries[name] = (ino, fresh)
    return fresh
