"""Everything the checks need, read once through the host door.

`read_facts` is the only reader in the hygiene package: the checks are pure functions of
the `HostFacts` it returns, and a doctor run on a snapshot and on a live host run the same
code (processes and shm files through one `IncrementalState`: a one-shot look is its first,
full round; a `watch` keeps one from round to round). Run on a `RecordingHost`, it records
exactly the doctor's inputs.
It reads through `read_once(host)`: one doctor look (one `watch` round, one `clean` plan)
runs each command and reads each file at most once, however many checks share a fact;
CPU facts come from the one reader of each (`accelhost.readers.cpus`).
A source that cannot be read is recorded in `errors` (its check becomes UNKNOWN); on a
recording, a source it does not hold is in `not_recorded` (its check is SKIP, "not in this
recording", as on the live host it would have been read); a tool that is not installed is
simply absent. Processes this reader may not see (`hidden_pids`, a /proc mounted with
`hidepid` for a reader without CAP_SYS_PTRACE) are never called dead.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from accelhost.errors import AccelhostError, HostError
from accelhost.host.base import Host, InodeLister
from accelhost.host.once import read_once
from accelhost.host.redact import ALLOC_CONF_VARS
from accelhost.hygiene.facts.containers import ContainerFacts, read_container_facts
from accelhost.hygiene.facts.devices import DeviceMemory, read_ascend, read_nvidia
from accelhost.hygiene.facts.rounds import IncrementalState
from accelhost.hygiene.options import HygieneOptions
from accelhost.parsers.meminfo import Meminfo, parse_meminfo
from accelhost.parsers.procstat import parse_status_field
from accelhost.parsers.sysfs import HugePagePool, parse_int_file, parse_size_dir
from accelhost.parsers.sysvipc import ShmSegment
from accelhost.readers.cpus import read_allowed_cpus
from accelhost.readers.procs import ProcessInfo, proc_hides
from accelhost.readers.shmfiles import HeldScan, ShmFile
from accelhost.readers.sysv import read_segments

HUGEPAGES_DIR = "/sys/kernel/mm/hugepages"
NODES_DIR = "/sys/devices/system/node"
THP_DIR = "/sys/kernel/mm/transparent_hugepage"
AFFINITY_ENV_VARS = ("OMP_PROC_BIND", "GOMP_CPU_AFFINITY")
# Interrupt actions of accelerator drivers in /proc/interrupts.
_DEVICE_IRQ = re.compile(r"nvidia|davinci|devdrv|hisi|amdgpu|kfd", re.IGNORECASE)
# The sources a recording may lack (a plan-only snapshot has no /proc), as checks name them.
NOT_RECORDED = {
    "processes": "the process table (/proc)",
    "segments": "/proc/sysvipc/shm",
    "hugepages": "HugePages (sysfs, /proc/meminfo)",
}
# What the device tools' readers say went wrong (`devices.read_ascend`, `read_nvidia`).
DEVICE_ERRORS = ("devices", "device_processes")
# Every Linux since 2.6 on every architecture accelhost supports uses 100 ticks per second
# for /proc/<pid>/stat; a snapshot does not record it.
DEFAULT_CLK_TCK = 100


@dataclass(frozen=True)
class DeviceIrq:
    irq: int
    action: str
    affinity: str


@dataclass(frozen=True)
class TuningFacts:
    irqbalance_pids: tuple[int, ...] = ()
    device_irqs: tuple[DeviceIrq, ...] = ()
    online_cpus: str | None = None
    thp_enabled: str | None = None
    thp_defrag: str | None = None
    proc_irq_readonly: bool | None = None
    affinity_env: Mapping[str, str] = field(default_factory=dict)
    allowed_cpus: int | None = None


@dataclass(frozen=True)
class HostFacts:
    """One reading of a host. `None` = could not be read; see `errors` for why."""

    live: bool
    now_epoch: float | None
    uptime_s: float | None
    clk_tck: int
    self_pid: int | None
    processes: Mapping[int, ProcessInfo] | None
    device_fds: Mapping[int, tuple[str, ...]]
    engine_env: Mapping[int, Mapping[str, str]]
    segments: tuple[ShmSegment, ...] | None
    meminfo: Meminfo | None
    hugepage_pools: tuple[HugePagePool, ...] | None
    devices: tuple[DeviceMemory, ...]
    device_sources: tuple[str, ...]
    tuning: TuningFacts
    errors: Mapping[str, str] = field(default_factory=dict)
    # POSIX shared memory: dir -> its files (None: the dir could not be listed), and what
    # live processes hold open or map (None: not read).
    shm_files: Mapping[str, tuple[ShmFile, ...] | None] = field(default_factory=dict)
    shm_held: HeldScan | None = None
    not_recorded: frozenset[str] = frozenset()  # sources absent from a recording
    # Processes /proc shows but will not describe to this reader (hidepid=1), and why the
    # table may lack some altogether (hidepid=2): neither is ever called dead.
    hidden_pids: frozenset[int] = frozenset()
    processes_partial: str | None = None
    # Containers: which one each process is in, their own /dev/shm, /dev/shm's free space
    # and logind's RemoveIPC (accelhost.hygiene.facts.containers); None: not read.
    containers: ContainerFacts | None = None

    def process_age_s(self, proc: ProcessInfo) -> float | None:
        if self.uptime_s is None:
            return None
        return max(0.0, self.uptime_s - proc.start_ticks / self.clk_tck)

    def alive(self, pid: int) -> bool:
        """A pid that exists and has not exited (a zombie has exited)."""
        if self.processes is None or pid in self.hidden_pids:
            return True  # unknown: never call something dead that we could not see
        proc = self.processes.get(pid)
        if proc is None:
            return self.processes_partial is not None
        return not proc.is_zombie


def _read_clock(host: Host) -> tuple[float | None, float | None]:
    """(now as epoch seconds, uptime): boot time + uptime, both read through the host."""
    try:
        uptime: float | None = float((host.read_file("/proc/uptime") or "").split()[0])
    except (ValueError, IndexError):
        uptime = None
    stat = host.read_file("/proc/stat") or ""
    btime = next(
        (float(line.split()[1]) for line in stat.splitlines() if line.startswith("btime ")), None
    )
    return (None if uptime is None or btime is None else btime + uptime), uptime


def _read_engine_env(
    host: Host, procs: Mapping[int, ProcessInfo], holders: set[int], options: HygieneOptions
) -> dict[int, dict[str, str]]:
    """Allocator settings of the engines that hold a device (the only ones it matters for;
    the recorder keeps only these variables, too)."""
    is_engine = options.catalog.is_engine
    out: dict[int, dict[str, str]] = {}
    for pid in sorted(holders):
        proc = procs.get(pid)
        if proc is None or proc.is_zombie or not proc.cmdline or not is_engine(proc.command):
            continue
        raw = host.read_file(f"/proc/{pid}/environ")
        if raw is not None:
            pairs = (item.partition("=") for item in raw.split("\0"))
            out[pid] = {name: v for name, sep, v in pairs if sep and name in ALLOC_CONF_VARS}
    return out


def _read_pool(host: Host, base: str, size_kb: int, node: int | None) -> HugePagePool | None:
    def count(name: str) -> int | None:
        path = f"{base}/{name}"
        text = host.read_file(path)
        return None if text is None else parse_int_file(text, path)

    total, free = count("nr_hugepages"), count("free_hugepages")
    if total is None or free is None:
        return None
    reserved, surplus = count("resv_hugepages") or 0, count("surplus_hugepages") or 0
    return HugePagePool(size_kb, node, total, free, reserved, surplus)


def _read_pools(host: Host, base: str, node: int | None) -> list[HugePagePool] | None:
    """A pool per page size under `base` (None: `base` cannot be listed)."""
    names = host.list_dir(base)
    if names is None:
        return None
    sizes = [(name, size) for name in names if (size := parse_size_dir(name)) is not None]
    pools = (_read_pool(host, f"{base}/{name}", size, node) for name, size in sizes)
    return [p for p in pools if p is not None]


def _read_hugepages(host: Host, meminfo: Meminfo | None) -> tuple[HugePagePool, ...] | None:
    pools = _read_pools(host, HUGEPAGES_DIR, None)
    if not pools and meminfo is not None and meminfo.hugepagesize_kb:
        # Older kernels or masked sysfs: the default size still shows in /proc/meminfo.
        m = meminfo  # total, free, reserved, surplus: HugePagePool's order
        counts = (m.hugepages_total, m.hugepages_free, m.hugepages_rsvd, m.hugepages_surp)
        pools = [HugePagePool(meminfo.hugepagesize_kb, None, *(n or 0 for n in counts))]
    if pools is None:
        return None
    for name in host.list_dir(NODES_DIR) or []:
        if name.startswith("node") and name[4:].isdigit():
            pools += _read_pools(host, f"{NODES_DIR}/{name}/hugepages", int(name[4:])) or []
    return tuple(pools)


def _read_tuning(host: Host, procs: Mapping[int, ProcessInfo] | None) -> TuningFacts:
    irqbalance = tuple(
        sorted(p.pid for p in (procs or {}).values() if p.comm == "irqbalance" and not p.is_zombie)
    )
    device_irqs: list[DeviceIrq] = []
    online = host.read_file("/sys/devices/system/cpu/online")
    if irqbalance:
        for line in (host.read_file("/proc/interrupts") or "").splitlines():
            head, sep, rest = line.partition(":")
            if not sep or not head.strip().isdigit() or not _DEVICE_IRQ.search(rest):
                continue
            irq = int(head)
            aff = host.read_file(f"/proc/irq/{irq}/smp_affinity_list")
            if aff is not None:
                device_irqs.append(DeviceIrq(irq, rest.split()[-1], aff.strip()))
    readonly: bool | None = None
    mountinfo = host.read_file("/proc/self/mountinfo")
    if mountinfo is not None:
        readonly = False
        for line in mountinfo.splitlines():
            parts = line.split()
            if len(parts) > 5 and parts[4] in ("/proc/irq", "/proc"):
                ro = "ro" in parts[5].split(",")
                if parts[4] == "/proc/irq":
                    readonly = ro
                    break
                readonly = readonly or ro
    try:
        allowed = read_allowed_cpus(host)
    except AccelhostError:  # a hostile list: the check says it cannot tell
        allowed = None
    env = {name: v for name in AFFINITY_ENV_VARS if (v := host.getenv(name)) is not None}
    return TuningFacts(
        irqbalance_pids=irqbalance,
        device_irqs=tuple(device_irqs),
        online_cpus=online.strip() if online else None,
        thp_enabled=_selected(host.read_file(f"{THP_DIR}/enabled")),
        thp_defrag=_selected(host.read_file(f"{THP_DIR}/defrag")),
        proc_irq_readonly=readonly,
        affinity_env=env,
        allowed_cpus=len(set(allowed)) if allowed else None,
    )


def _selected(text: str | None) -> str | None:
    """`always [madvise] never` -> `madvise`."""
    if text is None:
        return None
    m = re.search(r"\[([^\]]+)\]", text)
    return m.group(1) if m else text.strip() or None


def _self_pid(host: Host) -> int | None:
    status = host.read_file("/proc/self/status")
    pid = parse_status_field(status, "Pid") if status else None
    return int(pid) if pid and pid.isdigit() else None


def read_facts(
    host: Host,
    options: HygieneOptions | None = None,
    state: IncrementalState | None = None,
    tools_of: HostFacts | None = None,
) -> HostFacts:
    """Read every input of the doctor's checks from `host` (live, snapshot or recording),
    with a watch's `state`; `tools_of`: facts of this same round whose device tools' answer
    (npu-smi, nvidia-smi: seconds each) is taken, not asked again."""
    lister = host if host.is_live and isinstance(host, InodeLister) else None
    host = read_once(host)  # a fresh wrapper per call: each watch round reads anew
    opts = options or HygieneOptions()
    errors: dict[str, str] = {}
    absent: set[str] = set()  # what a recording lacks (a live host lacks nothing)
    now, uptime = _read_clock(host)
    known = (state or IncrementalState(opts)).read(host, lister, now or time.time())
    procs = None if known.processes is None else dict(known.processes)
    fds, hidden = dict(known.device_fds), known.hidden
    if procs is None:
        errors["processes"] = "/proc lists no processes (not Linux, or /proc not mounted)"
        if not host.is_live and host.list_dir("/proc") is None:
            absent.add("processes")
    segs = None
    try:
        segs = read_segments(host)
        if segs is None:
            errors["segments"] = "/proc/sysvipc/shm cannot be read"
            absent.add("segments")
    except AccelhostError as exc:
        errors["segments"] = str(exc)
    meminfo_text = host.read_file("/proc/meminfo")
    meminfo: Meminfo | None = None
    try:
        meminfo = parse_meminfo(meminfo_text) if meminfo_text is not None else None
        pools = _read_hugepages(host, meminfo)
    except AccelhostError as exc:
        errors["hugepages"] = str(exc)
        pools = None
    if pools is None and "hugepages" not in errors:
        errors["hugepages"] = "neither sysfs HugePages pools nor /proc/meminfo can be read"
        absent.add("hugepages")
    devices: list[DeviceMemory] = []
    sources: list[str] = []
    if tools_of is not None:  # the tools' answer of this same round (`watch`: why it holds)
        devices, sources = list(tools_of.devices), list(tools_of.device_sources)
        errors.update((k, v) for k, v in tools_of.errors.items() if k in DEVICE_ERRORS)
    else:
        for name, reader in (("npu-smi", read_ascend), ("nvidia-smi", read_nvidia)):
            try:
                found = reader(host, errors)
            except HostError as exc:  # a wedged driver: the tool hangs; say so, go on
                errors["devices"] = str(exc)
                found = []
            if found is not None:
                sources.append(name)
                devices.extend(found)
    shm_files, held = dict(known.shm_files), known.held if procs is not None else None
    holders = set(fds) | {row.pid for d in devices for row in d.processes}
    engine_env = _read_engine_env(host, procs or {}, holders, opts)
    containers = read_container_facts(host, procs, now, opts, shm_files, known.cgroups)
    return HostFacts(
        live=host.is_live,
        now_epoch=now,
        uptime_s=uptime,
        clk_tck=(os.sysconf("SC_CLK_TCK") if host.is_live else DEFAULT_CLK_TCK),
        self_pid=_self_pid(host),
        processes=procs,
        device_fds=fds,
        engine_env=engine_env,
        segments=tuple(segs) if segs is not None else None,
        meminfo=meminfo,
        hugepage_pools=pools,
        devices=tuple(devices),
        device_sources=tuple(sources),
        tuning=_read_tuning(host, procs),
        errors=errors,
        shm_files=shm_files,
        shm_held=held,
        not_recorded=frozenset() if host.is_live else frozenset(absent),
        hidden_pids=hidden,
        processes_partial=proc_hides(host) if procs is not None else None,
        containers=containers,
    )
