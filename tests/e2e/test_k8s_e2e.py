"""A Kubernetes pod's engine crashes: its /dev/shm files, between the attempts and after.

On the suite's own CRI node (tests/e2e/cri_node.py: containerd's CRI plugin driven as the
kubelet drives it, tests/e2e/cri_pod.py), one pod runs real vLLM with an emptyDir (medium
Memory) at /dev/shm, as vLLM's and SGLang's Kubernetes examples have it. The story runs
once (the module's fixture) and records what was there and what `accelhost doctor` said at
each moment: while attempt 0 serves, after `kill -9` of its API server (the container's
PID 1) and before the restart (the kubelet's back-off, up to 5 minutes in
CrashLoopBackOff), and after attempt 1 answers. The tests judge the records.

accelhost is told about the node as a user would: `CONTAINER_RUNTIME_ENDPOINT` (what
crictl reads), and `--cri-socket` / `--kubelet-root` where doctor offers them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cri_node import Node, start_node
from cri_pod import EXITED, Attempt, Pod, make_pod
from docker_accelhost import has_option, leftover_items
from engine import accelhost_argv
from hostcli import Answer, check, paths_named, say_at_end
from procs import SHM_DIR, wait_for

NAMESPACE, POD_NAME = "ah-e2e", "vllm-0"


def cri_args(node: Node, command: str = "doctor") -> list[str]:
    """How this node is named to accelhost, with the options `command` offers today."""
    args: list[str] = []
    if has_option(command, "--cri-socket"):
        args += ["--cri-socket", node.endpoint]
    if has_option(command, "--kubelet-root"):
        args += ["--kubelet-root", str(node.kubelet_root)]
    return args


def accelhost_on(node: Node, *args: str, timeout: float = 300) -> Answer:
    """`accelhost ARGS` on the host, told about the node; its `--json` read back."""
    env = {**os.environ, "CONTAINER_RUNTIME_ENDPOINT": node.endpoint}
    argv = accelhost_argv(*args[:1], *node.accelhost_args.get(args[0], ()), *args[1:])
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False,
                          env=env)  # fmt: skip
    data = json.loads(done.stdout) if "--json" in args and done.stdout.strip() else None
    return Answer(done.returncode, data, done.stdout, done.stderr)


def doctor(node: Node) -> Answer:
    return accelhost_on(node, "doctor", "--json", "--shm-min-age", "0")


def names(paths: set[str]) -> set[str]:
    return {os.path.basename(p) for p in paths}


def engine_files(pod: Pod) -> set[str]:
    """The emptyDir's files once vLLM has made its queues (psm_*) and semaphore (sem.mp-*)."""

    def made() -> set[str]:
        found = pod.files()
        ok = any("/psm_" in f for f in found) and any("/sem.mp-" in f for f in found)
        return found if ok else set()

    return set(wait_for(f"{pod.ref}'s files in its emptyDir", made, 120))  # type: ignore[arg-type]


def cgroups(pid: int) -> str:
    """/proc/PID/cgroup ("" once it is gone)."""
    try:
        return Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return ""


def attempt_gone(pod: Pod, attempt: Attempt) -> bool:
    return not {p for p in pod.pids() if attempt.id in cgroups(p)}


def shm_device(pid: int) -> int:
    """The filesystem a process sees at /dev/shm (st_dev, through its root)."""
    return os.stat(f"/proc/{pid}/root/dev/shm").st_dev


DOCTOR_MOMENTS = ("doctor_serving", "doctor_between", "doctor_after")


def _summary(answer: Answer | None) -> str:
    """What doctor said of /dev/shm and of the containers' PID 1s, in one line each."""
    if answer is None:
        return "not run"
    if answer.data is None:
        return f"exit {answer.rc}: {answer.stderr.strip()[-300:]}"
    said = {c["name"]: f"{c['status']} {c['summary']}" for c in answer.data["checks"]}
    return "; ".join(f"{k}: {said.get(k, 'absent')}" for k in ("posix_shm", "container_init"))


def _report(request: pytest.FixtureRequest, e2e_dir: Path, rec: dict[str, Any]) -> None:
    """The run's figures and doctor's answers: kept under e2e_dir and printed at the end."""
    for key in DOCTOR_MOMENTS:
        answer = rec.get(key)
        if answer is not None:
            failed = {"rc": answer.rc, "stderr": answer.stderr}
            body = answer.data if answer.data is not None else failed
            (e2e_dir / f"k8s-{key}.json").write_text(json.dumps(body, indent=1))
    (e2e_dir / "k8s-timings.json").write_text(json.dumps(rec["timings"], indent=1))
    lines = [f"  {k}: {v:.1f} s" for k, v in rec["timings"].items()]
    lines += [f"  {k}: {_summary(rec.get(k))}" for k in DOCTOR_MOMENTS]
    text = "\n== the CRI node's pod, as this run saw it\n" + "\n".join(lines)
    say_at_end(request, text)


