"""`accelhost doctor`: the checks (`checks`, with `tuning`, `container_init`), what their
results say (`evidence`: also the clean command a fix names), and device memory: who holds
it and vLLM's start-up memory check (`preflight`).
"""
