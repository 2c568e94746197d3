"""One look at a host's containers, through the host door (the package's one reader).

Each process's cgroup says which container; the namespaces say who shares whose IPC
namespace and which process is a container's PID 1; names come from each Docker or Podman
API socket (`Host.http_get`) and each CRI socket (`Host.cri_look`) that answers. Without
any answer, a container is named by its cgroup id only, never guessed, and `notes` says
why, once; a CRI socket that was named, or is there but silent or not the CRI, gets one
note of its own.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import replace
from typing import Literal

from accelhost.containers import docker_api
from accelhost.containers.cgroup import CgroupContainer, parse_cgroup
from accelhost.containers.cri_answers import CriAnswer, parse_cri_look
from accelhost.containers.model import (
    EXITED,
    NO_RUNTIME_NOTE,
    RUNNING,
    Container,
    ContainerView,
    Namespaces,
    Pod,
)
from accelhost.errors import AccelhostError
from accelhost.host.base import Host
from accelhost.host.cri import NOT_CRI
from accelhost.parsers.procstat import parse_status_field
from accelhost.readers.procs import ProcessInfo

DOCKER_SOCKETS = ("/var/run/docker.sock", "/run/podman/podman.sock")
# containerd's (its CRI plugin), CRI-O's and cri-dockerd's usual sockets, crictl's order
CRI_SOCKETS = (
    "/run/containerd/containerd.sock",
    "/var/run/crio/crio.sock",
    "/var/run/cri-dockerd.sock",
)
CRI_ENDPOINT_ENV = "CONTAINER_RUNTIME_ENDPOINT"
# How far back a removed container is still named from the runtime's events (Docker keeps
# the last 1000 events in memory, since the daemon started).
EVENTS_WINDOW_S = 7 * 86400
# An `until` in the future keeps the answer open until then: `until` is the host's wall
# clock (`Host.clock`, which stamps the runtime's events) to the microsecond, so a container
# removed a moment ago is named. A recording without a clock has only boot time + uptime,
# up to a second off: its `until` stays a whole second behind (a younger removal unnamed).
EVENTS_LAG_S = 1
_NS_LINK = re.compile(r"^([a-z_]{1,32}):\[(\d{1,20})\]$")
MAX_INSPECT = 256  # containers inspected per look: a host with more is named from the list


def events_window(now_epoch: float, clock: float | None = None) -> tuple[int, str]:
    """(since, until): the last week, up to the host's clock (see EVENTS_LAG_S)."""
    if clock is None:
        until = int(now_epoch) - EVENTS_LAG_S
        return until - EVENTS_WINDOW_S, str(until)
    return int(clock) - EVENTS_WINDOW_S, f"{clock:.6f}"


def runtime_sockets(host: Host, explicit: Sequence[str] = ()) -> list[str]:
    """`--docker-socket` paths, then `DOCKER_HOST=unix://...`, then the usual places (and
    the caller's rootless Podman, under `XDG_RUNTIME_DIR`)."""
    out = list(explicit)
    docker_host = host.getenv("DOCKER_HOST") or ""
    if docker_host.startswith("unix://"):
        out.append(docker_host.removeprefix("unix://"))
    out.extend(DOCKER_SOCKETS)
    runtime_dir = host.getenv("XDG_RUNTIME_DIR")
    if runtime_dir and runtime_dir.startswith("/"):
        out.append(f"{runtime_dir.rstrip('/')}/podman/podman.sock")
    return list(dict.fromkeys(p for p in out if p))


def cri_endpoints(host: Host, explicit: Sequence[str] = ()) -> list[tuple[str, bool]]:
    """(endpoint, named by the user): `CONTAINER_RUNTIME_ENDPOINT` (as crictl reads it,
    `unix:///...`), then `--cri-socket` endpoints, then the usual sockets."""
    named = [host.getenv(CRI_ENDPOINT_ENV) or "", *explicit]
    out = {e.strip().removeprefix("unix://"): True for e in named if e.strip()}
    for path in CRI_SOCKETS:
        out.setdefault(path, False)
    return list(out.items())


def ask_cri(host: Host, explicit: Sequence[str] = ()) -> tuple[list[CriAnswer], list[str]]:
    """Every CRI socket that answered, and one note for each that was named but is not
    there, or is there but silent, or answers something else."""
    answers, notes = [], []
    for endpoint, named in cri_endpoints(host, explicit):
        got = parse_cri_look(endpoint, host.cri_look(endpoint))
        if got is None:
            if named:
                notes.append(f"CRI socket {endpoint}: no such socket")
        elif got.answered:
            answers.append(got)
        elif named or got.error != NOT_CRI:  # Docker's own containerd: not worth a line
            notes.append(f"CRI socket {endpoint}: {got.error}")
    return answers, notes


