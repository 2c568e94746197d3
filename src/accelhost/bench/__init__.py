"""`accelhost bench`: the two A/B tools, each measured against a baseline in the same run:
`bench bind` (does binding help this workload? `bind_runner`, `bind_exec`, `bind_stats`,
`bind_report`) and `bench pipeline` (`pipeline`, and `realwork` for `--real`). Their
options live in `accelhost.cli.bench`; nothing here imports the command line.
"""
