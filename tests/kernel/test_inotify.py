"""The one inotify watcher (`kernel.inotify.CreationWatch`), on real directories: it names
what is created or moved in, watches the directories it can, and says so when the
kernel's queue overflowed (more creations than max_queued_events before a read), so its
users look at the directories in full. Every directory made here is removed in `finally`.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from accelhost.kernel.inotify import CreationWatch


def _max_queued() -> int:
    return int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())


def flood(directory: Path, count: int) -> None:
    """Create `count` empty files (one IN_CREATE each; distinct names never merge)."""
    for n in range(count):
        os.close(os.open(directory / f"f{n}", os.O_CREAT | os.O_WRONLY, 0o600))


def test_names_what_is_created_or_moved_in_and_skips_what_it_cannot_watch(
    tmp_path: Path,
) -> None:
    watched = tmp_path / "watched"
    watched.mkdir()
    watch = CreationWatch.open([str(tmp_path / "missing"), f"{watched}/"])
    try:
        assert list(watch.dirs.values()) == [str(watched)]
        assert watch.read() == []
        (watched / "psm_a").write_bytes(b"x")
        (tmp_path / "outside").write_bytes(b"y")
        (tmp_path / "outside").rename(watched / "moved")
        (tmp_path / "elsewhere").write_bytes(b"z")  # not in a watched directory
        assert watch.read() == [str(watched / "psm_a"), str(watched / "moved")]
        assert watch.read() == []
    finally:
        watch.close()


def test_no_directory_to_watch_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        CreationWatch.open([str(tmp_path / "missing")])
    with pytest.raises(OSError):
        CreationWatch.open([])


def test_a_queue_overflow_says_rescan_and_the_watch_goes_on() -> None:
    limit = _max_queued()
    if limit > 200_000:
        pytest.skip(f"max_queued_events is {limit}: too many files to flood it")
    directory = Path(tempfile.mkdtemp(prefix="accelhost-test-inotify-", dir="/dev/shm"))
    watch = None
    try:
        watch = CreationWatch.open([str(directory)])
        flood(directory, limit + 16)
        assert watch.read() is None  # names were dropped: look at the directory in full
        (directory / "after").write_bytes(b"x")
        assert watch.read() == [str(directory / "after")]
    finally:
        if watch is not None:
            watch.close()
        shutil.rmtree(directory)
