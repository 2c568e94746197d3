"""The house rule for what changes the machine, each part stated once and held to every module.

The README states the whole rule; in the code, each package that may change the machine
states its own part in its docstring, and `accelhost` the rest (nothing else does), each
once. Each kind of machine-changing call is then looked for with `ast` in every module
under src/accelhost (an alias such as `setaffinity = os.sched_setaffinity` counts as much
as a call, so does `from os import kill`), and may stand only in the packages the rule
gives it.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "accelhost"

# Each part of the rule, by the package it governs ("" for accelhost itself).
PARTS = {
    "apply": "apply/ places (CPU affinity, memory policy and pages, IRQ masks, irqbalance)",
    "remove": "remove/ removes (signals, /dev/shm unlinks, IPC_RMID)",
    "supervisor": "supervisor/ sets up the child it starts (spawn, subreaper, namespaces, "
    "its cgroup)",
    "": "nothing else changes the machine (accelhost's own files and a pipeline's own "
    "workers are not the machine)",
}
RULE = "; ".join(PARTS.values()) + "."

# Each kind of change, and the packages (first part of the module's path under
# src/accelhost) the rule lets it stand in.
ALLOWED: dict[str, set[str]] = {
    "signal": {"remove"},
    "IPC_RMID": {"remove"},
    "unlink": {"remove", "apply"},  # apply: the irqbalance file it wrote, its state's temp
    "affinity": {"apply"},
    "NUMA memory": {"apply"},
    "service": {"apply"},  # systemctl with a verb that changes something
    "namespace": {"supervisor"},  # prctl, unshare, mount, setns
    "rmdir": {"supervisor"},  # its own cgroup
    "kernel file write": {"apply", "supervisor"},  # IRQ masks; the run's cgroup files
    "own workers": {"pipeline"},  # multiprocessing / Popen objects stopped by their owner
}

# os.NAME / signal.NAME / shutil.NAME, whether called, aliased or imported by name
_MODULE_CALLS = {
    ("os", "kill"): "signal",
    ("os", "killpg"): "signal",
    ("signal", "pidfd_send_signal"): "signal",
    ("signal", "pthread_kill"): "signal",
    ("os", "unlink"): "unlink",
    ("os", "remove"): "unlink",
    ("shutil", "rmtree"): "unlink",
    ("os", "rmdir"): "rmdir",
    ("os", "sched_setaffinity"): "affinity",
    ("os", "unshare"): "namespace",
    ("os", "setns"): "namespace",
}
# .NAME on anything: libc functions through ctypes, Path methods
_ANY_ATTRIBUTE = {
    "pidfd_send_signal": "signal",
    "shmctl": "IPC_RMID",
    "unlink": "unlink",
    "rmdir": "rmdir",
    "prctl": "namespace",
    "unshare": "namespace",
    "mount": "namespace",
    "setns": "namespace",
}
# .NAME() called on something that is not a module: a child process object's own stop
_CHILD_STOPS = {"terminate", "kill", "send_signal"}
_NUMA_SYSCALLS = {"set_mempolicy", "migrate_pages", "move_pages", "mbind"}
_WRITE_FLAGS = {"O_WRONLY", "O_RDWR", "O_APPEND", "O_CREAT", "O_TRUNC"}
_READ_ONLY_VERBS = {"is-active", "is-enabled", "is-failed", "show", "status", "cat"}
_MODULES = {"os", "signal", "shutil"}


def _text(node: ast.AST | None) -> str | None:
    """A string literal, or the literal start of an f-string."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr) and node.values:
        return _text(node.values[0])
    return None


def _kernel_path(node: ast.AST | None) -> bool:
    text = _text(node)
    return text is not None and text.startswith(("/proc", "/sys"))


def _write_mode(call: ast.Call, at: int) -> bool:
    mode = call.args[at] if len(call.args) > at else None
    for kw in call.keywords:
        if kw.arg == "mode":
            mode = kw.value
    text = _text(mode)
    return text is not None and any(c in text for c in "wax+")


def _names(node: ast.AST) -> set[str]:
    return {
        n.id if isinstance(n, ast.Name) else n.attr
        for n in ast.walk(node)
        if isinstance(n, (ast.Name, ast.Attribute))
    }


