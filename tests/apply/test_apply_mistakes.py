"""User mistakes and unsafe writes found in review: each is one clear line or a failed
step, never a traceback, and no IRQ mask is written that `unbind --irq` cannot restore."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading

from apply_helpers import FULL, PCI, irq_args, thread_cpus

from accelhost.apply import irq as irqmod
from accelhost.apply.build import BindOptions, build_irq
from accelhost.apply.execute import execute
from accelhost.plans import Plan

NAMES = ("acl_thread", "release_thread", "worker")
A3 = {
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
        }
    },
}


def accelhost(*args: str) -> subprocess.CompletedProcess[str]:
    """The real command in a new interpreter: what a user sees on the terminal."""
    return subprocess.run(
        [sys.executable, "-m", "accelhost.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_bad_pattern_in_a_plan_file_is_one_line(spawn, plan_file, cli):
    child = spawn(*NAMES)
    path = plan_file(
        {"devices": {"0": {"main": [0], "thread_roles": {"x": {"pattern": "[", "cpus": [1]}}}}}
    )
    for command in ("bind", "verify"):
        res = cli(command, "--plan", path, "--device", "0", "--pid", str(child.pid))
        # refused when the plan file is read, naming the file and the role: a plan file
        # that is no plan is a usage error, as one that is not JSON (issue 26)
        assert res.rc == 2
        assert res.err.startswith(f"accelhost {command}: {path}: devices.0.thread_roles.x: ")
        assert "bad pattern '['" in res.err
        assert res.err.count("\n") == 1
    assert thread_cpus(child.pid, child.pid) == [0, 1]  # nothing was bound


def test_a_cpu_id_no_kernel_has_is_refused_in_a_plan_file(spawn, plan_file, cli):
    child = spawn(*NAMES)
    path = plan_file({"devices": {"0": {"main": [10**20], "acl": [1], "release": [1]}}})
    res = cli("bind", "--plan", path, "--device", "0", "--pid", str(child.pid))
    assert res.rc == 2, res.err
    assert "beyond any kernel's CPU count" in res.err and res.err.count("\n") == 1
    assert thread_cpus(child.pid, child.pid) == [0, 1]  # nothing was bound


def test_a_cpu_id_no_kernel_has_fails_only_its_steps(spawn):
    # a Plan built in Python skips the file checks: the applier must still cope
    from accelhost.apply.build import build_bind
    from accelhost.plans import DevicePlan

    child = spawn(*NAMES)
    plan = Plan(
        "A3", "manual", (0,), (DevicePlan(0, (10**20, 1), main=(10**20,), acl=(1,), release=(1,)),)
    )
    results = execute(
        build_bind(plan, 0, BindOptions(pid=child.pid, memory=False, irq=False)).steps
    )
    failed = [r for r in results if r.status == "failed"]
    assert failed and all("no such CPU on any kernel" in r.detail for r in failed)
    # The steps after the one that failed still ran.
    assert thread_cpus(child.pid, child.tid("acl_thread")) == [1]
    assert thread_cpus(child.pid, child.tid("release_thread")) == [1]
    assert thread_cpus(child.pid, child.tid("worker")) == [0, 1]


def test_exec_with_a_cpu_id_no_kernel_has_is_refused_before_starting(plan_file):
    path = plan_file({"devices": {"0": {"main": [10**20]}}})
    res = accelhost("exec", "--plan", path, "--device", "0", "--", "echo", "started")
    assert res.returncode == 2, res.stderr  # as bind says it: a plan file that is no plan
    assert res.stdout == ""
    assert "Traceback" not in res.stderr
    assert "beyond any kernel's CPU count" in res.stderr


def test_exec_with_a_cpu_this_host_lacks_still_starts_the_command(plan_file):
    path = plan_file({"devices": {"0": {"main": [5000]}}})
    res = accelhost("exec", "--plan", path, "--device", "0", "--", "echo", "started")
    assert res.returncode == 0, res.stderr
    assert res.stdout == "started\n"
    assert "Traceback" not in res.stderr
    assert "[failed] set affinity of the new command to CPUs 5000" in res.stderr
    assert "the NUMA node of CPU 5000 is unknown" in res.stderr


def test_an_upper_case_pci_address_is_found_in_sysfs(fake_tree, plan_file, cli, tmp_path):
    plan = json.loads(json.dumps(A3))
    plan["devices"]["0"]["pci"] = PCI.upper()  # as npu-smi prints it: 0000:C1:00.0
    res = cli(
        "bind",
        "--plan",
        plan_file(plan),
        "--device",
        "0",
        "--irq-only",
        "--host-root",
        str(fake_tree.root),
        "--state-dir",
        str(tmp_path / "state"),
        "--irqbalance",
        "keep",
    )
    assert res.rc == 0, res.out + res.err
    assert fake_tree.mask(200) == "00000100" and fake_tree.mask(201) == "00000100,00000000"


def test_a_step_that_cannot_be_prepared_says_why_once(fake_tree, plan_file, tmp_path):
    plan = json.loads(json.dumps(A3))
    plan["devices"]["0"]["pci"] = "0000:ff:00.0"
    args = (
        "bind",
        "--plan",
        plan_file(plan),
        "--device",
        "0",
        "--irq-only",
        "--host-root",
        str(fake_tree.root),
        "--state-dir",
        str(tmp_path / "state"),
        "--irqbalance",
        "keep",
    )
    why = f"no {fake_tree.root}/sys/bus/pci/devices/0000:ff:00.0/msi_irqs"
    res = accelhost(*args)
    assert res.returncode == 1
    assert res.stdout.splitlines()[0] == (
        f"[failed] bind the IRQs of device 0 to CPUs 8,40: cannot be done: {why}"
    )
    # The reason once: in the report, not again as a warning (nor from logging).
    assert res.stderr == ""
    assert res.stdout.count(why) == 1
    dry = accelhost(*args, "--dry-run")
    assert dry.returncode == 2
    assert dry.stdout.splitlines()[0] == (
        f"[planned] bind the IRQs of device 0 to CPUs 8,40: cannot be done: {why}"
    )
    assert fake_tree.masks()[200] == FULL


def test_irq_only_on_a_plan_without_irq_cpus_is_one_line(plan_file, cli):
    path = plan_file({"devices": {"0": {"main": [0], "acl": [1], "release": [1]}}})
    res = cli("bind", "--plan", path, "--device", "0", "--irq-only")
    assert res.rc == 1 and res.out == ""
    assert res.err == (
        "accelhost: --irq-only: the plan reserves no IRQ CPUs for device 0 "
        "(its 'irq' list is empty): nothing to bind\n"
    )


def test_masks_are_not_written_when_they_cannot_be_saved(fake_tree, plan_file, cli, tmp_path):
    not_a_dir = tmp_path / "state"
    not_a_dir.write_text("")  # the state directory cannot be created
    before = fake_tree.masks()
    res = cli(
        "bind",
        "--plan",
        plan_file(A3),
        "--device",
        "0",
        "--irq-only",
        "--host-root",
        str(fake_tree.root),
        "--state-dir",
        str(not_a_dir),
        "--irqbalance",
        "keep",
    )
    assert res.rc == 1, res.out
    assert fake_tree.masks() == before
    assert "[failed] save current IRQ masks" in res.out
    assert res.out.count("could not be saved for `unbind --irq`") == 2


def test_binds_at_the_same_time_keep_every_saved_mask(tmp_path):
    path = irqmod.state_path(str(tmp_path / "state"))
    start = threading.Barrier(16)

    def save(device: int) -> None:
        start.wait()
        for k in range(5):
            irqmod.remember_masks(path, "/", device, [(device * 10 + k, f"{device:08x}")])

    threads = [threading.Thread(target=save, args=(d,)) for d in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    saved = irqmod.load_state(path)["irqs"]
    assert sorted(r["irq"] for r in saved.values()) == sorted(
        d * 10 + k for d in range(16) for k in range(5)
    )
    assert sorted(os.listdir(tmp_path / "state")) == ["irq-state.json", "irq-state.json.lock"]


def test_irqbalance_config_keeps_its_permissions(fake_tree, tmp_path):
    from test_apply_irq import FakeHost

    cfg = fake_tree.root / "etc/default/irqbalance"
    cfg.parent.mkdir(parents=True)
    cfg.write_text('IRQBALANCE_ARGS="--foreground"\n')
    cfg.chmod(0o640)
    plan = Plan.from_dict(A3)
    host = FakeHost({"systemctl is-active irqbalance.service": "active\n"})
    opts = BindOptions(host_root=str(fake_tree.root), state_dir=str(tmp_path), irqbalance="ban")
    steps, _, _ = build_irq(plan, plan.device(0), opts, host)
    assert all(r.status == "ok" for r in execute(steps, host))
    assert stat.S_IMODE(cfg.stat().st_mode) == 0o640
    assert "--banirq=200" in cfg.read_text()
    assert os.listdir(cfg.parent) == ["irqbalance"]  # no temporary file left behind


def test_unbind_keeps_the_saved_mask_it_could_not_write_back(fake_tree, plan_file, cli, tmp_path):
    state = tmp_path / "state"
    assert cli(*irq_args(fake_tree, state, plan_file(A3))).rc == 0
    cq = fake_tree.root / "proc/irq/201/smp_affinity"
    bound = cq.read_text()
    cq.unlink()
    cq.mkdir()  # the write back fails (EISDIR)
    res = cli("unbind", "--irq", "--state-dir", str(state))
    assert res.rc == 2, res.out
    assert fake_tree.mask(200) == FULL
    assert "kept 1 whose restore failed, to retry" in res.out
    saved = irqmod.load_state(str(state / "irq-state.json"))["irqs"]
    assert [r["irq"] for r in saved.values()] == [201]
    cq.rmdir()
    cq.write_text(bound)  # as bind left it (a mask set since bind is not restored)
    again = cli("unbind", "--irq", "--state-dir", str(state))
    assert again.rc == 0, again.out
    assert fake_tree.mask(201) == FULL
    assert irqmod.load_state(str(state / "irq-state.json"))["irqs"] == {}


def test_a_damaged_state_file_is_neither_overwritten_nor_ignored(
    fake_tree, plan_file, cli, tmp_path
):
    state = tmp_path / "state"
    state.mkdir()
    damaged = state / "irq-state.json"
    damaged.write_text('{"format": "accelhost-irq-state/1", "irqs": {"x": {"irq": 2')
    before = fake_tree.masks()
    res = cli(*irq_args(fake_tree, state, plan_file(A3)))
    assert res.rc == 1
    assert fake_tree.masks() == before
    assert damaged.read_text().endswith('"irq": 2')
    undo = cli("unbind", "--irq", "--state-dir", str(state))
    assert undo.rc == 1 and undo.out == ""
    assert undo.err == (
        f"accelhost: {damaged} is not a usable IRQ state file (not valid JSON); the masks it "
        "saved are not restored: fix or move it away\n"
    )