def _ask_socket(
    host: Host, socket_path: str, wanted: set[str], window: tuple[int, str] | None
) -> tuple[dict[str, tuple[Container, int | None]], list[Container]] | None:
    """id -> (container, init pid) from one socket, plus removed ones (the events of
    `window`: since, until); None: no answer."""
    runtime = "podman" if "podman" in socket_path else "docker"
    answer = host.http_get(socket_path, docker_api.LIST_PATH)
    listed = docker_api.parse_container_list(answer, runtime)
    if listed is None:
        return None
    found: dict[str, tuple[Container, int | None]] = {c.id: (c, None) for c in listed}
    # The events first: they alone name a removed container (`docker rm -f`), and a slow
    # inspect below must not cost them.
    removed: list[Container] = []
    if window is not None:
        path = docker_api.events_path(*window, runtime)
        events = docker_api.parse_events(host.http_get(socket_path, path))
        removed = docker_api.removed_containers(events, runtime)
    order = sorted(found, key=lambda cid: (cid not in wanted, cid))[:MAX_INSPECT]
    for cid in order:
        inspected = host.http_get(socket_path, f"/containers/{cid}/json")
        got = docker_api.parse_inspect(inspected, runtime)
        if got is None or got[0].id != cid:
            # slow or garbled: ask it nothing more (a doctor waits a second, not one a
            # container); the listing's names stand
            break
        found[cid] = (replace(got[0], state=got[0].state or found[cid][0].state), got[1])
    return found, removed


def _merge(seen: CgroupContainer, record: Container | None) -> Container:
    """The cgroup's facts (runtime, id, pod uid) with the runtime's names where it answered.
    The runtime that answered names itself (a pod's containers are `containerd`'s whether
    they run or exited; the cgroup can only say `kubernetes`)."""
    pod = record.pod if record else None
    if seen.pod_uid is not None:
        pod = Pod(pod.namespace if pod else None, pod.name if pod else None, seen.pod_uid)
    if record is None:
        return Container(seen.runtime, seen.container_id, seen.name, state=RUNNING, pod=pod)
    return replace(record, runtime=record.runtime or seen.runtime, state=RUNNING, pod=pod)


def read_containers(
    host: Host,
    procs: Mapping[int, ProcessInfo],
    now_epoch: float | None = None,
    sockets: Sequence[str] = (),
    cgroups: MutableMapping[tuple[int, int], CgroupContainer | None] | None = None,
    cri_sockets: Sequence[str] = (),
) -> ContainerView:
    """Which container each process is in, and every container the runtimes know.
    `cgroups`: what an earlier look read of each process (by pid and start time), used
    and brought up to date (a watch keeps it between rounds; bounded by the processes).
    `sockets`: Docker API sockets to ask first; `cri_sockets`: CRI endpoints to ask."""
    seen = _read_cgroups(host, procs, {} if cgroups is None else cgroups)
    wanted = {c.container_id for c in seen.values()}
    records: dict[str, tuple[Container, int | None]] = {}  # id -> (its record, its PID 1)
    removed: list[Container] = []
    answered: list[str] = []
    # one window for every socket: a recording keeps one clock, which its replay asks with
    window = None if now_epoch is None else events_window(now_epoch, host.clock())
    for socket_path in runtime_sockets(host, sockets):
        got = _ask_socket(host, socket_path, wanted, window)
        if got is not None:
            answered.append(socket_path)
            for cid, answer in got[0].items():
                records.setdefault(cid, answer)
            removed += got[1]
    cri, cri_notes = ask_cri(host, cri_sockets)
    for runtime in cri:
        answered.append(runtime.endpoint)  # as cri_endpoints wrote it
        for cid, c in runtime.containers.items():
            records.setdefault(cid, (c, runtime.pids.get(cid)))
    # A bare id under a parent no runtime owns (`--cgroup-parent`) is a container only where
    # a runtime lists it: that runtime is the one; without one, the runtime would be a guess.
    seen = {pid: w for pid, w in seen.items() if w.runtime or w.container_id in records}
    host_ipc = _host_ipc(host, procs, seen)
    namespaces = {pid: read_namespaces(host, pid) for pid in sorted(seen)}
    containers: dict[str, Container] = {}
    for _pid, where in sorted(seen.items()):
        if where.container_id not in containers:
            record = records.get(where.container_id)
            containers[where.container_id] = _merge(where, record[0] if record else None)
    for cid, (rec, _init) in records.items():
        # No process of it seen: a cgroup shape the parser does not know, or a reader
        # without the host's PID namespace. What the runtime says stands: a running
        # container called exited would take the blame for what others left.
        if cid not in containers:
            containers[cid] = replace(rec, state=rec.state or EXITED)
    for c in removed:
        containers.setdefault(c.id, c)
    for cid, c in containers.items():
        pids = sorted(p for p, w in seen.items() if w.container_id == cid)
        if pids:
            init_pid = records[cid][1] if cid in records else None
            containers[cid] = _with_processes(c, pids, namespaces, procs, host_ipc, init_pid)
    unnamed = not answered and any(not w.name for w in seen.values())
    return ContainerView(
        pid_container={pid: w.container_id for pid, w in seen.items()},
        containers=containers,
        namespaces=namespaces,
        host_ipc=host_ipc,
        runtimes=tuple(answered),
        notes=(*cri_notes, *((NO_RUNTIME_NOTE,) if unnamed else ())),
    )


