"""The applier: the only code in accelhost that changes the machine.

Applying a plan is two phases so that `--dry-run` can show exactly what a real run does:
`build` reads the host and returns a list of step dataclasses (`steps`), and `execute`
runs them in order and reports each outcome. Modules here import only the standard
library so that `accelhost.apply.worker` stays cheap to import inside inference workers.
"""
