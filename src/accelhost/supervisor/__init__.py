"""`accelhost run`: supervise one engine so that nothing of it outlives it.

What lives where: `supervise` (the loop: start, forward signals, reap, tear down),
`options` (what it is asked and what it reports), `spawn` (own session, optional
`cgroup`), `wakeup` (its one `poll()`), `tree` and `procevents` (the tree now, and every
process it ever had), `teardown` (SIGTERM, grace, SIGKILL), `leftovers`, `segments` and
`shmfiles` (what the tree left: SysV segments, /dev/shm files, found here and removed
through `accelhost.remove`), `kernel` (subreaper, private namespaces), `integrations` (the
preflight and `--bind`, loaded when asked).

The house rule: apply/ places (CPU affinity, memory policy and pages, IRQ masks,
irqbalance); remove/ removes (signals, /dev/shm unlinks, IPC_RMID); supervisor/ sets up the
child it starts (spawn, subreaper, namespaces, its cgroup); nothing else changes the
machine (accelhost's own files and a pipeline's own workers are not the machine).

The supervisor may be PID 1 of every inference container, so this package imports only the
standard library, the host door, the small shared readers (`accelhost.readers.procs`,
`accelhost.readers.sysv`, `accelhost.readers.shmfiles`) and `accelhost.remove`; the
preflight and the CPU binding are imported only when their options are given.
"""

from __future__ import annotations

from accelhost.supervisor.options import RunOutcome, SupervisorOptions
from accelhost.supervisor.supervise import supervise

__all__ = ["RunOutcome", "SupervisorOptions", "supervise"]
