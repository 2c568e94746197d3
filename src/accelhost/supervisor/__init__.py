"""`accelhost run`: supervise one engine so that nothing of it outlives it.

What lives where: `loop` (`supervise`: start, forward signals, reap, tear down),
`options` (what it is asked and what it reports), `spawn` (own session, optional
`cgroup`), `wakeup` (its one `poll()`), `tree` and `procevents` (the tree now, and every
process it ever had), `eventfilter` (the kernel-side filters of those events, `watch`'s
too), `teardown` (SIGTERM, grace, SIGKILL), `leftovers`, `segments` and
`shmfiles` (what the tree left: SysV segments, /dev/shm files, found here and removed
through `accelhost.remove`), `kernel` (subreaper, private namespaces), `integrations` (the
preflight and `--bind`, loaded when asked).

Its part of the house rule (`accelhost`): supervisor/ sets up the child it starts (spawn,
subreaper, namespaces, its cgroup).

The supervisor may be PID 1 of every inference container, so this package imports only the
standard library, the host door, the small shared readers and `accelhost.remove`; the
preflight and the CPU binding only when their options are given.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from accelhost import lazy_names

if TYPE_CHECKING:
    from accelhost.supervisor.loop import supervise
    from accelhost.supervisor.options import RunOutcome, SupervisorOptions

__all__ = ["RunOutcome", "SupervisorOptions", "supervise"]

# Loaded on first use: `options` (with DEFAULT_GRACE_S, the one grace of run, clean, watch
# and bench bind) is read by `accelhost --help`, which must not load the supervisor's loop.
_LAZY = {
    "RunOutcome": "accelhost.supervisor.options",
    "SupervisorOptions": "accelhost.supervisor.options",
    "supervise": "accelhost.supervisor.loop",
}


__getattr__ = lazy_names(__name__, _LAZY)
