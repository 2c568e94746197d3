"""The files of a tmpfs directory (/dev/shm and the like), live or recorded.

A live directory is read with os calls (`os.scandir`, `lstat`, `statx` for birth times),
so it works everywhere, busybox images included (their `find` has no -printf, their
`stat` no %W). A snapshot records the listing in the form older releases wrote with
`find -printf FIND_FORMAT` and `stat -c %W`, and replays either. `accelhost.posixshm`
judges the files; this module only lists them.
"""

from __future__ import annotations

import ctypes
import os
import pwd
import stat as stat_mod
import struct
from collections.abc import Sequence
from dataclasses import dataclass, replace

from accelhost.host.base import CommandResult, Host
from accelhost.host.libc import syscall
from accelhost.host.record import RecordingHost

# How a snapshot records a directory (the live host reads it with os calls, not find):
# one line per entry, NUL-terminated (names may hold anything but "/" and NUL):
# type, apparent size, 512-byte blocks, uid, user, mtime, ctime, st_dev, inode, name.
FIND_FORMAT = r"%y %s %b %U %u %T@ %C@ %D %i %P\0"


@dataclass(frozen=True)
class ShmFile:
    path: str
    size_bytes: int  # apparent size (st_size), often sparse
    used_bytes: int  # st_blocks * 512: what the file really takes from the tmpfs
    uid: int
    owner: str
    mtime: float
    ctime: float
    dev: int = 0
    inode: int = 0
    birth: float | None = None  # creation time (statx), None where the kernel keeps none

    @property
    def name(self) -> str:
        return self.path.rsplit("/", 1)[-1]

    def age_s(self, now_epoch: float | None) -> float | None:
        if now_epoch is None:
            return None
        return max(0.0, now_epoch - self.mtime)


def parse_find_listing(text: str, directory: str) -> list[ShmFile]:
    """The regular files of a `find DIR -printf FIND_FORMAT` listing (pure)."""
    out = []
    for entry in text.split("\0"):
        parts = entry.lstrip("\n").split(" ", 9)
        if len(parts) != 10 or parts[0] != "f":
            continue
        _kind, size, blocks, uid, owner, mtime, ctime, dev, inode, name = parts
        try:
            out.append(
                ShmFile(
                    path=f"{directory.rstrip('/')}/{name}",
                    size_bytes=int(size),
                    used_bytes=int(blocks) * 512,
                    uid=int(uid),
                    owner=owner,
                    mtime=float(mtime),
                    ctime=float(ctime),
                    dev=int(dev),
                    inode=int(inode),
                )
            )
        except ValueError:
            continue
    return out


def find_argv(directory: str) -> list[str]:
    return ["find", directory, "-mindepth", "1", "-maxdepth", "1", "-printf", FIND_FORMAT]


def birth_argv(paths: Sequence[str]) -> list[str]:
    """How a snapshot records birth times (as coreutils' `stat` prints them)."""
    return ["stat", "-c", "%.9W %n", "--", *paths]


def parse_birth_times(text: str) -> dict[str, float]:
    """path -> birth time from `stat -c '%.9W %n'`; 0 or `-` (not kept) is left out."""
    out = {}
    for line in text.splitlines():
        born, sep, path = line.partition(" ")
        try:
            when = float(born)
        except ValueError:
            continue
        if sep and when > 0:
            out[path] = when
    return out


def read_shm_dir(directory: str) -> list[ShmFile] | None:
    """The regular files at the top of a live directory (like shm_open's names), read with
    os calls so that it works everywhere (busybox `find` has no -printf); None when the
    directory cannot be listed."""
    try:
        with os.scandir(directory) as entries:
            names = sorted(e.name for e in entries)
    except OSError:
        return None
    base = directory.rstrip("/")
    return [f for name in names if (f := stat_shm_file(f"{base}/{name}")) is not None]


def render_listing(files: Sequence[ShmFile]) -> str:
    """`files` as `find DIR -printf FIND_FORMAT` prints them: how snapshots record them."""
    return "".join(
        f"f {f.size_bytes} {f.used_bytes // 512} {f.uid} {f.owner} {f.mtime!r} {f.ctime!r} "
        f"{f.dev} {f.inode} {f.name}\0"
        for f in files
    )


def _recorder_of(host: Host) -> RecordingHost | None:
    """The recording host under `host`'s wrappers (`read_once`, counters), if any."""
    seen: object | None = host
    while seen is not None and not isinstance(seen, RecordingHost):
        seen = getattr(seen, "inner", None)
    return seen


def _replay_listing(host: Host, directory: str) -> list[ShmFile] | None:
    """A recorded directory (`find -printf` and `stat -c %W`, older releases too)."""
    result = host.run(find_argv(directory))
    if result is None or not result.ok:
        return None
    files = parse_find_listing(result.stdout, directory)
    if not files:
        return files
    born = host.run(birth_argv([f.path for f in files]))
    births = parse_birth_times(born.stdout) if born is not None else {}
    return [replace(f, birth=births.get(f.path)) for f in files]


def _read_listing(host: Host, directory: str) -> list[ShmFile] | None:
    """One directory: a live one read with os calls (and handed to a recording host in
    the recorded form), a recorded one replayed."""
    if not host.is_live:
        return _replay_listing(host, directory)
    files = read_shm_dir(directory)
    recorder = _recorder_of(host)
    if files is not None and recorder is not None:
        recorder.keep(find_argv(directory), CommandResult(render_listing(files)))
        if files:
            births = "".join(f"{f.birth:.9f} {f.path}\n" for f in files if f.birth is not None)
            recorder.keep(birth_argv([f.path for f in files]), CommandResult(births))
    return files


def list_shm_files(host: Host, dirs: Sequence[str]) -> dict[str, list[ShmFile] | None]:
    """dir -> its regular files (top level, like shm_open's names); None when unreadable."""
    return {directory: _read_listing(host, directory) for directory in dirs}


def stat_shm_file(path: str) -> ShmFile | None:
    """A fresh look at one live file (the cleaner's re-check); None when it is gone."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if not stat_mod.S_ISREG(st.st_mode):
        return None
    try:
        owner = pwd.getpwuid(st.st_uid).pw_name
    except KeyError:
        owner = str(st.st_uid)
    return ShmFile(
        path=path,
        size_bytes=st.st_size,
        used_bytes=st.st_blocks * 512,
        uid=st.st_uid,
        owner=owner,
        mtime=st.st_mtime,
        ctime=st.st_ctime,
        dev=st.st_dev,
        inode=st.st_ino,
        birth=birth_time(path),
    )


# statx(2): Python 3.11's os.stat gives no birth time on Linux.
_AT_FDCWD = -100
_AT_SYMLINK_NOFOLLOW = 0x100
_STATX_BTIME = 0x800
_STATX_SIZE = 256  # struct statx; stx_btime {s64 sec; u32 nsec} sits at offset 80


def birth_time(path: str) -> float | None:
    """When a file was created (statx), without coreutils' `stat` (busybox has no %W);
    None where the kernel, the filesystem or the architecture keeps none."""
    buf = ctypes.create_string_buffer(_STATX_SIZE)
    try:
        syscall(
            "statx",
            ctypes.c_long(_AT_FDCWD),
            ctypes.c_char_p(os.fsencode(path)),
            ctypes.c_long(_AT_SYMLINK_NOFOLLOW),
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
