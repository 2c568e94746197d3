"""`accelhost watch`: the doctor on a timer (`watcher`), what it exports (`metrics`), what
wakes it at once (`react`: process events and inotify), and what `--auto-clean` keeps,
said once with the command that removes it (`kept`).
"""
