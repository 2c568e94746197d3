"""`unbind --irq` on saved masks whose fake host root was deleted: it says which entries
cannot be restored and why, keeps them (exit 1), and `--forget` drops exactly those."""

from __future__ import annotations

import json
import shutil

from apply_helpers import FULL, ONE_DEVICE_PLAN, irq_args, saved_irqs


def test_a_deleted_host_root_is_named_kept_then_forgotten(fake_tree, plan_file, cli, tmp_path):
    state = tmp_path / "state"
    assert cli(*irq_args(fake_tree, state, plan_file(ONE_DEVICE_PLAN))).rc == 0
    assert len(saved_irqs(state)) == 2
    shutil.rmtree(fake_tree.root)
    root = str(fake_tree.root)

    res = cli("unbind", "--irq", "--state-dir", str(state))
    assert res.rc == 1, res.out + res.err
    for irq in (200, 201):
        assert (
            f"restore IRQ {irq} of device 0 (mask {FULL}): cannot be done: host root {root} "
            "no longer exists: kept in the state file; `unbind --irq --forget` drops it"
        ) in res.out
    assert len(saved_irqs(state)) == 2  # a missing mount may come back: nothing dropped

    dry = cli("unbind", "--irq", "--forget", "--dry-run", "--state-dir", str(state))
    assert dry.rc == 0, dry.out + dry.err
    assert "forget 2 saved IRQ(s)" in dry.out and len(saved_irqs(state)) == 2

    res = cli("unbind", "--irq", "--forget", "--json", "--state-dir", str(state))
    assert res.rc == 0, res.out + res.err
    [step] = json.loads(res.out)["steps"]
    assert step["status"] == "ok"
    assert f"that cannot be restored (host root {root} no longer exists)" in step["description"]
    assert saved_irqs(state) == {}
    again = cli("unbind", "--irq", "--state-dir", str(state))
    assert again.rc == 0 and "nothing to restore" in again.out


def test_forget_keeps_what_can_still_be_restored(fake_tree, plan_file, cli, tmp_path):
    """One IRQ gone from the tree, the other there: restored; only the gone one dropped."""
    state = tmp_path / "state"
    assert cli(*irq_args(fake_tree, state, plan_file(ONE_DEVICE_PLAN))).rc == 0
    shutil.rmtree(fake_tree.root / "proc/irq/201")
    res = cli("unbind", "--irq", "--state-dir", str(state))
    assert res.rc == 2, res.out + res.err  # one restored, one not: partial
    assert fake_tree.mask(200) == FULL
    assert "IRQ 201 no longer exists" in res.out
    assert [r["irq"] for r in saved_irqs(state).values()] == [201]
    res = cli("unbind", "--irq", "--forget", "--state-dir", str(state))
    assert res.rc == 0, res.out + res.err
    assert saved_irqs(state) == {}


def test_forget_goes_with_irq(cli, tmp_path):
    res = cli("unbind", "--pid", "1", "--forget", "--state-dir", str(tmp_path))
    assert res.rc == 2 and "--forget" in res.err
