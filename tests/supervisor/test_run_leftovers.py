"""`accelhost run` removes exactly what its tree left: System V segments of short-lived
descendants (process events), /dev/shm files the tree held, and everything of a private IPC
namespace; never what another process made or still holds."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from run_support import (
    PY,
    helper,
    janitor,
    live_shmids,
    ours_alive,
    recorded_pids,
    run_cmd,
    wait_for,
)
from tree_helper import shmget

from accelhost.host.live import LiveHost
from accelhost.kernel.inotify import CreationWatch
from accelhost.kernel.procevents import PROC_EVENT_EXIT, PROC_EVENT_FORK, ProcEvents
from accelhost.supervisor.leftovers import ShmFileLedger
from accelhost.supervisor.tree import ForkTracker

MARGIN_S = 20.0


def finish(proc: subprocess.Popen[bytes], timeout: float = MARGIN_S) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out.decode(), err.decode()


def ints(path: Path) -> list[int]:
    return [int(x) for x in path.read_text().split()] if path.exists() else []


def _events_available() -> bool:
    tracker = ForkTracker.open(os.getpid())
    if tracker is None:
        return False
    tracker.close()
    return True


needs_events = pytest.mark.skipif(
    not _events_available(), reason="no process events here (needs root, host PID namespace)"
)


@contextlib.contextmanager
def removed_after(*paths: Path) -> Iterator[None]:
    try:
        yield
    finally:
        for path in paths:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()


# ---- System V segments of short-lived descendants ------------------------------------------


@needs_events
def test_segment_of_a_grandchild_that_exited_before_the_command_is_removed(
    tmp_path: Path,
) -> None:
    script = " ".join(helper("mkseg", tmp_path)) + " & wait; sleep 0.3"
    with janitor(tmp_path) as j:
        try:
            proc = j.start(run_cmd("--grace", "1", "--", "sh", "-c", script))
            code, _, err = finish(proc)
        finally:
            j.shmids += ints(tmp_path / "shmids")
        (shmid,) = ints(tmp_path / "shmids")
        (maker,) = ints(tmp_path / "segpids")
        remaining = live_shmids()
    assert code == 0, err
    assert shmid not in remaining
    assert (
        f"removed shared memory shmid {shmid} key 0x00000000 (4096 bytes) left by pid {maker}"
        in err
    )


def _can_unshare_pid() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = ["unshare", "--pid", "--fork", "--mount-proc", "true"]
    return subprocess.run(probe, capture_output=True, timeout=30).returncode == 0


@pytest.mark.skipif(not _can_unshare_pid(), reason="cannot create PID namespaces here")
def test_without_process_events_an_unseen_makers_segment_is_kept_and_said(
    tmp_path: Path,
) -> None:
    # As PID 1 of a PID namespace (a container) the kernel sends no process events: the
    # grandchild's segment cannot be tied to the tree, so it must be kept, never guessed.
    script = " ".join(helper("mkseg", tmp_path)) + " & wait; sleep 0.3"
    argv = ["unshare", "--pid", "--fork", "--mount-proc"]
    with janitor(tmp_path) as j:
        try:
            proc = j.start(argv + run_cmd("--grace", "1", "--", "sh", "-c", script))
            code, _, err = finish(proc)
        finally:
            j.shmids += ints(tmp_path / "shmids")
        (shmid,) = ints(tmp_path / "shmids")
        remaining = live_shmids()
    assert code == 0, err
    assert "no process events here" in err and "--private-ipc" in err
    assert shmid in remaining
    assert f"shmid {shmid}" not in err


@needs_events
@pytest.mark.skipif(shutil.which("ipcmk") is None, reason="no ipcmk here")
def test_segment_of_ipcmk_under_a_shell_is_removed(tmp_path: Path) -> None:
    said = tmp_path / "ipcmk"
    script = f"ipcmk -M 8192 > {said}; sleep 0.2"
    with janitor(tmp_path) as j:
        try:
            proc = j.start(run_cmd("--grace", "1", "--", "sh", "-c", script))
            code, _, err = finish(proc)
        finally:
            made = [int(w) for w in said.read_text().split() if w.isdigit()]
            j.shmids += made
        remaining = live_shmids()
    assert code == 0, err
    assert len(made) == 1
    assert made[0] not in remaining
    assert f"removed shared memory shmid {made[0]} " in err


@needs_events
def test_segments_made_meanwhile_by_unrelated_processes_are_kept(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    go = tmp_path / "go"
    # The tree: a short-lived maker, then it waits until the test has made its own.
    script = (
        " ".join(helper("mkseg", tmp_path)) + f" & wait; while [ ! -e {go} ]; do sleep 0.05; done"
    )
    with janitor(tmp_path) as j:
        try:
            proc = j.start(run_cmd("--grace", "1", "--", "sh", "-c", script))
            wait_for(lambda: (tmp_path / "shmids").exists(), what="the tree's segment")
            # While the run lasts: one made by the test itself, one by a short-lived process
            # outside the tree (dead, unattached, made after the start: only not the tree's).
            mine = shmget()
            j.shmids.append(mine)
            subprocess.run(helper("mkseg", outside), check=True, timeout=MARGIN_S)
            go.write_text("go")
            code, _, err = finish(proc)
        finally:
            j.shmids += ints(tmp_path / "shmids") + ints(outside / "shmids")
        (ours,) = ints(tmp_path / "shmids")
        (theirs,) = ints(outside / "shmids")
        remaining = live_shmids()
    assert code == 0, err
    assert ours not in remaining
    assert mine in remaining and theirs in remaining
    assert f"shmid {mine} " not in err and f"shmid {theirs} " not in err


def test_process_events_follow_forks_from_the_root_only(tmp_path: Path) -> None:
    if not _events_available():
        pytest.skip("no process events here (needs root, host PID namespace)")
    # B was forked before the tracker opened: what B forks later is not ours.
    b = subprocess.Popen(
        [
            PY,
            "-c",
            "import os,sys; sys.stdin.readline(); p=os.fork()\n"
            "if p == 0: os._exit(0)\nos.waitpid(p, 0); print(p, flush=True)",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    tracker = ForkTracker.open(os.getpid())
    assert tracker is not None
    try:
        grandchild = tmp_path / "grandchild"
        subprocess.run(["sh", "-c", f"sh -c 'echo $$ > {grandchild}' & wait"], check=True)
        out, _ = b.communicate("go\n", timeout=MARGIN_S)
        tracker.drain()
        (gc,) = ints(grandchild)
        assert gc in tracker.members and gc not in tracker.live  # forked, ran, exited
        assert int(out) not in tracker.members
        assert b.pid not in tracker.members
    finally:
        tracker.close()
        if b.poll() is None:
            b.kill()
            b.wait(10)


def test_a_pid_the_tree_shared_with_an_outsider_is_ambiguous() -> None:
    a, b = socket.socketpair()
    tracker = ForkTracker(a, root=1000, outside={7000})  # 7000 was alive at the start
    try:
        tracker._apply(PROC_EVENT_FORK, (1000, 1000, 2000, 2000))  # ours
        tracker._apply(PROC_EVENT_FORK, (2000, 2000, 2001, 2000))  # a thread of it
        tracker._apply(PROC_EVENT_FORK, (2000, 2000, 3000, 3000))  # our grandchild
        tracker._apply(PROC_EVENT_EXIT, (2000, 2000, 0, 17))
        tracker._apply(PROC_EVENT_FORK, (555, 555, 2000, 2000))  # pid 2000 reused outside
        tracker._apply(PROC_EVENT_FORK, (2000, 2000, 4000, 4000))  # forked by the outsider
        tracker._apply(PROC_EVENT_FORK, (555, 555, 5000, 5000))  # an outsider's child ...
        tracker._apply(PROC_EVENT_EXIT, (5000, 5000, 0, 17))
        tracker._apply(PROC_EVENT_FORK, (3000, 3000, 5000, 5000))  # ... whose pid we get next
        tracker._apply(PROC_EVENT_FORK, (3000, 3000, 7000, 7000))  # a pid alive at the start
        assert tracker.members == {2000, 3000, 5000, 7000}
        assert tracker.ambiguous == {2000, 5000, 7000}
        assert tracker.live == {3000, 5000, 7000}
    finally:
        a.close()
        b.close()


def _neighbour_reads(tracker: ForkTracker) -> tuple[int, int]:
    """(events read, wraps of the pid counter) while a neighbour forks 400 times; it is
    started before a drain, so the filter's floor is above its pid."""
    loop = "read go; i=0; while [ $i -lt 400 ]; do /bin/true; i=$((i+1)); done"
    neighbour = subprocess.Popen(["sh", "-c", loop], stdin=subprocess.PIPE, text=True)
    try:
        tracker.drain()
        before, wraps = tracker.read_count, tracker.wraps
        neighbour.communicate("go\n", timeout=MARGIN_S)
        tracker.drain()
        return tracker.read_count - before, tracker.wraps - wraps
    finally:
        if neighbour.poll() is None:
            neighbour.kill()
        neighbour.wait(10)


