"""The rules that decide what may be removed: orphan engines, leaked System V segments and
leaked /dev/shm files.

Both the doctor (to report) and the cleaner (to act, and to re-check at the moment of
acting) use these functions, so "what the doctor calls leaked" and "what clean removes"
cannot drift apart.

A /dev/shm file is leaked when no live process holds it open or maps it (by path or by
inode: a live vLLM's semaphore is mapped only under the temporary name its creator made it
with), it has not changed for `--shm-min-age`, and its name matches an engine's naming in
the catalog (or a `--shm-name` glob). One held by nobody that matches no naming is
"unclaimed": listed, never removed (/dev/shm is shared by every program on the host, and
we only clean what we can name). A fact the rule needs and does not have (some process's
open files) makes the file "cannot tell" (`blocked`: never removed), on a live host and on
its recording alike.
"""

from __future__ import annotations

import fnmatch
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from accelhost.host.base import Host
from accelhost.hygiene.engines import Catalog
from accelhost.hygiene.options import DEFAULT_SHM_DIRS, SHELLS_AND_INITS, HygieneOptions
from accelhost.parsers.sysvipc import SHM_HUGETLB, ShmSegment
from accelhost.readers.procs import ProcessInfo, ancestors
from accelhost.readers.shmfiles import HeldScan, ShmFile, list_shm_files, scan_held


@dataclass(frozen=True)
class Orphan:
    proc: ProcessInfo
    engine: str
    reason: str
    # The process the orphan hangs under now (None: not visible) and the engine process
    # whose chain reached it (the orphan itself, or the EngineCore above a Worker).
    parent: ProcessInfo | None
    top: ProcessInfo
    # A frontend of the same engine alive in the orphan's process group: `watch
    # --auto-clean` leaves such a tree alone (its server may still be shutting it down).
    group_frontend: int | None = None


def protected_pids(processes: Mapping[int, ProcessInfo], self_pid: int | None) -> set[int]:
    """PID 0, PID 1, the caller and its ancestors: never reported, never signalled."""
    if self_pid is None:
        return {0, 1}
    return {0, 1, self_pid, *ancestors(processes, self_pid)}


def is_shell_or_init(proc: ProcessInfo) -> bool:
    """A shell, init, subreaper or wrapper by its command line, not its title.

    `exec -a "vllm serve" bash` is no shell to us (argv[0] is what the process says it
    is); `bash -lc "vllm serve ..."` and `python3 -m accelhost run -- vllm serve` are
    wrappers even though they name the engine.
    """
    args = proc.cmdline or (proc.comm,)
    first = args[0].split()[0] if args[0].split() else proc.comm
    names = {first, *args[1:3]}
    return any(
        (base := n.rsplit("/", 1)[-1].lstrip("-")) in SHELLS_AND_INITS
        or base.startswith("containerd-shim")
        for n in names
    )


def _launcher_lives(parent: ProcessInfo, child: ProcessInfo) -> str | None:
    """None when `parent` is the natural launcher of `child`; else why it is not.

    A live, non-shell process in the child's session that started before it: a script
    that embeds the engine (`LLM(...)` in `python bench.py`), or PID 1 running it.
    A shell, an init or a subreaper never starts an engine child itself.
    """
    if parent.is_zombie:
        return f"its parent {parent.pid} is a zombie"
    shell = is_shell_or_init(parent)
    if parent.pid == 1 and (shell or parent.sid != child.sid):
        return f"re-parented to PID 1 ({parent.comm}): its frontend is gone"
    if shell:
        return f"under {parent.comm} {parent.pid}, a shell, init or subreaper: not its engine"
    if parent.sid != child.sid:
        return f"re-parented to pid {parent.pid} ({parent.comm}) in another session"
    if parent.start_ticks > child.start_ticks:
        return f"re-parented to pid {parent.pid} ({parent.comm}), which started after it"
    return None


def engine_roles(
    processes: Mapping[int, ProcessInfo], catalog: Catalog
) -> tuple[dict[int, str], dict[int, str]]:
    """Live engine frontends and engine children by pid, each with its engine's name."""
    frontends: dict[int, str] = {}
    children: dict[int, str] = {}
    for pid, proc in processes.items():
        if proc.is_zombie or not proc.cmdline or proc.is_kernel_thread:
            continue
        child = catalog.child_engine(proc.command)
        front = None if child is not None else catalog.frontend_engine(proc.command)
        if child is not None:
            children[pid] = child
        elif front is not None and not is_shell_or_init(proc):
            frontends[pid] = front
    return frontends, children


