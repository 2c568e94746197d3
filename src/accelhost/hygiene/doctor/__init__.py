"""`accelhost doctor`: the checks (`checks`, with `posix`, `tuning`, `container_init`,
`shm_preflight`), the evidence objects they show (`evidence`), and vLLM's start-up memory
check done before the start (`preflight`).
"""
