"""POSIX shared memory end to end: doctor reports, clean removes one by one, journaled."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hygiene_lab import run_cli, stop_popen

from accelhost.host.live import LiveHost
from accelhost.hygiene.clean.cleaner import RemoveShmFile, execute, plan_clean
from accelhost.hygiene.clean.journal import Journal
from accelhost.hygiene.facts.host import read_facts
from accelhost.hygiene.options import HygieneOptions

SHM = Path("/dev/shm")
MAPPER = r"""
import mmap, os, sys, time
fd = os.open(sys.argv[1], os.O_RDWR)
m = mmap.mmap(fd, 4096)
os.close(fd)
print("ready", flush=True)
time.sleep(1000)
"""
RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|\+00:00)$")


@pytest.fixture
def files() -> Iterator[dict[str, Path]]:
    """Four files on the /dev/shm tmpfs, in two directories of our own (passed with
    --shm-dir): the held one apart from the others, because a file born with a held one is
    that holder's; other software's files on the shared /dev/shm cannot interfere either."""
    if os.geteuid() != 0 or not SHM.is_dir():
        pytest.skip("needs root and /dev/shm")
    tag = uuid.uuid4().hex[:8]
    a, b = (Path(tempfile.mkdtemp(prefix="accelhost-test-", dir=SHM)) for _ in range(2))
    made = {
        "leaked": a / f"psm_accelhost{tag}a",
        "held": b / f"psm_accelhost{tag}b",
        "unnamed": a / f"accelhost-test-{tag}",
        "young": a / f"sem.mp-accelhost{tag}",
    }
    try:
        for name, path in made.items():
            with open(path, "wb") as fh:
                fh.truncate(64 * 1024 * 1024)  # sparse: 64 MiB apparent
                fh.write(b"x" * 8192)
            if name != "young":
                past = time.time() - 3600
                os.utime(path, (past, past))
        yield made
    finally:
        for d in (a, b):
            shutil.rmtree(d, ignore_errors=True)


def _dirs(files: dict[str, Path]) -> list[str]:
    out: list[str] = []
    for d in sorted({str(p.parent) for p in files.values()}):
        out += ["--shm-dir", d]
    return out


@pytest.fixture
def mapper() -> Iterator[list[subprocess.Popen[str]]]:
    procs: list[subprocess.Popen[str]] = []
    try:
        yield procs
    finally:
        for p in procs:
            stop_popen(p)


def _map(procs: list[subprocess.Popen[str]], path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", MAPPER, str(path)], stdout=subprocess.PIPE, text=True
    )
    procs.append(proc)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"


def test_doctor_and_clean_remove_only_the_leaked_file(
    files: dict[str, Path], mapper: list[subprocess.Popen[str]], tmp_path: Path
) -> None:
    _map(mapper, files["held"])
    doctor = run_cli(
        "doctor", "--json", "--check", "posix_shm", "--shm-min-age", "600", *_dirs(files)
    )
    assert doctor.returncode in (0, 2), doctor.stderr
    (check,) = json.loads(doctor.stdout)["checks"]
    by = {e["path"]: e for e in check["evidence"]}
    leaked = by[str(files["leaked"])]
    assert check["status"] == "WARN"
    assert leaked["naming"] == "vLLM" and leaked["owner"] == "root" and leaked["uid"] == 0
    assert leaked["size_bytes"] == 64 * 1024 * 1024
    assert 8192 <= leaked["used_bytes"] < 1024 * 1024  # blocks, not the apparent size
    assert leaked["age_s"] >= 3500
    assert str(files["held"]) not in by  # held: never leaked, whatever its age
    assert str(files["young"]) not in by  # under --shm-min-age
    assert by[str(files["unnamed"])]["naming"] is None  # listed, never removed

    journal = tmp_path / "j.jsonl"
    scope = [a for p in files.values() for a in ("--path", str(p))]
    common = ["--shm-min-age", "600", "--journal", str(journal), *scope, *_dirs(files)]
    dry = run_cli("clean", "--json", *common)
    assert dry.returncode == 1, dry.stderr  # named files that are not leaked: said, exit 1
    kept = {u["target"]: u["reason"] for u in json.loads(dry.stdout)["not_acted_on"]}
    assert kept[str(files["held"])].startswith("not leaked: held open or mapped")
    assert "matches no engine naming" in kept[str(files["unnamed"])]
    assert "under 600 s" in kept[str(files["young"])]
    actions = json.loads(dry.stdout)["actions"]
    assert [(a["kind"], a["path"]) for a in actions] == [("remove_shm_file", str(files["leaked"]))]
    # the same fact, the same key, in doctor and clean
    for key in ("path", "used_bytes", "size_bytes", "owner", "uid", "naming"):
        assert actions[0][key] == leaked[key], key
    assert all(p.exists() for p in files.values()) and not journal.exists()

    res = run_cli("clean", "--yes", *common)
    assert res.returncode == 1, res.stdout + res.stderr
    assert not files["leaked"].exists()
    assert files["held"].exists() and files["unnamed"].exists() and files["young"].exists()
    records = [json.loads(line) for line in journal.read_text().splitlines()]
    assert [(r["event"], r["action"], r["path"]) for r in records] == [
        ("intent", "remove_shm_file", str(files["leaked"])),
        ("outcome", "remove_shm_file", str(files["leaked"])),
    ]
    assert records[1]["result"] == "removed"
    assert all(RFC3339.match(r["ts"]) for r in records), records[0]["ts"]


def test_a_file_held_after_planning_is_kept_at_removal(
    files: dict[str, Path], mapper: list[subprocess.Popen[str]], tmp_path: Path
) -> None:
    opts = HygieneOptions(
        shm_min_age_s=600, shm_dirs=tuple(sorted({str(p.parent) for p in files.values()}))
    )
    plan = [
        a
        for a in plan_clean(read_facts(LiveHost(), opts), opts)
        if isinstance(a, RemoveShmFile) and a.path == str(files["leaked"])
    ]
    assert len(plan) == 1
    _map(mapper, files["leaked"])  # someone maps it between the plan and the act
    journal = Journal(tmp_path / "j.jsonl")
    try:
        result = execute(list(plan), opts, journal)
    finally:
        journal.close()
    (outcome,) = result.outcomes
    assert outcome.ok and "holds it" in outcome.result
    assert files["leaked"].exists()
    assert not (tmp_path / "j.jsonl").read_text()  # nothing done, nothing journaled


def test_shm_dir_option_adds_a_tmpfs_and_min_age_is_respected(tmp_path: Path) -> None:
    extra = tmp_path / "shm"
    extra.mkdir()
    old = extra / "vllm_offload_0.mmap"
    old.write_bytes(b"y" * 4096)
    past = time.time() - 7200
    os.utime(old, (past, past))
    base = ["doctor", "--json", "--check", "posix_shm", "--shm-dir", str(extra)]
    found = json.loads(run_cli(*base, "--shm-min-age", "60").stdout)["checks"][0]["evidence"]
    assert {e["path"]: e["naming"] for e in found}.get(str(old)) == "vLLM"
    later = json.loads(run_cli(*base, "--shm-min-age", "86400").stdout)["checks"][0]["evidence"]
    assert str(old) not in {e["path"] for e in later}
    bad = run_cli("doctor", "--shm-dir", str(tmp_path / "missing"))
    assert bad.returncode == 2 and "not a directory" in bad.stderr


def test_watch_auto_clean_removes_leaked_files_and_counts_them(
    files: dict[str, Path], mapper: list[subprocess.Popen[str]], tmp_path: Path
) -> None:
    import io
    import threading

    from prometheus_client import generate_latest

    from accelhost.hygiene.clean.cleaner import CleanFilters
    from accelhost.hygiene.watch.watcher import WatchConfig, Watcher, json_logger

    _map(mapper, files["held"])
    stream = io.StringIO()
    watcher = Watcher(
        LiveHost,
        HygieneOptions(
            shm_min_age_s=600, shm_dirs=tuple(sorted({str(p.parent) for p in files.values()}))
        ),
        WatchConfig(
            auto_clean=True,
            journal=str(tmp_path / "auto.jsonl"),
            # a shared machine: never reach beyond what this test made
            scope=CleanFilters(paths=frozenset(str(p) for p in files.values())),
        ),
        json_logger(stream),
    )
    rnd = watcher.run_once()
    assert rnd.shm_files is not None and rnd.shm_files >= 1  # ours at least
    text = generate_latest(watcher.registry).decode()
    assert "accelhost_posix_shm_leaked_files " in text
    assert not files["leaked"].exists()
    assert files["held"].exists() and files["unnamed"].exists() and files["young"].exists()
    assert 'accelhost_clean_actions_total{kind="remove_shm_file",result="ok"} 1.0' in text
    records = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert records and all(RFC3339.match(r["ts"]) for r in records)
    watcher.run(threading.Event(), rounds=1)  # nothing left of ours to clean
    assert not any(
        e["event"] == "auto_clean"
        for e in (json.loads(line) for line in stream.getvalue().splitlines()[len(records) :])
    )
