"""The facts layer: read a host through the host door into typed facts. `topology`, `cpus`
and `gpu` serve the planners (`topology.read_topology` alone decides the family); `procs`,
`sysv` and `shmfiles` serve the doctor, the cleaner and `run`.

This package re-exports nothing, so `accelhost run` (PID 1 of a container), which needs
only the latter, loads no topology reader.
"""
