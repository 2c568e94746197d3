"""Every way accelhost removes something from a machine, shared by `clean` and `run`.

The house rule: apply/ places (CPU affinity, memory policy and pages, IRQ masks,
irqbalance); remove/ removes (signals, /dev/shm unlinks, IPC_RMID); supervisor/ sets up the
child it starts (spawn, subreaper, namespaces, its cgroup); nothing else changes the
machine (accelhost's own files and a pipeline's own workers are not the machine).
tests/test_house_rules.py holds every module to the rule.

What lives where: `signals` (a process pinned by pid and start time, so a reused pid is
never hit; a process group the caller vouches for; the caller's own cgroup members),
`stop` (the one loop of SIGTERM, grace, SIGKILL, wait, D state reported) and `shm` (one
/dev/shm file by unlink, one System V segment by IPC_RMID, each looked at again at the
moment of removal). What to remove is the callers' to decide; how it is re-checked
and removed is decided here, once. Standard library and accelhost's readers only, so the
supervisor (PID 1 of a container) imports it cheaply.
"""

# The one SIGTERM grace of run, clean, watch and bench bind: Kubernetes'
# terminationGracePeriodSeconds, long enough for vLLM's graceful shutdown. Here, in a module
# of constants, because `accelhost --help` shows it.
DEFAULT_GRACE_S = 30.0
