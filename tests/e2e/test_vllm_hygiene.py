"""doctor and clean on real vLLM servers: healthy ones untouched, what dead ones left removed.

Every `clean --yes` here is limited to what this suite started (`--pid`, `--path`), so the
suite never touches another process or file of the machine; the unlimited dry run beside
it shows what a user's plain `clean --yes` would do, and is checked too.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
from pathlib import Path

import pytest
from engine import Server, wait_gone
from hostcli import accelhost, check, paths_named, pids_named
from procs import parent, shm_files_held, wait_for

GRACE = "10"  # EngineCore and Worker ignore SIGTERM: clean waits this long, then SIGKILLs


def _journal(tmp_path: Path) -> str:
    return str(tmp_path / "clean.jsonl")


def _healthy_untouched(server: Server, pids: set[int], files: set[str]) -> None:
    """What a user checks after a clean: every process and file still there, it answers."""
    gone = {p for p in pids if not server.tracked.is_alive(p)}
    assert not gone, f"healthy server lost {gone}\n{server.log_tail()}"
    missing = {f for f in files if not os.path.exists(f)}
    assert not missing, f"healthy server's files removed: {missing}"
    assert server.answers()


def _held_own(server: Server) -> set[str]:
    """The files the server made that its processes hold now (open or mapped)."""
    return set(server.own_files) & shm_files_held(server.pids())


@pytest.mark.servers("healthy")
def test_healthy_servers_semaphore_is_held_by_its_worker(server_pool) -> None:
    # A fact of vLLM 0.32 (CPU build): while it serves, a healthy server keeps a `sem.mp-*`
    # file that no process maps by that name. Its Worker made it with glibc's sem_open,
    # which creates a temporary `sem.XXXXXX`, maps it, links it to `sem.mp-*` and unlinks
    # the temporary name: the Worker maps the same inode as `sem.XXXXXX (deleted)`. It is
    # held: doctor must not report it, clean must not plan to remove it.
    healthy = server_pool.get("healthy")
    sems = {f for f in healthy.own_files if "/sem.mp-" in f and os.path.exists(f)}
    assert sems, healthy.own_files
    by_name: set[str] = set()
    for pid in healthy.pids():
        with contextlib.suppress(OSError):
            maps = Path(f"/proc/{pid}/maps").read_text().splitlines()
            by_name |= {ln.split(None, 5)[-1] for ln in maps}
    assert not sems & by_name, f"mapped by name now: {sems & by_name}"
    assert sems <= shm_files_held(healthy.pids()), "not held by inode either"

    doctor = accelhost("doctor", "--json", "--shm-min-age", "0")
    assert doctor.data is not None, doctor.explain()
    assert not paths_named(doctor.data) & sems, f"a live server's semaphore called leaked: {sems}"
    plan = accelhost("clean", "--json", "--shm-min-age", "0")
    assert plan.data is not None, plan.explain()
    assert not paths_named(plan.data) & sems, f"clean would remove a live server's {sems}"
    assert healthy.answers()


@pytest.mark.servers("healthy")
def test_script_launched_healthy_server_is_never_touched(server_pool, tmp_path: Path) -> None:
    healthy = server_pool.get("healthy")
    pids, files = healthy.pids(), _held_own(healthy)
    # A deployment script started it and exited: the group leader is gone, it still serves.
    assert healthy.popen.poll() == 0
    assert healthy.api_pid is not None
    assert os.getpgid(healthy.api_pid) == healthy.popen.pid, "not in the script's group"
    assert len(pids) >= 3
    assert any("/psm_" in f for f in files), files  # its message queues

    held = shm_files_held(pids)  # held files are never leaks
    doctor = accelhost("doctor", "--json", "--shm-min-age", "0")
    assert doctor.data is not None, doctor.explain()
    named = pids_named(check(doctor.data, "orphan_engines")["evidence"])
    assert not named & pids, f"healthy server named as orphan: {named & pids}"
    assert not paths_named(doctor.data) & (files | held), (
        "a file the healthy server holds called leaked"
    )

    plan = accelhost("clean", "--json", "--shm-min-age", "0")  # what plain `clean --yes` would do
    assert plan.data is not None, plan.explain()
    assert not pids_named(plan.data) & pids, f"clean would stop the healthy server: {plan.stdout}"
    assert not paths_named(plan.data) & files, f"clean would remove its files: {plan.stdout}"

    done = accelhost(
        "clean", "--yes", "--json", "--only", "orphans", "--grace", GRACE,
        "--journal", _journal(tmp_path), *[a for p in sorted(pids) for a in ("--pid", str(p))],
    )  # fmt: skip
    # Named and not acted on: clean says why for each and exits 1 (issue 18, point 6).
    assert done.rc == 1, done.explain()
    assert not done.data["actions"] and not pids_named(done.data) & pids, done.explain()
    refused = {u["target"]: u["reason"] for u in done.data["not_acted_on"] if u["kind"] == "pid"}
    assert set(refused) == pids and all(refused.values()), done.explain()
    _healthy_untouched(healthy, pids, files)


@pytest.mark.servers("healthy", "victim_api")
def test_api_server_killed_leaves_orphans_that_clean_removes(
    server_pool, tmp_path: Path, e2e_dir: Path
) -> None:
    healthy = server_pool.get("healthy")
    victim = server_pool.get("victim_api")
    healthy_pids, healthy_files = healthy.pids(), _held_own(healthy)
    api, engine, worker = (
        victim.api_pid,
        victim.pid_of("VLLM::EngineCore"),
        victim.pid_of("VLLM::Worker"),
    )
    assert api is not None and parent(engine) == api

    victim.tracked.signal([api], signal.SIGKILL)
    victim.popen.wait(timeout=60)
    wait_for("EngineCore to be re-parented", lambda: parent(engine) not in (None, api), 60)
    orphans = {engine, worker}
    assert all(victim.tracked.is_alive(p) for p in orphans), "the orphans died by themselves"

    doctor = accelhost("doctor", "--json")
    assert doctor.data is not None, doctor.explain()
    assert doctor.rc == 1, doctor.explain()
    orphan_check = check(doctor.data, "orphan_engines")
    assert orphan_check["status"] == "FAIL"
    ours = (healthy_pids | victim.tracked.seen.keys()) & pids_named(orphan_check["evidence"])
    assert ours == orphans, f"doctor named {ours}, expected exactly {orphans}"
    by_pid = {e["pid"]: e for e in orphan_check["evidence"] if e.get("pid") in orphans}
    assert "VLLM::EngineCore" in by_pid[engine]["cmdline"]
    assert by_pid[engine]["ppid"] == parent(engine)  # the parent is in the evidence

    # Record this host as it is now: the bundled example `vllm-cpu-orphaned-engine` is one.
    record = tmp_path / "vllm-cpu-orphaned-engine.json"
    snap = accelhost("snapshot", "-o", str(record))
    assert snap.rc == 0, snap.explain()
    replay = accelhost("doctor", "--snapshot", str(record), "--json")
    assert replay.data is not None, replay.explain()
    assert orphans <= pids_named(check(replay.data, "orphan_engines")["evidence"])
    if os.environ.get("E2E_RECORD_DIR"):
        shutil.copy(record, Path(os.environ["E2E_RECORD_DIR"]) / record.name)

    plan = accelhost("clean", "--json")
    assert plan.data is not None, plan.explain()
    assert orphans <= pids_named(plan.data) and not pids_named(plan.data) & healthy_pids

    journal = _journal(tmp_path)
    done = accelhost(
        "clean", "--yes", "--json", "--only", "orphans", "--grace", GRACE, "--journal", journal,
        "--pid", str(engine), "--pid", str(worker),
    )  # fmt: skip
    assert done.rc == 0, done.explain()
    wait_gone(victim, timeout=60)
    assert Path(journal).read_text().count("\n") >= 1
    after = accelhost("doctor", "--json")
    assert not orphans & pids_named(check(after.data, "orphan_engines")["evidence"])
    _healthy_untouched(healthy, healthy_pids, healthy_files)


@pytest.mark.servers("healthy", "victim_tree")
def test_whole_tree_killed_leaves_shm_files_that_clean_removes(server_pool, tmp_path: Path) -> None:
    healthy = server_pool.get("healthy")
    victim = server_pool.get("victim_tree")
    healthy_pids, healthy_files = healthy.pids(), _held_own(healthy)
    tree = victim.pids()
    left = set(victim.own_files)
    assert any("/psm_" in f for f in left) and any("/sem.mp-" in f for f in left), left

    victim.tracked.signal(tree, signal.SIGKILL)  # what `docker rm -f` and the OOM killer do
    victim.popen.wait(timeout=60)
    wait_gone(victim, timeout=60)
    left = {f for f in left if os.path.exists(f)}
    assert left, "vLLM removed its files although it was SIGKILLed"
    assert not left & healthy_files

    doctor = accelhost("doctor", "--json", "--shm-min-age", "0")
    assert doctor.data is not None, doctor.explain()
    named = paths_named(doctor.data)
    assert left <= named, f"doctor missed {left - named}: {doctor.stdout}"
    assert not named & healthy_files, "a live server's files called leaked"

    plan = accelhost("clean", "--json", "--shm-min-age", "0")
    assert plan.data is not None, plan.explain()
    assert left <= paths_named(plan.data) and not paths_named(plan.data) & healthy_files

    done = accelhost(
        "clean", "--yes", "--json", "--only", "shm", "--shm-min-age", "0",
        "--journal", _journal(tmp_path), *[a for f in sorted(left) for a in ("--path", f)],
    )  # fmt: skip
    assert done.rc == 0, done.explain()
    assert not {f for f in left if os.path.exists(f)}, "leaked files still there"
    _healthy_untouched(healthy, healthy_pids, healthy_files)
