"""Every answer true or "cannot tell" (issue 18, points 1 and 5).

- A reader that cannot see every process (the user `nobody`, against a root process that
  holds a /dev/shm file and a device node) says so: UNKNOWN, the unreadable pids in the
  evidence, and `clean` leaves the file it could not verify.
- A recording is judged like the live host it was made of; a fact a recording lacks
  (the whole process table) is SKIP "not in this recording", never a leak.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hygiene_fakes import as_live
from hygiene_lab import MAKE_SEM_PY, Lab, nobody_python, run_cli, stop_popen

from accelhost.host.live import LiveHost
from accelhost.host.redact import recorder
from accelhost.host.snapshot import SnapshotHost
from accelhost.hygiene import HygieneOptions, read_facts, run_checks
from accelhost.hygiene.clean.cleaner import plan_clean
from accelhost.hygiene.facts.host import HostFacts

SHM = Path("/dev/shm")
# Maps its queue (argv 1) and makes its semaphore (argv 2) as glibc's sem_open does.
HOLDER_PY = (
    MAKE_SEM_PY
    + r"""
import sys, time
fd = os.open(sys.argv[1], os.O_RDWR)
m = mmap.mmap(fd, 4096)
os.close(fd)
sem = make_sem(sys.argv[2])
print("ready", flush=True)
time.sleep(1000)
"""
)


@pytest.fixture
def shm_dirs() -> Iterator[list[Path]]:
    """Two directories of our own on the /dev/shm tmpfs (a real tmpfs: birth times kept),
    removed whole afterwards."""
    if not SHM.is_dir():
        pytest.skip("no /dev/shm")
    made = [Path(tempfile.mkdtemp(prefix="accelhost-trust-", dir=SHM)) for _ in range(2)]
    try:
        yield made
    finally:
        for d in made:
            shutil.rmtree(d, ignore_errors=True)


def _file(where: Path, name: str, age_s: float = 0.0) -> Path:
    path = where / name
    with open(path, "wb") as fh:
        fh.truncate(8192)
        fh.write(b"x" * 4096)
    if age_s:
        old = time.time() - age_s
        os.utime(path, (old, old))
    return path


def _as_nobody(tmp: Path) -> Callable[[list[str]], subprocess.CompletedProcess[str]]:
    """Run this checkout's CLI as the user nobody (a copy of the package under `tmp`)."""
    prefix, env = nobody_python(tmp)

    def run(args: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*prefix, "-m", "accelhost.cli.main", *args],
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
            env=env,
            cwd=tmp,
        )

    return run


def _checks(stdout: str) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in json.loads(stdout)["checks"]}


