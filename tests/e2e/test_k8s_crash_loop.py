"""A pod's crash loop on the suite's CRI node, without and then with contrib/k8s/daemonset.yaml.

One pod (tests/e2e/cri_pod.py: real vLLM, an emptyDir of medium Memory at /dev/shm) has its
engine killed (`kill -9` of the container's PID 1) once its files exist (`psm_*` and
`sem.mp-*` in the emptyDir: a crash during start-up, the usual crash loop), and the next
attempt started after a back-off, as the kubelet does:

1. three crashes without the DaemonSet, a 2 s back-off (shorter than the kubelet's first
   10 s to save time: nothing acts on the emptyDir in between, so only the wait differs):
   the files and bytes in the emptyDir after each crash;
2. the DaemonSet's pod, run from the yaml through the CRI (tests/e2e/cri_daemonset.py):
   its `watch --auto-clean` finds the pile-up of step 1 and removes it;
3. three more crashes, the back-off the kubelet's first, 10 s, kept constant (each restart
   as early as the kubelet ever makes it: the strictest case for the watch): each crashed
   attempt's files are gone within the yaml's --shm-min-age plus a few seconds of the
   crash and before the next attempt starts; the last attempt's files stay while it runs
   through three of the watch's rounds; the watch's log names the pod and the attempt that
   left them (from the CRI), and its /metrics counts no failed round.

The figures are printed as a table at the end and kept as `<basetemp>/.../inner/e2e0/
k8s-crash-loop.{md,json}` (docs/kubernetes.md shows a run's).

Isolation: the DaemonSet's watch is hostPID with --auto-clean: it acts on every orphan
engine and leaked engine file it can see. So the test runs itself again in a PID, mount
and IPC namespace of its own with a private /dev/shm (tests/e2e/isolated.py) and starts
its CRI node there: the DaemonSet's "host" is that namespace.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from cri_daemonset import DaemonSetPod, option, start_daemonset
from cri_node import Node, start_node
from cri_pod import RUNNING, Attempt, Pod, make_pod
from hostcli import metrics
from isolated import inside, nothing_to_clean_before, run_isolated
from k8s_loop_report import Row, figures, report
from procs import wait_for

NAMESPACE, POD_NAME = "ah-e2e", "vllm-loop"
CRASHES = 3  # in each phase
# Without the DaemonSet nothing acts on the volume between attempts: a back-off shorter
# than the kubelet's changes no figure, and saves 24 s of the suite.
BACKOFF_WITHOUT_S = 2.0
# The kubelet's first back-off (then 20, 40 ... 300 s), kept constant: each restart as
# early as the kubelet ever makes it, the strictest case for the watch.
BACKOFF_S = 10.0
REACT_S = 4.0  # "a few seconds" past --shm-min-age: the round that sees it, and its work
ROUNDS_HELD = 3
INNER_TIMEOUT_S = 900
_TEST = "test_daemonset_ends_a_pods_crash_loop"


def test_daemonset_ends_a_pods_crash_loop(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    if not inside():
        run_isolated(__file__, _TEST, tmp_path, INNER_TIMEOUT_S, ipc=True)
        return
    e2e_dir: Path = request.getfixturevalue("e2e_dir")
    model: Path = request.getfixturevalue("tiny_model")
    rec: dict[str, Any] = {"rows": [], "timings": {}}
    nothing_to_clean_before(0)
    node = start_node(e2e_dir / "kubelet")
    node.keep_logs = e2e_dir / "k8s-loop-logs"
    try:
        _loop(node, model, tmp_path, rec)
        _judge(rec)
    finally:
        rec["timings"].update(node.timings)
        ds = rec.get("ds")
        if ds is not None:  # its log, kept before the node removes it
            (e2e_dir / "k8s-loop-watch.log").write_text("\n".join(ds.log_lines()))
        node.close()
        report(request, e2e_dir, rec)


def _engine_files(pod: Pod, attempt: Attempt, before: set[str]) -> set[str]:
    """This attempt's files once it has made a queue (psm_*) and a semaphore (sem.mp-*)."""

    def made() -> set[str]:
        new = pod.files() - before
        if any("/psm_" in f for f in new) and any("/sem.mp-" in f for f in new):
            return new
        status, _ = pod.status(attempt.id)
        if status.state != RUNNING:
            raise AssertionError(
                f"attempt {attempt.attempt} exited ({status.exit_code}, {status.reason}) "
                f"before its files were made\n{pod.log_tail(attempt)}"
            )
        return set()

    return set(wait_for(f"attempt {attempt.attempt}'s files", made, 600, every=0.2))  # type: ignore[arg-type]


