"""`accelhost watch`: the doctor on a timer (`watcher`), what it exports (`metrics`) and
what wakes it at once (`react`: process events and inotify).
"""
