"""The small interface shared by live, snapshot and recording hosts."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable


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
    """What the kernel says of one file: the facts /dev/shm hygiene and fd identity need.

    `kind` is "file", "dir", "link" or "other"; `blocks` counts 512-byte units (what the
    file really takes from a tmpfs, where `size` is often sparse); `birth` is the creation
    time (statx), None where the kernel, filesystem or architecture keeps none.
    """

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
    """One machine, live or recorded. Every reader above this door sees only these calls.

    Absent things are `None`, never exceptions: a command that is not installed, a file or
    directory that does not exist, an unset variable.
    """

    @property
    def machine(self) -> str:
        """What `platform.machine()` says (`aarch64`, `x86_64`, ...)."""
        ...

    @property
    def device_type(self) -> str | None:
        """An explicit accelerator family recorded with the host (snapshots), else None."""
        ...

    @property
    def is_live(self) -> bool:
        """True for this machine; False for a recording being replayed."""
        ...

    def run(self, argv: Sequence[str]) -> CommandResult | None:
        """Run a command; None when it is not installed."""
        ...

    def run_many(self, argvs: Sequence[Sequence[str]]) -> list[CommandResult | None]:
        """Run independent commands; a live host runs them concurrently."""
        ...

    def read_file(self, path: str) -> str | None:
        """Whole text of a file; None when it does not exist or cannot be read."""
        ...

    def list_dir(self, path: str) -> list[str] | None:
        """Sorted entry names of a directory; None when it does not exist."""
        ...

    def read_link(self, path: str) -> str | None:
        """Target of a symbolic link (e.g. /proc/PID/fd/N); None when absent."""
        ...

    def stat_dir(self, path: str) -> list[FileStat] | None:
        """Every entry of a directory as it is (links not followed), sorted by name; None
        when the directory cannot be listed. /dev/shm is read this way, so the doctor asks
        the kernel, not a tool busybox images lack."""
        ...

    def stat(self, path: str) -> FileStat | None:
        """The file a path names, links followed (so /proc/PID/fd/N is the open file
        itself); None when it does not exist or cannot be looked at."""
        ...

    def getenv(self, name: str) -> str | None:
        """An environment variable of the host's process; None when unset."""
        ...

    def http_get(self, socket_path: str, path: str) -> str | None:
        """The body of an HTTP GET on a unix socket (a container runtime's API); None when
        nothing answers `200` within a second (absent, slow, garbled)."""
        ...


class HostWrapper:
    """Base of the hosts that answer through another one (read-once, recording, counting).

    It forwards what the host *is* (machine, family, live or not); subclasses decide what
    happens to the questions (`run`, `read_file`, ...), which they define themselves.
    """

    def __init__(self, inner: Host) -> None:
        self.inner = inner

    @property
    def machine(self) -> str:
        return self.inner.machine

    @property
    def device_type(self) -> str | None:
        return self.inner.device_type

    @property
    def is_live(self) -> bool:
        return self.inner.is_live
