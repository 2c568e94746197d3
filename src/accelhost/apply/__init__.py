"""The applier: what accelhost places on the machine.

The house rule: apply/ places (CPU affinity, memory policy and pages, IRQ masks,
irqbalance); remove/ removes (signals, /dev/shm unlinks, IPC_RMID); supervisor/ sets up the
child it starts (spawn, subreaper, namespaces, its cgroup); nothing else changes the
machine (accelhost's own files and a pipeline's own workers are not the machine).

Applying a plan is two phases so that `--dry-run` can show exactly what a real run does:
`build` reads the host and returns a list of step dataclasses (`steps`), and `execute`
runs them in order and reports each outcome. `driver` is the one bind driver that
`accelhost bind`, `exec`, `run --bind` and `worker.bind_current_process` all call (ARM
policy, thread roles, retry of threads born while binding, the report). Around them:
`threads` (list, match and pin threads), `irq` and `irqbalance` (device interrupts),
`memory` and `migrate` (NUMA pages), `traps` (warnings before binding), `identity` (which
device a process holds, or a worker's local rank uses), `hostcheck` (a plan made for
another host is refused), `verify` (drift). Files are read through the host door
(`accelhost.host`: a `LiveHost`, with `--host-root` paths), the allowed CPUs and the cgroup
cpuset by their one readers in `accelhost.readers.cpus`; one exception, on purpose: the
thread names of the bind's hot path (`threads`), opened relative to an open task directory,
which a 500-thread bind needs and the door does not offer. Modules here use only the
standard library and accelhost's own packages, and `worker` imports the rest on its first
call, so that it stays cheap to import inside inference workers.
"""

# The defaults of the applier's options live here, not in the modules that use them, so that
# the CLI can show them in --help and a worker can name them without importing the applier.
# The memory step's time budget (`--migrate-budget-ms`, `migrate_budget_ms=`):
DEFAULT_MIGRATE_BUDGET_MS = 1000
# Where the IRQ masks found at bind time are saved for `unbind --irq` (`--state-dir`):
DEFAULT_STATE_DIR = "/var/lib/accelhost"