@pytest.fixture(scope="module")
def cri_node(e2e_dir: Path) -> Iterator[Node]:
    node = start_node(e2e_dir / "kubelet")
    node.keep_logs = e2e_dir / "k8s-logs"  # each container's log, kept when the pod goes
    try:
        yield node
    finally:
        node.close()


def _story(node: Node, model: Path, rec: dict[str, Any]) -> None:
    """Attempt 0 serves; `kill -9` of its API server; doctor between; attempt 1 serves."""
    started = time.monotonic()
    node.accelhost_args = {c: cri_args(node, c) for c in ("doctor", "clean")}
    pod = rec["pod"] = make_pod(node, NAMESPACE, POD_NAME)
    first = rec["first"] = pod.start_engine(model)
    pod.wait_ready(first)
    rec["timings"]["pod_start_to_answer_s"] = time.monotonic() - started
    rec["first_answers"] = pod.answers(first, model)
    rec["serving_files"] = engine_files(pod)
    pid1 = pod.pid1(first)
    rec["first_pid1_cmd"] = Path(f"/proc/{pid1}/cmdline").read_bytes().replace(b"\0", b" ")
    rec["first_cgroup"] = cgroups(pid1)
    rec["first_status"] = pod.status(first.id)[0]
    pause = [p for p in pod.pids() if str(pod.sandbox_id) in cgroups(p)]
    rec["shm_devices"] = {
        "engine": shm_device(pid1),
        "pause": [shm_device(p) for p in pause],
        "empty_dir": os.stat(pod.empty_dir).st_dev,
    }
    rec["host_shm_names"] = set(os.listdir(SHM_DIR))
    rec["doctor_serving"] = doctor(node)

    crashed = time.monotonic()
    pod.tracked.signal([pid1], signal.SIGKILL)  # kill -9 of the container's PID 1
    rec["first_exit"] = pod.wait_exited(first)
    wait_for("attempt 0's processes to go", lambda: attempt_gone(pod, first), 60)
    rec["timings"]["kill_to_exited_s"] = time.monotonic() - crashed
    rec["left"] = pod.files()
    rec["doctor_between"] = doctor(node)  # the kubelet's back-off: nothing of it runs

    restarted = time.monotonic()
    second = rec["second"] = pod.start_engine(model)
    pod.wait_ready(second)
    rec["timings"]["restart_to_answer_s"] = time.monotonic() - restarted
    rec["second_answers"] = pod.answers(second, model)
    rec["second_status"] = pod.status(second.id)[0]
    wait_for("attempt 1's own files", lambda: engine_files(pod) - rec["left"], 120)
    rec["after_restart_files"] = pod.files()
    rec["doctor_after"] = doctor(node)
    rec["timings"]["story_s"] = time.monotonic() - started


@pytest.fixture(scope="module")
def crash_story(
    request: pytest.FixtureRequest, cri_node: Node, tiny_model: Path, e2e_dir: Path
) -> Iterator[dict[str, Any]]:
    """The story, run once; what it recorded is reported even when a step fails."""
    rec: dict[str, Any] = {"timings": dict(cri_node.timings)}
    try:
        _story(cri_node, tiny_model, rec)
        yield rec
    finally:
        _report(request, e2e_dir, rec)


# -- the node and the pod, as the kubelet makes them (passes on today's accelhost) -------------


