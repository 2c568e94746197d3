"""A container's own /dev/shm on this machine: a process in its own IPC and mount
namespace with its own tmpfs at /dev/shm, in a cgroup shaped like Docker's. The doctor
finds the crashed incarnation's file there and names the container; `clean --yes
--container` removes exactly that file through /proc/<pid>/root/dev/shm, and the live
incarnation's file (held open) stays. A test daemon on its own socket names it; one that
never answers costs at most a second and leaves the name unknown.

Needs root, `unshare` and a writable cgroup hierarchy (the real-Docker runs are `make e2e`).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from unix_server import unix_server


@dataclass
class FakeContainer:
    id: str
    pid: int  # the process inside (host pid)
    shm: str  # /proc/<pid>/root/dev/shm


def _cgroup_parent() -> Path | None:
    unified = Path("/sys/fs/cgroup/cgroup.controllers").exists()
    base = Path("/sys/fs/cgroup") if unified else Path("/sys/fs/cgroup/pids")
    return base if os.access(base, os.W_OK) else None


needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None or _cgroup_parent() is None,
    reason="needs root, unshare and a writable cgroup hierarchy",
)


@pytest.fixture
def container(tmp_path: Path) -> Iterator[FakeContainer]:
    parent = _cgroup_parent()
    assert parent is not None
    cid = secrets.token_hex(32)
    group = parent / f"accelhost-test-{cid[:8]}"
    scope = group / f"docker-{cid}.scope"
    ready = tmp_path / "ready"
    old = int(time.time()) - 7200
    script = (
        "mount -t tmpfs -o size=16m tmpfs /dev/shm || exit 1\n"
        "head -c 8192 /dev/zero > /dev/shm/psm_crashed\n"
        f"touch -d @{old} /dev/shm/psm_crashed\n"
        "head -c 8192 /dev/zero > /dev/shm/psm_live\n"
        f"echo $$ > {ready}\n"
        "exec sleep 600 3</dev/shm/psm_live\n"
    )
    outer = subprocess.Popen(
        ["unshare", "--ipc", "--mount", "--propagation", "private", "--fork", "sh", "-c", script]
    )
    inner = None
    try:
        scope.mkdir(parents=True)
        deadline = time.monotonic() + 20
        while not ready.exists() or not ready.read_text().strip():
            assert time.monotonic() < deadline and outer.poll() is None, "namespace did not start"
            time.sleep(0.1)
        inner = int(ready.read_text())
        (scope / "cgroup.procs").write_text(str(inner))
        yield FakeContainer(cid, inner, f"/proc/{inner}/root/dev/shm")
    finally:
        if inner is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(inner, signal.SIGKILL)
        outer.kill()
        outer.wait(timeout=10)
        for d in (scope, group):
            for _ in range(50):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.1)


def _cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "accelhost", *args], capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture
def daemon() -> Iterator[tuple[str, dict[str, str]]]:
    """A test daemon on its own unix socket answering `answers[path]` (absent: never)."""
    answers: dict[str, str] = {}

    def reply(conn: socket.socket, request: bytes) -> None:
        words = request.decode(errors="replace").split(" ")
        body = answers.get(words[1] if len(words) > 1 else "")
        if body is None:
            time.sleep(1.5)  # a daemon that never answers in time
            return
        head = f"HTTP/1.0 200 OK\r\nContent-Length: {len(body)}\r\n\r\n"
        conn.sendall(head.encode() + body.encode())

    with unix_server(reply) as path:
        yield path, answers


@needs_root
def test_doctor_and_clean_in_a_containers_own_dev_shm(
    container: FakeContainer, tmp_path: Path, daemon: tuple[str, dict[str, str]]
) -> None:
    sock, answers = daemon
    answers["/containers/json?all=1"] = json.dumps(
        [{"Id": container.id, "Names": ["/shm-pod"], "Image": "test", "State": "running"}]
    )
    start = time.monotonic()
    res = _cli(
        "doctor", "--json", "--check", "posix_shm", "--container", "shm-pod",
        "--docker-socket", sock,
    )  # fmt: skip
    # the daemon answers the listing but not the inspect or the events: a second each
    assert time.monotonic() - start < 30
    assert res.returncode in (0, 1), res.stderr
    (check,) = json.loads(res.stdout)["checks"]
    paths = {e["path"]: e for e in check["evidence"]}
    crashed = f"{container.shm}/psm_crashed"
    assert set(paths) == {crashed}, check
    who = paths[crashed]["left_by"]["containers"]
    assert [(c["id"], c["name"]) for c in who] == [(container.id, "shm-pod")]

    journal = tmp_path / "clean.jsonl"
    res = _cli(
        "clean", "--yes", "--json", "--container", container.id[:16], "--only", "shm",
        "--journal", str(journal),
    )  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    out = json.loads(res.stdout)
    assert [a["path"] for a in out["actions"]] == [crashed]
    assert [(o["target"], o["result"]) for o in out["outcomes"]] == [(crashed, "removed")]
    assert not os.path.exists(crashed)
    assert os.path.exists(f"{container.shm}/psm_live")  # the live incarnation's stays
    assert '"action": "remove_shm_file"' in journal.read_text()


@needs_root
def test_a_daemon_that_never_answers_leaves_names_unknown(
    container: FakeContainer, daemon: tuple[str, dict[str, str]]
) -> None:
    sock, _silent = daemon
    start = time.monotonic()
    res = _cli("doctor", "--json", "--container", container.id[:12], "--docker-socket", sock)
    assert time.monotonic() - start < 60
    assert res.returncode in (0, 1, 2), res.stderr
    report = json.loads(res.stdout)
    shm = next(c for c in report["checks"] if c["name"] == "posix_shm")
    (e,) = [e for e in shm["evidence"] if e["path"].endswith("psm_crashed")]
    (c,) = e["left_by"]["containers"]
    assert c["id"] == container.id and c["name"] is None
