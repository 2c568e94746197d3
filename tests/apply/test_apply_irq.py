"""IRQ binding under a fake --host-root tree; irqbalance through a fake host."""

from __future__ import annotations

import json
from collections.abc import Sequence

from apply_helpers import FULL, OTHER_PCI, PCI, irq_args

from accelhost.apply.build import BindOptions, build_irq
from accelhost.apply.execute import execute
from accelhost.apply.steps import IrqAffinity, IrqBalance, Unresolved
from accelhost.host.base import CommandResult
from accelhost.plans import Plan

A3_PLAN = {
    "device_type": "A3",
    "devices": {
        "0": {
            "pool": [8, 40, 41, 42, 43],
            "irq": [8, 40],
            "main": [41],
            "acl": [42],
            "release": [43],
            "numa_node": 0,
            "pci": PCI,
        },
    },
}


def test_irq_masks_are_written_and_nothing_else(fake_tree, plan_file, cli, tmp_path):
    before = fake_tree.masks()
    res = cli(*irq_args(fake_tree, tmp_path / "state", plan_file(A3_PLAN)))
    assert res.rc == 0, res.out + res.err
    after = fake_tree.masks()
    assert after[200] == "00000100"  # SQ -> pool[0] = CPU 8
    assert after[201] == "00000100,00000000"  # CQ -> pool[1] = CPU 40
    assert {k: v for k, v in after.items() if k not in (200, 201)} == {
        k: v for k, v in before.items() if k not in (200, 201)
    }
    assert "[SQ of NPU 0 (0000:c1:00.0)]" in res.out
    saved = json.loads((tmp_path / "state/irq-state.json").read_text())
    assert sorted(r["mask"] for r in saved["irqs"].values()) == [FULL, FULL]


def test_dry_run_writes_no_mask(fake_tree, plan_file, cli, tmp_path):
    before = fake_tree.masks()
    res = cli(*irq_args(fake_tree, tmp_path / "state", plan_file(A3_PLAN)), "--dry-run")
    assert res.rc == 0
    assert "[planned] write mask 00000100,00000000 (CPUs 40)" in res.out
    assert fake_tree.masks() == before
    assert not (tmp_path / "state").exists()


def test_bind_lines_fit_the_terminal_width(fake_tree, plan_file, cli, tmp_path, monkeypatch):
    """With $COLUMNS (or a terminal) each step line wraps to it and loses no word; a pipe
    keeps whole lines (issue 18, point 7)."""
    args = (*irq_args(fake_tree, tmp_path / "state", plan_file(A3_PLAN)), "--dry-run")
    monkeypatch.delenv("COLUMNS", raising=False)
    whole = cli(*args)
    monkeypatch.setenv("COLUMNS", "60")
    fitted = cli(*args)
    assert whole.rc == fitted.rc == 0
    assert max(len(line) for line in whole.out.splitlines()) > 60
    # a line stays longer only where one word is (a path is never cut)
    over = [line for line in fitted.out.splitlines() if len(line) > 60]
    assert all(len(line.split()) == 1 for line in over), over
    assert fitted.out.split() == whole.out.split()


def test_verify_then_unbind_restores(fake_tree, plan_file, cli, tmp_path):
    state = tmp_path / "state"
    plan = plan_file(A3_PLAN)
    assert cli(*irq_args(fake_tree, state, plan)).rc == 0
    verify = ("verify", "--plan", plan, "--device", "0", "--host-root", str(fake_tree.root))
    ok = cli(*verify)
    assert ok.rc == 0 and "2 IRQs checked" in ok.out
    (fake_tree.root / "proc/irq/201/smp_affinity").write_text("00000001\n")
    bad = cli(*verify)
    assert bad.rc == 1
    assert (
        "IRQ 201 (CQ of NPU 0 (0000:c1:00.0)) drifted: plan 00000100,00000000 (CPUs 40), "
        "actual 00000001 (CPUs 0)"
    ) in bad.out
    # A second bind must not overwrite the originals saved by the first.
    assert cli(*irq_args(fake_tree, state, plan)).rc == 0
    res = cli("unbind", "--irq", "--state-dir", str(state))
    assert res.rc == 0, res.out + res.err
    assert fake_tree.mask(200) == FULL and fake_tree.mask(201) == FULL
    again = cli("unbind", "--irq", "--state-dir", str(state))
    assert again.rc == 0 and "nothing to restore" in again.out


