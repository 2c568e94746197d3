"""The facts layer: read a host through the host door into typed facts.

What lives where:
- `topology`: `read_topology`, where the family is decided (and nowhere else), and
  `plain_topology` for hosts with no accelerator we can see;
- `cpus`: one reader per CPU fact (allowed CPUs, cgroup cpuset, NUMA nodes, SMT siblings,
  caches, sockets);
- `ascend`: npu-smi on top of lscpu, as vllm-ascend reads;
- `gpu`: nvidia-smi or `--pci` addresses on top of sysfs, as torchrun reads;
- `nvml`: the optional live-only NVML fallback for GPUs sysfs leaves without a node;
- `procs`: processes from /proc (`ProcessInfo`, `read_process`, `list_pids`) and the one
  walk of a process's open files (`open_fds`, and `open_file_stat` for one fd's identity);
- `sysv`: the SysV shared-memory segment table (`read_segments`);
- `shmfiles`: /dev/shm files (`list_shm_files`, `stat_shm_file`) and who holds them open
  or mapped (`scan_held`, `path_is_held`);
- `visibility`: what this reader may see of other processes (CAP_SYS_PTRACE, `hidepid`).

This package re-exports nothing, so `accelhost run` (PID 1 of a container), which needs
`procs`, `sysv` and `shmfiles`, loads no topology reader.
"""
