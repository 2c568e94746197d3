"""The live host: this machine, read-only."""

from __future__ import annotations

import ctypes
import os
import platform
import pwd
import shutil
import stat as stat_mod
import struct
import subprocess
import time
from collections.abc import Mapping, Sequence
from typing import Any

from accelhost.errors import HostError
from accelhost.host.base import CommandResult, FileStat, command_key
from accelhost.kernel.libc import syscall

_KINDS = {stat_mod.S_IFREG: "file", stat_mod.S_IFDIR: "dir", stat_mod.S_IFLNK: "link"}
# Tools like npu-smi answer in seconds on a busy host but can hang on a wedged driver.
DEFAULT_TIMEOUT_S = 60.0
_C_LOCALE = {"LC_ALL": "C", "LANG": "C", "LC_MESSAGES": "C"}


class LiveHost:
    """Reads this machine. Commands run with the C locale and a timeout."""

    device_type: str | None = None
    is_live = True

    def __init__(
        self, timeout: float = DEFAULT_TIMEOUT_S, env: Mapping[str, str] | None = None
    ) -> None:
        self.machine = platform.machine()
        self.timeout = timeout
        self._env = dict(os.environ if env is None else env)
        self._run_env = {**self._env, **_C_LOCALE}
        self._owners: dict[int, str] = {}  # uid -> user name, for this host's lifetime

    def _installed(self, argv: Sequence[str]) -> bool:
        """The program exists and may be run (looked up as the child would, in its PATH):
        a tool that is not installed costs no fork (a doctor on a host without npu-smi)."""
        path = self._run_env.get("PATH", os.defpath)
        return bool(argv) and shutil.which(argv[0], path=path) is not None

    def run(self, argv: Sequence[str]) -> CommandResult | None:
        if not self._installed(argv):
            return None
        try:
            proc = subprocess.run(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env=self._run_env,
                timeout=self.timeout,
                check=False,
            )
        except (FileNotFoundError, PermissionError, NotADirectoryError):
            return None
        except subprocess.TimeoutExpired:
            raise HostError(
                f"`{command_key(argv)}` did not answer within {self.timeout:g} s"
            ) from None
        return CommandResult(proc.stdout.decode("utf-8", "replace"), proc.returncode)

    def run_many(self, argvs: Sequence[Sequence[str]]) -> list[CommandResult | None]:
        # Each npu-smi call can take seconds; reading the host should cost the slowest one.
        if sum(self._installed(a) for a in argvs) <= 1:
            return [self.run(a) for a in argvs]
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=min(16, len(argvs))) as pool:
            return list(pool.map(self.run, argvs))

    def read_file(self, path: str) -> str | None:
        # Plain os calls: half the cost of a buffered file object, and a bind or a doctor
        # reads many small /proc and /sys files (the one file reader of live code).
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                chunks = list(iter(lambda: os.read(fd, 65536), b""))
            finally:
                os.close(fd)
        except OSError:
            return None
        return b"".join(chunks).decode("utf-8", "replace")

    def list_dir(self, path: str) -> list[str] | None:
        try:
            return sorted(os.listdir(path))
        except OSError:
            return None

    def read_link(self, path: str) -> str | None:
        try:
            return os.readlink(path)
        except OSError:
            return None

    def stat_dir(self, path: str) -> list[FileStat] | None:
        # scandir + lstat + statx, no external tool: busybox images list the same.
        names = self.list_dir(path)
        if names is None:
            return None
        found = (self._stat(f"{path.rstrip('/')}/{name}", name, follow=False) for name in names)
        return [f for f in found if f is not None]  # None: gone between listing and look

    def list_dir_inodes(self, path: str) -> dict[str, int] | None:
        """name -> inode number of each entry, from the directory alone (no stat per entry):
        a watch tells what changed in /proc (a reused pid's directory is a new inode) and
        in /dev/shm between rounds by it. Not part of `Host`: only a live host changes."""
        try:
            with os.scandir(path) as entries:
                return {e.name: e.inode() for e in entries}
        except OSError:
            return None

    def stat(self, path: str) -> FileStat | None:
        # What one file is asked is its identity, size and times; its birth (a statx, as
        # dear as the stat itself) only where it names who left a file: `birth_time`.
        return self._stat(path, path.rstrip("/").rsplit("/", 1)[-1], follow=True, birth=False)

    def _stat(self, path: str, name: str, *, follow: bool, birth: bool = True) -> FileStat | None:
        try:
            st = os.stat(path, follow_symlinks=follow)
        except OSError:
            return None
        owner = self._owners.get(st.st_uid)
        if owner is None:
            try:
                owner = pwd.getpwuid(st.st_uid).pw_name
            except KeyError:
                owner = str(st.st_uid)
            self._owners[st.st_uid] = owner
        return FileStat(
            name=name,
            kind=_KINDS.get(stat_mod.S_IFMT(st.st_mode), "other"),
            size=st.st_size,
            blocks=st.st_blocks,
            uid=st.st_uid,
            owner=owner,
            mtime=st.st_mtime,
            ctime=st.st_ctime,
            dev=st.st_dev,
            inode=st.st_ino,
            birth=_statx_birth(path, follow=follow) if birth else None,
        )

    def birth_time(self, path: str) -> float | None:
        """When a file was created (statx, links not followed); None where the kernel, the
        filesystem or the architecture keeps none. Not part of `Host`: a snapshot's
        listing holds the births it read (`stat_dir`)."""
        return _statx_birth(path, follow=False)

    def getenv(self, name: str) -> str | None:
        return self._env.get(name)

    def clock(self) -> float | None:
        return time.time()

    def http_get(self, socket_path: str, path: str) -> str | None:
        from accelhost.host.unixhttp import unix_http_get

        return unix_http_get(socket_path, path)

    def cri_look(self, endpoint: str) -> dict[str, Any] | None:
        # grpc and protobuf load here only, when a CRI socket is asked
        from accelhost.host.cri import cri_look

        return cri_look(endpoint)


# statx(2): Python 3.11's os.stat gives no birth time on Linux.
_AT_FDCWD = -100
_AT_SYMLINK_NOFOLLOW = 0x100
_STATX_BTIME = 0x800
_STATX_SIZE = 256  # struct statx; stx_btime {s64 sec; u32 nsec} sits at offset 80


def _statx_birth(path: str, *, follow: bool) -> float | None:
    buf = ctypes.create_string_buffer(_STATX_SIZE)
    try:
        syscall(
            "statx",
            ctypes.c_long(_AT_FDCWD),
            ctypes.c_char_p(os.fsencode(path)),
            ctypes.c_long(0 if follow else _AT_SYMLINK_NOFOLLOW),
            ctypes.c_long(_STATX_BTIME),
            buf,
        )
    except OSError:
        return None
    (mask,) = struct.unpack_from("=I", buf.raw, 0)
    if not mask & _STATX_BTIME:
        return None
    sec, nsec = struct.unpack_from("=qI", buf.raw, 80)
    return sec + nsec / 1e9 if sec > 0 else None


def live_host() -> LiveHost:
    """This machine, read-only: the one place the library makes a live host (a caller
    that holds a host already passes that one instead)."""
    return LiveHost()