def _read_cgroups(
    host: Host,
    procs: Mapping[int, ProcessInfo],
    memo: MutableMapping[tuple[int, int], CgroupContainer | None],
) -> dict[int, CgroupContainer]:
    """pid -> the container its cgroup names (host processes left out). `memo` (by pid and
    start time) is used, then replaced by what this look read; a cgroup file that could
    not be read (gone, or none) is not remembered."""
    seen: dict[int, CgroupContainer] = {}
    now: dict[tuple[int, int], CgroupContainer | None] = {}
    # most processes share a few cgroups (every host service's is one line): each text is
    # parsed once
    parsed: dict[str, CgroupContainer | None | Literal[False]] = {}
    for pid, proc in procs.items():
        if proc.is_kernel_thread:
            continue
        key = (pid, proc.start_ticks)
        if key in memo:
            now[key] = memo[key]
        elif text := host.read_file(f"/proc/{pid}/cgroup"):
            if text not in parsed:
                try:
                    parsed[text] = parse_cgroup(text, f"/proc/{pid}/cgroup")
                except AccelhostError:
                    parsed[text] = False
            if (found := parsed[text]) is not False:
                now[key] = found
        if (found := now.get(key)) is not None:
            seen[pid] = found
    memo.clear()
    memo.update(now)
    return seen


def _host_ipc(
    host: Host, procs: Mapping[int, ProcessInfo], seen: Mapping[int, CgroupContainer]
) -> int | None:
    """PID 1's IPC namespace; where its links are hidden (a sandbox's init holds
    capabilities even root lacks), that of the first host process (in no container) whose
    link can be read."""
    for pid in [1, *sorted(p for p in procs if p != 1 and p not in seen)][:64]:
        found = parse_ns_link(host.read_link(f"/proc/{pid}/ns/ipc"))
        if found is not None:
            return found
    return None


def _with_processes(
    c: Container,
    pids: list[int],
    namespaces: Mapping[int, Namespaces],
    procs: Mapping[int, ProcessInfo],
    host_ipc: int | None,
    init_pid: int | None,
) -> Container:
    """PID 1's command and host-IPC sharing from the processes seen in the container."""
    init = next((p for p in pids if namespaces[p].is_namespace_init), None)
    if init is None and init_pid in procs:
        init = init_pid
    if init is None:  # no nested PID namespace seen (--pid=host): the oldest process
        init = min(pids, key=lambda p: (procs[p].start_ticks, p))
    ipcs = {namespaces[p].ipc for p in pids if namespaces[p].ipc is not None}
    shares = None if not ipcs or host_ipc is None else host_ipc in ipcs
    return replace(c, pid1_command=procs[init].command, shares_host_ipc=shares)


def parse_ns_link(target: str | None) -> int | None:
    """`ipc:[4026531839]` -> 4026531839; None for anything else."""
    m = _NS_LINK.match(target.strip()) if target else None
    return int(m.group(2)) if m else None


def read_namespaces(host: Host, pid: int) -> Namespaces:
    """The namespaces of one process (absent links stay None: gone, or not ours to read);
    `NSpid:` ending in 1 marks a container's PID 1 (malformed: no values)."""
    pid_ns, ipc, mnt = (
        parse_ns_link(host.read_link(f"/proc/{pid}/ns/{k}")) for k in ("pid", "ipc", "mnt")
    )
    status = host.read_file(f"/proc/{pid}/status") or ""
    nspid = (parse_status_field(status, "NSpid") or "").split()
    if len(nspid) > 64 or not all(v.isascii() and v.isdigit() for v in nspid):
        nspid = []
    return Namespaces(pid_ns, ipc, mnt, tuple(int(v) for v in nspid))
