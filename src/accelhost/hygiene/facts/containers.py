"""What the doctor reads about containers, once, through the host door: the
`ContainerView`; each container /dev/shm that is not the host's (one per IPC namespace,
through `/proc/<pid>/root/dev/shm`, once per tmpfs), with what its processes hold;
/dev/shm's free space (`stat -f`); and systemd-logind's `RemoveIPC`. A source that cannot
be read stays None; nothing here raises for a host's content.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, MutableMapping
from dataclasses import dataclass, field, replace

from accelhost.containers.cgroup import CgroupContainer
from accelhost.containers.model import ContainerView
from accelhost.containers.pod_volumes import PodMounts, read_pod_mounts
from accelhost.containers.reader import read_containers
from accelhost.host.base import Host
from accelhost.hygiene.options import HygieneOptions
from accelhost.parsers.procstat import parse_status_field
from accelhost.readers.procs import ProcessInfo
from accelhost.readers.shmfiles import HeldScan, ShmFile, list_shm_files, scan_held

SHM = "/dev/shm"
STATFS_ARGV = ("stat", "-f", "-c", "%S %b %a", SHM)
# systemd reads the vendor file, then /etc's (which replaces it), then drop-ins by name
LOGIND_CONFS = ("/usr/lib/systemd/logind.conf", "/etc/systemd/logind.conf")
LOGIND_DROPINS = (
    "/etc/systemd/logind.conf.d",
    "/run/systemd/logind.conf.d",
    "/usr/lib/systemd/logind.conf.d",
)

_TRUE, _FALSE = ("yes", "true", "on", "1"), ("no", "false", "off", "0")  # systemd's words


@dataclass(frozen=True)
class ContainerShmDir:
    """A container's own /dev/shm, as the host reaches it: through one of its processes, or
    a pod's memory emptyDir where the kubelet mounted it (seen also while none of the
    pod's containers runs, between a crash and the next attempt)."""

    path: str  # /proc/<pid>/root/dev/shm, or the emptyDir's mount point
    ipc: int | None  # the IPC namespace whose processes may hold its files (None: a volume)
    pids: tuple[int, ...]  # the processes that may hold its files by their own path
    # the containers that share it (a pod's: several; a volume's: every attempt of the
    # containers it is mounted into, never the pod's sandbox, which never has it)
    container_ids: tuple[str, ...]
    files: tuple[ShmFile, ...] | None
    held: HeldScan | None  # what `pids` hold (their own paths)
    pod_uid: str | None = None  # a volume's pod


@dataclass(frozen=True)
class ShmSpace:
    total_bytes: int
    free_bytes: int  # available to an unprivileged writer (what vLLM's statvfs sees)


@dataclass(frozen=True)
class ContainerFacts:
    view: ContainerView
    shm_dirs: tuple[ContainerShmDir, ...] = ()
    shm_space: ShmSpace | None = None
    remove_ipc: bool | None = None  # logind's RemoveIPC (None: no systemd-logind config)
    remove_ipc_source: str | None = None
    engine_uids: Mapping[int, int] = field(default_factory=dict)  # engine pid -> real uid
    # (st_dev, inode) of the files each running container's processes hold now -> its id
    held_by: Mapping[tuple[int, int], str] = field(default_factory=dict)
    errors: Mapping[str, str] = field(default_factory=dict)


def parse_statfs(text: str | None) -> ShmSpace | None:
    """`stat -f -c '%S %b %a'`: block size, total blocks, blocks free for users."""
    parts = (text or "").split()
    if len(parts) != 3 or not all(p.isascii() and p.isdigit() for p in parts):
        return None
    size, total, avail = (int(p) for p in parts)
    return ShmSpace(size * total, size * avail)


def parse_remove_ipc(texts: list[tuple[str, str]]) -> tuple[bool | None, str | None]:
    """RemoveIPC from logind.conf then its drop-ins in order (the last setting wins);
    (None, None) when no file sets it and none exists, (True, default) when files exist
    but none sets it (systemd's default is yes)."""
    value: bool | None = None
    source: str | None = None
    for path, text in texts:
        section = ""
        for raw in text.splitlines():
            line = raw.strip()
            if not line or line[0] in "#;":
                continue
            if line.startswith("[") and line.endswith("]"):
                section = line[1:-1].strip()
                continue
            key, eq, val = line.partition("=")
            if eq and section == "Login" and key.strip() == "RemoveIPC":
                word = val.strip().lower()
                if word in _TRUE + _FALSE:
                    value, source = word in _TRUE, path
    if value is None and texts:
        return True, "systemd's default (RemoveIPC=yes)"
    return value, source


def _read_logind(host: Host) -> tuple[bool | None, str | None]:
    # /etc's replaces the vendor file: the first that exists is the only one read
    confs = ((path, host.read_file(path)) for path in reversed(LOGIND_CONFS))
    main = next(((path, text) for path, text in confs if text is not None), None)
    texts = [main] if main else []
    # a drop-in's name in an earlier dir hides the same name in a later one
    names = ((d, name) for d in reversed(LOGIND_DROPINS) for name in host.list_dir(d) or [])
    dropins = {name: f"{d}/{name}" for d, name in names if name.endswith(".conf")}
    read = ((dropins[name], host.read_file(dropins[name])) for name in sorted(dropins))
    texts += [(path, text) for path, text in read if text is not None]
    return parse_remove_ipc(texts)