def test_sq_is_looked_up_among_the_device_msi_irqs(fake_tree, plan_file, cli, tmp_path):
    plan = json.loads(json.dumps(A3_PLAN))
    plan["devices"]["0"]["pci"] = OTHER_PCI
    assert cli(*irq_args(fake_tree, tmp_path / "s", plan_file(plan))).rc == 0
    assert fake_tree.mask(100) == "00000100" and fake_tree.mask(200) == FULL


def test_no_irq_cpus_no_irq_step_and_950_says_skipped(fake_tree, tmp_path):
    opts = BindOptions(host_root=str(fake_tree.root), state_dir=str(tmp_path), irqbalance="keep")
    plan = Plan.from_dict({"devices": {"0": {"main": [0]}}})
    assert build_irq(plan, plan.device(0), opts, FakeHost()) == ([], [], [])
    plan950 = Plan.from_dict({"device_type": "950", "devices": {"0": {"main": [0]}}})
    assert build_irq(plan950, plan950.device(0), opts, FakeHost())[2] == [
        "[irq] IRQ binding skipped on Ascend 950."
    ]


class FakeHost:
    """Answers npu-smi and systemctl; records every command."""

    machine = "aarch64"
    device_type = None
    is_live = False

    def __init__(self, answers: dict[str, str] | None = None) -> None:
        self.answers = answers or {}
        self.ran: list[str] = []

    def run(self, argv: Sequence[str]) -> CommandResult | None:
        key = " ".join(argv)
        self.ran.append(key)
        if key in self.answers:
            return CommandResult(self.answers[key])
        return CommandResult("", 0) if argv[0] == "systemctl" and argv[1] != "is-active" else None

    def run_many(self, argvs):
        return [self.run(a) for a in argvs]

    def read_file(self, path):
        return None

    def list_dir(self, path):
        return None

    def read_link(self, path):
        return None

    def getenv(self, name):
        return None


BOARD = """\
        NPU ID                         : 1
        Chip ID                        : 1
        PCIe Bus Info                  : 0000:C1:00.0
        Slot ID                        : 1
"""


def test_pci_from_the_board_query_when_the_plan_has_none(fake_tree, tmp_path):
    data = json.loads(json.dumps(A3_PLAN))
    dev = data["devices"].pop("0")
    del dev["pci"]
    data["devices"]["3"] = dev
    plan = Plan.from_dict(data)
    host = FakeHost({"npu-smi info -t board -i 1 -c 1": BOARD})
    opts = BindOptions(host_root=str(fake_tree.root), state_dir=str(tmp_path), irqbalance="keep")
    steps, _, _ = build_irq(plan, plan.device(3), opts, host)
    assert [s.irq for s in steps if isinstance(s, IrqAffinity)] == [200, 201]
    missing = build_irq(plan, plan.device(3), opts, FakeHost())[0]
    assert len(missing) == 1 and isinstance(missing[0], Unresolved)


