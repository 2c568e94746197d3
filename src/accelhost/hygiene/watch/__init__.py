"""`accelhost watch`: the doctor on a timer (`watcher`), its `metrics`, what wakes it at once
(`react`), and what `--auto-clean` keeps, said once (`kept`).
"""
