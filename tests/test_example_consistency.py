"""Every bundled example tells a possible story: no device reports less memory in use than
its own process table says processes hold on it (a reader of `doctor --snapshot` would
otherwise see memory "held by nothing" turn negative, or a preflight call a full device
free)."""

from __future__ import annotations

import pytest

from accelhost.host import load_snapshot
from accelhost.host.snapshot import example_names
from accelhost.hygiene import read_facts

EXAMPLES = example_names()


def _held_and_used(name: str) -> list[tuple[str, int, int]]:
    """(device, MiB its processes hold, MiB it reports used) for each device with both."""
    facts = read_facts(load_snapshot(f"example:{name}"))
    rows = []
    for dev in facts.devices:
        held = sum(p.memory_mib or 0 for p in dev.processes)
        if dev.used_mib is not None and dev.processes:
            rows.append((dev.label, held, dev.used_mib))
    return rows


@pytest.mark.parametrize("name", EXAMPLES)
def test_device_memory_used_covers_what_processes_hold(name: str) -> None:
    bad = [(dev, held, used) for dev, held, used in _held_and_used(name) if used < held]
    assert not bad, f"{name}: (device, held by processes, used) with used < held: {bad}"


def test_the_rule_is_checked_on_real_process_tables() -> None:
    # Not vacuous: most Ascend examples list processes with memory on their chips.
    checked = {name: _held_and_used(name) for name in EXAMPLES}
    with_rows = [name for name, rows in checked.items() if rows]
    assert len(with_rows) >= 5, checked
    assert all(held > 0 for rows in checked.values() for _, held, _ in rows)
