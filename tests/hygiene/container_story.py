"""The Docker leak, as a recorded host: what the spec measured, laid out on one machine.

Containers (Docker 20.10, every one with vLLM's CPU build):
- `vllm-bash`: `bash -lc "vllm serve ..."` as PID 1, `--ipc=host`, stopped with `docker stop`
  (exit 137): its 2 `psm_*` (240 + 160 MiB apparent) and 1 `sem.mp-*` stay in /dev/shm;
- `vllm-rmf`: removed with `docker rm -f` while serving: its 3 files stay too; only the
  runtime's events still name it;
- `vllm-safe`: `accelhost run -- vllm serve ...` as PID 1, `--ipc=host`, serving: its files
  are held, and it is the safe one;
- `vllm-tini`: `--init` (docker-init, tini) with `--ipc=host`, serving: at risk;
- `pause` + `vllm-pod`: a pod replayed with Docker (`--ipc=shareable`, and the engine with
  `--ipc=container:pause --restart=on-failure`): after one crash and restart the pod's own
  /dev/shm holds the crashed incarnation's files beside the live one's.
"""

from __future__ import annotations

import time
from typing import Any

from hygiene_fakes import NOW, FakeHost

from accelhost.containers.docker_api import events_path
from accelhost.containers.reader import events_window
from accelhost.host.base import FileStat
from container_hosts import (
    DOCKER_SOCK,
    HOST_IPC,
    SHAPES,
    cid,
    docker_answers,
    event,
    on_host,
    put_in_container,
)

MIB = 1024 * 1024
BASH, RMF, SAFE, TINI, PAUSE, POD = (cid(n) for n in (0xB1, 0xB2, 0xB3, 0xB4, 0xB5, 0xB6))
HOST_SHM_DEV = 26  # 00:1a
POD_SHM_DEV = 300  # 01:2c
POD_IPC = 4026532700
POD_SHM = "/proc/3000/root/dev/shm"


def rfc3339(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(epoch)) + ".000000000Z"


def record_shm_dir(
    fake: FakeHost, directory: str, rows: list[tuple[str, int, int, float, int]], dev: int
) -> None:
    """A /dev/shm listing as a snapshot records it (the one place that knows the form):
    rows of (name, apparent bytes, MiB used, birth = mtime, inode)."""
    fake.stat_dirs[directory] = [
        FileStat(
            name=name,
            kind="file",
            size=size,
            blocks=used * 2048,
            uid=0,
            owner="root",
            mtime=born,
            ctime=born,
            dev=dev,
            inode=ino,
            birth=born,
        )
        for name, size, used, born, ino in rows
    ]


def _map(dev: str, inode: int, path: str) -> str:
    return f"7f0000000000-7f0000100000 rw-s 00000000 {dev} {inode} {path}\n"


# (name, apparent bytes, MiB used, birth, inode): the host's /dev/shm
HOST_FILES = [
    ("psm_6a1f0c2e", 240 * MIB, 4, NOW - 7150, 101),  # vllm-bash's, docker stop
    ("psm_9b7d44a1", 160 * MIB, 4, NOW - 7150, 102),
    ("sem.mp-3kq9x1ab", 32, 0, NOW - 7150, 103),
    ("psm_c0ffee11", 240 * MIB, 4, NOW - 2950, 104),  # vllm-rmf's, docker rm -f
    ("psm_c0ffee22", 160 * MIB, 4, NOW - 2950, 105),
    ("sem.mp-r2m4f6zz", 32, 0, NOW - 2950, 106),
    ("psm_5afe0001", 240 * MIB, 4, NOW - 1000, 107),  # vllm-safe's, serving
    ("sem.mp-5afe0001", 32, 0, NOW - 1000, 108),
    ("psm_71a10001", 240 * MIB, 4, NOW - 900, 109),  # vllm-tini's, serving
    ("sem.mp-71a10001", 32, 0, NOW - 900, 110),
]
# the pod's own /dev/shm: the crashed incarnation's three, the live one's two
POD_FILES = [
    ("psm_01d0a1a1", 250 * MIB, 4, NOW - 1800, 201),
    ("psm_01d0a1a2", 160 * MIB, 4, NOW - 1800, 202),
    ("sem.mp-01dold00", 32, 0, NOW - 1800, 203),
    ("psm_0e770001", 250 * MIB, 4, NOW - 600, 204),
    ("sem.mp-0e770001", 32, 0, NOW - 600, 205),
]


