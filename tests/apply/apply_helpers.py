"""Real processes with named threads, a fake /proc + /sys tree for IRQs, and CLI runs."""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import pytest

from accelhost.apply import memory
from accelhost.apply.threads import RoleMatcher
from accelhost.cpulist import parse_cpulist
from accelhost.kernel.libc import syscall
from accelhost.plans import ThreadRole

# A child whose threads name themselves (writing their own comm), then wait for stdin to close.
CHILD = r"""
import sys, threading
own = {}  # name -> (thread, its own stop event), for "end NAME"
def run(name, ready, mine):
    tid = threading.get_native_id()
    with open(f"/proc/self/task/{tid}/comm", "w") as fh:
        fh.write(name)
    ready.set()
    mine.wait()
def start(name):
    ready, mine = threading.Event(), threading.Event()
    t = threading.Thread(target=run, args=(name, ready, mine), daemon=True)
    t.start()
    ready.wait()
    own[name] = (t, mine)
if len(sys.argv) > 2 and sys.argv[1] == "--count":
    threading.stack_size(256 * 1024)
    names = [f"worker{i}" for i in range(int(sys.argv[2]))]
else:
    names = sys.argv[1:]
for name in names:
    start(name)
print("ready", flush=True)
for line in sys.stdin:  # "spawn NAME": one more thread; "end NAME": that thread exits
    verb, name = line.split()
    if verb == "spawn":
        start(name)
    else:
        t, mine = own.pop(name)
        mine.set()
        t.join()
    print("ok", flush=True)
for t, mine in own.values():
    mine.set()
"""


@dataclass
class Child:
    proc: subprocess.Popen[str]

    @property
    def pid(self) -> int:
        return self.proc.pid

    def tids(self) -> dict[str, list[int]]:
        """Thread name -> thread ids (ascending)."""
        out: dict[str, list[int]] = {}
        for tid in sorted(int(t) for t in os.listdir(f"/proc/{self.pid}/task")):
            name = Path(f"/proc/{self.pid}/task/{tid}/comm").read_text().strip()
            out.setdefault(name, []).append(tid)
        return out

    def tid(self, name: str) -> int:
        return self.tids()[name][0]

    def spawn_thread(self, name: str) -> None:
        self._ask(f"spawn {name}")

    def end_thread(self, name: str) -> None:
        """Make the thread of that name exit; returns once the kernel has let it go.

        Python's join() returns when the thread's Python work is done, a moment before the
        kernel task goes; wait for /proc/PID/task/TID to vanish so callers see it gone.
        """
        task = Path(f"/proc/{self.pid}/task/{self.tid(name)}")
        self._ask(f"end {name}")
        deadline = time.monotonic() + 30
        while task.exists():
            assert time.monotonic() < deadline, f"thread {name} did not exit"
            time.sleep(0.005)

    def _ask(self, line: str) -> None:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(f"{line}\n")
        self.proc.stdin.flush()
        assert self.proc.stdout.readline().strip() == "ok"


def start_child(*args: str, env: dict[str, str] | None = None) -> Child:
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=None if env is None else {**os.environ, **env},
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if line.strip() != "ready":
        proc.kill()
        proc.wait()
        raise RuntimeError("child did not start")
    return Child(proc)


def stop_child(child: Child) -> None:
    """Ask the child to leave (close stdin); kill it by its pid if it does not."""
    try:
        if child.proc.stdin is not None:
            child.proc.stdin.close()
        child.proc.wait(timeout=10)
    except (subprocess.TimeoutExpired, OSError):
        child.proc.kill()
        child.proc.wait()


@pytest.fixture
def spawn() -> Iterator[Callable[..., Child]]:
    started: list[Child] = []

    def make(*args: str, env: dict[str, str] | None = None) -> Child:
        child = start_child(*args, env=env)
        started.append(child)
        return child

    yield make
    for child in started:
        stop_child(child)


def thread_cpus(pid: int, tid: int) -> list[int]:
    """Cpus_allowed_list of one thread, as /proc/<pid>/task/<tid>/status says."""
    for line in Path(f"/proc/{pid}/task/{tid}/status").read_text().splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return sorted(set(parse_cpulist(line.split(":", 1)[1])))
    raise AssertionError("no Cpus_allowed_list")


def all_thread_cpus(child: Child) -> dict[int, list[int]]:
    return {tid: thread_cpus(child.pid, tid) for tids in child.tids().values() for tid in tids}


@pytest.fixture
def plan_file(tmp_path: Path) -> Callable[[dict[str, object]], str]:
    counter = [0]

    def write(data: dict[str, object]) -> str:
        counter[0] += 1
        path = tmp_path / f"plan{counter[0]}.json"
        path.write_text(json.dumps(data))
        return str(path)

    return write


