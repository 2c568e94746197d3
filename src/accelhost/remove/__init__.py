"""Every way accelhost removes something from a machine, shared by `clean` and `run`.

The house rule: apply/ places (CPU affinity, memory policy and pages, IRQ masks,
irqbalance); remove/ removes (signals, /dev/shm unlinks, IPC_RMID); supervisor/ sets up the
child it starts (spawn, subreaper, namespaces, its cgroup and that cgroup's kill); nothing
else changes the machine (accelhost's own files, such as the journal, the IRQ state,
snapshots and traces, and the workers a pipeline starts and stops itself, are not the
machine). tests/test_house_rules.py holds every module to it.

What lives where: `signals` (a process pinned by pid and start time, through a pidfd where
the kernel has one, so a reused pid is never hit; a process group the caller vouches for;
the members of a frozen cgroup) and `shm` (one /dev/shm file by unlink, one System V
segment by IPC_RMID, each looked at again at the moment of removal). What to remove is the
callers' to decide (`hygiene.cleaner`'s plan, `supervisor`'s ledgers); how it is re-checked
and removed is decided here, once. Standard library and accelhost's readers only, so the
supervisor (PID 1 of a container) imports it cheaply.
"""