@needs_events
def test_the_kernel_drops_a_neighbours_forks_and_the_tree_is_still_followed(
    tmp_path: Path,
) -> None:
    """A neighbour forks 400 times: the tracker reads next to none of its 800 events (a
    BPF filter drops them before they are queued), and a new member that forks at once
    is followed (its grandchild is a member, seen gone)."""
    grandchild = tmp_path / "grandchild"
    root = subprocess.Popen(
        [PY, "-c", "import subprocess, sys; sys.stdin.readline(); "
         f"subprocess.run(['sh', '-c', \"sh -c 'echo $$ > {grandchild}' & wait\"])"],
        stdin=subprocess.PIPE, text=True,
    )  # fmt: skip
    tracker = ForkTracker.open(root.pid)
    try:
        assert tracker is not None and tracker.floor is not None
        read, wrapped = _neighbour_reads(tracker)
        if wrapped:  # the pid counter wrapped round meanwhile (pid_max 32768): once more
            read, wrapped = _neighbour_reads(tracker)
        assert not wrapped and read < 40, (read, wrapped)
        root.communicate("go\n", timeout=MARGIN_S)
        tracker.drain()
        (gc,) = ints(grandchild)
        assert gc in tracker.members and gc not in tracker.live
        assert not tracker.lost
        assert not tracker.outside & tracker.members
    finally:
        if tracker is not None:
            tracker.close()
        if root.poll() is None:
            root.kill()
        root.wait(10)