def container_story(answering: bool = True) -> FakeHost:
    """The host; `answering=False`: no runtime socket answers (names unknown)."""
    fake = FakeHost()
    on_host(fake, 1)
    on_host(fake, 900)
    fake.proc(800, "/usr/sbin/dockerd -H unix:///var/run/docker.sock", ppid=1, pgid=800)
    on_host(fake, 800)
    shims = {SAFE: 1900, TINI: 1901, PAUSE: 1902, POD: 1903}
    for container_id, shim in shims.items():
        fake.proc(
            shim,
            f"/usr/bin/containerd-shim-runc-v2 -namespace moby -id {container_id}",
            ppid=1,
            pgid=shim,
        )
        on_host(fake, shim)
    # vllm-safe: accelhost run as PID 1, --ipc=host
    # (container, pid, cmdline, ppid, pid inside, (its queue's inode, its semaphore's)):
    # a live engine maps its queue by name and its semaphore, as vLLM's Worker does, only
    # under the temporary name sem_open made it with (`sem.XXXXXX (deleted)`)
    rows: list[tuple[str, int, str, int, int, tuple[int, ...]]] = [
        (SAFE, 2000, "accelhost run -- vllm serve /models/tiny --port 8001", 1900, 1, ()),
        (SAFE, 2001, "vllm serve /models/tiny --port 8001", 2000, 7, ()),
        (SAFE, 2002, "VLLM::EngineCore", 2001, 9, (107, 108)),
        (TINI, 2100, "/sbin/docker-init -- vllm serve /models/tiny --port 8002", 1901, 1, ()),
        (TINI, 2101, "vllm serve /models/tiny --port 8002", 2100, 7, ()),
        (TINI, 2102, "VLLM::EngineCore", 2101, 8, (109, 110)),
        (PAUSE, 3000, "/pause", 1902, 1, ()),
        (POD, 3100, "vllm serve /models/tiny --port 8003", 1903, 1, ()),
        (POD, 3102, "VLLM::EngineCore", 3100, 12, (204, 205)),
    ]
    leaders: dict[str, int] = {}
    for container_id, pid, cmd, ppid, inner, mapped in rows:
        leader = leaders.setdefault(container_id, pid)  # PID 1's session, for the tree
        fake.proc(pid, cmd, ppid=ppid, pgid=leader, sid=leader, start_s=5000.0 + pid / 100)
        ipc = POD_IPC if container_id in (PAUSE, POD) else HOST_IPC
        shape = f"/docker/{container_id}" if container_id != SAFE else SHAPES["docker-systemd"]
        put_in_container(
            fake,
            pid,
            shape.format(c=container_id),
            ipc=ipc,
            pid_ns=4026532000 + int(container_id[:2], 16),
            nspid=(pid, inner),
        )
        if mapped:
            queue, sem = mapped
            inside = POD_FILES if ipc == POD_IPC else HOST_FILES
            name = next(f[0] for f in inside if f[4] == queue)
            dev = "01:2c" if ipc == POD_IPC else "00:1a"
            fake.files[f"/proc/{pid}/maps"] = _map(dev, queue, f"/dev/shm/{name}") + _map(
                dev, sem, "/dev/shm/sem.Tq3xZ1 (deleted)"
            )
    for pid in fake.pids:
        fake.files.setdefault(f"/proc/{pid}/maps", "")
        fake.dirs.setdefault(f"/proc/{pid}/fd", [])
    record_shm_dir(fake, "/dev/shm", HOST_FILES, HOST_SHM_DEV)
    record_shm_dir(fake, POD_SHM, POD_FILES, POD_SHM_DEV)
    fake.commands["stat -f -c %S %b %a /dev/shm"] = "4096 2097152 1900000\n"
    if answering:
        fake.http.update(docker_http())
    return fake


