"""`accelhost run`: supervise one engine so that nothing of it outlives it.

The supervisor may be PID 1 of every inference container, so this package imports only the
standard library and the small shared readers (`accelhost.procs`, `accelhost.shm`); the
preflight and the CPU binding are imported only when their options are given.
"""

from __future__ import annotations

from accelhost.supervisor.options import RunOutcome, SupervisorOptions
from accelhost.supervisor.supervise import supervise

__all__ = ["RunOutcome", "SupervisorOptions", "supervise"]