def test_a_wrapped_pid_counter_or_a_late_members_event_is_said() -> None:
    """What the filter passes below its floor: a child below the start is the pid counter
    wrapping round (every event is read from then on; a member whose pid was handed out
    since the start, maybe to a hidden outsider then, is ambiguous); a member between the
    start and the floor came too late for the filter (its forks may be hidden: lost)."""
    a, b = socket.socketpair()
    try:
        late = ForkTracker(ProcEvents(a), root=1000, floor=20001, start=20000, _since=20000)
        late._apply(PROC_EVENT_FORK, (1000, 1000, 20500, 20500))  # born since: fine
        assert not late.lost
        late._apply(PROC_EVENT_FORK, (1000, 1000, 20000, 20000))  # listed too late
        assert late.lost and late.wraps == 0
        t = ForkTracker(ProcEvents(a), root=1000, floor=20001, start=20000, _since=20000)
        t._apply(PROC_EVENT_FORK, (1000, 1000, 20600, 20600))  # ours, before the wrap
        t._apply(PROC_EVENT_FORK, (555, 555, 400, 400))  # an outsider, after the wrap
        assert t.wraps == 1 and t._rearm and not t.lost
        t._apply(PROC_EVENT_FORK, (1000, 1000, 20700, 20700))  # handed out since the start
        t._apply(PROC_EVENT_FORK, (1000, 1000, 20600, 20600))  # ours then, ours again
        t._apply(PROC_EVENT_FORK, (1000, 1000, 900, 900))  # below the start: not since
        assert t.ambiguous == {20700} and not t.lost
        assert {20600, 20700, 900} <= t.members
        t.floor, t._since = 1001, 1000  # armed afresh after the wrap (the counter at 1000)
        t._apply(PROC_EVENT_FORK, (555, 555, 350, 350))  # ... and it wrapped again
        t._apply(PROC_EVENT_FORK, (1000, 1000, 500, 500))  # every new member now
        assert t.wraps == 2 and 500 in t.ambiguous
        # an old outsider at or above the floor that forks (after a wrap: the floor is
        # low): dropped by pid at the next update; the tree getting its pid is said
        me = os.getpid()
        o = ForkTracker(ProcEvents(a), root=1, floor=2, start=2, _since=2)
        o._apply(PROC_EVENT_FORK, (me, me, me + 1, me + 1))
        o._refilter(1)
        assert o._outsiders == {me} and not o.lost
        o._apply(PROC_EVENT_FORK, (1, 1, me, me))
        assert o.lost
    finally:
        a.close()
        b.close()


