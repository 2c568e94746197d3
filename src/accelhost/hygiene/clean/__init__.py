"""`accelhost clean`: what it may do (`actions`), its plan and its order (`cleaner`), the
stop of orphans (`stopper`, on `accelhost.remove.stop`), its journal (`journal`), and why a
named target is not in the plan (`targets`).
"""