def test_nobody_cannot_tell_what_root_holds_and_clean_keeps_it(lab: Lab) -> None:
    """A root process holds a device node and a file in a shm dir; `nobody` can read
    neither its fds nor its maps. The device check and the file check are UNKNOWN with
    that pid named, never "no process holds a device node" / "held by no process"; `clean
    --yes` as nobody leaves the file (nobody could unlink it: it is nobody's, in a sticky
    directory) and says why."""
    if shutil.which("setpriv") is None:
        pytest.skip("needs setpriv (util-linux)")
    node = lab.device_node(f"davinci_trust_{uuid.uuid4().hex[:8]}")
    shm = Path(tempfile.mkdtemp(prefix="accelhost-trust-nobody-", dir=SHM))
    run_dir = Path(tempfile.mkdtemp(prefix="accelhost-trust-run-"))
    holder = None
    try:
        shm.chmod(0o1777)  # like /dev/shm: anyone may create, only the owner may unlink
        held = _file(shm, f"psm_{uuid.uuid4().hex[:8]}", age_s=7200)
        os.chown(held, 65534, 65534)
        held.chmod(0o666)
        holder = subprocess.Popen(
            ["bash", "-c", f"exec 3<'{node}' 4<'{held}'; exec sleep 1000"],
            stdin=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while len(os.listdir(f"/proc/{holder.pid}/fd")) < 5 and time.monotonic() < deadline:
            time.sleep(0.05)
        args = ["--device-glob", lab.glob(), "--shm-dir", str(shm)]
        only = ["--check", "device_holders", "--check", "posix_shm"]

        # root sees the holder: the setup is what the test says it is
        as_root = run_cli("doctor", "--json", *args, *only)
        root = _checks(as_root.stdout)
        assert holder.pid in {e.get("pid") for e in root["device_holders"]["evidence"]}
        assert str(held) not in {e.get("path") for e in root["posix_shm"]["evidence"]}

        nobody = _as_nobody(run_dir)
        res = nobody(["doctor", "--json", *args, *only])
        assert res.returncode == 2, res.stdout + res.stderr
        checks = _checks(res.stdout)
        dev = checks["device_holders"]
        assert dev["status"] == "UNKNOWN", dev
        assert "no process holds a device node as far as this user can see" in dev["summary"]
        (blind,) = [e for e in dev["evidence"] if e["kind"] == "unreadable_processes"]
        assert holder.pid in blind["pids"] and "may hold a device node" in blind["reason"]
        posix = checks["posix_shm"]
        assert posix["status"] == "UNKNOWN", posix
        (f,) = [e for e in posix["evidence"] if e.get("path") == str(held)]
        assert f["reason"].startswith("cannot tell: open files of pid(s)"), f
        assert "held by no process" not in json.dumps(posix)

        table = nobody(["doctor", *args, *only])
        assert "OK      no process holds a device node" not in table.stdout
        assert "cannot be read" in table.stdout

        run_dir.chmod(0o777)  # the journal goes here
        journal = run_dir / "clean.jsonl"
        clean = nobody(["clean", "--yes", "--only", "shm", *args, "--journal", str(journal)])
        assert held.exists(), clean.stdout + clean.stderr
        assert "0 action(s)" in clean.stdout
        assert re.search(r"\d+ not judged, kept \(open files of pid\(s\)", clean.stdout)
        named = nobody(["clean", "--yes", "--path", str(held), *args, "--journal", str(journal)])
        assert held.exists(), named.stdout + named.stderr
    finally:
        if holder is not None:
            stop_popen(holder)  # type: ignore[arg-type]
        shutil.rmtree(shm, ignore_errors=True)
        shutil.rmtree(run_dir, ignore_errors=True)


def test_a_plan_only_recording_skips_what_it_does_not_hold() -> None:
    """The bundled Ascend recording holds npu-smi and /proc/self/status only: the process
    checks are SKIP "not in this recording" (the docs' promise), nothing failed or could
    not run: exit 0."""
    res = run_cli("doctor", "--snapshot", "example:a3-640cpu-16npu", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    checks = _checks(res.stdout)
    for name in ("orphan_engines", "device_holders", "posix_shm", "shared_memory", "hugepages"):
        assert checks[name]["status"] == "SKIP", checks[name]
        assert "not in this recording" in checks[name]["summary"]
    assert "/proc lists no processes" not in res.stdout
    # what the recording does hold is still shown: npu-smi's process table
    assert len(checks["device_holders"]["evidence"]) == 16
    assert checks["unattributed_memory"]["status"] == "OK"


def test_the_bundled_vllm_recording_sees_each_semaphore_held_by_its_worker() -> None:
    """The real-vLLM recording: each Worker maps its `sem.mp-*` only under the temporary
    name sem_open made it with (`sem.XXXXXX (deleted)`, same inode); every semaphore is
    held, four by the healthy servers and one by the orphan Worker, so none is called
    leaked and `clean` plans no removal of them."""
    res = run_cli(
        "doctor", "--snapshot", "example:vllm-cpu-orphaned-engine", "--json", "--check", "posix_shm"
    )
    (check,) = json.loads(res.stdout)["checks"]
    assert check["status"] == "OK", check
    assert check["summary"].startswith("15 file(s) in /dev/shm, none leaked"), check
    assert not [e for e in check["evidence"] if "path" in e]
    plan = run_cli("clean", "--snapshot", "example:vllm-cpu-orphaned-engine", "--json")
    kinds = [a["kind"] for a in json.loads(plan.stdout)["actions"]]
    assert kinds == ["stop"]  # the orphans, and no file


def _report(facts: HostFacts, opts: HygieneOptions) -> dict[str, Any]:
    return run_checks(facts, opts).to_dict()


def _server_and_leftovers(
    dirs: list[Path], popens: list[subprocess.Popen[str]]
) -> tuple[Path, Path, list[Path]]:
    """dirs[0]: a live engine maps its queue, and its semaphore only under the temporary
    name it made it with. dirs[1]: a dead tree's queue and semaphore, two hours unchanged."""
    queue = _file(dirs[0], f"psm_{uuid.uuid4().hex[:8]}")
    sem = dirs[0] / f"sem.mp-{uuid.uuid4().hex[:8]}"
    argv = ["python3", HOLDER_PY, str(queue), str(sem)]
    engine = subprocess.Popen(
        ["bash", "-c", 'exec -a VLLM::EngineCore "$0" -c "$1" "$2" "$3"', *argv],
        stdout=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    popens.append(engine)
    assert engine.stdout is not None and engine.stdout.readline().strip() == "ready"
    past = time.time() - 7200
    os.utime(sem, (past, past))  # old: only its holder keeps it
    dead = [
        _file(dirs[1], f"psm_{uuid.uuid4().hex[:8]}", age_s=7200),
        _file(dirs[1], f"sem.mp-{uuid.uuid4().hex[:8]}", age_s=7200),
    ]
    return queue, sem, dead


def test_a_recording_is_judged_as_the_live_host(shm_dirs: list[Path]) -> None:
    """Every check, evidence included, is the same on the live host and on its recording:
    the live server's semaphore is kept (held by inode) and the dead tree's files leaked."""
    popens: list[subprocess.Popen[str]] = []
    try:
        queue, sem, dead = _server_and_leftovers(shm_dirs, popens)
        opts = HygieneOptions(shm_dirs=tuple(str(d) for d in shm_dirs))
        rec = recorder(LiveHost())
        live = _report(read_facts(rec, opts), opts)
        snap = rec.to_snapshot()
        replayed = _report(read_facts(SnapshotHost(snap), opts), opts)
        assert as_live(replayed) == live
        posix = {c["name"]: c for c in live["checks"]}["posix_shm"]
        named = {e["path"]: e for e in posix["evidence"] if "path" in e}
        assert str(queue) not in named and str(sem) not in named
        assert {str(p) for p in dead} <= set(named)
        assert all(named[str(p)]["reason"].startswith("held by no process") for p in dead)

        # the same recording without birth times (a kernel that keeps none, an older
        # recorder): the same verdicts, which never needed them
        for entry in snap["stat_dirs"][str(shm_dirs[0])]:
            entry.pop("birth", None)
        blind = read_facts(SnapshotHost(snap), opts)
        assert as_live(_report(blind, opts)) == live
        paths = {getattr(a, "path", None) for a in plan_clean(blind, opts)}
        assert str(sem) not in paths and {str(p) for p in dead} <= paths
    finally:
        for p in popens:
            stop_popen(p)


def test_hidden_processes_are_never_dead() -> None:
    """A process /proc lists but will not describe to this reader (hidepid=1), and any
    process under a /proc that hides others (hidepid=2): their segments are never called
    leaked, and the check says why."""
    from hygiene_fakes import FakeHost

    fake = FakeHost()
    fake.segment(1, 2**20, cpid=555)
    fake.pids.append(555)  # listed, its stat unreadable
    opts = HygieneOptions()
    gone = run_checks(read_facts(fake.host(), opts), opts, ("shared_memory",)).checks[0]
    assert gone.status == "WARN"  # no /proc/555 any more: its creator is dead
    snap = fake.snapshot()
    snap["stats"] = {
        "/proc/555": {"name": "555", "kind": "dir", "size": 0, "blocks": 0, "uid": 0}
        | {"owner": "root", "dev": 1, "inode": 1, "mtime": 0.0, "ctime": 0.0}
    }
    hidden = read_facts(SnapshotHost(snap), opts)
    assert 555 in hidden.hidden_pids and hidden.alive(555)
    check = run_checks(hidden, opts, ("shared_memory",)).checks[0]
    assert check.status == "OK" and "hidden from this user" in check.summary
    del snap["stats"]
    snap["files"]["/proc/self/mountinfo"] = (
        "22 1 0:21 / /proc rw,nosuid - proc proc rw,hidepid=invisible\n"
    )
    partial = read_facts(SnapshotHost(snap), opts)
    assert partial.alive(4242)  # not listed: maybe hidden, never dead
    check = run_checks(partial, opts, ("shared_memory",)).checks[0]
    assert check.status == "OK" and "hidepid=invisible" in check.summary
