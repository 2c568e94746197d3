"""Build recorded hosts for the pure checks (the snapshot itself: `fakehost.FakeMachine`)."""

# ruff: noqa: E501  (npu-smi tables are wide)

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from accelhost.host.base import FileStat
from accelhost.host.snapshot import SnapshotHost
from fakehost import FakeMachine

BTIME = 1_700_000_000
UPTIME = 10_000.0
NOW = BTIME + UPTIME
SHM_HEADER = (
    "       key      shmid perms                  size  cpid  lpid nattch   uid   gid  cuid"
    "  cgid      atime      dtime      ctime                   rss                  swap\n"
)


RECORDED, NO_CLEAN = "on the recorded host: ", "; a --snapshot replay cannot be cleaned"


def as_live(report: dict[str, Any]) -> dict[str, Any]:
    """A replay's report (`to_dict`) as the live host's: the same judgement, but a fix that
    cleans says it is for the recorded host (a replay cannot clean)."""
    for c in report["checks"]:
        fix = c.get("fix") or ""
        if fix.startswith(RECORDED):
            assert fix.endswith(NO_CLEAN)
            c["fix"] = fix[len(RECORDED) : -len(NO_CLEAN)]
    return report


@dataclass
class FakeHost:
    files: dict[str, str] = field(default_factory=dict)
    dirs: dict[str, list[str]] = field(default_factory=dict)
    links: dict[str, str] = field(default_factory=dict)
    commands: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    http: dict[str, str] = field(default_factory=dict)  # a runtime's unix-socket answers
    pids: list[int] = field(default_factory=list)
    segments: list[str] = field(default_factory=list)
    stat_dirs: dict[str, list[FileStat]] = field(default_factory=dict)
    stats: dict[str, FileStat] = field(default_factory=dict)  # `stat` of one path
    cri: dict[str, dict[str, Any]] = field(default_factory=dict)  # endpoint -> CRI look

    def __post_init__(self) -> None:
        self.files["/proc/uptime"] = f"{UPTIME} 100.0\n"
        self.files["/proc/stat"] = f"cpu 1 2 3\nbtime {BTIME}\n"
        self.files["/proc/self/status"] = "Name:\tpython3\nPid:\t900\nCpus_allowed_list:\t0-63\n"
        self.proc(1, "systemd", ppid=0, pgid=1, sid=1)
        self.proc(900, "accelhost doctor", ppid=899, pgid=899, sid=899)

    def proc(
        self,
        pid: int,
        cmdline: str,
        *,
        ppid: int,
        pgid: int,
        sid: int | None = None,
        state: str = "S",
        comm: str | None = None,
        start_s: float = 100.0,
        fds: dict[int, str] | None = None,
        environ: dict[str, str] | None = None,
    ) -> FakeHost:
        name = comm or cmdline.split()[0].split("/")[-1][:15]
        ticks = int(start_s * 100)
        self.files[f"/proc/{pid}/stat"] = (
            f"{pid} ({name}) {state} {ppid} {pgid} {sid or pgid} 0 -1 0 0 0 0 0 0 0 0 0 "
            f"20 0 1 0 {ticks} 0 0\n"
        )
        self.files[f"/proc/{pid}/cmdline"] = "\0".join(cmdline.split()) + "\0"
        self.files[f"/proc/{pid}/status"] = (
            f"Name:\t{name}\nState:\t{state}\nPid:\t{pid}\nPPid:\t{ppid}\nCapPrm:\t0\n"
        )
        # as root records them: every process's fd directory and (shared) maps are read
        self.dirs[f"/proc/{pid}/fd"] = sorted(str(n) for n in fds or {})
        self.files.setdefault(f"/proc/{pid}/maps", "")
        for n, target in (fds or {}).items():
            self.links[f"/proc/{pid}/fd/{n}"] = target
        if environ is not None:
            self.files[f"/proc/{pid}/environ"] = "".join(f"{k}={v}\0" for k, v in environ.items())
        self.pids.append(pid)
        return self

    def segment(
        self,
        shmid: int,
        size: int,
        cpid: int,
        *,
        lpid: int = 0,
        nattch: int = 0,
        perms: str = "600",
        ctime: float = NOW - 3600,
        key: int = 0,
    ) -> FakeHost:
        self.segments.append(
            f"{key:>10} {shmid:>10} {perms:>5} {size:>21} {cpid:>5} {lpid:>5} {nattch:>6} "
            f"0 0 0 0 0 0 {int(ctime)} {size} 0\n"
        )
        return self

    def shm_file(
        self,
        name: str,
        size: int,
        blocks: int,
        mtime: float,
        inode: int,
        directory: str = "/dev/shm",
    ) -> FakeHost:
        """A regular file of a tmpfs dir, owned by root, as the host's `stat_dir` lists it."""
        self.stat_dirs.setdefault(directory, []).append(
            FileStat(name, "file", size, blocks, 0, "root", mtime, mtime, 26, inode)
        )
        return self

    def hugepages(self, size_kb: int, total: int, free: int, node: int | None = None) -> FakeHost:
        base = (
            "/sys/kernel/mm/hugepages"
            if node is None
            else f"/sys/devices/system/node/node{node}/hugepages"
        )
        if node is not None:
            nodes = self.dirs.setdefault("/sys/devices/system/node", [])
            if f"node{node}" not in nodes:
                nodes.append(f"node{node}")
        self.dirs.setdefault(base, []).append(f"hugepages-{size_kb}kB")
        d = f"{base}/hugepages-{size_kb}kB"
        self.files[f"{d}/nr_hugepages"] = f"{total}\n"
        self.files[f"{d}/free_hugepages"] = f"{free}\n"
        self.files[f"{d}/resv_hugepages"] = "0\n"
        self.files[f"{d}/surplus_hugepages"] = "0\n"
        return self

    def host(self) -> SnapshotHost:
        return SnapshotHost(self.snapshot())

    def snapshot(self) -> dict[str, Any]:
        files = dict(self.files)
        files["/proc/sysvipc/shm"] = SHM_HEADER + "".join(self.segments)
        dirs = {**self.dirs, "/proc": sorted(str(p) for p in self.pids) + ["self", "stat"]}
        if "/sys/kernel/mm/hugepages" not in dirs:
            dirs["/sys/kernel/mm/hugepages"] = []
        machine = FakeMachine(
            machine="aarch64",
            env=self.env,
            files=files,
            dirs=dirs,
            links=self.links,
            commands=self.commands,
            stat_dirs=self.stat_dirs,
            stats=self.stats,
            http=self.http,
            cri=self.cri,
        )
        return machine.snapshot()


def npu_smi(used: list[int], total: int, procs: list[tuple[int, int, str, int]]) -> str:
    """An A2-style `npu-smi info`: one chip per NPU; procs are (npu, pid, name, MB)."""
    lines = [
        "+------------------------------------------------------------------------------+",
        "| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|",
        "| Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |",
        "+===========================+===============+====================================================+",
    ]
    for i, u in enumerate(used):
        lines.append(
            f"| {i}     910B3               | OK            | 95.1        44                0    / 0             |"
        )
        lines.append(
            f"| 0                         | 0000:C{i + 1}:00.0 | 0           0    / 0          {u} / {total}         |"
        )
        lines.append(
            "+===========================+===============+====================================================+"
        )
    lines.append(
        "| NPU     Chip              | Process id    | Process name             | Process memory(MB)      |"
    )
    lines.append(
        "+===========================+===============+====================================================+"
    )
    for npu, pid, name, mb in procs:
        lines.append(
            f"| {npu}       0                 | {pid}       | {name}          | {mb}                   |"
        )
        lines.append(
            "+---------------------------+---------------+----------------------------------------------------+"
        )
    return "\n".join(lines) + "\n"
