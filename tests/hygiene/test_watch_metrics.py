"""watch serves Prometheus metrics on a loopback port; the registry is the watch's own."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest
from hygiene_lab import PY, Lab, metric, scrape, watch_cli
from prometheus_client import REGISTRY, generate_latest

from accelhost.host.snapshot import load_snapshot
from accelhost.hygiene.options import HygieneOptions
from accelhost.hygiene.watch.watcher import WatchConfig, Watcher


def test_watch_serves_metrics_and_stops_on_sigterm(lab: Lab) -> None:
    leaked, _ = lab.segment("create-exit", 65536)
    with watch_cli("--interval", "0.5", "--shm-min-age", "0") as (proc, addr):
        assert addr.startswith("127.0.0.1:")
        body = ""
        deadline = time.monotonic() + 60
        while "accelhost_check_status" not in body and time.monotonic() < deadline:
            body = scrape(addr)
            time.sleep(0.2)
        for name in (
            'accelhost_check_status{check="orphan_engines",state="OK"}',
            'accelhost_check_status{check="shared_memory",state="WARN"} 1.0',
            "accelhost_shm_leaked_bytes",
            "accelhost_posix_shm_leaked_files",
            "accelhost_posix_shm_leaked_bytes",
            "accelhost_orphan_processes",
            'accelhost_hugepages_pages{size_bytes="2097152",state="total"}',
            'accelhost_hugepages_pages{size_bytes="2097152",state="free"}',
            "accelhost_watch_runs_total",
        ):
            assert name in body, name
        leaked_bytes = metric(body, "accelhost_shm_leaked_bytes")
        assert (
            leaked_bytes is not None and leaked_bytes >= 65536
        )  # our segment at least (others may exist)
        # no device source here: no device series at all, rather than zeros
        assert "accelhost_device_memory_used_bytes{" not in body
        os.kill(proc.pid, signal.SIGTERM)
        out, _err = proc.communicate(timeout=30)
        assert proc.returncode == 0
        events = [json.loads(line)["event"] for line in out.splitlines()]
        assert "check_status" in events and events[-1] == "stopped"


def test_registry_is_per_watch_and_devices_come_from_the_snapshot() -> None:
    host = load_snapshot("example:a2-192cpu-8npu-sees-npu0")
    logs: list[dict[str, object]] = []
    a = Watcher(lambda: host, HygieneOptions(), WatchConfig(), logs.append)
    b = Watcher(lambda: host, HygieneOptions(), WatchConfig(), logs.append)
    assert a.registry is not b.registry
    a.run_once()
    text = generate_latest(a.registry).decode()
    assert 'accelhost_device_memory_used_bytes{device="npu0"} 6.294601728e+10' in text
    assert 'accelhost_device_memory_total_bytes{device="npu7"}' in text
    assert "accelhost_device_memory_unattributed_bytes" in text
    # a source not in the recording is SKIP (never OK), and exports no sample
    assert 'accelhost_check_status{check="shared_memory",state="SKIP"} 1.0' in text
    assert "accelhost_shm_leaked_bytes" not in text
    assert "accelhost_" not in generate_latest(REGISTRY).decode()
    assert "accelhost_watch_runs_total 0.0" in generate_latest(b.registry).decode()
    # status changes are logged once, not every round
    n = len(logs)
    a.run_once()
    assert len(logs) == n


@pytest.mark.parametrize("addr", ["nonsense", "127.0.0.1:notaport", "127.0.0.1:99999"])
def test_bad_metrics_addr_is_one_line(addr: str) -> None:
    res = subprocess.run(
        [PY, "-m", "accelhost.cli.main", "watch", "--metrics-addr", addr, "--rounds", "1"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert res.returncode == 2 and res.stderr.startswith("accelhost watch: --metrics-addr")


def test_auto_clean_removes_leaks_at_once_and_orphans_after_two_rounds(lab: Lab) -> None:
    from hygiene_lab import pid_alive, shmids_now, wait_gone

    from accelhost.host.live import LiveHost
    from accelhost.hygiene.clean.cleaner import CleanFilters

    node = lab.device_node()
    orphan = lab.orphan_engine(node)
    leaked, _ = lab.segment("create-exit", 4096)
    journal = lab.tmp / "auto.jsonl"
    logs: list[dict[str, object]] = []
    watcher = Watcher(
        LiveHost,
        HygieneOptions(device_globs=(lab.glob(),), shm_min_age_s=0),
        WatchConfig(
            auto_clean=True,
            clean_orphan_rounds=2,
            journal=str(journal),
            grace_s=5,
            # a shared machine: never reach beyond what this test made
            scope=CleanFilters(pids=frozenset({orphan}), shmids=frozenset({leaked})),
        ),
        logs.append,
    )
    watcher.run_once()
    assert leaked not in shmids_now()
    assert pid_alive(orphan)  # seen once: not yet
    watcher.run_once()
    assert wait_gone(orphan)
    events = [e["event"] for e in logs]
    assert events.count("auto_clean") == 2
    text = generate_latest(watcher.registry).decode()
    assert 'accelhost_clean_actions_total{kind="remove_segment",result="ok"} 1.0' in text
    assert 'accelhost_clean_actions_total{kind="stop",result="ok"} 1.0' in text
    assert journal.read_text().count('"event": "intent"') == 2


# Makes a 4 KiB segment, hands it to `nobody` (IPC_SET of ipc_perm's uid and gid, which
# sit after its int key on every Linux ABI), prints its shmid and sleeps until killed.
NOBODYS_SEGMENT = r"""
import ctypes, ctypes.util, struct, time
libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
libc.shmget.argtypes = [ctypes.c_int, ctypes.c_size_t, ctypes.c_int]
libc.shmctl.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
shmid = libc.shmget(0, 4096, 0o1000 | 0o600)
ds = ctypes.create_string_buffer(512)
assert shmid >= 0 and libc.shmctl(shmid, 2, ds) == 0  # IPC_STAT
struct.pack_into("=II", ds, 4, 65534, 65534)
assert libc.shmctl(shmid, 1, ds) == 0  # IPC_SET
print(shmid, flush=True)
time.sleep(1000)
"""


def test_unasked_auto_clean_removes_only_the_segments_an_engine_made(lab: Lab) -> None:
    """A SysV segment is also how other software keeps state between its processes (one
    makes it and exits, others attach later): unless its scope names it by shmid or key,
    --auto-clean removes only a segment it saw an engine process make; the other stays leaked in the
    report, for a person to `clean`. Both belong to `nobody`, whose segments alone the
    watch's owner scope lets it touch on this shared machine."""
    from hygiene_lab import shmids_now, wait_gone

    from accelhost.host.live import LiveHost
    from accelhost.hygiene.clean.cleaner import CleanFilters

    made: dict[str, tuple[int, int]] = {}
    events: list[dict[str, object]] = []
    for title in ("VLLM::Worker_TP0", "myapp-setup"):
        proc = subprocess.Popen(
            ["bash", "-c", 'exec -a "$T" "$PY" -c "$H"'],
            env={**os.environ, "T": title, "PY": PY, "H": NOBODYS_SEGMENT},
            stdout=subprocess.PIPE,
            text=True,
        )
        lab.popens.append(proc)
        assert proc.stdout is not None
        shmid = int(proc.stdout.readline())
        lab.shmids.append(shmid)
        made[title] = (shmid, lab.adopt(proc.pid))
    watcher = Watcher(
        LiveHost,
        HygieneOptions(shm_min_age_s=0),
        WatchConfig(
            auto_clean=True,
            journal=str(lab.tmp / "auto.jsonl"),
            scope=CleanFilters(owners=frozenset({65534})),  # nobody's segments alone
        ),
        events.append,
    )
    watcher.run_once()  # both makers seen alive
    for _shmid, pid in made.values():
        os.kill(pid, signal.SIGKILL)
        assert wait_gone(pid)
    rnd = watcher.run_once()
    engine_made, other = made["VLLM::Worker_TP0"][0], made["myapp-setup"][0]
    assert engine_made not in shmids_now() and other in shmids_now()
    check = next(c for c in rnd.report.checks if c.name == "shared_memory")
    assert other in [e.get("shmid") for e in check.evidence]

    # what it keeps, it says, once: why, and the command that would remove it
    def kept() -> list[dict[str, object]]:
        return [e for e in events if e["event"] == "auto_clean_kept" and e["shmid"] == other]

    (note,) = kept()
    assert "no engine process was seen making it" in str(note["reason"])
    assert note["command"] == f"accelhost clean --yes --shmid {other} --shm-min-age 0"
    watcher.run_once()
    assert len(kept()) == 1


