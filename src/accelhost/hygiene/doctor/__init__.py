"""`accelhost doctor`: the checks (`checks`, with `tuning`, `container_init`), their
`evidence`, the clean command their fixes name (`fixes`), and device memory: who holds it
and vLLM's start-up memory check (`preflight`).
"""
