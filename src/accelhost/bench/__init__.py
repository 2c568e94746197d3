"""`accelhost bench`: the two A/B tools, each measured against a baseline in the same run.

What lives where: `bench bind` (does binding help this workload?): `bind_runner` (runs the
command in both arms, interleaved, and reads one figure per run), `bind_exec` (the bound
arm: the steps `accelhost exec` builds, run in the child), `bind_stats` (medians, bootstrap
interval, verdict: pure) and `bind_report` (the table, the JSON and the progress line);
and `bench pipeline` (`pipeline`: the pipeline against the serial loop and the asyncio
recipe; `realwork`: its `--real` workload). Their options live in `accelhost.cli.bench`;
nothing here imports the command line.
"""
