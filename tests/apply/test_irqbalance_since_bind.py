"""`unbind --irq` undoes what bind did to irqbalance, and nothing someone did since: a
configuration file edited after a `ban`, a service disabled or masked after a `stop`, a
service stopped after a `ban`. Each test failed on the code before its fix.

`systemctl` is a real executable on PATH (`fakehost.fake_tools`) that answers as systemd
would and logs every call, so the tests see the commands that really ran."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from apply_helpers import FULL, ONE_DEVICE_PLAN

from accelhost.apply.build import BindOptions, build_irq, build_unbind_irq
from accelhost.apply.execute import execute
from accelhost.plans import Plan
from fakehost import fake_tools

UNIT = "irqbalance.service"
ORIGINAL = '#IRQBALANCE_ONESHOT=\nIRQBALANCE_BANNED_CPULIST="0"\n'


class Systemd:
    """A fake `systemctl` whose answers a test changes between bind and unbind, as an
    administrator would change the unit's state."""

    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        self.bin = tmp_path / "bin"
        monkeypatch.setenv("PATH", f"{self.bin}:/bin:/usr/bin")

    def answer(self, active: str, enabled: str, fails: tuple[str, ...] = ()) -> None:
        """Answer so from now on, with a fresh log."""
        (self.bin / "calls.log").unlink(missing_ok=True)
        verbs = ("start", "stop", "restart", "try-restart")
        outputs = {f"systemctl {v} {UNIT}": "" for v in verbs if v not in fails}
        outputs[f"systemctl is-active {UNIT}"] = active + "\n"
        outputs[f"systemctl is-enabled {UNIT}"] = enabled + "\n"
        self.log = fake_tools(self.bin, outputs)

    def changes(self) -> list[str]:
        """The calls that change something (not `is-active`, `is-enabled`), in order."""
        text = self.log.path.read_text() if self.log.path.exists() else ""
        return [c for c in text.splitlines() if " is-" not in c]

    def clear(self) -> None:
        self.log.path.unlink(missing_ok=True)


@pytest.fixture
def systemd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Systemd:
    return Systemd(tmp_path, monkeypatch)


def _bind(cli, fake_tree, state: Path, plan: str, mode: str) -> None:
    res = cli(
        "bind", "--plan", plan, "--device", "0", "--irq-only", "--host-root", str(fake_tree.root),
        "--state-dir", str(state), "--irqbalance", mode,
    )  # fmt: skip
    assert res.rc == 0, res.out + res.err


def _saved_irqbalance(state: Path) -> object:
    return json.loads((state / "irq-state.json").read_text())["irqbalance"]


@pytest.mark.parametrize("now", ["disabled", "masked"])
def test_irqbalance_disabled_or_masked_since_bind_is_not_started_again(
    fake_tree, plan_file, cli, tmp_path, systemd, now
):
    """bind stopped irqbalance; then an administrator ran `systemctl disable --now` (or
    `mask`) on it. `systemctl start` ignores `disable`: the old unbind ran irqbalance again
    against that (and, masked, failed with exit 2 on every later unbind)."""
    state = tmp_path / "state"
    systemd.answer("active", "enabled")
    _bind(cli, fake_tree, state, plan_file(ONE_DEVICE_PLAN), "stop")
    assert systemd.changes() == [f"systemctl stop {UNIT}"]

    systemd.answer("inactive", now, fails=("start",) if now == "masked" else ())
    res = cli("unbind", "--irq", "--state-dir", str(state))
    assert res.rc == 0, res.out + res.err
    assert systemd.changes() == []  # nothing started
    assert f"leave {UNIT} stopped: disabled or masked since bind" in res.out
    assert fake_tree.mask(200) == FULL and fake_tree.mask(201) == FULL  # masks still restored
    assert _saved_irqbalance(state) is None  # done with: the next unbind does not retry


def test_irqbalance_still_enabled_is_started_again(fake_tree, plan_file, cli, tmp_path, systemd):
    """The contract stands: what bind stopped, unbind starts (its unit state unchanged)."""
    state = tmp_path / "state"
    systemd.answer("active", "enabled")
    _bind(cli, fake_tree, state, plan_file(ONE_DEVICE_PLAN), "stop")
    systemd.answer("inactive", "enabled")
    res = cli("unbind", "--irq", "--state-dir", str(state))
    assert res.rc == 0, res.out + res.err
    assert systemd.changes() == [f"systemctl start {UNIT}"]
    assert _saved_irqbalance(state) is None