def changes(source: str) -> list[tuple[str, int]]:
    """(kind, line) of every machine-changing call or reference in a module's source."""
    found: list[tuple[str, int]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module in _MODULES:
            for alias in node.names:
                kind = _MODULE_CALLS.get((node.module, alias.name))
                if kind:
                    found.append((kind, node.lineno))
        elif isinstance(node, ast.Attribute):
            base = node.value.id if isinstance(node.value, ast.Name) else None
            kind = _MODULE_CALLS.get((base or "", node.attr)) or _ANY_ATTRIBUTE.get(node.attr)
            if kind:
                found.append((kind, node.lineno))
        elif (
            isinstance(node, (ast.List, ast.Tuple))
            and node.elts
            and _text(node.elts[0]) == "systemctl"
        ):
            verb = _text(node.elts[1]) if len(node.elts) > 1 else None
            if verb not in _READ_ONLY_VERBS:
                found.append(("service", node.lineno))
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
        owner = (
            func.value.id
            if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
            else None
        )
        if name == "syscall" and node.args and _text(node.args[0]) in _NUMA_SYSCALLS:
            found.append(("NUMA memory", node.lineno))
        elif name in _CHILD_STOPS and isinstance(func, ast.Attribute) and owner not in _MODULES:
            found.append(("own workers", node.lineno))
        elif name == "open" and owner == "os" and len(node.args) > 1:
            if _names(node.args[1]) & _WRITE_FLAGS:
                found.append(("kernel file write", node.lineno))
        elif name == "open" and owner is None and node.args:
            if _kernel_path(node.args[0]) and _write_mode(node, 1):
                found.append(("kernel file write", node.lineno))
        elif name in ("write_text", "write_bytes") and isinstance(func, ast.Attribute):
            target = func.value
            if isinstance(target, ast.Call) and target.args and _kernel_path(target.args[0]):
                found.append(("kernel file write", node.lineno))
    return found


def _modules() -> dict[str, Path]:
    return {str(p.relative_to(SRC)): p for p in sorted(SRC.rglob("*.py"))}


def _package(rel: str) -> str:
    first = rel.split("/", 1)[0]
    return first if "/" in rel else first.removesuffix(".py")


def _docstring(path: Path) -> str:
    return " ".join((ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or "").split())


def test_each_part_of_the_rule_is_stated_once_by_the_package_it_governs() -> None:
    readme = " ".join((ROOT / "README.md").read_text(encoding="utf-8").split())
    assert RULE in readme, "README.md does not state the house rule as it is"
    for package, part in PARTS.items():
        stated = [rel for rel, path in _modules().items() if part in _docstring(path)]
        assert stated == [f"{package}/__init__.py".lstrip("/")], (part, stated)


def test_only_the_packages_the_rule_names_are_allowed_changes() -> None:
    """The allowances below are what the stated parts say: the three packages, and the
    pipeline's own workers (which the rule says are not the machine)."""
    allowed = {p for packages in ALLOWED.values() for p in packages}
    assert allowed == {"apply", "remove", "supervisor", "pipeline"}
    assert ALLOWED["own workers"] == {"pipeline"}


def test_the_checker_finds_every_kind_of_change() -> None:
    source = """
import os, signal, ctypes, shutil
from os import kill
from pathlib import Path
os.kill(1, 9); os.killpg(1, 9); signal.pidfd_send_signal(3, 9)
os.unlink("/dev/shm/x"); Path("/dev/shm/y").unlink(); shutil.rmtree("/tmp/z")
lib = ctypes.CDLL(None); rm = lib.shmctl
setaffinity = os.sched_setaffinity
syscall("move_pages", 1); syscall("statx", 2)
lib.prctl(36, 1, 0); lib.unshare(0); lib.mount(None)
run(["systemctl", "stop", "irqbalance"]); run(["systemctl", "is-active", "irqbalance"])
os.rmdir("/sys/fs/cgroup/x")
fd = os.open(f"/proc/irq/{n}/smp_affinity", os.O_WRONLY | os.O_TRUNC)
os.open("/proc/self/stat", os.O_RDONLY)
open(f"/sys/fs/cgroup/{x}/cgroup.kill", "w"); open("/proc/self/stat")
Path("/proc/sys/kernel/x").write_text("1")
worker.terminate()
open("out.json", "w"); items.remove(3); os.getpid()
"""
    kinds = [kind for kind, _line in changes(source)]
    assert sorted(kinds) == sorted(
        ["signal"] * 4
        + ["unlink"] * 3
        + ["IPC_RMID", "affinity", "NUMA memory"]
        + ["namespace"] * 3
        + ["service", "rmdir", "own workers"]
        + ["kernel file write"] * 3
    )


def test_nothing_changes_the_machine_outside_the_packages_the_rule_names() -> None:
    wrong = []
    for rel, path in _modules().items():
        for kind, line in changes(path.read_text(encoding="utf-8")):
            if _package(rel) not in ALLOWED[kind]:
                wrong.append(f"src/accelhost/{rel}:{line}: {kind}")
    assert not wrong, "outside the house rule:\n" + "\n".join(wrong)


def test_every_allowance_is_used() -> None:
    """A package allowed a kind of change it no longer makes: take it off the list (and
    the rule), so that neither says more than is true."""
    used = {
        (kind, _package(rel))
        for rel, path in _modules().items()
        for kind, _line in changes(path.read_text(encoding="utf-8"))
    }
    unused = [(k, p) for k, packages in ALLOWED.items() for p in packages if (k, p) not in used]
    assert not unused, f"allowed but not used: {unused}"


def test_each_kind_of_removal_has_one_module() -> None:
    """Inside remove/, signals live in `signals` and unlink / IPC_RMID in `shm`."""
    homes = {"signal": "remove/signals.py", "unlink": "remove/shm.py", "IPC_RMID": "remove/shm.py"}
    for rel, path in _modules().items():
        if not rel.startswith("remove/"):
            continue
        for kind, line in changes(path.read_text(encoding="utf-8")):
            assert homes.get(kind) == rel, f"{rel}:{line}: {kind} belongs in {homes.get(kind)}"
    assert re.search(r"`signals`", (SRC / "remove" / "__init__.py").read_text())
