"""Pure parsers: text in, typed facts out; one module per source.

A parser that meets text it cannot read raises `accelhost.errors.ParseError` naming the
source, never a bare IndexError or ValueError. Every id and list is bounded by what a
kernel or driver can have (`accelhost.cpulist`: CPUs, nodes, devices, pids), so a
corrupt or hostile recording is refused instead of expanded.

What lives where: `lscpu` (CPU -> node, threads per core); `procstat` (/proc/PID/stat and
status: identity, family links, `Cpus_allowed_list`); `sysfs` (PCI addresses, NUMA node
ids, cache dirs, cgroup cpuset paths, HugePages pools); `npusmi` (the npu-smi queries);
`nvidia_smi` (GPU list, `topo -m`, memory and compute apps); `meminfo`, `sysvipc`, `ps`
(what the doctor and the 950 planner read); `devnodes` (the one grammar of accelerator
device node names, and the NVIDIA driver's per-GPU file). CPU lists themselves are parsed
by `accelhost.cpulist.parse_cpulist`.
"""
