"""The spec's table replayed on the suite's own Docker daemon, in three batches.

Each batch runs its containers through what users do and records, at the moment it
matters, what the tests check afterwards: how each stop went (`Stopped`), accelhost's
answers while the containers serve and right after each stop, the snapshot of the leak.
At most two vLLM servers run at once (the machine has 2 cores). Each batch is a generator
for a module-scoped fixture: it yields its record and removes its containers and every
file they left (those nothing holds) in its finally, whatever happened.

1. `seed_beside_run`: the seed's `bash -lc "vllm ...; echo done"` as PID 1 beside
   `accelhost run` as PID 1, and a device holder; the first is stopped (snapshot, doctor,
   clean of its leftovers while the second still serves), then the second.
2. `engine_and_tini`: the engine itself as PID 1, and `--init` (tini); both stopped.
3. `removed_and_pod`: the seed's pattern removed with `docker rm -f` while it serves; a
   pod replay (a "pause" container owning the IPC namespace and a 1 GiB /dev/shm, vLLM in a
   second one with `--ipc=container:pause --restart=on-failure`) whose API server is
   killed with SIGKILL and restarted by Docker; the pod still serves when the batch yields.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from docker_accelhost import accelhost_for, clean_files, clean_plan, doctor, has_option
from docker_daemon import Container, Daemon, host_mounts
from docker_vllm import (
    HOST_SHM,
    PID1,
    Stopped,
    VllmContainer,
    crash_api_server,
    remove_and_measure,
    remove_unheld,
    start_vllm,
    stop_and_measure,
)
from procs import wait_for

DEVICE_NODE = "/dev/davinci0"  # an Ascend device's node, here a stand-in: /dev/null's numbers


@dataclass
class Timings:
    """The measured table (docs/e2e.md), filled as the batches run."""

    rows: list[Stopped] = field(default_factory=list)
    batches: dict[str, float] = field(default_factory=dict)
    notes: dict[str, float] = field(default_factory=dict)

    def markdown(self) -> str:
        lines = [
            "| container's PID 1 | how | took | exit | left in its /dev/shm |",
            "| --- | --- | --- | --- | --- |",
        ]
        for row in self.rows:
            left = _describe(row.sizes) if row.left else "nothing"
            code = "—" if row.exit_code is None else str(row.exit_code)
            lines.append(
                f"| {PID1[row.pid1].label} | {row.how} | {row.seconds:.1f} s | {code} | {left} |"
            )
        lines.append("")
        lines += [f"- {k}: {v:.0f} s" for k, v in {**self.notes, **self.batches}.items()]
        return "\n".join(lines)


def _describe(sizes: dict[str, int]) -> str:
    psm = sorted((s for p, s in sizes.items() if "/psm_" in p), reverse=True)
    sems = [p for p in sizes if "/sem.mp-" in p]
    mib = " + ".join(f"{s / 2**20:.0f}" for s in psm)
    return f"{len(psm)} `psm_*` ({mib} MiB apparent) + {len(sems)} `sem.mp-*`"


def _remove(daemon: Daemon, *containers: Container | VllmContainer | None) -> set[str]:
    """Remove them (the batch's finally); return the files the vLLM ones made, found now
    for one whose batch failed before it looked (so that they are removed too)."""
    own: set[str] = set()
    for c in containers:
        if isinstance(c, VllmContainer):
            own |= c.own
            with contextlib.suppress(Exception):  # inspect fails for one removed already
                if c.container.state()["Running"]:
                    own |= c.find_own()
        if c is not None:
            with contextlib.suppress(Exception):
                daemon.remove(c.container if isinstance(c, VllmContainer) else c)
    return own


def _device_holder(daemon: Daemon) -> tuple[Container, int]:
    """A container whose `sleep` holds the device node open (not PID 1: bash is)."""
    holder = daemon.create(
        "ah-device-holder",
        ["--network", "none", "--device", f"/dev/null:{DEVICE_NODE}", *host_mounts()],
        ["bash", "-c", f"sleep infinity 3<{DEVICE_NODE} & wait"],
    )

    def holding() -> int | None:
        for pid in holder.pids():
            with contextlib.suppress(OSError):
                fds = os.listdir(f"/proc/{pid}/fd")
                if any(_readlink(f"/proc/{pid}/fd/{fd}") == DEVICE_NODE for fd in fds):
                    return pid
        return None

    pid = wait_for(f"{holder.name}'s sleep to open {DEVICE_NODE}", holding, 30)
    assert isinstance(pid, int)
    return holder, pid


def _readlink(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return ""


def seed_beside_run(
    daemon: Daemon, model: Path, workdir: Path, timings: Timings
) -> Iterator[dict[str, Any]]:
    rec: dict[str, Any] = {}
    seed = run = holder = None
    started = time.monotonic()
    try:
        holder, rec["holder_pid"] = _device_holder(daemon)
        rec["holder"] = holder
        seed = start_vllm(daemon, "ah-seed-bash", "bash", model)
        run = start_vllm(daemon, "ah-run", "run", model)
        rec["seed"], rec["run"] = seed.wait_ready(), run.wait_ready()
        timings.notes["two servers until both answer"] = time.monotonic() - started
        seed.find_own(), run.find_own()
        rec["seed_pid1_cmd"] = _cmd(seed.container.pid1())
        rec["run_pid1_cmd"] = _cmd(run.container.pid1())
        rec["serving"] = doctor(daemon)

        rec["seed_stop"] = stop_and_measure(seed)
        timings.rows.append(rec["seed_stop"])
        snapshot = workdir / "docker-bash-pid1-leak.json"
        rec["snapshot_answer"] = accelhost_for(daemon, "snapshot", "-o", str(snapshot))
        rec["snapshot"] = snapshot
        if os.environ.get("E2E_RECORD_DIR"):
            shutil.copy(snapshot, Path(os.environ["E2E_RECORD_DIR"]) / snapshot.name)
        rec["after_seed_stop"] = doctor(daemon)
        rec["plan_after_seed_stop"] = clean_plan(daemon)
        scope = ("--container", seed.name) if has_option("clean", "--container") else ()
        rec["clean_scope"] = scope
        rec["run_files"] = run.present()
        rec["clean"] = clean_files(
            daemon, rec["seed_stop"].left, str(workdir / "clean.jsonl"), *scope
        )
        rec["seed_left_after_clean"] = seed.present()
        rec["run_files_after_clean"] = run.present()
        rec["run_answers_after_clean"] = run.answers()

        rec["run_stop"] = stop_and_measure(run)
        timings.rows.append(rec["run_stop"])
        timings.batches["batch 1 (seed's bash beside accelhost run, device holder)"] = (
            time.monotonic() - started
        )
        yield rec
    finally:
        remove_unheld(_remove(daemon, seed, run, holder))


def engine_and_tini(daemon: Daemon, model: Path, timings: Timings) -> Iterator[dict[str, Any]]:
    rec: dict[str, Any] = {}
    engine = tini = None
    started = time.monotonic()
    try:
        engine = start_vllm(daemon, "ah-engine-pid1", "engine", model)
        tini = start_vllm(daemon, "ah-tini", "tini", model)
        rec["engine"], rec["tini"] = engine.wait_ready(), tini.wait_ready()
        engine.find_own(), tini.find_own()
        rec["engine_pid1_cmd"] = _cmd(engine.container.pid1())
        rec["tini_pid1_cmd"] = _cmd(tini.container.pid1())
        rec["serving"] = doctor(daemon)
        rec["engine_stop"] = stop_and_measure(engine)
        rec["tini_stop"] = stop_and_measure(tini)
        timings.rows += [rec["engine_stop"], rec["tini_stop"]]
        rec["after_stops"] = doctor(daemon)
        timings.batches["batch 2 (engine as PID 1, tini)"] = time.monotonic() - started
        yield rec
    finally:
        remove_unheld(_remove(daemon, engine, tini))


def removed_and_pod(daemon: Daemon, model: Path, timings: Timings) -> Iterator[dict[str, Any]]:
    rec: dict[str, Any] = {}
    victim = pod = pause = None
    started = time.monotonic()
    try:
        pause = daemon.create(
            "ah-pod-pause",
            ["--ipc=shareable", "--shm-size", "1g", "--network", "none", *host_mounts()],
            ["sleep", "infinity"],
        )
        pod_shm = f"/proc/{pause.pid1()}/root/dev/shm/"
        rec["pause"], rec["pod_shm"] = pause, pod_shm
        victim = start_vllm(daemon, "ah-rm-f", "bash", model)  # the seed's own story
        pod = start_vllm(
            daemon, "ah-pod-vllm", "engine", model,
            ipc=f"container:{pause.id}", shm_dir=pod_shm, options=["--restart=on-failure"],
        )  # fmt: skip
        rec["victim"], rec["pod"] = victim.wait_ready(), pod.wait_ready()
        victim.find_own(), pod.find_own()
        rec["serving"] = doctor(daemon)
        rec["rm_f"] = remove_and_measure(victim)
        timings.rows.append(rec["rm_f"])
        # at once, as a user's next command or a watch's round comes: Docker's events are
        # read up to the host's clock, so the removal that just returned is known
        rec["after_rm_f"] = doctor(daemon)

        old_own = set(pod.own)
        old_pid = crash_api_server(pod)
        crashed = time.monotonic()

        def restarted() -> bool:
            info = pod.container.inspect()
            pid = int(info["State"]["Pid"])
            return bool(
                info["RestartCount"] >= 1 and info["State"]["Running"] and pid not in (0, old_pid)
            )

        wait_for(f"{pod.name} to be restarted by Docker", restarted, 120)
        new = VllmContainer(
            pod.container,
            "engine",
            pod.port,
            model,
            pod_shm,
            set(os.listdir(pod_shm)),
            time.time(),
        )
        rec["new"] = new
        new.wait_ready()
        timings.notes["pod: from kill -9 until the new incarnation answers"] = (
            time.monotonic() - crashed
        )
        new.find_own()
        rec.update(
            old_pid=old_pid, old_own=old_own, old_left={f for f in old_own if os.path.exists(f)}
        )
        rec["new_own"] = set(new.own)
        names = {os.path.basename(f) for f in old_own | new.own}
        rec["on_host_shm"] = names & set(os.listdir(HOST_SHM))
        rec["pod_restarted"] = doctor(daemon)
        rec["plan_pod_restarted"] = clean_plan(daemon)
        timings.batches["batch 3 (docker rm -f, the pod's crash and restart)"] = (
            time.monotonic() - started
        )
        yield rec
    finally:
        own = _remove(daemon, victim, pod, pause)
        remove_unheld({f for f in own if f.startswith(HOST_SHM)})  # the pod's go with it


def _cmd(pid: int) -> str:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    return ""
