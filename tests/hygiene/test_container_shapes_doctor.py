"""`doctor --json` names the container of a process in each cgroup shape the parser learned
from public reports (LXC, systemd-nspawn, containerd's `/default/<id>`, Docker with a
cgroupfs `--cgroup-parent`), and leaves a bare id no runtime lists on the host."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from hygiene_fakes import FakeHost

from container_hosts import cid, docker_answers, on_host, put_in_container

# (pid, cgroup path, inner pid namespace)
ENGINES = [
    (3001, "/lxc.payload.vllm-lxc/system.slice/vllm.service", 4026532301),
    (
        3002,
        "/machine.slice/machine-vllm\\x2dspawn.scope/payload/system.slice/vllm.service",
        4026532302,
    ),
    (3003, f"/default/{cid(0x33)}", 4026532303),
    (3004, f"/engines/{cid(0x44)}", 4026532304),  # docker run --cgroup-parent=/engines
    (3005, f"/engines/{cid(0x55)}", 4026532305),  # the same shape, no runtime lists it
]


def shapes_host() -> FakeHost:
    fake = FakeHost()
    on_host(fake, 1)
    on_host(fake, 900)
    for pid, path, pid_ns in ENGINES:
        fake.proc(pid, "VLLM::EngineCore", ppid=1, pgid=pid, sid=pid)
        put_in_container(fake, pid, path, pid_ns=pid_ns, nspid=(pid, 7))
    docker_answers(fake.http, [{"id": cid(0x44), "name": "vllm-parent", "pid": 0}])
    return fake


def _orphans(snap: Path, *more: str) -> dict[str, Any]:
    res = subprocess.run(
        [sys.executable, "-m", "accelhost", "doctor", "--snapshot", str(snap), "--json",
         "--check", "orphan_engines", *more],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert res.stdout, res.stderr
    (check,) = json.loads(res.stdout)["checks"]
    return check  # type: ignore[no-any-return]


def test_doctor_json_names_each_new_shapes_container(tmp_path: Path) -> None:
    snap = tmp_path / "shapes.json"
    snap.write_text(json.dumps(shapes_host().snapshot()))
    check = _orphans(snap)
    by_pid = {e["pid"]: e["container"] for e in check["evidence"]}
    assert set(by_pid) == {3001, 3002, 3003, 3004, 3005}
    named = {pid: c and (c["runtime"], c["id"], c["name"]) for pid, c in by_pid.items()}
    assert named == {
        3001: ("lxc", "vllm-lxc", "vllm-lxc"),
        3002: ("systemd-nspawn", "vllm-spawn", "vllm-spawn"),
        3003: ("containerd", cid(0x33), None),  # no runtime to name it: the id is the answer
        3004: ("docker", cid(0x44), "vllm-parent"),  # Docker lists the id: Docker's
        3005: None,  # the runtime would be a guess: a host process, as before
    }
    assert by_pid[3001]["label"] == "vllm-lxc (lxc vllm-lxc)"
    # `--container NAME` keeps what that LXC or nspawn container runs, by the cgroup's name
    for name, pid in (("vllm-lxc", 3001), ("vllm-spawn", 3002), ("vllm-parent", 3004)):
        assert [e["pid"] for e in _orphans(snap, "--container", name)["evidence"]] == [pid]
