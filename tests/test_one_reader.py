"""`host/` is the only reader of the machine, and each reading concept has one home.

Checked on the sources with `ast`, so a rule the package docstrings state cannot quietly
stop being true: no module outside `host/` reads /proc, /sys or /dev with os calls on a
path it names, none makes a `LiveHost` itself, none walks /proc/PID/fd but
`readers/procs.py`, and no recording speaks a tool's output format in place of the facts.
"""

from __future__ import annotations

import ast
import importlib.util
from collections.abc import Iterator
from pathlib import Path

import accelhost

SRC = Path(accelhost.__file__).parent
MACHINE = ("/proc", "/sys", "/dev")
READS = {"scandir", "listdir", "lstat", "stat", "readlink", "open", "statvfs"}

# Reads that files owned by other changes still make; the coordinator empties this list
# as their owners move them behind the host door. Each entry: (module path, call).
KNOWN: set[tuple[str, str]] = {
    # the bind's hot path: thread names relative to an open task dir (apply/__init__ says so)
    ("apply/threads.py", "os.open"),
}


def _modules() -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        yield rel, ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _leading_text(node: ast.expr) -> str | None:
    """The start of a path argument when the source spells it ("/proc/..", f"/proc/{pid}")."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr) and node.values:
        first = node.values[0]
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            return first.value
    return None


def machine_reads(tree: ast.Module) -> list[tuple[int, str, str]]:
    """(line, call, path) of each os call or open() on a /proc, /sys or /dev path."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        func = node.func
        if isinstance(func, ast.Name) and func.id == "open":
            call = "open"
        elif (
            isinstance(func, ast.Attribute)
            and isinstance(func.value, ast.Name)
            and func.value.id == "os"
            and func.attr in READS
        ):
            call = f"os.{func.attr}"
        else:
            continue
        text = _leading_text(node.args[0])
        if text is not None and text.startswith(MACHINE):
            found.append((node.lineno, call, text))
    return found


def test_the_checker_finds_a_read_beside_the_door() -> None:
    tree = ast.parse(
        "import os\n"
        "os.stat('/proc/self/ns/user')\n"
        "open(f'/sys/bus/pci/devices/{pci}/numa_node')\n"
        "os.readlink(path)\n"  # a path it does not spell: not judged
        "os.listdir('/tmp')\n"
    )
    assert [(line, call) for line, call, _ in machine_reads(tree)] == [
        (2, "os.stat"),
        (3, "open"),
    ]


def test_only_the_host_door_reads_the_machine() -> None:
    beside = []
    for rel, tree in _modules():
        if rel.startswith("host/"):
            continue
        for line, call, text in machine_reads(tree):
            if (rel, call) not in KNOWN:
                beside.append(f"{rel}:{line} {call}({text!r}...)")
    assert not beside, "read through the host door instead: " + ", ".join(beside)


def test_the_known_exceptions_still_exist() -> None:
    still = {(rel, call) for rel, tree in _modules() for _, call, _ in machine_reads(tree)}
    assert still >= KNOWN, f"remove from KNOWN: {sorted(KNOWN - still)}"


def test_one_live_host_factory() -> None:
    """`LiveHost()` is made in `host/` alone (`live_host()`); everyone else asks for it."""
    made = [
        f"{rel}:{node.lineno}"
        for rel, tree in _modules()
        if not rel.startswith("host/")
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name | ast.Attribute)
        and (getattr(node.func, "id", None) or getattr(node.func, "attr", None)) == "LiveHost"
    ]
    assert not made, made


def test_one_walk_of_open_files() -> None:
    """Only `readers/procs.py` names /proc/PID/fd in a path (`open_fds`, `open_file_stat`)."""
    naming = sorted(
        rel
        for rel, tree in _modules()
        for node in ast.walk(tree)
        if isinstance(node, ast.JoinedStr)
        and any(
            isinstance(v, ast.Constant) and isinstance(v.value, str) and "/fd" in v.value
            for v in node.values
        )
    )
    assert set(naming) == {"readers/procs.py"}, naming


def test_recordings_keep_facts_not_a_tool_output() -> None:
    """The /dev/shm listing is the host's `stat_dir`, recorded as such: no module writes
    or parses a `find -printf` listing or `stat -c` birth times any more."""
    for path in sorted(SRC.rglob("*")):
        if path.suffix not in (".py", ".json"):
            continue
        text = path.read_text(encoding="utf-8")
        for token in ("-printf", "FIND_FORMAT", "stat -c", "%T@"):
            assert token not in text, f"{path.relative_to(SRC)} speaks {token!r}"


def test_the_readers_live_in_packages() -> None:
    for gone in ("procs", "shm", "shmlisting", "posixshm", "recording"):
        assert not (SRC / f"{gone}.py").exists(), gone
        assert importlib.util.find_spec(f"accelhost.{gone}") is None, gone
    for home in ("readers.procs", "readers.sysv", "readers.shmfiles", "host.redact"):
        assert importlib.util.find_spec(f"accelhost.{home}") is not None, home


def test_live_recorded_and_replayed_hosts_are_read_by_one_reader(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A doctor's look at a live host, a recording and a `--snapshot` replay run the same
    reader of processes and shm files (`IncrementalState`), and agree on what it read."""
    from accelhost.host.live import LiveHost
    from accelhost.host.record import RecordingHost
    from accelhost.host.snapshot import SnapshotHost
    from accelhost.hygiene.facts.host import read_facts
    from accelhost.hygiene.facts.rounds import IncrementalState
    from accelhost.hygiene.options import HygieneOptions

    listers: list[bool] = []
    real = IncrementalState.read

    def counted(self, host, lister, now):  # type: ignore[no-untyped-def]
        listers.append(lister is not None)
        return real(self, host, lister, now)

    monkeypatch.setattr(IncrementalState, "read", counted)
    opts = HygieneOptions()
    read_facts(LiveHost(), opts)
    rec = RecordingHost(LiveHost())
    recorded = read_facts(rec, opts)
    replayed = read_facts(SnapshotHost(rec.to_snapshot()), opts)
    # the live host lists inode numbers (rounds can read only what changed); the others
    # are read in full, through the same code
    assert listers == [True, False, False]
    assert recorded.processes is not None and replayed.processes is not None
    assert set(replayed.processes) == set(recorded.processes)
    assert replayed.device_fds == recorded.device_fds
    assert replayed.shm_files == recorded.shm_files
    assert replayed.shm_held == recorded.shm_held