def test_cri_pod_runs_vllm_and_a_crash_leaves_its_files_in_the_emptydir(crash_story) -> None:
    rec = crash_story
    pod: Pod = rec["pod"]
    first, second = rec["first"], rec["second"]
    # the pod as the kubelet makes it: its cgroup, its labels, the attempt numbers
    assert f"/kubepods/burstable/pod{pod.uid}/{first.id}" in rec["first_cgroup"], rec
    for status, attempt in ((rec["first_status"], 0), (rec["second_status"], 1)):
        assert status.metadata.attempt == attempt and status.metadata.name == "vllm", status
        assert status.labels["io.kubernetes.pod.namespace"] == NAMESPACE, status.labels
        assert status.labels["io.kubernetes.pod.name"] == POD_NAME, status.labels
        assert status.labels["io.kubernetes.pod.uid"] == pod.uid, status.labels
        assert status.labels["io.kubernetes.container.name"] == "vllm", status.labels
    assert first.id != second.id
    # the API server is the container's PID 1, and vLLM answered
    assert b"vllm.entrypoints.openai.api_server" in rec["first_pid1_cmd"], rec["first_pid1_cmd"]
    assert rec["first_answers"] and rec["second_answers"]
    # its files are in the emptyDir (the kubelet's path), none in the host's /dev/shm
    serving = rec["serving_files"]
    assert all(f.startswith(f"{pod.empty_dir}/") for f in serving), serving
    assert not names(serving) & rec["host_shm_names"], "an engine file in the host's /dev/shm"
    # the engine's /dev/shm is the emptyDir; the pause container's is another filesystem
    devices = rec["shm_devices"]
    assert devices["engine"] == devices["empty_dir"], devices
    assert devices["pause"] and devices["empty_dir"] not in devices["pause"], devices
    # the crash: exit 137 (SIGKILL), every file stays for the next attempt to find
    assert rec["first_exit"].state == EXITED and rec["first_exit"].exit_code == 137
    assert rec["left"] == serving, f"left {rec['left']} of {serving}"
    new = rec["after_restart_files"] - rec["left"]
    assert any("/psm_" in f for f in new), rec["after_restart_files"]
    assert rec["left"] <= rec["after_restart_files"], "the old attempt's files went"


# -- what accelhost says of it (issue 25's "Done when"; being built) -------------------------


def _named_with_the_pod(
    report: Any, pod: Pod, files: set[str], attempt: Attempt, when: str
) -> None:
    said = [f"{c['name']}: {c['summary']}" for c in report.get("checks", [])]
    for name in sorted(names(files)):
        items = [i for p in paths_named(report) if os.path.basename(p) == name
                 for i in leftover_items(report, p)]  # fmt: skip
        assert items, f"{when}: doctor does not find {name} (it said: {said})"
        for item in items:
            left = item.get("left_by")
            assert isinstance(left, dict) and left.get("containers"), f"{when}: {name}: {item}"
            assert not left.get("ambiguous"), f"{when}: {name}: cannot tell who: {left}"
            for who in left["containers"]:
                named = who.get("pod") or {}
                assert (named.get("namespace"), named.get("name")) == (NAMESPACE, POD_NAME), who
                pause = who.get("id") == pod.sandbox_id or who.get("name") == "POD"
                assert not pause, f"{when}: {name} blamed on the pause container: {who}"
                assert who.get("id") == attempt.id, f"{when}: {name} not by attempt 0: {who}"


def test_doctor_names_a_crashed_attempts_files_with_their_pod_and_clean_removes_them(
    crash_story, cri_node: Node, tiny_model: Path, tmp_path: Path
) -> None:
    rec = crash_story
    pod: Pod = rec["pod"]
    left, first = rec["left"], rec["first"]
    # between the attempts: nothing of the pod runs, its emptyDir is still judged
    _named_with_the_pod(rec["doctor_between"].data, pod, left, first, "between attempts")
    # after the restart: the old files named the same way, the new attempt's are no leftovers
    after = rec["doctor_after"].data
    _named_with_the_pod(after, pod, left, first, "after the restart")
    new = rec["after_restart_files"] - left
    assert not names(paths_named(after)) & names(new), f"live files called leftovers: {new}"
    # clean --container <namespace>/<pod> --yes removes exactly the old ones
    done = accelhost_on(
        cri_node, "clean", "--yes", "--json", "--only", "shm", "--shm-min-age", "0",
        "--container", pod.ref, "--journal", str(tmp_path / "clean.jsonl"),
    )  # fmt: skip
    assert done.rc == 0, done.explain()
    assert not any(os.path.exists(f) for f in left), f"still there: {pod.files() & left}"
    assert pod.files() >= new, "clean removed the live attempt's files"
    assert pod.answers(rec["second"], tiny_model), "the engine stopped answering"
    # and it was told about the node as a user tells it
    for command, args in cri_node.accelhost_args.items():
        assert "--cri-socket" in args and "--kubelet-root" in args, f"{command} offers {args}"


def test_container_init_names_the_pod_before_harm_with_a_kubernetes_fix(crash_story) -> None:
    found = check(crash_story["doctor_serving"].data, "container_init")
    assert found["status"] == "WARN", found
    risky = [e for e in found["evidence"] if e.get("risky")]
    pods = [(e["container"].get("pod") or {}) for e in risky]
    assert any((p.get("namespace"), p.get("name")) == (NAMESPACE, POD_NAME) for p in pods), found
    assert f"{NAMESPACE}/{POD_NAME}" in found["summary"], found["summary"]
    fix = found["fix"]
    assert 'command: ["accelhost", "run", "--"' in fix, fix
    assert "docker" not in fix and "--ipc" not in fix, f"Docker's words for a pod: {fix}"
