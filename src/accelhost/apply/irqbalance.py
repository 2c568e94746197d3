"""irqbalance: left running, it rewrites the IRQ masks within seconds.

The reference stops it for the whole host and never restarts it. Kinder options: `ban`
adds the reserved CPUs to its own banned list (IRQBALANCE_BANNED_CPULIST, irqbalance 1.8+)
and restarts it; `keep` leaves it alone with a warning. `unbind --irq` undoes either.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable

from accelhost.cpulist import format_cpulist, parse_cpulist
from accelhost.errors import ParseError
from accelhost.host.base import Host

SERVICE = "irqbalance.service"
MODES = ("stop", "ban", "keep")
CONFIG_PATHS = ("/etc/default/irqbalance", "/etc/sysconfig/irqbalance")
_BANNED = re.compile(r"^\s*(?:export\s+)?IRQBALANCE_BANNED_CPULIST\s*=\s*\"?([^\"#]*)\"?")


def is_active(host: Host) -> bool:
    """True when systemd says the service runs; no systemd (a container) means not active."""
    result = host.run(["systemctl", "is-active", SERVICE])
    return result is not None and result.ok and result.stdout.strip() == "active"


def config_path(root: str) -> str:
    """The distribution's irqbalance environment file (Debian, then Red Hat)."""
    from accelhost.apply.irq import rooted

    for path in CONFIG_PATHS:
        if os.path.exists(rooted(root, path)):
            return rooted(root, path)
    return rooted(root, CONFIG_PATHS[0])


def banned_config(original: str, cpus: Iterable[int]) -> str:
    """`original` with `cpus` added to IRQBALANCE_BANNED_CPULIST (other lines unchanged)."""
    lines = original.splitlines()
    wanted = set(cpus)
    for i, line in enumerate(lines):
        m = _BANNED.match(line)
        if m:
            try:
                wanted |= set(parse_cpulist(m.group(1).strip()))
            except ParseError:
                pass
            lines[i] = f'IRQBALANCE_BANNED_CPULIST="{format_cpulist(wanted)}"'
            break
    else:
        lines.append("# added by accelhost bind (--irqbalance=ban); undo with accelhost unbind --irq")
        lines.append(f'IRQBALANCE_BANNED_CPULIST="{format_cpulist(wanted)}"')
    return "\n".join(lines) + "\n"
