"""Engine plugins (`vllm_plugin`): each binds an engine's workers from inside, through
accelhost's API."""