def _volume_dirs(host: Host, view: ContainerView, mounts: PodMounts) -> list[ContainerShmDir]:
    """Each pod's memory emptyDir, from the mount table: its holders are the processes of
    the pod's containers that mount it (their own /dev/shm paths), its authors those
    containers' attempts, running or not."""
    out = []
    for vol in mounts.volumes:
        pod = [
            c
            for c in view.containers.values()
            if c.pod is not None and c.pod.uid == vol.pod_uid and not c.is_sandbox
        ]
        users = [c for c in pod if vol.mount_point in c.mounts] or pod
        pids = tuple(sorted(p for c in users for p in view.pids_of(c.id)))
        files = list_shm_files(host, [vol.mount_point])[vol.mount_point]
        ids = tuple(sorted(c.id for c in users))
        here = host.stat(vol.mount_point)
        if here is not None and here.dev != vol.dev:
            continue  # unmounted since the mount table was read (its pod went): not judged
        # unmounted while listed: what is under it now is not the volume's
        listed = None if files is None else tuple(f for f in files if f.dev == vol.dev)
        held = scan_held(host, pids)
        out.append(ContainerShmDir(vol.mount_point, None, pids, ids, listed, held, vol.pod_uid))
    return out


def _shm_dirs(
    host: Host,
    view: ContainerView,
    procs: Mapping[int, ProcessInfo],
    host_devs: set[int],
    mounts: PodMounts,
) -> tuple[ContainerShmDir, ...]:
    by_ipc: dict[int, list[int]] = {}
    for pid, ns in sorted(view.namespaces.items()):
        proc = procs.get(pid)
        if ns.ipc is None or ns.ipc == view.host_ipc or proc is None or proc.is_zombie:
            continue
        by_ipc.setdefault(ns.ipc, []).append(pid)
    out = _volume_dirs(host, view, mounts)
    volumes = {v.dev for v in mounts.volumes}
    seen_devs = set(host_devs) | volumes
    for ipc, pids in sorted(by_ipc.items()):
        # One listing per tmpfs seen at /dev/shm: a pod's sandbox /dev/shm and a container's
        # own emptyDir mounted there (another device) are both the pod's; the namespace's
        # processes are the holders of either.
        by_dev: dict[int | None, list[int]] = {}
        for pid in pids:
            st = host.stat(f"/proc/{pid}/root{SHM}")
            by_dev.setdefault(None if st is None else st.dev, []).append(pid)
        held: HeldScan | None = None
        for dev, group in by_dev.items():
            if dev in volumes:
                continue  # a pod's emptyDir, listed where the kubelet mounted it
            path = f"/proc/{group[0]}/root{SHM}"
            files = list_shm_files(host, [path])[path]
            devs = {f.dev for f in files or () if f.dev}
            if devs and devs <= seen_devs:
                continue  # the host's /dev/shm, or one already listed through another process
            seen_devs |= devs
            ids = tuple(sorted({view.pid_container[p] for p in group if p in view.pid_container}))
            listed = None if files is None else tuple(files)
            held = held or scan_held(host, pids)
            out.append(ContainerShmDir(path, ipc, tuple(pids), ids, listed, held))
    return tuple(out)


def _engine_uids(
    host: Host, procs: Mapping[int, ProcessInfo], is_engine: Callable[[str], bool]
) -> dict[int, int]:
    """The real uid of each engine process (logind's RemoveIPC spares system users)."""
    out = {}
    for pid, p in sorted(procs.items()):
        if p.is_zombie or not p.cmdline or not is_engine(p.command):
            continue
        status = host.read_file(f"/proc/{pid}/status") or ""
        real = (parse_status_field(status, "Uid") or "").split()[:1]
        if real and real[0].isascii() and real[0].isdigit():
            out[pid] = int(real[0])
    return out


def read_container_facts(
    host: Host,
    procs: Mapping[int, ProcessInfo] | None,
    now_epoch: float | None,
    options: HygieneOptions,
    host_shm: Mapping[str, tuple[ShmFile, ...] | None] | None = None,
    cgroups: MutableMapping[tuple[int, int], CgroupContainer | None] | None = None,
) -> ContainerFacts:
    """Everything the container-aware checks need (`procs` None: no process table), with
    the runtimes, the kubelet root and the engine catalog of `options`."""
    space_text = host.run(list(STATFS_ARGV))
    space = parse_statfs(space_text.stdout if space_text is not None and space_text.ok else None)
    errors = {} if space is not None else {"shm_space": f"{SHM}: free space not read (stat -f)"}
    remove_ipc, source = _read_logind(host)
    if procs is None:
        return ContainerFacts(ContainerView(), (), space, remove_ipc, source, errors=errors)
    view = read_containers(
        host, procs, now_epoch, options.container_sockets, cgroups, options.cri_sockets
    )
    mounts = read_pod_mounts(host, options.kubelet_root)
    if mounts.notes:
        view = replace(view, notes=(*view.notes, *mounts.notes))
    host_devs = {f.dev for files in (host_shm or {}).values() for f in files or () if f.dev}
    dirs = _shm_dirs(host, view, procs, host_devs, mounts)
    uids = _engine_uids(host, procs, options.catalog.is_engine) if remove_ipc else {}
    held_by = {
        node: cid
        for cid in sorted(view.containers)
        if (pids := view.pids_of(cid))
        for node in scan_held(host, pids).inodes
    }
    return ContainerFacts(view, dirs, space, remove_ipc, source, uids, held_by, errors=errors)
