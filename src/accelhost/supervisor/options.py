"""What the supervisor is asked to do, and what it reports back."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from accelhost.remove import DEFAULT_GRACE_S

if TYPE_CHECKING:
    from accelhost.plans import Plan


def _stderr(line: str) -> None:
    # A closed or broken stderr must not stop a teardown half way.
    with contextlib.suppress(OSError, ValueError):
        print(f"accelhost run: {line}", file=sys.stderr, flush=True)


@dataclass
class BindRequest:
    """`--bind DEVICE`: apply the CPU plan to the engine once it holds the device."""

    device: int
    plan: Plan | None = None  # made before the start, so a bad host is refused up front
    # Bind after this many seconds even when no process has opened the device (yet).
    delay_s: float | None = None


@dataclass
class SupervisorOptions:
    argv: Sequence[str]
    grace_s: float = DEFAULT_GRACE_S
    # A process not dead this long after SIGKILL sits in a driver (D state): only a reset frees it.
    kill_wait_s: float = 5.0
    fail_on_exit: Sequence[str] = ()
    cgroup: str | None = None  # None, "auto", "1" or "2"
    clean_shm: bool = True  # remove the SysV segments and /dev/shm files the tree left
    shm_dirs: Sequence[str] = ("/dev/shm",)
    # Run the tree in an IPC namespace and a /dev/shm of its own, freed by the kernel with it.
    private_ipc: bool = False
    track_forks: bool = True  # follow every fork through the kernel's process events
    scan_interval_s: float = 5.0
    bind: BindRequest | None = None
    log: Callable[[str], None] = field(default=_stderr)  # progress; --quiet silences it
    warn: Callable[[str], None] = field(default=_stderr)  # problems; always shown


@dataclass
class RemovedSegment:
    shmid: int
    key_hex: str
    size: int
    cpid: int


@dataclass
class RemovedFile:
    path: str
    used_bytes: int


@dataclass
class RunOutcome:
    """How the run ended; `status` is what `accelhost run` exits with."""

    status: int
    # "exited" (the command ended by itself), "signal" (the supervisor was told to stop),
    # "engine-died" (--fail-on-exit) or "not-started".
    reason: str
    cmd_pid: int | None = None
    terminated: list[int] = field(default_factory=list)  # pids sent SIGTERM in teardown
    killed: list[int] = field(default_factory=list)  # pids that needed SIGKILL
    survivors: list[int] = field(default_factory=list)  # pids that outlived even SIGKILL
    removed_segments: list[RemovedSegment] = field(default_factory=list)
    removed_files: list[RemovedFile] = field(default_factory=list)  # under /dev/shm
