"""`accelhost bench bind`: does binding help this workload on this host? An A/B that says.

Kept light at import: the CLI registers its options from `benchbind.cli` without loading
the runner or the applier.
"""
