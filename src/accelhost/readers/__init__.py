"""The facts layer: read a host through the host door into typed facts.

`topology.read_topology` is where the family is decided (and nowhere else), and Ascend
hosts are read; `cpus` and `gpu` read the rest of what the planners need. `procs`
(processes, their open files, what this reader may see of them), `sysv` (SysV segments)
and `shmfiles` (/dev/shm files and who holds them) serve the doctor, the cleaner and `run`.

This package re-exports nothing, so `accelhost run` (PID 1 of a container), which needs
`procs`, `sysv` and `shmfiles`, loads no topology reader.
"""
