"""Which device is a process's: nodes it holds open (real char devices made with mknod,
held by real child processes), and the rules that turn node names into plan keys."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from accelhost.apply.identity import (
    HeldNode,
    device_of_nodes,
    device_of_pid,
    held_nodes,
    nodes_of_targets,
)
from accelhost.errors import UsageError

NULL = os.stat("/dev/null").st_rdev

# A child that opens every path it is given and waits for stdin to close.
HOLDER = r"""
import sys
held = [open(p, "rb") for p in sys.argv[1:]]
print("ready", flush=True)
sys.stdin.read()
"""


def make_node(directory: Path, name: str) -> Path:
    """A character device with /dev/null's numbers, under a name a driver would use."""
    path = directory / name
    os.mknod(path, 0o600 | stat.S_IFCHR, NULL)
    return path


@pytest.fixture
def holder() -> Iterator[Callable[..., subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []

    def start(*paths: Path) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            [sys.executable, "-c", HOLDER, *map(str, paths)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        started.append(proc)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        return proc

    yield start
    for proc in started:
        try:
            assert proc.stdin is not None
            proc.stdin.close()
            proc.wait(timeout=10)
        except (subprocess.TimeoutExpired, OSError):
            proc.kill()
            proc.wait()


def test_a_real_process_holding_one_node(tmp_path: Path, holder) -> None:
    node = make_node(tmp_path, "davinci3")
    proc = holder(node)
    glob = str(tmp_path / "davinci*")
    nodes = held_nodes(proc.pid, [glob])
    assert nodes == [HeldNode(str(node), "glob", 3)]
    found = device_of_pid(proc.pid, None, [glob])
    assert found.device == 3 and str(node) in found.how and str(proc.pid) in found.how


def test_no_glob_no_node(tmp_path: Path, holder) -> None:
    proc = holder(make_node(tmp_path, "davinci3"))
    with pytest.raises(UsageError, match="holds no device node"):
        device_of_pid(proc.pid)


def test_bind_without_device_resolves_it_from_the_node(
    tmp_path: Path, holder, plan_file, cli
) -> None:
    proc = holder(make_node(tmp_path, "davinci3"))
    plan = plan_file({"devices": {"3": {"main": [0]}, "4": {"main": [1]}}})
    glob = str(tmp_path / "davinci*")
    res = cli("bind", "--plan", plan, "--pid", str(proc.pid), "--device-glob", glob,
              "--dry-run", "--json")  # fmt: skip
    assert res.rc == 0, res.err
    data = json.loads(res.out)
    assert data["device"] == 3
    assert data["device_found"]["device"] == 3
    assert str(tmp_path / "davinci3") in data["device_found"]["how"]
    threads = [s for s in data["steps"] if s["kind"] == "thread"]
    assert threads and all(s["cpus"] == [0] for s in threads)
    text = cli("bind", "--plan", plan, "--pid", str(proc.pid), "--device-glob", glob,
               "--dry-run")  # fmt: skip
    assert text.rc == 0 and text.out.startswith("device 3: process")


def test_two_nodes_are_refused_naming_both(tmp_path: Path, holder, plan_file, cli) -> None:
    a, b = make_node(tmp_path, "davinci3"), make_node(tmp_path, "davinci4")
    proc = holder(a, b)
    plan = plan_file({"devices": {"3": {"main": [0]}, "4": {"main": [1]}}})
    res = cli("bind", "--plan", plan, "--pid", str(proc.pid), "--device-glob",
              str(tmp_path / "davinci*"), "--dry-run", "--json")  # fmt: skip
    assert res.rc == 2
    assert str(a) in res.err and str(b) in res.err and "give --device" in res.err
    # --device says which: no refusal.
    ok = cli("bind", "--plan", plan, "--pid", str(proc.pid), "--device", "4", "--dry-run")
    assert ok.rc == 0, ok.err


def test_verify_without_device_says_how_it_found_it(tmp_path: Path, holder, plan_file, cli) -> None:
    proc = holder(make_node(tmp_path, "accel1"))
    plan = plan_file({"devices": {"1": {"main": [0, 1]}}})
    res = cli("verify", "--plan", plan, "--pid", str(proc.pid), "--device-glob",
              str(tmp_path / "accel*"), "--json")  # fmt: skip
    data = json.loads(res.out)
    assert data["device_found"]["device"] == 1, res.err


def test_a_process_that_is_gone_is_not_a_usage_error(plan_file, cli) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    res = cli("bind", "--plan", plan_file({"devices": {"0": {"main": [0]}}}), "--pid",
              str(proc.pid), "--dry-run")  # fmt: skip
    assert res.rc == 1 and "does not exist" in res.err


# -- the pure rules ----------------------------------------------------------------------


def test_node_names_and_control_nodes() -> None:
    targets = [
        "/dev/davinci_manager",
        "/dev/nvidiactl",
        "/dev/davinci2",
        "/dev/davinci2",
        "socket:[123]",
        "/dev/nvidia-uvm",
        "/dev/accel/accel5",
        "/dev/dri/renderD129",
    ]
    nodes = nodes_of_targets(targets)
    assert [(n.path, n.kind, n.number) for n in nodes] == [
        ("/dev/accel/accel5", "accel", 5),
        ("/dev/davinci2", "davinci", 2),
        ("/dev/dri/renderD129", "render", None),
    ]


def test_pci_of_a_node_joins_it_to_the_plan() -> None:
    # A render node is known only by its PCI address; an NVIDIA node whose minor differs
    # from the plan key (a plan made where nvidia-smi numbers differently) joins by PCI.
    render = HeldNode("/dev/dri/renderD128", "render", None, "0000:c1:00.0")
    assert device_of_nodes(1, [render], {"0000:C1:00.0": 6}).device == 6
    nvidia = HeldNode("/dev/nvidia5", "nvidia", 5, "0000:41:00.0")
    found = device_of_nodes(1, [nvidia], {"0000:41:00.0": 0})
    assert found.device == 0 and "PCI 0000:41:00.0" in found.how
    assert device_of_nodes(1, [nvidia], {}).device == 5
    with pytest.raises(UsageError, match="renderD128 \\(PCI 0000:c1:00.0, in no plan"):
        device_of_nodes(1, [render], {})


def test_several_nodes_of_one_device_are_one_device() -> None:
    a = HeldNode("/dev/nvidia2", "nvidia", 2, "0000:41:00.0")
    b = HeldNode("/dev/dri/renderD130", "render", None, "0000:41:00.0")
    assert device_of_nodes(1, [a, b], {"0000:41:00.0": 2}).device == 2
