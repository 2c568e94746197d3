"""Pure parsers: text in, typed facts out; one module per source.

A parser that meets text it cannot read raises `accelhost.errors.ParseError` naming the
source, never a bare IndexError or ValueError. Every id and list is bounded by what a
kernel or driver can have (`accelhost.cpulist`: CPUs, nodes, devices, pids), so a
corrupt or hostile recording is refused instead of expanded.

What lives where: `lscpu` (CPU -> node, threads per core); `procstatus`
(`Cpus_allowed_list`, the one parser of it); `procstat` (/proc/PID/stat and status
fields); `sysfs` (PCI addresses, NUMA node ids, cache dirs, cgroup cpuset paths);
`npusmi_map`, `npusmi_info`, `npusmi_topo`, `npusmi_board` (the npu-smi queries);
`nvidia_smi` (GPU list, `topo -m`), `nvidia_smi_memory` (memory and compute apps);
`meminfo`, `hugepages`, `sysvipc`, `ps` (what the doctor and the 950 planner read);
`devnodes` (the one grammar of accelerator device node names, and the NVIDIA driver's
per-GPU file).
CPU lists themselves are parsed by `accelhost.cpulist.parse_cpulist`.
"""
