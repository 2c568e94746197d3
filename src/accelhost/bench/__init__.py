"""`accelhost bench`: the two A/B tools, each measured against a baseline in the same run:
`bench bind` (the `bind_*` modules) and `bench pipeline` (`pipeline`, `realwork`). Their
options live in `accelhost.cli.bench`; nothing here imports the command line.
"""
