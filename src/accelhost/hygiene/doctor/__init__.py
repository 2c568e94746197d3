"""`accelhost doctor`: the checks (`checks`, with `posix`, `tuning`, `container_init`,
`shm_preflight`), the evidence objects they show (`evidence`), the clean command their
fixes name with the options in force (`fixes`), and vLLM's start-up memory check done
before the start (`preflight`).
"""