def test_a_scope_of_files_never_stops_an_orphan(lab: Lab, tmp_path) -> None:
    """A watch scoped to some files (or segments) leaves out the kinds its scope does not
    name: an orphan seen in every round is never stopped (it could be anyone's)."""
    from hygiene_lab import pid_alive

    from accelhost.host.live import LiveHost
    from accelhost.hygiene.clean.cleaner import CleanFilters

    orphan = lab.orphan_engine(lab.device_node())
    leaked, _ = lab.segment("create-exit", 4096)
    for scope in (
        CleanFilters(paths=frozenset({str(tmp_path / "psm_not_there")})),
        CleanFilters(shmids=frozenset({leaked})),
    ):
        logs: list[dict[str, object]] = []
        watcher = Watcher(
            LiveHost,
            HygieneOptions(device_globs=(lab.glob(),), shm_min_age_s=3600),
            WatchConfig(
                auto_clean=True, clean_orphan_rounds=1, journal=str(tmp_path / "j"), scope=scope
            ),
            logs.append,
        )
        watcher.run_once()
        watcher.run_once()
        stops = [
            a
            for e in logs
            if e["event"] == "auto_clean"
            for a in e["actions"]  # type: ignore[attr-defined]
            if a.get("kind") == "stop"
        ]
        assert not stops, stops
        assert pid_alive(orphan)