def containers_json() -> list[dict[str, Any]]:
    return [
        {"id": SAFE, "name": "vllm-safe", "pid": 2000, "ipc": "host", "path": "accelhost",
         "args": ["run", "--", "vllm", "serve", "/models/tiny", "--port", "8001"],
         "started": rfc3339(NOW - 1010)},
        {"id": TINI, "name": "vllm-tini", "pid": 2100, "ipc": "host", "path": "/sbin/docker-init",
         "args": ["--", "vllm", "serve", "/models/tiny", "--port", "8002"],
         "started": rfc3339(NOW - 910)},
        {"id": BASH, "name": "vllm-bash", "state": "exited", "ipc": "host",
         "started": rfc3339(NOW - 7200), "finished": rfc3339(NOW - 3600)},
        {"id": PAUSE, "name": "pause", "pid": 3000, "ipc": "shareable", "path": "/pause",
         "args": [], "started": rfc3339(NOW - 2000)},
        {"id": POD, "name": "vllm-pod", "pid": 3100, "ipc": f"container:{PAUSE}",
         "path": "vllm", "args": ["serve", "/models/tiny", "--port", "8003"],
         "started": rfc3339(NOW - 610), "restarts": 1},
    ]  # fmt: skip


def docker_http() -> dict[str, str]:
    http: dict[str, str] = {}
    rmf_events = [
        event("start", RMF, "vllm-rmf", NOW - 3000),
        event("die", RMF, "vllm-rmf", NOW - 2400),
        event("destroy", RMF, "vllm-rmf", NOW - 2399),
    ]
    docker_answers(http, containers_json(), rmf_events, events_path(*events_window(NOW)))
    return http


def story_snapshot(answering: bool = True) -> dict[str, Any]:
    return container_story(answering).snapshot()


__all__ = [
    "BASH",
    "DOCKER_SOCK",
    "PAUSE",
    "POD",
    "POD_SHM",
    "RMF",
    "SAFE",
    "TINI",
    "story_snapshot",
]


EXAMPLE_NAME = "docker-vllm-leak"
DESCRIPTION = (
    "Written by hand from the measured facts of docs/containers.md (not recorded by the "
    "e2e harness): vllm-bash stopped (bash as PID 1, --ipc=host), vllm-rmf removed with "
    "docker rm -f, vllm-safe under accelhost run, vllm-tini with --init, and a pod (pause + "
    "vllm-pod) after one crash and restart. Rebuild: tests/hygiene/container_story.py."
)


def bundled_example() -> dict[str, Any]:
    """The bundled `example:docker-vllm-leak`: the story on the CPU-only host of the
    real-engine suite (its lscpu, sysfs and meminfo; the story's processes and clock)."""
    import json
    from pathlib import Path

    import accelhost

    base_path = Path(accelhost.__file__).parent / "data/examples/vllm-cpu-orphaned-engine.json"
    base = json.loads(base_path.read_text(encoding="utf-8"))
    story = story_snapshot()
    files = {k: v for k, v in base["files"].items() if not k.startswith("/proc/")}
    files["/proc/meminfo"] = base["files"]["/proc/meminfo"]
    files.update(story["files"])
    files["/proc/self/status"] = files["/proc/self/status"].replace("0-63", "0-1")  # 2 CPUs
    dirs = {k: v for k, v in base["dirs"].items() if not k.startswith("/proc")}
    dirs.update(story["dirs"])
    commands = {k: v for k, v in base["commands"].items() if k.startswith("lscpu")}
    commands.update(story["commands"])
    return {
        "format": story["format"],
        "description": DESCRIPTION,
        "machine": base["machine"],
        "env": {},
        "files": dict(sorted(files.items())),
        "dirs": dict(sorted(dirs.items())),
        "links": dict(sorted(story["links"].items())),
        "commands": dict(sorted(commands.items())),
        "http": dict(sorted(story["http"].items())),
        **{k: dict(sorted(story[k].items())) for k in ("stat_dirs", "stats") if story.get(k)},
    }
