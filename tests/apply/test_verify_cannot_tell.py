"""`verify` that could check nothing says it cannot tell (exit 2), never "match" (exit 0):
failed on the code before the fix, which printed "match: 0 threads and 0 IRQs checked"."""

from __future__ import annotations

import json

from apply_helpers import OTHER_PCI, PCI

PLAN = {
    "device_type": "A3",
    "devices": {"0": {"pool": [8, 40, 41], "irq": [8, 40], "main": [41], "pci": PCI}},
}


def _verify(cli, fake_tree, plan: str, *more: str):
    return cli("verify", "--plan", plan, "--device", "0", "--host-root", str(fake_tree.root), *more)


def test_verify_whose_irq_lookup_fails_cannot_tell(fake_tree, plan_file, cli):
    # The device's MSI IRQs are gone from sysfs (a driver unloaded, a wrong --host-root).
    msi = fake_tree.root / f"sys/bus/pci/devices/{PCI}/msi_irqs"
    for entry in msi.iterdir():
        entry.unlink()
    msi.rmdir()
    path = plan_file(PLAN)
    res = _verify(cli, fake_tree, path)
    assert res.rc == 2, res.out
    assert "cannot tell: 0 threads and 0 IRQs checked, 0 drifted" in res.out
    assert f"IRQs not checked: no {msi}" in res.out
    assert "match" not in res.out
    data = json.loads(_verify(cli, fake_tree, path, "--json").out)
    assert (data["ok"], data["exit_code"], data["checked_irqs"]) == (False, 2, 0)


def test_verify_that_checked_the_irqs_still_answers(fake_tree, plan_file, cli):
    """The same lookup, working: the answer is match (0) or drift (1), as before."""
    res = _verify(cli, fake_tree, plan_file(PLAN))
    assert res.rc == 1 and "DRIFT: 0 threads and 2 IRQs checked, 2 drifted" in res.out
    other = {"devices": {"0": {**PLAN["devices"]["0"], "pci": OTHER_PCI}}}  # IRQs 100, 101
    for irq, mask in ((100, "00000100"), (101, "00000100,00000000")):
        (fake_tree.root / f"proc/irq/{irq}/smp_affinity").write_text(mask + "\n")
    res = _verify(cli, fake_tree, plan_file(other))
    assert res.rc == 0 and "match: 0 threads and 2 IRQs checked, 0 drifted" in res.out, res.out