def _runs(ds: DaemonSetPod) -> float:
    return metrics(ds.metrics_addr).get("accelhost_watch_runs_total", 0.0)


def _crash(pod: Pod, model: Path, rec: dict[str, Any], ds: DaemonSetPod | None) -> Row:
    """One attempt: started, killed once its files exist (after ROUNDS_HELD of the watch's
    rounds for the last one under the watch), then the back-off."""
    before = pod.files()
    started = time.monotonic()
    attempt = pod.start_engine(model)
    own = _engine_files(pod, attempt, before)
    row = Row("with" if ds else "without", attempt.attempt, time.monotonic() - started)
    row.own = own
    rec["rows"].append(row)
    if ds is not None and attempt.attempt == 2 * CRASHES - 1:  # the live attempt kept
        first = _runs(ds)
        wait_for(f"{ROUNDS_HELD} rounds", lambda: _runs(ds) >= first + ROUNDS_HELD, 120, every=0.5)
        row.held_rounds = int(_runs(ds) - first)
    row.at_kill = pod.files()
    pid1 = pod.pid1(attempt)
    killed = time.monotonic()
    pod.tracked.signal([pid1], signal.SIGKILL)  # kill -9 of the container's PID 1
    exit_status = pod.wait_exited(attempt)
    row.exit_code = int(exit_status.exit_code)
    exited = time.monotonic()
    row.after_crash = figures(pod.empty_dir)
    restart_at = exited + (BACKOFF_S if ds else BACKOFF_WITHOUT_S)
    if ds is not None:
        # the crashed attempt's files, polled every 0.1 s until gone or the restart is due
        def gone() -> bool:
            if not pod.files() & row.at_kill:
                row.removed_after_s = time.monotonic() - killed
                return True
            return False

        while time.monotonic() < restart_at and not gone():
            time.sleep(0.1)
    time.sleep(max(0.0, restart_at - time.monotonic()))
    row.at_restart = figures(pod.empty_dir)
    row.left_at_restart = pod.files()
    return row


def _loop(node: Node, model: Path, tmp_path: Path, rec: dict[str, Any]) -> None:
    started = time.monotonic()
    pod = rec["pod"] = make_pod(node, NAMESPACE, POD_NAME)
    for _ in range(CRASHES):
        _crash(pod, model, rec, None)
    rec["timings"]["without_s"] = time.monotonic() - started

    pile = pod.files()
    t_ds = time.monotonic()
    ds = rec["ds"] = start_daemonset(node, tmp_path / "journal")
    rec["shm_min_age"] = float(option(ds.container, "shm-min-age"))
    rec["interval"] = float(option(ds.container, "interval"))
    rec["kubelet_root"] = option(ds.container, "kubelet-root")

    def serving() -> bool:
        status, _ = ds.pod.status(ds.id)
        assert status.state == RUNNING, f"the DaemonSet's watch exited:\n{ds.log_lines()[-40:]}"
        try:
            return _runs(ds) >= 1
        except OSError:
            return False

    wait_for("the DaemonSet's first round", serving, 120, every=0.2)
    rec["confinement"] = ds.confinement()
    rec["timings"]["daemonset_first_round_s"] = time.monotonic() - t_ds
    wait_for("the pile-up to go", lambda: not pod.files() & pile, 120, every=0.2)
    rec["timings"]["pileup_removed_after_start_s"] = time.monotonic() - t_ds
    rec["pile"] = pile

    started = time.monotonic()
    for _ in range(CRASHES):
        _crash(pod, model, rec, ds)
    rec["timings"]["with_s"] = time.monotonic() - started
    rec["metrics"] = metrics(ds.metrics_addr)
    rec["events"] = ds.events()
    rec["journal"] = ds.journal_entries()


