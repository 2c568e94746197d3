"""The small interface shared by live, snapshot and recording hosts."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class CommandResult:
    """What a command printed on standard output (with `LC_ALL=C`) and its exit status."""

    stdout: str
    rc: int = 0

    @property
    def ok(self) -> bool:
        return self.rc == 0


@dataclass(frozen=True)
class FileStat:
    """One file as the kernel states it. `kind`: "file", "dir", "link" or "other";
    `blocks`: 512-byte units (what a sparse file really takes from a tmpfs); `birth`:
    statx's creation time, None where the kernel or filesystem keeps none."""

    name: str
    kind: str
    size: int
    blocks: int
    uid: int
    owner: str
    mtime: float
    ctime: float
    dev: int
    inode: int
    birth: float | None = None


def command_key(argv: Sequence[str]) -> str:
    """The snapshot key of a command: its argv joined with single spaces."""
    return " ".join(argv)


def http_key(socket_path: str, path: str) -> str:
    """The snapshot key of an HTTP GET on a unix socket: the socket, a space, the path."""
    return f"{socket_path} {path}"


@runtime_checkable
class Host(Protocol):
    """One machine, live or recorded. Absent things (a command not installed, a missing
    file, an unset variable) are `None`, never exceptions."""

    machine: str
    device_type: str | None  # an explicit accelerator family recorded with it (snapshots)
    is_live: bool

    def run(self, argv: Sequence[str]) -> CommandResult | None: ...

    def run_many(self, argvs: Sequence[Sequence[str]]) -> list[CommandResult | None]:
        """Run independent commands; a live host runs them concurrently."""

    def read_file(self, path: str) -> str | None: ...

    def list_dir(self, path: str) -> list[str] | None:
        """Sorted entry names."""

    def read_link(self, path: str) -> str | None: ...

    def stat_dir(self, path: str) -> list[FileStat] | None:
        """Every entry as it is (links not followed), sorted by name."""

    def stat(self, path: str) -> FileStat | None:
        """Links followed, so /proc/PID/fd/N is the open file itself."""

    def getenv(self, name: str) -> str | None: ...

    def clock(self) -> float | None:
        """The wall clock, as the host's processes and its container runtime stamp time
        (epoch seconds, to the microsecond); None for a recording that kept none. The
        kernel's boot time plus uptime is up to a second off it (whole-second boot time)."""

    def http_get(self, socket_path: str, path: str) -> str | None:
        """A container runtime's API; None unless `200` comes within a second."""

    def cri_look(self, endpoint: str) -> dict[str, Any] | None:
        """What the CRI runtime on `endpoint` (a socket path or `unix://` endpoint) says of
        its pod sandboxes and containers, as plain JSON-able data (`accelhost.host.cri`),
        or `{"error": why}` when it cannot be asked (silent for a second, not the CRI);
        None where no such socket exists."""


def recorded_pci(host: Host) -> tuple[str, ...] | None:
    """The `--pci` addresses a snapshot was recorded with, None for any other host (not
    part of `Host`: only a recording has them)."""
    found: tuple[str, ...] | None = getattr(host, "recorded_pci", None)
    return found


class HostWrapper:
    """Base of the hosts that answer through another one: it keeps what the host *is*;
    subclasses define what happens to the questions."""

    def __init__(self, inner: Host) -> None:
        self.inner = inner
        self.machine = inner.machine
        self.device_type = inner.device_type
        self.is_live = inner.is_live
        self.recorded_pci = recorded_pci(inner)

    def clock(self) -> float | None:
        return self.inner.clock()


@runtime_checkable
class InodeLister(Protocol):
    """A live host that lists a directory's names with their inode numbers, and tells a
    file's birth apart from its stat (`accelhost.host.live.LiveHost`): a watch
    reads only what changed by it; other hosts are read in full."""

    def list_dir_inodes(self, path: str) -> dict[str, int] | None: ...

    def birth_time(self, path: str) -> float | None: ...
