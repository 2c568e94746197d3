"""`accelhost clean`: what it may do and why a named target is not in the plan
(`actions`), its plan, order and stops (`cleaner`), and its `journal`.
"""
