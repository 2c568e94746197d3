"""The pure parts: role matching, IRQ parsing, irqbalance config, numa_maps, exit codes;
and the NUMA system calls made for real on this kernel."""

from __future__ import annotations

import json
import os

from apply_helpers import assign, thread_cpus

from accelhost.apply.irq import banned_config, parse_interrupts
from accelhost.apply.steps import (
    FAILED,
    OK,
    PLANNED,
    ApplyReport,
    StepResult,
    ThreadAffinity,
    Unresolved,
)
from accelhost.apply.threads import RoleMatcher
from accelhost.plans import ThreadRole


def test_later_roles_win_and_unmatched_threads_get_main():
    roles = [ThreadRole("acl", "acl_thread", (3,)), ThreadRole("mine", "^acl", (4,))]
    got = assign([(1, "python"), (2, "acl_thread")], (0, 1), roles)
    assert [(a.tid, a.role, a.cpus) for a in got] == [(1, "main", (0, 1)), (2, "mine", (4,))]


def test_long_literal_patterns_match_the_truncated_kernel_name():
    m = RoleMatcher(ThreadRole("host", "uvb_poll_window_thread", (1,)))
    assert m.matches("uvb_poll_window")  # what /proc shows: 15 bytes
    assert not m.matches("uvb_poll")
    assert RoleMatcher(ThreadRole("r", "release_thread", (1,))).matches("release_thread")


def test_parse_interrupts_keeps_numbered_lines_in_order():
    text = (
        "           CPU0\n  7:  1  IO-APIC  x\nNMI:  0  y\n 12:  3  PCI-MSI sq_send_trigger_irq\n"
    )
    assert [n for n, _ in parse_interrupts(text)] == [7, 12]


def test_banned_config_adds_cpus_and_irqs_once():
    text = banned_config("FOO=1\n", [8, 40], [200, 201])
    assert text == (
        "FOO=1\n# added by accelhost bind --irqbalance=ban; undo: accelhost unbind --irq\n"
        'IRQBALANCE_BANNED_CPULIST="8,40"\nIRQBALANCE_ARGS="--banirq=200 --banirq=201"\n'
    )
    again = banned_config(text, [8, 40], [200, 201])
    assert again.count("IRQBALANCE_BANNED_CPULIST") == 1 and again.count("--banirq=200") == 1


def test_exit_status_partial_versus_full():
    ok = StepResult(ThreadAffinity(1, 1, "a", "main", (0,)), OK)
    bad = StepResult(ThreadAffinity(1, 2, "b", "main", (0,)), FAILED, "x")
    assert ApplyReport(results=(ok, ok)).exit_status == 0
    assert ApplyReport(results=(ok, bad)).exit_status == 2
    assert ApplyReport(results=(bad,)).exit_status == 1
    unresolved = StepResult(Unresolved("irq", "no pci"), PLANNED)
    assert ApplyReport(results=(unresolved,), dry_run=True).exit_status == 2
    # A bind that did nothing is not ok, dry run or not (issue 18, point 4).
    skipped = ApplyReport(skipped="CPU binding skipped: non-ARM CPU detected.", device=0, pid=1)
    assert skipped.exit_status == 1 and not skipped.ok
    assert not ApplyReport(skipped="why", device=None, pid=1, dry_run=True).ok


def test_memory_step_selects_regions_when_several_nodes_have_memory(
    spawn, plan_file, cli, fake_tree
):
    # The fake sysfs claims nodes 0 and 1 hold memory: the step reads the process's real
    # maps, skips what must not move, and (every page being on node 0 here) moves nothing,
    # saying where the memory is before and after.
    (fake_tree.root / "sys/devices/system/node/has_memory").write_text("0-1\n")
    child = spawn("worker")
    res = cli(
        "bind",
        "--plan",
        plan_file({"devices": {"0": {"main": [0], "numa_node": 0}}}),
        "--device",
        "0",
        "--pid",
        str(child.pid),
        "--host-root",
        str(fake_tree.root),
        "--json",
    )
    assert res.rc == 0, res.out
    step = next(s for s in json.loads(res.out)["steps"] if s["kind"] == "memory")
    assert step["status"] == "noop" and step["memory_nodes"] == [0, 1]
    assert step["to_node"] == 0 and step["regions"] == []
    assert "kernel mapping" in {s["reason"] for s in step["skipped"]}
    # bytes, as every JSON document gives memory: whole pages of at least 4 KiB
    before, after = step["resident_bytes_before"]["0"], step["resident_bytes_after"]["0"]
    assert before > 0 and after > 0 and before % 4096 == 0 and after % 4096 == 0


def test_mempolicy_round_trip_in_a_child():
    import subprocess
    import sys

    code = (
        f"import sys; sys.path.insert(0, {os.path.dirname(__file__)!r});"
        "from accelhost.apply import memory as m; m.set_mempolicy('bind', [0]);"
        "from apply_helpers import get_mempolicy; print(get_mempolicy())"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    ).stdout
    assert out.strip() == "('bind', [0])"


def test_threads_created_after_binding_inherit_and_verify_names_them(spawn, plan_file, cli):
    child = spawn("worker")
    path = plan_file({"devices": {"0": {"main": [0], "acl": [1]}}})
    assert cli("bind", "--plan", path, "--device", "0", "--pid", str(child.pid)).rc == 0
    child.spawn_thread("acl_thread")  # created by the main thread, pinned to CPU 0
    late = child.tid("acl_thread")
    assert thread_cpus(child.pid, late) == [0]
    res = cli("verify", "--plan", path, "--device", "0", "--pid", str(child.pid))
    assert res.rc == 1
    assert f"thread {late} (acl_thread) drifted: plan CPUs 1 [acl], actual 0" in res.out
    assert os.path.exists(f"/proc/{child.pid}")
