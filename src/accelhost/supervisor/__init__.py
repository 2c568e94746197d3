"""`accelhost run`: supervise one engine so that nothing of it outlives it.

What lives where: `loop` (`supervise`: start, forward signals, reap, stop the tree
through `accelhost.remove.signals`, all from its one `poll()`), `options` (what it is asked
and what it reports), `spawn` (own session, subreaper, private namespaces, its optional
cgroup), `tree` (the tree now, and every process it ever had, from the kernel's process
events), `leftovers` (the SysV segments and /dev/shm files the tree left, found here and
removed through `accelhost.remove`), `integrations` (the preflight and `--bind`, loaded
when asked).

Its part of the house rule (`accelhost`): supervisor/ sets up the child it starts (spawn,
subreaper, namespaces, its cgroup).

The supervisor may be PID 1 of every inference container, so this package imports only the
standard library, the host door, `accelhost.kernel`, the small shared readers and
`accelhost.remove`; the preflight and the CPU binding only when their options are given.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from accelhost import lazy_names

if TYPE_CHECKING:
    from accelhost.supervisor.loop import supervise
    from accelhost.supervisor.options import RunOutcome, SupervisorOptions

__all__ = ["RunOutcome", "SupervisorOptions", "supervise"]

# Loaded on first use: `accelhost run --help` must not load the supervisor's loop.
_LAZY = {
    "RunOutcome": "accelhost.supervisor.options",
    "SupervisorOptions": "accelhost.supervisor.options",
    "supervise": "accelhost.supervisor.loop",
}
__getattr__ = lazy_names(__name__, _LAZY)