def _walk_up(
    processes: Mapping[int, ProcessInfo],
    frontends: Mapping[int, str],
    children: Mapping[int, str],
    proc: ProcessInfo,
) -> tuple[str | None, ProcessInfo, str]:
    """From an engine child up through its engine's processes: (why it is an orphan, or
    None; the topmost engine process; why it is not one, for a person who named it)."""
    engine = children[proc.pid]
    top = proc
    seen = {proc.pid}
    parent = processes.get(top.ppid)
    while True:
        if parent is None:
            hidden = "is not visible (gone, or another PID namespace): cannot tell"
            return None, top, f"its parent {top.ppid} {hidden}"
        if parent.pid in seen:
            return None, top, "its chain of parents loops: cannot tell"
        if frontends.get(parent.pid) == engine:
            if parent.sid != top.sid:
                # another server (`docker exec` gives each its own session) adopted it
                adopted = f"re-parented to {engine} frontend {parent.pid} of another session"
                return adopted, top, ""
            return None, top, f"its parent is its engine's frontend {parent.pid} ({parent.comm})"
        if children.get(parent.pid) == engine:
            seen.add(parent.pid)
            top, parent = parent, processes.get(parent.ppid)
            continue
        healthy = f"its launcher {parent.pid} ({parent.comm}) lives, in its session"
        return _launcher_lives(parent, top), top, healthy


def why_not_orphan(
    processes: Mapping[int, ProcessInfo], self_pid: int | None, options: HygieneOptions, pid: int
) -> str:
    """Why `find_orphans` does not list `pid`: for a person who named it (`clean --pid`)."""
    proc = processes.get(pid)
    if proc is None:
        return "no such process"
    if pid <= 1:
        return f"PID {pid} ({proc.comm}): never signalled"
    if pid in protected_pids(processes, self_pid):
        return "this command or one of its ancestors: never signalled"
    if proc.is_zombie:
        return f"a zombie: it has exited; its parent {proc.ppid} has yet to reap it"
    if proc.is_kernel_thread:
        return "a kernel thread"
    frontends, children = engine_roles(processes, options.catalog)
    if pid in frontends:
        return f"an engine frontend ({frontends[pid]}): never judged an orphan"
    if pid not in children:
        return "not an engine child process (the catalog names it no engine's child)"
    _why, top, healthy = _walk_up(processes, frontends, children, proc)
    if top is not proc:
        healthy = f"under {children[pid]} process {top.pid} ({top.comm}), {healthy}"
    return f"not an orphan: {healthy}"


def find_orphans(
    processes: Mapping[int, ProcessInfo], self_pid: int | None, options: HygieneOptions
) -> list[Orphan]:
    """Engine children that lost their frontend (the spec's rule, per catalog engine).

    From each engine child we walk up through processes of the same engine. Reaching one of
    its frontends: healthy. Reaching anything else X: healthy only if X is the child's
    natural launcher (`_launcher_lives`); an orphan otherwise (re-parented to PID 1, to a
    subreaper, or hanging under a shell). A frontend is never judged: `nohup vllm serve &`
    from a script that exited is a healthy server, whatever its process group says.
    """
    protected = protected_pids(processes, self_pid)
    frontends, children = engine_roles(processes, options.catalog)
    out = []
    for pid, engine in sorted(children.items()):
        if pid in protected:
            continue
        proc = processes[pid]
        reason, top, _healthy = _walk_up(processes, frontends, children, proc)
        if reason is None:
            continue
        if top is not proc:
            reason = f"under {engine} process {top.pid} ({top.comm}), {reason}"
        ours = [f for f, e in sorted(frontends.items()) if e == engine and proc.pgid > 0]
        front = next((f for f in ours if processes[f].pgid == proc.pgid), None)
        out.append(Orphan(proc, engine, reason, processes.get(proc.ppid), top, front))
    return out


@dataclass(frozen=True)
class LeakVerdict:
    leaked: bool
    reason: str
    # seconds until a segment that fails only for its age counts as leaked (None: not one)
    waiting_s: float | None = None


def segment_idle_s(seg: ShmSegment, now_epoch: float | None) -> float | None:
    """Seconds since the segment was created, attached or detached, whichever is latest."""
    if now_epoch is None:
        return None
    return max(0.0, now_epoch - max(seg.ctime, seg.atime, seg.dtime))


def is_hugetlb(seg: ShmSegment) -> bool:
    return bool(seg.perms & SHM_HUGETLB)


