"""NVIDIA GPUs and other PCI accelerators: facts from nvidia-smi and sysfs, torchrun's
`--numa-binding` strategies for every visible GPU at once.

    facts = read_gpu_facts(host)            # None: no nvidia-smi and no --pci
    plan = plan_gpus(facts, strategy="exclusive")
"""

from accelhost.gpu.facts import CpuFacts, GpuFacts, GpuInfo, read_cpu_facts, read_gpu_facts
from accelhost.gpu.strategies import DEFAULT_STRATEGY, NUMA_SOURCES, STRATEGIES, plan_gpus
from accelhost.gpu.topology import cpu_topology, gpu_topology
from accelhost.gpu.visible import resolve_visible

__all__ = [
    "DEFAULT_STRATEGY",
    "NUMA_SOURCES",
    "STRATEGIES",
    "CpuFacts",
    "GpuFacts",
    "GpuInfo",
    "cpu_topology",
    "gpu_topology",
    "plan_gpus",
    "read_cpu_facts",
    "read_gpu_facts",
    "resolve_visible",
]
