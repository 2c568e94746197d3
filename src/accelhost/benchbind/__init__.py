"""`accelhost bench bind`: does binding help this workload on this host? An A/B that says.

What lives where: `cli` (the options), `runner` (runs the command in both arms,
interleaved, and reads one figure per run), `binding` (the bound arm: the steps
`accelhost exec` builds, run in the child), `stats` (medians, bootstrap interval,
verdict: pure), `report` (the table, the JSON and the progress line).

Kept light at import: the CLI registers its options from `benchbind.cli` without loading
the runner or the applier.
"""
