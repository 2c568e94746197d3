"""Ways a bind or unbind could change what is not the planned device's: each test failed
on the code before its fix."""

from __future__ import annotations

import os

import pytest
from apply_helpers import FULL, ONE_DEVICE_PLAN, OTHER_PCI, PCI, irq_args, saved_irqs

from accelhost.apply import irq as irqmod
from accelhost.apply.build import build_unbind_irq
from accelhost.apply.migrate import MoveRegions, build_move
from accelhost.apply.steps import IrqAffinity, IrqBalance
from accelhost.errors import PlanError
from accelhost.plans import Plan


def test_unbind_leaves_an_irq_set_since_bind_as_it_is(fake_tree, plan_file, cli, tmp_path):
    """After bind, IRQ 201 was set by someone else (an operator; or a reboot gave the number
    to a NIC queue, whose mask its driver set): writing the saved mask back would undo that.
    IRQ 200, still as bind left it, is restored; both records are done with."""
    state = tmp_path / "state"
    assert cli(*irq_args(fake_tree, state, plan_file(ONE_DEVICE_PLAN))).rc == 0
    assert fake_tree.mask(201) == "00000100,00000000"  # bind: CPU 40
    (fake_tree.root / "proc/irq/201/smp_affinity").write_text("00000004\n")

    res = cli("unbind", "--irq", "--state-dir", str(state))
    assert res.rc == 0, res.out + res.err
    assert fake_tree.mask(200) == FULL
    assert fake_tree.mask(201) == "00000004"
    assert "were set since bind (IRQ 201 is 00000004): left as they are" in res.out
    assert saved_irqs(state) == {}


def test_an_irq_set_since_bind_does_not_keep_irqbalance_stopped(
    fake_tree, plan_file, cli, tmp_path
):
    state = tmp_path / "state"
    assert cli(*irq_args(fake_tree, state, plan_file(ONE_DEVICE_PLAN))).rc == 0
    path = irqmod.state_path(str(state))
    irqmod.remember_irqbalance(path, {"action": "stop"})
    (fake_tree.root / "proc/irq/200/smp_affinity").write_text("00000004\n")
    steps = build_unbind_irq(str(state)).steps
    assert [s.irq for s in steps if isinstance(s, IrqAffinity)] == [201]
    assert [s.action for s in steps if isinstance(s, IrqBalance)] == ["start"]


def test_a_cq_number_that_is_another_devices_irq_is_not_touched(
    fake_tree, plan_file, cli, tmp_path
):
    """The CQ is SQ + 1; when that number is not one of the device's MSI IRQs, it is another
    device's interrupt, and neither it nor the SQ is moved."""
    ours = fake_tree.root / f"sys/bus/pci/devices/{PCI}/msi_irqs"
    (ours / "201").rename(fake_tree.root / f"sys/bus/pci/devices/{OTHER_PCI}/msi_irqs/201")
    before = fake_tree.masks()
    res = cli(*irq_args(fake_tree, tmp_path / "state", plan_file(ONE_DEVICE_PLAN)))
    assert res.rc == 1, res.out + res.err
    assert "IRQ 201 (CQ = SQ 200 + 1) is not an MSI IRQ of 0000:c1:00.0" in res.out
    assert fake_tree.masks() == before


@pytest.mark.parametrize("pattern", ["", ".", "uvb|", "d"])
def test_a_host_thread_pattern_matching_ordinary_threads_is_refused(pattern):
    """Host threads are pinned whoever owns them: such a plan would pin every thread of
    the host (PID 1's, sshd's, other engines') onto the host-thread CPUs."""
    plan = {"devices": {"0": {"main": [0]}}, "host_threads": {"pattern": pattern, "cpus": [0]}}
    with pytest.raises(PlanError, match="would pin every process's threads"):
        Plan.from_dict(plan)


def test_the_uvb_host_thread_pattern_is_still_read():
    plan = {"devices": {"0": {"main": [0]}}, "host_threads": {"cpus": [0]}}
    ht = Plan.from_dict(plan).host_threads
    assert ht is not None and ht.pattern == "uvb_poll_window_thread"


def test_pages_move_only_into_room_the_target_node_has(tmp_path):
    """move_pages(2) allocates on the target node alone and reclaims there when it runs
    short (the page cache and the memory of the processes already there): at most half
    the node's free memory is moved; what does not fit is skipped and said."""
    node1 = tmp_path / "sys/devices/system/node/node1"
    node1.mkdir(parents=True)
    node1.joinpath("meminfo").write_text("Node 1 MemTotal: 100 kB\nNode 1 MemFree: 8 kB\n")
    # This process's pages are all on node 0 of this host: all of them are off node 1.
    step = build_move(os.getpid(), 1, 1000, root=str(tmp_path))
    assert isinstance(step, MoveRegions)
    assert all(r.off_node * r.page_kb <= 4 for r in step.regions)
    [(mappings, kb)] = [(n, kb) for why, n, kb in step.skipped if why == "no room on node 1"]
    assert mappings > 0 and kb > 4
    assert "no room on node 1" in step.describe()
