"""`accelhost bench`: the two A/B tools, each measured against a baseline in the same run.

What lives where: `bench bind` (does binding help this workload? the interleaved bound and
unbound runner, its statistics and report) and `bench pipeline` (`pipeline`: the pipeline
against the serial loop and the asyncio recipe; `realwork`: its `--real` workload).
Their options live in `accelhost.cli.bench`; nothing here imports the command line.
"""
