"""Fake GPU hosts: snapshot dicts holding the sysfs tree and nvidia-smi output of a machine.

The trees are written the way the kernel and nvidia-smi write them, so tests go through
the same readers and parsers as a live host. `shuffle` reorders everything a host may
list in any order (directory listings, nvidia-smi rows) to check that nothing depends on it.
The snapshot itself is built by `fakehost.FakeMachine`, the one builder.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from accelhost.cpulist import format_cpulist
from accelhost.host.snapshot import SnapshotHost
from fakehost import FakeMachine

QUERY = "nvidia-smi --query-gpu=index,pci.bus_id,uuid --format=csv,noheader"
TOPO = "nvidia-smi topo -m"


@dataclass
class FakeGpu:
    index: int
    pci: str  # sysfs form, 0000:1b:00.0
    numa_node: int | None  # None: no numa_node file; -1 written as is
    local_cpus: Sequence[int] | None = None  # None: the node's CPUs (all CPUs for -1)
    uuid: str | None = None
    msi_irqs: Sequence[int] = ()

    def uuid_text(self) -> str:
        return self.uuid or f"GPU-{self.index:08x}-1111-2222-3333-{self.index:012x}"


@dataclass
class FakeHost:
    nodes: Mapping[int, Sequence[int]]  # node -> CPUs ([] = memory-only node)
    gpus: Sequence[FakeGpu] = ()
    siblings: Sequence[Sequence[int]] = ()  # SMT groups; CPUs not listed are alone
    packages: Mapping[int, int] | None = None  # node -> socket; default node id
    l3: Sequence[Sequence[int]] | None = None  # cache groups; None = no cache info
    allowed: Sequence[int] | None = None  # default: every CPU
    cpuset: Sequence[int] | None = None  # cgroup v2 cpuset.cpus.effective; default allowed
    env: dict[str, str] = field(default_factory=dict)
    nvidia_smi: bool = True
    smi_failure: str | None = None  # stdout of a failing nvidia-smi (rc 9)
    with_topo: bool = True
    sysfs_pci: bool = True
    machine: str = "x86_64"
    device_type: str | None = "nvidia"

    def all_cpus(self) -> list[int]:
        return sorted({c for cpus in self.nodes.values() for c in cpus})

    def node_of(self, cpu: int) -> int:
        return next(n for n, cpus in self.nodes.items() if cpu in cpus)

    def sibling_group(self, cpu: int) -> list[int]:
        for group in self.siblings:
            if cpu in group:
                return sorted(group)
        return [cpu]

    def l3_group(self, cpu: int) -> list[int]:
        assert self.l3 is not None
        return sorted(next(g for g in self.l3 if cpu in g))

    def local_cpus(self, gpu: FakeGpu) -> list[int]:
        if gpu.local_cpus is not None:
            return list(gpu.local_cpus)
        if gpu.numa_node is None or gpu.numa_node < 0:
            return self.all_cpus()
        return sorted(self.nodes[gpu.numa_node])

    def snapshot(self, shuffle: random.Random | None = None) -> dict[str, Any]:
        files: dict[str, str] = {}
        dirs: dict[str, list[str]] = {}
        cpus = self.all_cpus()
        allowed = cpus if self.allowed is None else sorted(self.allowed)
        cpuset = allowed if self.cpuset is None else sorted(self.cpuset)
        files["/proc/self/status"] = (
            "Name:\tpython3\nState:\tR (running)\nTgid:\t4242\nPid:\t4242\n"
            f"Cpus_allowed:\tffffffff\nCpus_allowed_list:\t{format_cpulist(allowed)}\n"
            f"Mems_allowed_list:\t{format_cpulist(self.nodes)}\nvoluntary_ctxt_switches:\t3\n"
        )
        files["/proc/self/cgroup"] = "0::/\n"
        files["/sys/fs/cgroup/cpuset.cpus.effective"] = format_cpulist(cpuset) + "\n"
        node_ids = sorted(self.nodes)
        files["/sys/devices/system/node/possible"] = format_cpulist(node_ids) + "\n"
        dirs["/sys/devices/system/node"] = [f"node{n}" for n in node_ids] + [
            "has_cpu",
            "online",
            "possible",
        ]
        for node, node_cpus in self.nodes.items():
            files[f"/sys/devices/system/node/node{node}/cpulist"] = format_cpulist(node_cpus) + "\n"
        for cpu in cpus:
            top = f"/sys/devices/system/cpu/cpu{cpu}/topology"
            group = self.sibling_group(cpu)
            files[f"{top}/thread_siblings_list"] = format_cpulist(group) + "\n"
            node = self.node_of(cpu)
            package = node if self.packages is None else self.packages[node]
            files[f"{top}/physical_package_id"] = f"{package}\n"
            if self.l3 is None:
                continue
            cache = f"/sys/devices/system/cpu/cpu{cpu}/cache"
            dirs[cache] = ["index0", "index1", "index2", "index3", "uevent"]
            layout = [
                (1, "Data", group),
                (1, "Instruction", group),
                (2, "Unified", group),
                (3, "Unified", self.l3_group(cpu)),
            ]
            for k, (level, kind, shared) in enumerate(layout):
                files[f"{cache}/index{k}/level"] = f"{level}\n"
                files[f"{cache}/index{k}/type"] = f"{kind}\n"
                files[f"{cache}/index{k}/shared_cpu_list"] = format_cpulist(shared) + "\n"
        for gpu in self.gpus:
            if not self.sysfs_pci:
                break
            base = f"/sys/bus/pci/devices/{gpu.pci}"
            if gpu.numa_node is not None:
                files[f"{base}/numa_node"] = f"{gpu.numa_node}\n"
            files[f"{base}/local_cpulist"] = format_cpulist(self.local_cpus(gpu)) + "\n"
            dirs[f"{base}/msi_irqs"] = sorted(str(i) for i in gpu.msi_irqs)
        commands: dict[str, Any] = {}
        if self.nvidia_smi:
            if self.smi_failure is not None:
                commands[QUERY] = {"stdout": self.smi_failure, "rc": 9}
                commands[TOPO] = {"stdout": self.smi_failure, "rc": 9}
            else:
                rows = [
                    f"{g.index}, {smi_pci(g.pci)}, {g.uuid_text()}"
                    for g in sorted(self.gpus, key=lambda g: g.index)
                ]
                if shuffle is not None:
                    shuffle.shuffle(rows)
                commands[QUERY] = "".join(r + "\n" for r in rows)
                if self.with_topo:
                    commands[TOPO] = self.topo_text()
        if shuffle is not None:
            for names in dirs.values():
                shuffle.shuffle(names)
        return FakeMachine(
            machine=self.machine,
            device_type=self.device_type,
            env=dict(self.env),
            files=files,
            dirs=dirs,
            commands=commands,
        ).snapshot()

    def host(self, shuffle: random.Random | None = None) -> SnapshotHost:
        return SnapshotHost(self.snapshot(shuffle), source="fake-host")

    def topo_text(self) -> str:
        """`nvidia-smi topo -m` as recent drivers print it (underlined header, tabs)."""
        gpus = sorted(self.gpus, key=lambda g: g.index)
        names = [f"GPU{g.index}" for g in gpus]
        header = "\t\x1b[4m" + "\t".join(names + ["CPU Affinity", "NUMA Affinity", "GPU NUMA ID"])
        lines = [header + "\x1b[0m"]
        for g in gpus:
            links = [" X " if h.index == g.index else "NV18" for h in gpus]
            node = "N/A" if g.numa_node is None or g.numa_node < 0 else str(g.numa_node)
            cpus = format_cpulist(self.local_cpus(g))
            lines.append("\t".join([f"GPU{g.index}", *links, cpus, node, "", "N/A"]))
        lines += [
            "",
            "Legend:",
            "",
            "  X    = Self",
            "  SYS  = Connection traversing PCIe as well as the SMP interconnect between "
            "NUMA nodes (e.g., QPI/UPI)",
            "  NODE = Connection traversing PCIe as well as the interconnect between PCIe "
            "Host Bridges within a NUMA node",
            "  NV#  = Connection traversing a bonded set of # NVLinks",
        ]
        return "\n".join(lines) + "\n"


def smi_pci(pci: str) -> str:
    """sysfs `0000:1b:00.0` -> nvidia-smi `00000000:1B:00.0`."""
    domain, bus, rest = pci.split(":")
    return f"{int(domain, 16):08X}:{bus.upper()}:{rest.upper()}"


def smt_pairs(cores: int) -> list[list[int]]:
    """The usual x86 numbering: CPU c and CPU c + cores are the two threads of core c."""
    return [[c, c + cores] for c in range(cores)]


def dgx_like(**overrides: Any) -> FakeHost:
    """2 sockets x 56 cores x 2 threads (224 CPUs), one node per socket, 8 GPUs, 4 per node,
    one L3 per socket: the layout of a DGX H100."""
    pcis = ["1b", "43", "52", "61", "9d", "c3", "d1", "df"]
    gpus = [
        FakeGpu(
            i, f"0000:{bus}:00.0", 0 if i < 4 else 1, msi_irqs=range(100 + 40 * i, 108 + 40 * i)
        )
        for i, bus in enumerate(pcis)
    ]
    node0 = list(range(0, 56)) + list(range(112, 168))
    node1 = list(range(56, 112)) + list(range(168, 224))
    args: dict[str, Any] = {
        "nodes": {0: node0, 1: node1},
        "gpus": gpus,
        "siblings": smt_pairs(112),
        "l3": [node0, node1],
    }
    args.update(overrides)
    return FakeHost(**args)


@dataclass
class RandomCase:
    """A random host and the CUDA_VISIBLE_DEVICES a process sees it with."""

    host: FakeHost
    visible: list[int] | None  # nvidia indices in CUDA ordinal order; None = unset

    def pcis_by_ordinal(self) -> list[str]:
        by_index = {g.index: g.pci for g in self.host.gpus}
        order = sorted(by_index) if self.visible is None else self.visible
        return [by_index[i] for i in order]


def random_case(draw: Any) -> RandomCase:
    """Draw a host: 1-4 CPU nodes (maybe memory-only nodes too), SMT numbered the x86 way
    or the adjacent way, 1-2 nodes per socket, 1-3 cache complexes per node, 1-8 GPUs
    (some on node -1 or a memory-only node), a cpuset that may cut nodes, a reordered
    CUDA_VISIBLE_DEVICES. `draw` is hypothesis' draw function."""
    from hypothesis import strategies as st

    n_nodes = draw(st.integers(1, 4))
    cores = [draw(st.integers(1, 12)) for _ in range(n_nodes)]
    smt = draw(st.sampled_from([1, 2]))
    adjacent = draw(st.booleans())
    total = sum(cores)
    nodes: dict[int, list[int]] = {}
    siblings: list[list[int]] = []
    l3: list[list[int]] = []
    core_id = 0
    for node, count in enumerate(cores):
        node_core_groups: list[list[int]] = []
        for _ in range(count):
            if smt == 1:
                group = [core_id]
            elif adjacent:
                group = [2 * core_id, 2 * core_id + 1]
            else:
                group = [core_id, core_id + total]
            core_id += 1
            siblings.append(group)
            node_core_groups.append(group)
        nodes[node] = sorted(c for g in node_core_groups for c in g)
        cuts = sorted(set(draw(st.lists(st.integers(1, max(1, count - 1)), max_size=2))))
        cuts = [c for c in cuts if 0 < c < count]
        bounds = [0, *cuts, count]
        for a, b in zip(bounds, bounds[1:], strict=False):
            l3.append(sorted(c for g in node_core_groups[a:b] for c in g))
    memory_only = draw(st.integers(0, 2))
    for extra in range(memory_only):
        nodes[n_nodes + extra] = []
    per_socket = draw(st.sampled_from([1, 2]))
    packages = {n: n // per_socket for n in nodes}
    all_cpus = sorted(c for cpus in nodes.values() for c in cpus)
    if draw(st.integers(0, 2)) > 0:
        allowed = all_cpus
    else:
        allowed = sorted(draw(st.sets(st.sampled_from(all_cpus), min_size=1)))
    cpu_nodes = [n for n, cpus in nodes.items() if cpus]
    odd_nodes = [n for n, cpus in nodes.items() if not cpus] + [-1]
    n_gpus = draw(st.integers(1, 8))
    gpus = []
    for i in range(n_gpus):
        # mostly GPUs on CPU nodes, so that most plans succeed; now and then -1 or memory
        odd = draw(st.integers(0, 5)) == 0
        node = draw(st.sampled_from(odd_nodes if odd else cpu_nodes))
        gpus.append(FakeGpu(i, f"0000:{0x10 + 0x11 * i:02x}:00.0", node))
    visible: list[int] | None = None
    if draw(st.booleans()):
        visible = draw(st.permutations(list(range(n_gpus))))
        visible = visible[: draw(st.integers(1, n_gpus))]
    env = {} if visible is None else {"CUDA_VISIBLE_DEVICES": ",".join(map(str, visible))}
    host = FakeHost(
        nodes=nodes,
        gpus=gpus,
        siblings=siblings,
        packages=packages,
        l3=l3,
        allowed=allowed,
        env=env,
    )
    return RandomCase(host, visible)


# --- the bundled example hosts (src/accelhost/data/examples/gpu-*.json) -------------------


def _uuids(seed: int, count: int) -> list[str]:
    rng = random.Random(seed)

    def hexes(n: int) -> str:
        return "".join(rng.choice("0123456789abcdef") for _ in range(n))

    return [f"GPU-{hexes(8)}-{hexes(4)}-{hexes(4)}-{hexes(4)}-{hexes(12)}" for _ in range(count)]


def example_2socket_8gpu_smt() -> FakeHost:
    """A DGX H100-like host: 2 x 56 cores x 2 threads, GPUs 0-3 on node 0, 4-7 on node 1."""
    host = dgx_like()
    for gpu, uuid in zip(host.gpus, _uuids(8, 8), strict=True):
        gpu.uuid = uuid
    return host


def example_1node_numa_minus1() -> FakeHost:
    """A cloud VM with 4 GPUs (g5.12xlarge-like): 24 cores x 2 threads, one node, and the
    kernel writes -1 in every GPU's numa_node."""
    uuids = _uuids(1, 4)
    gpus = [
        FakeGpu(
            i,
            f"0000:00:{0x1B + i:02x}.0",
            -1,
            uuid=uuids[i],
            msi_irqs=range(40 + 9 * i, 49 + 9 * i),
        )
        for i in range(4)
    ]
    return FakeHost(
        nodes={0: list(range(48))},
        gpus=gpus,
        siblings=smt_pairs(24),
        l3=[list(range(48))],
    )


def example_cpuset_slice() -> FakeHost:
    """A container on a DGX-like host given 2 GPUs and 16 cores of node 0 (32 CPUs)."""
    host = example_2socket_8gpu_smt()
    host.gpus = [
        FakeGpu(0, "0000:1b:00.0", 0, uuid=host.gpus[0].uuid, msi_irqs=host.gpus[0].msi_irqs),
        FakeGpu(1, "0000:43:00.0", 0, uuid=host.gpus[1].uuid, msi_irqs=host.gpus[1].msi_irqs),
    ]
    host.allowed = list(range(0, 16)) + list(range(112, 128))
    host.env = {"CUDA_VISIBLE_DEVICES": "0,1"}
    return host


EXAMPLES = {
    "gpu-2socket-8gpu-smt": example_2socket_8gpu_smt,
    "gpu-1node-numa-minus1": example_1node_numa_minus1,
    "gpu-cpuset-slice": example_cpuset_slice,
}


def record_example(name: str) -> dict[str, Any]:
    """What `accelhost snapshot` would write on that host: only what the reader read."""
    from accelhost.host.record import RecordingHost
    from accelhost.readers.gpu import read_gpu_topology

    recorder = RecordingHost(EXAMPLES[name]().host())
    read_gpu_topology(recorder)
    return recorder.to_snapshot(device_type="nvidia")
