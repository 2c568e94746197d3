"""Is this plan this host's? A plan made elsewhere names CPUs and devices that are not here.

What decides is the hardware recorded in `Plan.host` and each device's `pci`: CPUs not
online here, other NUMA nodes, a PCI address this host lacks. The hostname is only named:
a container has one of its own, and a plan is as good on a twin machine. A plan without
`host` is not checked; a fact this host does not show is not compared.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING

from accelhost.cpulist import format_cpulist
from accelhost.errors import ForeignPlanError
from accelhost.parsers.sysfs import PCI_DEVICES
from accelhost.plans import HOSTNAME, Plan, PlannedHost

if TYPE_CHECKING:
    from accelhost.host.base import Host

FORCE = "--force (allow_foreign=True) applies it anyway"


def differences(
    made: PlannedHost,
    plan: Plan,
    online: Sequence[int] | None,
    nodes: Sequence[int] | None,
    pci: Collection[str] | None,
) -> list[str]:
    """What of the plan's host is not so here; None for a fact this host does not show."""
    out: list[str] = []
    if online is not None:
        here = set(online)
        missing = [c for c in made.allowed_cpus if c not in here]
        if missing:
            out.append(
                f"its CPUs {format_cpulist(missing)} are not online here "
                f"(here: {format_cpulist(online)})"
            )
    if nodes is not None and made.numa_nodes and tuple(nodes) != tuple(made.numa_nodes):
        out.append(
            f"NUMA nodes {format_cpulist(made.numa_nodes)} there, {format_cpulist(nodes)} here"
        )
    if pci is not None:
        here_pci = {p.lower() for p in pci}
        out += [
            f"device {d.device}'s PCI address {d.pci} is not on this host"
            for d in plan.devices
            if d.pci and d.pci.strip().lower() not in here_pci
        ]
    return out


def foreign(plan: Plan, host: Host | None = None) -> ForeignPlanError | None:
    """Why `plan` was made for another host; None when it is this host's."""
    made = plan.host
    if made is None:
        return None
    from accelhost.apply.traps import online_cpus
    from accelhost.host.live import live_host
    from accelhost.readers.cpus import read_sysfs_nodes

    h = host or live_host()
    _, node_cpus = read_sysfs_nodes(h)
    pci = h.list_dir(PCI_DEVICES) or None  # no sysfs here: nothing to compare
    diffs = differences(made, plan, online_cpus(h), sorted(node_cpus) or None, pci)
    if not diffs:
        return None
    here = (h.read_file(HOSTNAME) or "").strip() or "unnamed"
    return ForeignPlanError(made.hostname or "unnamed", here, tuple(diffs), FORCE)


def refuse_foreign(plan: Plan, allow_foreign: bool = False, host: Host | None = None) -> None:
    """ForeignPlanError (an ApplyError, exit 1) for a plan made for another host, unless
    `allow_foreign`."""
    if allow_foreign:
        return
    why = foreign(plan, host)
    if why is not None:
        raise why
