"""`accelhost clean`: what it may do (`actions`), its plan, order and stops (`cleaner`), its
`journal`, and why a named target is not in the plan (`targets`).
"""