def judge_segment(
    seg: ShmSegment,
    alive: Callable[[int], bool],
    now_epoch: float | None,
    min_age_s: float,
    exempt_age: bool = False,
) -> LeakVerdict:
    """The leak rule: unattached, not marked, creator and last user dead, idle long enough.

    A pid of 0 is "not visible from this PID namespace", never "dead": a segment whose
    creator cannot be seen is not ours to judge.
    """
    if seg.marked_for_destruction:
        return LeakVerdict(False, "already marked for destruction")
    if seg.nattch > 0:
        return LeakVerdict(False, f"attached by {seg.nattch} process(es)")
    if seg.cpid <= 0:
        return LeakVerdict(False, "creator not visible from this PID namespace")
    if alive(seg.cpid):
        return LeakVerdict(False, f"creator {seg.cpid} is alive")
    if seg.lpid > 0 and alive(seg.lpid):
        return LeakVerdict(False, f"last user {seg.lpid} is alive")
    idle = segment_idle_s(seg, now_epoch)
    if not exempt_age:
        if idle is None:
            return LeakVerdict(False, "age unknown (no clock in the recording)")
        if idle < min_age_s:
            why = f"idle {idle:.0f} s, under the {min_age_s:g} s grace"
            return LeakVerdict(False, why, min_age_s - idle)
    users = f"creator {seg.cpid}" + (
        f" and last user {seg.lpid}" if seg.lpid > 0 and seg.lpid != seg.cpid else ""
    )
    idle_text = f", idle {idle:.0f} s" if idle is not None else ""
    return LeakVerdict(True, f"unattached, {users} gone{idle_text}")


@dataclass(frozen=True)
class ShmVerdict:
    """The /dev/shm rule's verdict on one file: what the doctor reports, what the cleaner
    removes (`leaked`) and what neither may touch (`unclaimed`, `blocked`)."""

    file: ShmFile
    naming: str | None  # which engine's naming the name matches (None: no known naming)
    reason: str
    leaked: bool = False  # held by nobody, unchanged long enough, named: clean removes it
    unclaimed: bool = False  # held by nobody, unchanged long enough, but no naming: reported only
    blocked: bool = False  # cannot tell: some live process's open files were unreadable
    # seconds until a named file held by nobody counts as leaked (None: not one)
    waiting_s: float | None = None

    @property
    def abandoned(self) -> bool:
        """Held by nobody and unchanged long enough, named or not."""
        return self.leaked or self.unclaimed


def judge_shm_file(
    f: ShmFile,
    scan: HeldScan,
    now_epoch: float | None,
    min_age_s: float,
    naming: str | None,
    holders_name: ShmFile | None = None,
    note: str = "",
) -> ShmVerdict:
    """The /dev/shm leak rule for one file. `holders_name`: the file as its holders name it
    where that differs from the host's path (a container's own /dev/shm: `/dev/shm/x`,
    not `/proc/<pid>/root/dev/shm/x`); `note` ends the reason (where it lies)."""
    if scan.holds(f) or (holders_name is not None and scan.holds(holders_name)):
        return ShmVerdict(f, naming, "held open or mapped by a live process" + note)
    age = f.age_s(now_epoch)
    if age is None:
        return ShmVerdict(f, naming, "age unknown (no clock)" + note)
    if age < min_age_s:
        why = f"unchanged {age:.0f} s, under {min_age_s:g} s{note}"
        return ShmVerdict(f, naming, why, waiting_s=None if naming is None else min_age_s - age)
    if not scan.complete:
        shown = ", ".join(str(p) for p in scan.unreadable[:3])
        more = f" and {len(scan.unreadable) - 3} more" if len(scan.unreadable) > 3 else ""
        why = f"cannot tell: open files of pid(s) {shown}{more} unreadable, any may hold it"
        return ShmVerdict(f, naming, why + note, blocked=True)
    why = f"held by no process, unchanged {age:.0f} s{note}"
    if naming is None:
        why += "; matches no engine naming: not removed (see --shm-name)"
        return ShmVerdict(f, naming, why, unclaimed=True)
    return ShmVerdict(f, naming, why, leaked=True)


def match_naming(name: str, namings: Sequence[tuple[str, str]]) -> str | None:
    """The first (label, glob) whose glob matches the file name."""
    return next((label for label, glob in namings if fnmatch.fnmatchcase(name, glob)), None)


def leaked_posix_shm(
    dirs: Sequence[str] = DEFAULT_SHM_DIRS,
    min_age_s: float = 60.0,
    host: Host | None = None,
    namings: Sequence[tuple[str, str]] = (),
    now_epoch: float | None = None,
) -> list[ShmVerdict]:
    """For a library caller: the files under `dirs` no live process holds, unchanged for
    `min_age_s`, named or not (`naming`; live by default)."""
    if host is None:
        from accelhost.host.live import live_host

        host = live_host()
    now = time.time() if now_epoch is None and host.is_live else now_epoch
    scan = scan_held(host)
    judged = (
        judge_shm_file(f, scan, now, min_age_s, match_naming(f.name, namings))
        for files in list_shm_files(host, dirs).values()
        for f in files or []
    )
    return [v for v in judged if v.abandoned]
