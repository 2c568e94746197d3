"""Start the command in its own session and process group, optionally inside a cgroup or
private IPC and /dev/shm namespaces; make the supervisor its tree's subreaper.

A plain fork and exec, not `subprocess`: waitpid(-1) would race a Popen's bookkeeping, and
the child must join the cgroup before it execs. Exec errors come back through a
close-on-exec pipe, so "command not found" is a message and 127.

The cgroup of the run's own (`--cgroup`) gives a membership no process can leave by
re-parenting. With `cgroup.kill` (v2) or the v1 freezer the final SIGKILL is atomic even
against a process that forks in a loop. v2 is preferred; v1 uses freezer, else pids. Where
neither can be written, `--cgroup` fails with one line instead of running unprotected.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from accelhost.errors import AccelhostError
from accelhost.host.live import live_host
from accelhost.kernel.libc import check, libc
from accelhost.remove.signals import signal_members

if TYPE_CHECKING:  # the mount table is read only for --cgroup: `run` alone does not pay
    from accelhost.containers.pod_volumes import Mount

V1_PREFERENCE = ("freezer", "pids")


class CgroupError(AccelhostError):
    """`--cgroup` was asked for and cannot be had here."""


def read_own_cgroups(text: str) -> dict[str, str]:
    """Controller (or "" for v2, "name=systemd" for named v1) -> our path in it."""
    rows = [line.split(":", 2) for line in text.splitlines()]
    return {name: row[2] for row in rows if len(row) == 3 for name in row[1].split(",")}


def _join(mount: Mount, path: str) -> str:
    """Our cgroup's directory under the mount (the mount may show only a subtree)."""
    rel = path
    if mount.root != "/" and (path == mount.root or path.startswith(mount.root + "/")):
        rel = path[len(mount.root) :]
    return os.path.join(mount.mount_point, rel.lstrip("/"))


