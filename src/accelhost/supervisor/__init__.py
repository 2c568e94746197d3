"""`accelhost run`: supervise one engine so that nothing of it outlives it.

What lives where: `supervise` (the loop: start, forward signals, reap, tear down),
`options` (what it is asked and what it reports), `spawn` (own session, optional
`cgroup`), `wakeup` (its one `poll()`), `tree` and `procevents` (the tree now, and every
process it ever had), `teardown` (SIGTERM, grace, SIGKILL), `leftovers`, `segments` and
`shmfiles` (what the tree left: SysV segments, /dev/shm files), `kernel` (the few Linux
calls through ctypes), `integrations` (the preflight and `--bind`, loaded when asked).

The supervisor may be PID 1 of every inference container, so this package imports only the
standard library, the host door and the small shared readers (`accelhost.readers.procs`,
`accelhost.readers.sysv`, `accelhost.readers.shmfiles`); the preflight and the CPU binding
are imported only when their options are given.
"""

from __future__ import annotations

from accelhost.supervisor.options import RunOutcome, SupervisorOptions
from accelhost.supervisor.supervise import supervise

__all__ = ["RunOutcome", "SupervisorOptions", "supervise"]