# ---- /dev/shm files ---------------------------------------------------------------------------


def test_dev_shm_files_the_tree_held_are_removed_and_others_kept(tmp_path: Path) -> None:
    tag = f"accelhost-test-{os.getpid()}-{tmp_path.name}"
    mapped = Path(f"/dev/shm/psm_{tag}")
    shared = Path(f"/dev/shm/shared-{tag}")
    before = Path(f"/dev/shm/before-{tag}")
    foreign = Path(f"/dev/shm/foreign-{tag}")
    ready = tmp_path / "ready"
    go = tmp_path / "go"
    with removed_after(mapped, shared, before, foreign), janitor(tmp_path) as j:
        before.write_text("there before the run")
        script = (
            f"{' '.join(helper('shmfile', tmp_path, str(mapped)))} & "
            f"{' '.join(helper('shmfile', tmp_path / 'b', str(shared)))} & "
            f"while [ ! -e {go} ]; do sleep 0.05; done; exit 3"
        )
        proc = j.start(run_cmd("--grace", "0.5", "--", "sh", "-c", script))
        wait_for(lambda: ready.exists() and (tmp_path / "b" / "ready").exists())
        foreign.write_text("made by someone else during the run, held by nobody")
        # Something outside the tree holds one of the tree's files: it must stay.
        with open(shared, "rb") as held:
            go.write_text("go")
            code, _, err = finish(proc)
            assert shared.exists(), err
            assert held.read(1) == b"x"
        left = [
            p
            for d in (tmp_path, tmp_path / "b")
            for p in recorded_pids(d)
            if ours_alive(p, str(tmp_path))
        ]
        assert code == 3, err
        assert left == []
        assert not mapped.exists()
        assert f"removed {mapped} (4096 bytes used) left by the tree" in err
        assert f"kept {shared}: still held by a live process" in err
        assert before.exists() and foreign.exists()


def test_dev_shm_file_of_a_tree_that_died_before_the_teardown_is_removed(tmp_path: Path) -> None:
    # Seen held when it was created (the supervisor watches the directory), so it is the
    # tree's even though every process of the tree is dead when the teardown begins.
    mapped = Path(f"/dev/shm/psm_accelhost-test-{os.getpid()}-{tmp_path.name}")
    hold_s = "3"  # ample for a look triggered by the file's creation
    script = " ".join(helper("shmfile-die", tmp_path, str(mapped), hold_s)) + "; exit 3"
    with removed_after(mapped), janitor(tmp_path) as j:
        proc = j.start(run_cmd("--grace", "0.5", "--", "sh", "-c", script))
        code, _, err = finish(proc)
        assert code == 3, err
        assert "stopping" not in err  # nothing was alive at the teardown
        assert not mapped.exists(), err
        assert f"removed {mapped} (" in err


def test_a_semaphore_the_tree_made_with_sem_open_is_removed(tmp_path: Path) -> None:
    # sem_open links the semaphore to its name after mapping it: the tree maps it only as
    # `sem.XXXXXX (deleted)`, and holds it by inode (as each vLLM Worker holds its sem.mp-*).
    name = f"accelhost-test-{os.getpid()}-{tmp_path.name}"
    sem = Path(f"/dev/shm/sem.{name}")
    script = " ".join(helper("sem-die", tmp_path, f"/{name}", "3")) + "; exit 3"
    with removed_after(sem), janitor(tmp_path) as j:
        proc = j.start(run_cmd("--grace", "0.5", "--", "sh", "-c", script))
        wait_for(sem.exists)
        code, _, err = finish(proc)
        assert code == 3, err
        assert not sem.exists(), err
        assert f"removed {sem} (" in err