def test_irqbalance_stop_then_start_again(fake_tree, tmp_path):
    plan = Plan.from_dict(A3_PLAN)
    host = FakeHost({"systemctl is-active irqbalance.service": "active\n"})
    opts = BindOptions(host_root=str(fake_tree.root), state_dir=str(tmp_path))
    steps, warnings, _ = build_irq(plan, plan.device(0), opts, host)
    assert isinstance(steps[0], IrqBalance) and steps[0].action == "stop"
    assert any("stopping it for the whole host" in w for w in warnings)
    results = execute(steps, host)
    assert all(r.status == "ok" for r in results), [r.line for r in results]
    assert "systemctl stop irqbalance.service" in host.ran
    from accelhost.apply.build import build_unbind_irq

    undo = build_unbind_irq(str(tmp_path))
    assert [type(s).__name__ for s in undo.steps][-1] == "IrqBalance"
    execute(undo.steps, host)
    assert host.ran[-1] == "systemctl start irqbalance.service"
    assert fake_tree.mask(200) == FULL


def test_irqbalance_ban_edits_its_config_and_unbind_restores_it(fake_tree, tmp_path):
    cfg = fake_tree.root / "etc/default/irqbalance"
    cfg.parent.mkdir(parents=True)
    original = '#IRQBALANCE_ONESHOT=\nIRQBALANCE_BANNED_CPULIST="0"\n'
    cfg.write_text(original)
    plan = Plan.from_dict(A3_PLAN)
    host = FakeHost({"systemctl is-active irqbalance.service": "active\n"})
    opts = BindOptions(host_root=str(fake_tree.root), state_dir=str(tmp_path), irqbalance="ban")
    steps, _, _ = build_irq(plan, plan.device(0), opts, host)
    assert all(r.status == "ok" for r in execute(steps, host))
    text = cfg.read_text()
    assert 'IRQBALANCE_BANNED_CPULIST="0,8,40"' in text
    assert 'IRQBALANCE_ARGS="--banirq=200 --banirq=201"' in text
    assert "systemctl restart irqbalance.service" in host.ran
    from accelhost.apply.build import build_unbind_irq

    execute(build_unbind_irq(str(tmp_path)).steps, host)
    assert cfg.read_text() == original


def test_gpu_irqs_are_spread_over_the_irq_cpus(fake_tree, tmp_path):
    for irq in (300, 301, 302):
        (fake_tree.root / f"proc/irq/{irq}").mkdir()
        (fake_tree.root / f"proc/irq/{irq}/smp_affinity").write_text(FULL)
    msi = fake_tree.root / "sys/bus/pci/devices/0000:1b:00.0/msi_irqs"
    msi.mkdir(parents=True)
    for irq in (300, 301, 302):
        (msi / str(irq)).write_text("msix")
    plan = Plan.from_dict(
        {
            "device_type": "nvidia",
            "devices": {
                "0": {"pool": [2, 3, 4, 5], "irq": [2, 3], "main": [4, 5], "pci": "0000:1b:00.0"}
            },
        }
    )
    opts = BindOptions(host_root=str(fake_tree.root), state_dir=str(tmp_path), irqbalance="keep")
    steps, _, _ = build_irq(plan, plan.device(0), opts, FakeHost())
    assert [(s.irq, s.mask) for s in steps if isinstance(s, IrqAffinity)] == [
        (300, "00000004"),
        (301, "00000008"),
        (302, "00000004"),
    ]


def test_bad_pci_fails_the_irq_step_only(spawn, fake_tree, plan_file, cli, tmp_path):
    child = spawn("worker")
    plan = json.loads(json.dumps(A3_PLAN))
    plan["devices"]["0"].update({"pci": "0000:ff:00.0", "main": [0], "acl": [1], "release": [1]})
    res = cli(
        "bind",
        "--plan",
        plan_file(plan),
        "--device",
        "0",
        "--pid",
        str(child.pid),
        "--host-root",
        str(fake_tree.root),
        "--state-dir",
        str(tmp_path),
        "--irqbalance",
        "keep",
    )
    assert res.rc == 2
    failed = "[failed] bind the IRQs of device 0 to CPUs 8,40: cannot be done"
    assert failed in res.out and "bind the IRQs" not in res.err  # said once, in the report
    assert fake_tree.masks()[200] == FULL