def _config(fake_tree) -> Path:
    cfg = fake_tree.root / "etc/default/irqbalance"
    cfg.parent.mkdir(parents=True)
    cfg.write_text(ORIGINAL)
    return cfg


def test_a_config_edited_since_ban_is_left_as_it_is(fake_tree, plan_file, cli, tmp_path, systemd):
    """After `--irqbalance=ban`, an administrator edited /etc/default/irqbalance (their own
    banned CPUs, say). The old unbind wrote the pre-bind file over that edit."""
    cfg = _config(fake_tree)
    state = tmp_path / "state"
    systemd.answer("active", "enabled")
    _bind(cli, fake_tree, state, plan_file(ONE_DEVICE_PLAN), "ban")
    assert "--banirq=200" in cfg.read_text()
    edited = cfg.read_text() + 'IRQBALANCE_ONESHOT="yes"\n'
    cfg.write_text(edited)
    systemd.clear()

    res = cli("unbind", "--irq", "--state-dir", str(state))
    assert res.rc == 0, res.out + res.err
    assert cfg.read_text() == edited
    assert f"leave {cfg} as it is: edited since bind, so not restored" in res.out
    assert systemd.changes() == []  # nor restarted: the edit is the administrator's to apply
    assert fake_tree.mask(200) == FULL  # the masks are restored all the same
    assert _saved_irqbalance(state) is None


def test_a_config_deleted_since_ban_is_not_recreated(fake_tree, plan_file, cli, tmp_path, systemd):
    """Deleted since bind is edited since bind: the old unbind wrote the pre-bind file back."""
    cfg = _config(fake_tree)
    state = tmp_path / "state"
    systemd.answer("active", "enabled")
    _bind(cli, fake_tree, state, plan_file(ONE_DEVICE_PLAN), "ban")
    cfg.unlink()
    res = cli("unbind", "--irq", "--state-dir", str(state))
    assert res.rc == 0, res.out + res.err
    assert not cfg.exists()
    assert "edited since bind" in res.out


def test_restore_after_ban_does_not_start_an_irqbalance_stopped_since(
    fake_tree, plan_file, cli, tmp_path, systemd
):
    """`ban` never stopped irqbalance; an administrator did, after bind. The old unbind ran
    `systemctl restart`, which starts a stopped unit; `try-restart` restarts it only if it
    runs (systemctl(1)). The file, still as bind left it, is restored."""
    cfg = _config(fake_tree)
    state = tmp_path / "state"
    systemd.answer("active", "enabled")
    _bind(cli, fake_tree, state, plan_file(ONE_DEVICE_PLAN), "ban")
    systemd.answer("inactive", "disabled")
    res = cli("unbind", "--irq", "--state-dir", str(state))
    assert res.rc == 0, res.out + res.err
    assert systemd.changes() == [f"systemctl try-restart {UNIT}"]
    assert cfg.read_text() == ORIGINAL


def test_a_second_ban_still_counts_as_what_bind_left(fake_tree, tmp_path, systemd):
    """Two binds with other IRQ CPUs write two texts; the file holding the second is still
    bind's, so the first original comes back. (A guard on the rule above, not a harm: the
    old code passed it.)"""
    cfg = _config(fake_tree)
    systemd.answer("active", "enabled")
    opts = BindOptions(host_root=str(fake_tree.root), state_dir=str(tmp_path), irqbalance="ban")
    for irq_cpus in ([8, 40], [9, 41]):
        data = json.loads(json.dumps(ONE_DEVICE_PLAN))
        data["devices"]["0"]["irq"] = irq_cpus
        plan = Plan.from_dict(data)
        steps, _, _ = build_irq(plan, plan.device(0), opts, None)
        done = execute(steps)
        assert all(r.status == "ok" for r in done), [r.line for r in done]
    assert 'IRQBALANCE_BANNED_CPULIST="0,8-9,40-41"' in cfg.read_text()
    results = execute(build_unbind_irq(str(tmp_path)).steps)
    assert all(r.status == "ok" for r in results), [r.line for r in results]
    assert cfg.read_text() == ORIGINAL
