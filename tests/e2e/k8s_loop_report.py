"""The crash loop's figures (tests/e2e/test_k8s_crash_loop.py): one row per crash, the
emptyDir's files and bytes after it and at the next start, printed as a table at the end
of the run and kept under the run's e2e folder."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hostcli import say_at_end

MIB = 2**20
WATCH = "accelhost_watch_"  # the DaemonSet's own figures kept: rounds, their cost


@dataclass(frozen=True)
class Figures:
    """What a tmpfs folder holds: its files, their apparent size (st_size), the memory
    their pages take (st_blocks * 512) and the file system's own count (statvfs)."""

    files: int
    apparent: int
    used: int
    fs_used: int


def figures(folder: Path) -> Figures:
    apparent = used = files = 0
    for entry in os.scandir(folder):
        st = entry.stat(follow_symlinks=False)
        files, apparent, used = files + 1, apparent + st.st_size, used + st.st_blocks * 512
    vfs = os.statvfs(folder)
    return Figures(files, apparent, used, (vfs.f_blocks - vfs.f_bfree) * vfs.f_frsize)


@dataclass
class Row:
    """One crash of the loop."""

    phase: str  # "without" or "with" the DaemonSet
    attempt: int
    start_to_files_s: float  # StartContainer until its psm_* and sem.mp-* exist
    own: set[str] = field(default_factory=set)  # the files it made
    at_kill: set[str] = field(default_factory=set)  # the emptyDir just before the kill
    held_rounds: int = 0  # the watch's rounds its files stayed through, while it ran
    exit_code: int | None = None
    after_crash: Figures | None = None  # once the container is EXITED
    removed_after_s: float | None = None  # kill until its files were gone (the watch)
    at_restart: Figures | None = None  # when the back-off ends
    left_at_restart: set[str] = field(default_factory=set)


def table(rows: list[Row]) -> str:
    head = [
        "| DaemonSet | attempt | start to its files (s) | after the crash: files | apparent MiB "
        "| in use KiB (blocks) | tmpfs in use KiB (statvfs) | files gone after the kill (s) "
        "| at the next start: files | tmpfs in use KiB |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    lines = []
    for r in rows:
        a, b = r.after_crash, r.at_restart
        if a is None or b is None:
            continue
        gone = "-" if r.removed_after_s is None else f"{r.removed_after_s:.1f}"
        lines.append(
            f"| {r.phase} | {r.attempt} | {r.start_to_files_s:.0f} | {a.files} "
            f"| {a.apparent / MIB:.0f} | {a.used // 1024} | {a.fs_used // 1024} | {gone} "
            f"| {b.files} | {b.fs_used // 1024} |"
        )
    return "\n".join(head + lines)


def report(request: pytest.FixtureRequest, e2e_dir: Path, rec: dict[str, Any]) -> None:
    """The table and the timings: kept under e2e_dir and printed (also on failure)."""
    rows: list[Row] = rec.get("rows", [])
    text = table(rows)
    timings = "\n".join(f"  {k}: {v:.1f} s" for k, v in rec.get("timings", {}).items())
    (e2e_dir / "k8s-crash-loop.md").write_text(text + "\n")
    body = {
        "rows": [
            {**asdict(r), "own": sorted(r.own), "at_kill": sorted(r.at_kill),
             "left_at_restart": sorted(r.left_at_restart)}
            for r in rows
        ],
        "timings": rec.get("timings", {}),
        "watch": {k: v for k, v in rec.get("metrics", {}).items() if k.startswith(WATCH)},
        "confinement": rec.get("confinement"),
    }  # fmt: skip
    (e2e_dir / "k8s-crash-loop.json").write_text(json.dumps(body, indent=1))
    watch = body["watch"]
    cost = "".join(f"\n  {k}: {v:g}" for k, v in watch.items() if "fallback" not in k)
    out = f"\n== the pod's crash loop, as this run saw it\n{text}\n{timings}{cost}"
    say_at_end(request, out)
