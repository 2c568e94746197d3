"""The applier: what accelhost places on the machine.

Its part of the house rule (`accelhost`): apply/ places (CPU affinity, memory policy and
pages, IRQ masks, irqbalance).

Applying a plan is two phases (`build`, then `execute`: see `build`) behind the one bind
`driver`; each other module's docstring says what it holds. Files are read through the host
door, except, on purpose, the thread names of the bind's hot path (`threads`).
"""

# Option defaults live here so the CLI and a worker can name them without the applier.
DEFAULT_MIGRATE_BUDGET_MS = 1000
# Where the IRQ masks found at bind time are saved for `unbind --irq` (`--state-dir`):
DEFAULT_STATE_DIR = "/var/lib/accelhost"
IRQBALANCE_MODES = ("stop", "ban", "keep")
