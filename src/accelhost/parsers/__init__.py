"""Pure parsers: text in, typed facts out; one module per source, named for it (`lscpu`,
`procstat`, `sysfs`, `npusmi`, `nvidia_smi`, `meminfo`, `sysvipc`, `ps`, `devnodes`). CPU
lists themselves are parsed by `accelhost.cpulist.parse_cpulist`.

A parser that meets text it cannot read raises `accelhost.errors.ParseError` naming the
source, never a bare IndexError or ValueError. Every id and list is bounded by what a
kernel or driver can have (`accelhost.cpulist`: CPUs, nodes, devices, pids), so a
corrupt or hostile recording is refused instead of expanded.
"""
