"""`accelhost doctor`: the checks (`checks`, with `posix`, `tuning`, `container_init`), their
`evidence`, the clean command their fixes name (`fixes`), and vLLM's start-up memory check
(`preflight`).
"""
