"""irqbalance: left running, it rewrites the IRQ masks within seconds.

The reference stops it for the whole host and never restarts it. Kinder options: `ban`
adds the reserved CPUs to its own banned list (IRQBALANCE_BANNED_CPULIST, irqbalance 1.8+)
and restarts it; `keep` leaves it alone with a warning. `unbind --irq` undoes either.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from accelhost.cpulist import format_cpulist, parse_cpulist
from accelhost.errors import ParseError

if TYPE_CHECKING:
    from accelhost.host.base import Host

SERVICE = "irqbalance.service"
MODES = ("stop", "ban", "keep")
CONFIG_PATHS = ("/etc/default/irqbalance", "/etc/sysconfig/irqbalance")
_BANNED = re.compile(r'^\s*(?:export\s+)?IRQBALANCE_BANNED_CPULIST\s*=\s*"?([^"#]*)"?')
_ARGS = re.compile(r'^\s*(?:export\s+)?IRQBALANCE_ARGS\s*=\s*"?([^"#]*)"?')


def is_active(host: Host) -> bool:
    """True when systemd says the service runs; no systemd (a container) means not active."""
    result = host.run(["systemctl", "is-active", SERVICE])
    return result is not None and result.ok and result.stdout.strip() == "active"


def unit_state(host: Host) -> str | None:
    """`systemctl is-enabled`'s answer (enabled, disabled, masked...); None: cannot tell.
    Disabled exits 1, so the answer is read whatever the status."""
    result = host.run(["systemctl", "is-enabled", SERVICE])
    return (result.stdout.strip() or None) if result is not None else None


def turned_off_since(record: dict[str, Any], now: str | None) -> bool:
    """Whether irqbalance was disabled or masked after the bind that stopped it: `systemctl
    start` ignores `disable` and would run it against that. (No state at bind: cannot tell.)"""
    was = record.get("enabled")
    return was is not None and now != was and now in ("disabled", "masked", "masked-runtime")


def config_path(root: str) -> str:
    """The distribution's irqbalance environment file (Debian, then Red Hat)."""
    from accelhost.apply.irq import rooted  # not at the top: the CLI imports this for --help

    paths = [rooted(root, path) for path in CONFIG_PATHS]
    return next((path for path in paths if os.path.exists(path)), paths[0])


def banned_config(original: str, cpus: Iterable[int], irqs: Iterable[int] = ()) -> str:
    """`original` with `cpus` added to the banned CPUs and `irqs` to the banned IRQs.

    Banning the CPUs keeps other interrupts off the reserved CPUs; banning our IRQs
    (`--banirq` in IRQBALANCE_ARGS) stops irqbalance from moving them off those CPUs.
    Other lines are kept as they are.
    """
    lines = original.splitlines()
    wanted = set(cpus)
    ban_args = [f"--banirq={irq}" for irq in irqs]
    found_cpus = found_args = False
    for i, line in enumerate(lines):
        m = _BANNED.match(line)
        if m and not found_cpus:
            with contextlib.suppress(ParseError):
                wanted |= set(parse_cpulist(m.group(1).strip()))
            lines[i] = f'IRQBALANCE_BANNED_CPULIST="{format_cpulist(wanted)}"'
            found_cpus = True
            continue
        a = _ARGS.match(line)
        if a and not found_args:
            args = a.group(1).split()
            args += [b for b in ban_args if b not in args]
            lines[i] = f'IRQBALANCE_ARGS="{" ".join(args)}"'
            found_args = True
    if not found_cpus or (ban_args and not found_args):
        lines.append("# added by accelhost bind --irqbalance=ban; undo: accelhost unbind --irq")
    if not found_cpus:
        lines.append(f'IRQBALANCE_BANNED_CPULIST="{format_cpulist(wanted)}"')
    if ban_args and not found_args:
        lines.append(f'IRQBALANCE_ARGS="{" ".join(ban_args)}"')
    return "\n".join(lines) + "\n"