PCI = "0000:c1:00.0"
OTHER_PCI = "0000:41:00.0"
FULL = "ffffffff,ffffffff"
# One A3 device whose SQ and CQ IRQs are 200 and 201 in the fake tree.
ONE_DEVICE_PLAN = {
    "device_type": "A3",
    "devices": {
        "0": {"pool": [8, 40, 41], "irq": [8, 40], "main": [41], "numa_node": 0, "pci": PCI},
    },
}


@dataclass
class FakeTree:
    root: Path

    def mask(self, irq: int) -> str:
        return (self.root / f"proc/irq/{irq}/smp_affinity").read_text().strip()

    def masks(self) -> dict[int, str]:
        base = self.root / "proc/irq"
        return {int(n): self.mask(int(n)) for n in os.listdir(base)}


@pytest.fixture
def fake_tree(tmp_path: Path) -> FakeTree:
    """Two Ascend NPUs' IRQs. Ours (0000:c1:00.0): SQ 200, CQ 201, another 202.

    The other NPU's SQ (100) comes first in /proc/interrupts, so a lookup that ignored
    msi_irqs would pick it.
    """
    root = tmp_path / "host"
    lines = [
        "            CPU0       CPU1",
        "  24:          1          0  IO-APIC   5-edge      ACPI:Ged",
        f" 100:          0          0  PCI-MSI-{OTHER_PCI}  sq_send_trigger_irq",
        f" 101:          0          0  PCI-MSI-{OTHER_PCI}  cq_update_irq",
        f" 200:          5          0  PCI-MSI-{PCI}  sq_send_trigger_irq",
        f" 201:          7          0  PCI-MSI-{PCI}  cq_update_irq",
        f" 202:          0          0  PCI-MSI-{PCI}  other_irq",
        "NMI:          0          0   Non-maskable interrupts",
    ]
    (root / "proc").mkdir(parents=True)
    (root / "proc/interrupts").write_text("\n".join(lines) + "\n")
    for irq in (24, 100, 101, 200, 201, 202):
        d = root / f"proc/irq/{irq}"
        d.mkdir(parents=True)
        (d / "smp_affinity").write_text(FULL + "\n")
    for pci, irqs in ((PCI, (200, 201, 202)), (OTHER_PCI, (100, 101))):
        msi = root / f"sys/bus/pci/devices/{pci}/msi_irqs"
        msi.mkdir(parents=True)
        for irq in irqs:
            (msi / str(irq)).write_text("msix\n")
    node = root / "sys/devices/system/node"
    (node / "node0").mkdir(parents=True)
    (node / "node0/cpulist").write_text("0-63\n")
    (node / "has_memory").write_text("0\n")
    return FakeTree(root)


@dataclass
class CliResult:
    rc: int
    out: str
    err: str


@pytest.fixture
def cli(capsys: pytest.CaptureFixture[str]) -> Callable[..., CliResult]:
    from accelhost.cli.main import main

    def run(*args: str) -> CliResult:
        capsys.readouterr()
        rc = main(list(args))
        captured = capsys.readouterr()
        return CliResult(rc, captured.out, captured.err)

    return run


def irq_args(tree, state, plan):
    """`accelhost bind` arguments for the IRQ step alone, on a fake host-root tree."""
    return (
        "bind",
        "--plan",
        plan,
        "--device",
        "0",
        "--irq-only",
        "--host-root",
        str(tree.root),
        "--state-dir",
        str(state),
        "--irqbalance",
        "keep",
    )


def saved_irqs(state: Path) -> dict[str, dict[str, object]]:
    """The IRQ masks a bind saved in `state`'s state file, by key."""
    return json.loads((state / "irq-state.json").read_text())["irqs"]


class Assignment(NamedTuple):
    tid: int
    name: str
    role: str
    cpus: tuple[int, ...]


def assign(
    threads: Iterable[tuple[int, str]], main: Sequence[int], roles: Sequence[ThreadRole]
) -> list[Assignment]:
    """The plain reference `thread_steps` is tested against: every (tid, name) gets `main`,
    or the CPUs of the last role it matches (sorted, unique); with no CPUs, none."""
    matchers = [(RoleMatcher(r), tuple(sorted(set(r.cpus)))) for r in roles if r.cpus]
    main_cpus = tuple(sorted(set(main)))
    out = []
    for tid, name in threads:
        role, cpus = "main", main_cpus
        for m, role_cpus in matchers:
            if m.matches(name):
                role, cpus = m.role.name, role_cpus
        if cpus:
            out.append(Assignment(tid, name, role, cpus))
    return out


def get_mempolicy() -> tuple[str, list[int]]:
    """(mode name, nodes) of the calling thread's policy: what set_mempolicy is checked by."""
    mode = ctypes.c_int(0)
    mask, maxnode = memory._mask([1023])
    args = (ctypes.byref(mode), mask, ctypes.c_ulong(maxnode), None, ctypes.c_ulong(0))
    syscall("get_mempolicy", *args)
    nodes = [w * 64 + b for w, v in enumerate(mask) for b in range(64) if v >> b & 1]
    names = {number: name for name, number in memory.MODES.items()}
    return names.get(mode.value, str(mode.value)), nodes
