"""What the tree may leave behind besides processes (`segments`, `shmfiles`), fed the
pids the supervisor sees and made exact by process events (`forks`). With
`--private-ipc` there is nothing to attribute: the kernel frees the tree's namespaces.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from accelhost.host.base import Host
from accelhost.kernel.inotify import CreationWatch
from accelhost.readers.procs import list_pids
from accelhost.supervisor.forks import ForkTracker
from accelhost.supervisor.options import RunOutcome, SupervisorOptions
from accelhost.supervisor.segments import SegmentLedger, remove_leaked
from accelhost.supervisor.shmfiles import ShmFileLedger, remove_left_files


@dataclass
class Leftovers:
    host: Host
    segments: SegmentLedger | None = None
    files: ShmFileLedger | None = None
    tracker: ForkTracker | None = None
    creations: CreationWatch | None = None
    # the live tree's pids by a /proc scan, where there are no process events
    scan: Callable[[], Iterable[int]] | None = None

    @classmethod
    def start(
        cls,
        host: Host,
        root: int,
        opts: SupervisorOptions,
        scan: Callable[[], Iterable[int]] | None = None,
    ) -> Leftovers:
        """Record what exists before the command starts (call before spawning it)."""
        if not opts.clean_shm or opts.private_ipc:
            return cls(host)
        tracker = ForkTracker.open(root, list_pids(host)) if opts.track_forks else None
        if opts.track_forks and tracker is None:
            opts.log(
                "no process events here (they need root in the host's PID namespace): a "
                "segment of a process that exits unseen cannot be attributed; "
                "--private-ipc frees them all"
            )
        files = ShmFileLedger.start(host, opts.shm_dirs) if opts.shm_dirs else None
        left = cls(host, SegmentLedger.start(host), files, tracker, None, scan)
        if files is not None:
            with contextlib.suppress(OSError):  # no inotify: only the teardown's look counts
                left.creations = CreationWatch.open(opts.shm_dirs)
        return left

    def sources(self) -> list[tuple[int, Callable[[], None]]]:
        out: list[tuple[int, Callable[[], None]]] = []
        if self.tracker is not None:
            out.append((self.tracker.fileno(), self.drain))
        if self.creations is not None:
            out.append((self.creations.fileno(), self._created))
        return out

    def drain(self) -> None:
        if self.tracker is not None:
            self.tracker.drain()

    def _created(self) -> None:
        """Files appeared in /dev/shm: see which of them the tree holds while it does."""
        if self.creations is None or self.files is None:
            return
        paths = self.creations.read()  # None: the queue overflowed, some names are unknown
        if paths is not None and not self.files.unknown(paths):
            return  # gone already (a semaphore's name), or known
        if self.tracker is not None and not self.tracker.lost:
            self.drain()
            self.observe(self.tracker.live - self.tracker.ambiguous)
        elif self.scan is not None:
            self.observe(self.scan())

    def note(self, pids: Iterable[int]) -> None:
        if self.segments is not None:
            self.segments.note(pids)

    def observe(self, pids: Iterable[int]) -> None:
        """The live tree as the teardown begins: which /dev/shm files it holds."""
        if self.files is not None:
            self.files.observe(self.host, pids)

    def finish(self, outcome: RunOutcome, log: Callable[[str], None]) -> None:
        """After the teardown: remove what is provably the tree's and nobody uses."""
        self.drain()
        if self.segments is not None and self.tracker is not None:
            if self.tracker.lost:
                # A lost exit and fork could hide a reused pid: trust only what was seen.
                log(
                    "process events were lost (a fork storm, or a fork that raced the "
                    "kernel's event filter): only segments of processes seen in the tree "
                    "are removed"
                )
            else:
                self.segments.absorb(self.tracker.members, self.tracker.ambiguous)
        if self.segments is not None:
            outcome.removed_segments = remove_leaked(self.host, self.segments, log)
        if self.files is not None:
            outcome.removed_files = remove_left_files(self.host, self.files, log)

    def close(self) -> None:
        if self.tracker is not None:
            self.tracker.close()
            self.tracker = None
        if self.creations is not None:
            self.creations.close()
            self.creations = None
