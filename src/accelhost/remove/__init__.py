"""Every way accelhost removes something from a machine, shared by `clean` and `run`.

Its part of the house rule (`accelhost`): remove/ removes (signals, /dev/shm unlinks,
IPC_RMID): signals and the stop loop in `signals`, unlink and IPC_RMID in `shm`,
each target re-checked at the moment of removal. What to remove is the callers' to
decide; how it is re-checked and removed is decided here, once. Standard library,
accelhost's readers and `kernel.libc` (pidfds) only, so the supervisor (PID 1 of a
container) imports it cheaply.
"""

# The one SIGTERM grace of run, clean, watch and bench bind: Kubernetes'
# terminationGracePeriodSeconds, long enough for vLLM's graceful shutdown. Here, in a module
# of constants, because `accelhost --help` shows it.
DEFAULT_GRACE_S = 30.0