def _named(events: list[dict[str, Any]], attempt_id: str) -> bool:
    """A posix_shm change in the watch's log names this attempt's container and its pod."""
    return any(
        f"{attempt_id[:12]}, pod {NAMESPACE}/{POD_NAME})" in label
        for e in events
        if e.get("event") == "check_status" and e.get("check") == "posix_shm"
        for label in e.get("containers", [])
    )


# CAP_DAC_READ_SEARCH (2) and CAP_SYS_PTRACE (19): the yaml's add, after its drop ALL
READ_CAPS = (1 << 2) | (1 << 19)


def _judge(rec: dict[str, Any]) -> None:
    pod: Pod = rec["pod"]
    # the yaml's securityContext, as the kernel applied it to the running watch
    seccomp_filter = 2
    want = {"uid": 0, "cap_eff": READ_CAPS, "no_new_privs": 1, "seccomp": seccomp_filter,
            "root_ro": True}  # fmt: skip
    assert rec["confinement"] == want, rec["confinement"]
    rows: list[Row] = rec["rows"]
    without, with_ = rows[:CRASHES], rows[CRASHES:]
    # without the watch: every crash leaves its files, and they pile up
    kept: set[str] = set()
    for row in without:
        assert row.exit_code == 137, row
        assert row.own <= row.left_at_restart, f"attempt {row.attempt} lost {row.own}"
        kept |= row.own
        assert kept <= row.left_at_restart, f"before attempt {row.attempt + 1}: {kept}"
    assert rec["pile"] == kept
    # the DaemonSet's watch removed the pile-up, and each crashed attempt's files under it
    bound = rec["shm_min_age"] + REACT_S
    for row in with_:
        assert row.exit_code == 137, row
        assert row.own <= row.at_kill, f"attempt {row.attempt}'s files went while it ran"
        assert row.removed_after_s is not None, (
            f"attempt {row.attempt}'s files still there at the restart: {row.left_at_restart}"
        )
        assert row.removed_after_s <= bound, f"attempt {row.attempt}: {row.removed_after_s:.1f} s"
        assert not row.left_at_restart, row.left_at_restart
    # the live attempt's files stayed through three rounds
    assert with_[-1].held_rounds >= ROUNDS_HELD, with_[-1]
    # what it removed: only crashed attempts' files, each named with its pod from the CRI
    removed = {e["path"] for e in rec["journal"] if e.get("event") == "intent"}
    # ... each through the kubelet's pods directory it mounts (--kubelet-root), where the
    # emptyDir is also while no attempt runs
    volume = f"{rec['kubelet_root']}/pods/{pod.uid}/volumes/kubernetes.io~empty-dir/{pod.volume}/"
    assert all(p.startswith(volume) for p in removed), removed
    crashed = rec["pile"] | {f for row in with_ for f in row.at_kill}
    in_pod = {os.path.basename(f) for f in crashed}
    assert {os.path.basename(p) for p in removed} == in_pod, (removed, crashed)
    attempts = {
        row.attempt: a.id for row in with_ for a in pod.attempts if a.attempt == row.attempt
    }
    unnamed = [n for n, cid in attempts.items() if not _named(rec["events"], cid)]
    assert not unnamed, f"the watch's log names no pod for attempts {unnamed}: {rec['events']}"
    scraped = rec["metrics"]
    assert scraped.get("accelhost_watch_round_failures_total") == 0.0, scraped
