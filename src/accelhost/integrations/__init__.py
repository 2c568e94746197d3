"""Engine plugins: each binds an engine's workers from inside, through accelhost's API.

`vllm_plugin`: the `vllm.general_plugins` entry point (set ACCELHOST_PLAN to use it).
"""