@dataclass
class Cgroup:
    version: int
    path: str

    def _file(self, name: str) -> str:
        return os.path.join(self.path, name)

    def pids(self) -> list[int]:
        """Every process in the cgroup now (empty when it is gone)."""
        text = _read(self._file("cgroup.procs"))
        return sorted({int(x) for x in text.split() if x.isdigit()})

    def kill_all(self) -> None:
        """SIGKILL every member at once: cgroup.kill (v2, Linux 5.14+), else freeze, kill
        each, thaw, so that no member can fork between the listing and the kill."""
        if self.version == 2 and os.path.exists(self._file("cgroup.kill")):
            with contextlib.suppress(OSError):
                _write(self._file("cgroup.kill"), "1")
                return
        frozen = self._freeze(True)
        signal_members(self.pids(), signal.SIGKILL)
        if frozen:
            self._freeze(False)

    def _freeze(self, on: bool) -> bool:
        try:
            if self.version == 2:
                _write(self._file("cgroup.freeze"), "1" if on else "0")
            elif os.path.exists(self._file("freezer.state")):
                _write(self._file("freezer.state"), "FROZEN" if on else "THAWED")
            else:
                return False
        except OSError:
            return False
        # the v1 freezer goes FREEZING before FROZEN: wait a little, never long (v2's
        # cgroup.freeze is synchronous enough for a kill right after)
        deadline = time.monotonic() + 0.5
        while on and self.version == 1 and time.monotonic() < deadline:
            if _read(self._file("freezer.state")).strip() != "FREEZING":
                break
            time.sleep(0.01)
        return True

    def remove(self, timeout_s: float = 2.0) -> bool:
        """rmdir once the members are reaped (EBUSY until the kernel drops the last one)."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                os.rmdir(self.path)
                return True
            except FileNotFoundError:
                return True
            except OSError as exc:
                if exc.errno != errno.EBUSY or time.monotonic() >= deadline:
                    return False
            time.sleep(0.02)


def _write(path: str, value: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def join_cgroup(cgroup: Cgroup, pid: int) -> None:
    """Move `pid` (0 = the caller) into the cgroup; OSError when refused."""
    _write(os.path.join(cgroup.path, "cgroup.procs"), str(pid))


def _read(path: str) -> str:
    """A cgroup file through the one live file reader; "" when absent or unreadable."""
    return live_host().read_file(path) or ""


def _candidates(version: str, mounts: list[Mount], own: dict[str, str]) -> list[tuple[int, str]]:
    """The parents to try, v2 first: the first match of each wanted version."""
    v2 = [(2, _join(m, own[""])) for m in mounts if m.fstype == "cgroup2" and "" in own]
    v1 = [
        (1, _join(m, own[name]))
        for name in V1_PREFERENCE
        for m in mounts
        if m.fstype == "cgroup" and name in m.options and name in own
    ]
    out = v2[:1] if version in ("auto", "2") else []
    return out + (v1[:1] if version in ("auto", "1") else [])


def create_cgroup(version: str, name: str) -> Cgroup:
    """A new, empty cgroup below our own. CgroupError with the reason when none can be made."""
    from accelhost.containers.pod_volumes import parse_mountinfo

    mounts = parse_mountinfo(_read("/proc/self/mountinfo"))
    own = read_own_cgroups(_read("/proc/self/cgroup"))
    candidates = _candidates(version, mounts, own)
    if not candidates:
        wanted = {"auto": "v1 or v2", "1": "v1 (freezer or pids)", "2": "v2"}.get(version, version)
        raise CgroupError(f"--cgroup: no cgroup {wanted} hierarchy is mounted here")
    problems = []
    for ver, parent in candidates:
        # Never one that exists: it is a killed run's (same pid) or anybody's, and its
        # processes would be torn down, their memory removed and the cgroup rmdir-ed as ours.
        for n in range(100):
            path = os.path.join(parent, f"{name}.{n}" if n else name)
            try:
                os.mkdir(path)
            except FileExistsError:
                continue
            except OSError as exc:
                problems.append(f"cannot create {path}: {exc.strerror}")
                break
            return Cgroup(version=ver, path=path)
    raise CgroupError("--cgroup: " + "; ".join(problems))


PR_SET_CHILD_SUBREAPER = 36
CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
MS_NOSUID = 0x2
MS_NODEV = 0x4
MS_REC = 0x4000
MS_SLAVE = 1 << 19


def become_subreaper() -> bool:
    """Orphans of the command's tree re-parent to us instead of to PID 1, so we can reap
    them and find them again through /proc parent links. False when the kernel refused."""
    if os.getpid() == 1:
        return True  # init of a PID namespace already receives every orphan
    try:
        prctl = libc().prctl
        prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong]
        return bool(prctl(PR_SET_CHILD_SUBREAPER, 1, 0) == 0)
    except (OSError, AttributeError):
        return False


def private_ipc_setup() -> Callable[[], None]:
    """A function for the forked child (looked up before the fork): a new IPC namespace
    and a fresh tmpfs on /dev/shm, as Docker's `--ipc=private`, freed by the kernel with
    their last process. Raises OSError (EPERM without CAP_SYS_ADMIN)."""
    unshare = libc().unshare
    unshare.argtypes = [ctypes.c_int]
    mount = libc().mount
    mount.argtypes = [ctypes.c_char_p] * 3 + [ctypes.c_ulong, ctypes.c_char_p]

    def setup() -> None:
        check(unshare(CLONE_NEWIPC | CLONE_NEWNS), "unshare")
        # Mounts made from here on must not propagate back to the host's namespace.
        check(mount(None, b"/", None, MS_REC | MS_SLAVE, None), "mount --make-rslave /")
        tmpfs = mount(b"tmpfs", b"/dev/shm", b"tmpfs", MS_NOSUID | MS_NODEV, b"mode=1777")
        check(tmpfs, "mount tmpfs /dev/shm")

    return setup


@dataclass
class SpawnError(Exception):
    step: str  # "exec", "cgroup" or "private-ipc"
    errno: int
    argv0: str

    def __str__(self) -> str:
        why = os.strerror(self.errno)
        if self.step == "cgroup":
            return f"--cgroup: cannot join the cgroup: {why}"
        if self.step == "private-ipc":
            return (
                "--private-ipc: cannot make an IPC namespace and /dev/shm of the command's "
                f"own: {why}"
            )
        if self.errno == errno.ENOENT:
            return f"{self.argv0}: command not found"
        return f"{self.argv0}: cannot execute: {why}"


def _child(
    argv: Sequence[str],
    cgroup: Cgroup | None,
    reset: Sequence[int],
    err_w: int,
    private: Callable[[], None] | None,
) -> None:
    """Runs in the forked child; never returns."""
    step = "setup"
    try:
        signal.set_wakeup_fd(-1)
        for sig in reset:
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, set())
        os.setsid()
        if cgroup is not None:
            step = "cgroup"
            join_cgroup(cgroup, os.getpid())
        if private is not None:
            step = "private-ipc"
            private()
        step = "exec"
        os.execvp(argv[0], list(argv))
    except OSError as exc:
        code = exc.errno or errno.EINVAL
    except BaseException:
        code = errno.EINVAL
    try:
        os.write(err_w, f"{step}:{code}".encode())
    finally:
        os._exit(127)


def spawn(
    argv: Sequence[str], cgroup: Cgroup | None, reset: Sequence[int], private_ipc: bool = False
) -> int:
    """The command's pid (also its process group and session id). SpawnError when it did
    not start; the failed child has been reaped by then."""
    private = private_ipc_setup() if private_ipc else None
    err_r, err_w = os.pipe2(os.O_CLOEXEC)
    try:
        pid = os.fork()
    except BaseException:
        os.close(err_r)
        os.close(err_w)
        raise
    if pid == 0:  # pragma: no cover - the child execs or exits
        os.close(err_r)
        _child(argv, cgroup, reset, err_w, private)
    os.close(err_w)
    with open(err_r, "rb") as pipe:  # empty once the exec closed it
        failure = pipe.read()
    if not failure:
        return pid
    os.waitpid(pid, 0)
    step, _, code = failure.decode().partition(":")
    raise SpawnError(step, int(code or errno.EINVAL), argv[0])
