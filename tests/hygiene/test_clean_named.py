"""`clean --pid/--shmid/--path` naming something it cannot act on says why and exits 1
(2 for an id that cannot name anything): real processes, segments and files, removed by
id in finally."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from hygiene_lab import Lab, remove_shmid, run_cli, shmids_now, stop_popen


def _never_a_pid() -> int:
    # pids run from 1 to pid_max - 1: pid_max itself is never given to a process
    return int(Path("/proc/sys/kernel/pid_max").read_text())


def _not_acted_on(res: subprocess.CompletedProcess[str]) -> dict[object, str]:
    return {u["target"]: u["reason"] for u in json.loads(res.stdout)["not_acted_on"]}


def test_a_pid_that_names_no_process_exits_1_and_says_so(tmp_path: Path) -> None:
    pid = _never_a_pid()
    for extra in ([], ["--yes", "--journal", str(tmp_path / "j.jsonl")]):
        res = run_cli("clean", "--pid", str(pid), *extra)
        assert res.returncode == 1, res.stdout + res.stderr
        assert res.stderr.strip() == f"accelhost clean: cannot act on pid {pid}: no such process"
    assert not (tmp_path / "j.jsonl").exists()  # nothing to do: no journal written
    res = run_cli("clean", "--json", "--pid", str(pid))
    assert res.returncode == 1 and _not_acted_on(res) == {pid: "no such process"}
    assert json.loads(res.stdout)["actions"] == []


@pytest.mark.parametrize(
    ("option", "value", "says"),
    [
        ("--shmid", "-1", "--shmid -1: not a segment id (0 or more)"),
        ("--pid", "0", "--pid 0: not a process id (1 or more)"),
        ("--pid", "-5", "--pid -5: not a process id (1 or more)"),
    ],
)
def test_an_id_that_cannot_name_anything_is_a_usage_error(
    option: str, value: str, says: str
) -> None:
    res = run_cli("clean", option, value)
    assert res.returncode == 2, res.stdout + res.stderr
    assert res.stderr.strip() == f"accelhost clean: {says}"


def test_a_live_process_that_is_no_engine_is_not_acted_on() -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1000)"])
    try:
        res = run_cli("clean", "--json", "--pid", str(proc.pid), "--yes", "--journal", "/dev/null")
        assert res.returncode == 1, res.stdout + res.stderr
        assert _not_acted_on(res) == {
            proc.pid: "not an engine child process (the catalog names it no engine's child)"
        }
        assert proc.poll() is None  # untouched
    finally:
        stop_popen(proc)


def test_pid_1_and_the_callers_own_ancestors_are_named_as_never_signalled() -> None:
    res = run_cli("clean", "--json", "--pid", "1")
    assert res.returncode == 1
    assert _not_acted_on(res)[1].endswith("never signalled")


def test_a_live_engine_under_its_frontend_is_not_an_orphan(lab: Lab) -> None:
    node = lab.device_node()
    healthy, frontend = lab.healthy_engine(node)
    res = run_cli("clean", "--json", "--device-glob", lab.glob(), "--pid", str(healthy))
    assert res.returncode == 1, res.stdout + res.stderr
    assert _not_acted_on(res)[healthy] == (
        f"not an orphan: its parent is its engine's frontend {frontend} (bash)"
    )
    text = run_cli("clean", "--device-glob", lab.glob(), "--pid", str(healthy))
    assert f"cannot act on pid {healthy}: not an orphan: its parent" in text.stderr


def test_a_segment_that_is_gone_is_no_such_segment(lab: Lab) -> None:
    shmid, _ = lab.segment("create-exit", 4096)
    remove_shmid(shmid)
    assert shmid not in shmids_now()
    res = run_cli("clean", "--json", "--shmid", str(shmid))
    assert res.returncode == 1, res.stdout + res.stderr
    assert _not_acted_on(res) == {shmid: "no such segment"}


def test_a_missing_file_and_a_file_outside_the_shm_dirs(tmp_path: Path) -> None:
    if not Path("/dev/shm").is_dir():
        pytest.skip("no /dev/shm")
    missing = f"/dev/shm/accelhost-test-nope-{uuid.uuid4().hex[:8]}"
    outside = tmp_path / "psm_abc"
    outside.write_bytes(b"x")
    res = run_cli("clean", "--json", "--path", missing, "--path", str(outside))
    assert res.returncode == 1, res.stdout + res.stderr
    kept = _not_acted_on(res)
    assert kept[missing] == "no such file"
    assert kept[str(outside)].startswith("not in a shared-memory directory (/dev/shm")
    assert outside.exists()


def test_a_file_a_live_process_holds_is_not_leaked(tmp_path: Path) -> None:
    if not Path("/dev/shm").is_dir():
        pytest.skip("no /dev/shm")
    d = Path("/dev/shm") / f"accelhost-test-{uuid.uuid4().hex[:8]}"
    d.mkdir()
    held = d / "psm_heldbyone"
    held.write_bytes(b"x" * 4096)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; f = open(sys.argv[1]); print(1, flush=True); time.sleep(1000)",
            str(held),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "1"
        res = run_cli(
            "clean", "--json", "--shm-dir", str(d), "--shm-min-age", "0", "--path", str(held)
        )
        assert res.returncode == 1, res.stdout + res.stderr
        assert _not_acted_on(res)[str(held)] == (
            "not leaked: held open or mapped by a live process"
        )
        assert held.exists()
    finally:
        stop_popen(holder)
        held.unlink(missing_ok=True)
        d.rmdir()


def test_a_pid_left_out_by_only_says_so() -> None:
    res = run_cli("clean", "--json", "--only", "segments", "--pid", "1")
    assert res.returncode == 1, res.stdout + res.stderr
    assert _not_acted_on(res) == {1: "left out by --only (it cleans no pid target)"}