def test_memory_stays_bounded_over_many_rounds() -> None:
    import gc
    import tracemalloc

    host = load_snapshot("example:a2-192cpu-8npu-sees-npu0")
    watcher = Watcher(lambda: host, HygieneOptions(), WatchConfig(), lambda _e: None)
    for _ in range(30):
        watcher.run_once()
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(300):
            watcher.run_once()
            generate_latest(watcher.registry)
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert grown < 256 * 1024, grown


def test_failed_process_query_exports_no_unattributed_memory() -> None:
    """nvidia-smi answers the memory query but not the compute-apps one: used and total are
    known, who uses it is not; "all of it is unattributed" would be a false alarm."""
    from hygiene_fakes import FakeHost

    fake = FakeHost()
    fake.commands[
        "nvidia-smi --query-gpu=index,memory.used,memory.total --format=csv,noheader,nounits"
    ] = "0, 40000, 81559\n"
    fake.commands[
        "nvidia-smi --query-compute-apps=pid,used_memory,gpu_bus_id --format=csv,noheader,nounits"
    ] = {"stdout": "", "rc": 6}
    host = fake.host()
    watcher = Watcher(lambda: host, HygieneOptions(), WatchConfig(), lambda _e: None)
    rnd = watcher.run_once()
    assert {c.name: c.status for c in rnd.report.checks}["unattributed_memory"] == "UNKNOWN"
    text = generate_latest(watcher.registry).decode()
    assert 'accelhost_device_memory_used_bytes{device="gpu0"}' in text
    assert "accelhost_device_memory_unattributed_bytes{" not in text
    assert 'accelhost_check_status{check="unattributed_memory",state="UNKNOWN"} 1.0' in text


def test_a_failed_round_exports_unknown_not_the_previous_numbers() -> None:
    import threading

    from accelhost.host.base import Host

    host = load_snapshot("example:a2-192cpu-8npu-sees-npu0")
    broken = {"now": False}

    def factory() -> Host:
        if broken["now"]:
            raise OSError("host went away")
        return host

    logs: list[dict[str, object]] = []
    watcher = Watcher(factory, HygieneOptions(), WatchConfig(), logs.append)
    watcher.run(threading.Event(), rounds=1)
    assert "accelhost_device_memory_used_bytes{" in generate_latest(watcher.registry).decode()
    broken["now"] = True
    watcher.run(threading.Event(), rounds=1)
    text = generate_latest(watcher.registry).decode()
    assert logs[-1]["event"] == "round_failed"
    assert "accelhost_device_memory_used_bytes{" not in text  # stale numbers dropped
    assert 'accelhost_check_status{check="preflight",state="UNKNOWN"} 1.0' in text
    assert 'accelhost_check_status{check="orphan_engines",state="UNKNOWN"} 1.0' in text
    assert "accelhost_watch_round_failures_total 1.0" in text
    broken["now"] = False
    watcher.run(threading.Event(), rounds=1)
    text = generate_latest(watcher.registry).decode()
    # not requested: SKIP, and never exported as OK
    assert 'accelhost_check_status{check="preflight",state="SKIP"} 1.0' in text
    assert 'accelhost_check_status{check="preflight",state="OK"} 0.0' in text
