"""The applier: what accelhost places on the machine.

Its part of the house rule (`accelhost`): apply/ places (CPU affinity, memory policy and
pages, IRQ masks, irqbalance).

Applying a plan is two phases so that `--dry-run` shows exactly what a real run does:
`build` reads the host and returns step dataclasses (`steps`); `execute` runs them and
reports each outcome. `driver` is the one bind driver behind `bind`, `exec`, `run --bind`
and `worker.bind_current_process`. Around them: `threads` (list, match and pin threads),
`irq` (device interrupts, irqbalance), `memory` and `migrate` (NUMA pages), `traps`
(warnings before binding), `identity` (which device a process holds, or a worker's local
rank uses), `verify` (drift). Files are read through the host door, except, on purpose,
the thread names of the bind's hot path (`threads`).
"""

# Option defaults live here so the CLI and a worker can name them without the applier.
DEFAULT_MIGRATE_BUDGET_MS = 1000
# Where the IRQ masks found at bind time are saved for `unbind --irq` (`--state-dir`):
DEFAULT_STATE_DIR = "/var/lib/accelhost"
IRQBALANCE_MODES = ("stop", "ban", "keep")