def test_creation_watch_names_new_files_and_the_ledger_skips_gone_or_known(
    tmp_path: Path,
) -> None:
    old = tmp_path / "old"
    old.write_text("there before")
    ledger = ShmFileLedger.start(LiveHost(), [str(tmp_path)])
    watch = CreationWatch.open([str(tmp_path)])
    try:
        assert watch.read() == []
        made = tmp_path / "psm_made"
        made.write_text("new")
        fleeting = tmp_path / "sem.fleeting"
        fleeting.write_text("made and unlinked at once, as Python's semaphores")
        fleeting.unlink()
        outside = tmp_path.parent / f"{tmp_path.name}-moved-in"
        outside.write_text("moved in")
        moved = tmp_path / "moved"
        outside.rename(moved)
        paths = watch.read()
        assert paths == [str(made), str(fleeting), str(moved)]
        assert not ledger.unknown([str(fleeting), str(old)])  # gone; there before
        assert ledger.unknown([str(made)])
        st = made.stat()
        ledger.held_by_tree.add((st.st_dev, st.st_ino))
        assert not ledger.unknown([str(made)])  # already known to be the tree's
    finally:
        watch.close()


def test_keep_shm_keeps_dev_shm_files_too(tmp_path: Path) -> None:
    mapped = Path(f"/dev/shm/psm_accelhost-test-{os.getpid()}-{tmp_path.name}")
    with removed_after(mapped), janitor(tmp_path) as j:
        script = (
            f"{' '.join(helper('shmfile', tmp_path, str(mapped)))} & "
            f"while [ ! -e {tmp_path / 'ready'} ]; do sleep 0.05; done"
        )
        proc = j.start(run_cmd("--keep-shm", "--grace", "0.5", "--", "sh", "-c", script))
        code, _, err = finish(proc)
        assert code == 0, err
        assert mapped.exists()


# ---- --private-ipc ----------------------------------------------------------------------------


def _can_make_namespaces() -> bool:
    if shutil.which("unshare") is None:
        return False
    probe = subprocess.run(["unshare", "--ipc", "--mount", "true"], capture_output=True, timeout=30)
    return probe.returncode == 0


def _processes_in_ipc_ns(inode: int) -> list[int]:
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            with contextlib.suppress(OSError):
                if os.stat(f"/proc/{name}/ns/ipc").st_ino == inode:
                    out.append(int(name))
    return out


@pytest.mark.skipif(not _can_make_namespaces(), reason="cannot create namespaces here")
def test_private_ipc_namespace_and_dev_shm_die_with_the_tree(tmp_path: Path) -> None:
    name = f"accelhost-test-{os.getpid()}-{tmp_path.name}"
    script = " ".join(helper("private", tmp_path, name)) + " & wait"
    with removed_after(Path(f"/dev/shm/{name}")), janitor(tmp_path) as j:
        proc = j.start(run_cmd("--private-ipc", "--grace", "1", "--", "sh", "-c", script))
        code, _, err = finish(proc)
        maker, shmid, ns = ints(tmp_path / "private")
        host_segments = Path("/proc/sysvipc/shm").read_text().splitlines()[1:]
        assert code == 0, err
        assert ns != os.stat("/proc/self/ns/ipc").st_ino  # its own namespace
        # its segment and its file never reached the host's table and /dev/shm ...
        assert all(int(line.split()[4]) != maker for line in host_segments)
        assert not Path(f"/dev/shm/{name}").exists()
        # ... and nothing keeps its namespace (with the segment in it) alive
        assert _processes_in_ipc_ns(ns) == []
        assert "removed" not in err


def test_private_ipc_refused_by_the_kernel_is_one_line(tmp_path: Path) -> None:
    if shutil.which("setpriv") is None or os.geteuid() != 0:
        pytest.skip("needs setpriv and root to drop CAP_SYS_ADMIN")
    marker = tmp_path / "started"
    argv = ["setpriv", "--bounding-set", "-sys_admin", "--inh-caps", "-sys_admin", "--"]
    with janitor(tmp_path) as j:
        proc = j.start(argv + run_cmd("--private-ipc", "--", "touch", str(marker)))
        code, _, err = finish(proc)
    if "setpriv:" in err:
        pytest.skip("setpriv cannot drop capabilities here")
    assert code == 1, err
    assert err.strip().splitlines() == [
        "accelhost: --private-ipc: cannot make an IPC namespace and /dev/shm of the "
        "command's own: Operation not permitted"
    ]
    assert not marker.exists()
