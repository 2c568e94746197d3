"""Build recorded Ascend hosts (snapshot dicts) in the formats the real tools print.

Used by planner tests and property tests: the text goes through the same parsers as a
real host's would. The snapshot itself is built by `fakehost.FakeMachine`, the one builder.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from accelhost.cpulist import format_cpulist
from accelhost.host.snapshot import SnapshotHost
from fakehost import FakeMachine

NAMES = {"A2": "910B3", "A3": "Ascend910", "310P": "310P3", "950": "Ascend950DT"}


@dataclass
class AscendHost:
    family: str
    chips_per_npu: int
    npu_count: int
    nodes: Mapping[int, Sequence[int]]
    allowed: Sequence[int]
    running: Sequence[int] = ()  # logical ids with a process
    affinity: Mapping[int, Sequence[int]] = field(default_factory=dict)
    visible: str | None = None
    threads_per_core: int = 1
    uvb_tids: Sequence[int] = ()
    first_npu_id: int = 0
    machine: str = "aarch64"  # `uname -m`, as lscpu's Architecture too

    def logical(self) -> list[tuple[int, int, int]]:
        out = []
        for n in range(self.npu_count):
            for c in range(self.chips_per_npu):
                out.append((self.first_npu_id + n, c, n * self.chips_per_npu + c))
        return out

    def map_text(self) -> str:
        name = NAMES[self.family]
        if self.family == "950":
            head = (
                "\tNPU ID                         Slot ID                        Chip ID"
                "                        Chip Phy-ID                    Chip Name\n"
            )
            rows = [
                f"\t{npu:<31}{npu:<31}{chip:<31}{logic:<31}{name}\n"
                for npu, chip, logic in self.logical()
            ]
            return head + "".join(rows) + "\n"
        head = (
            "\tNPU ID                         Chip ID                        Chip Logic ID"
            "                  Chip Name\n"
        )
        rows = []
        for n in range(self.npu_count):
            npu = self.first_npu_id + n
            for c in range(self.chips_per_npu):
                rows.append(f"\t{npu:<31}{c:<31}{n * self.chips_per_npu + c:<31}{name}\n")
            rows.append(f"\t{npu:<31}{self.chips_per_npu:<31}{'-':<31}Mcu\n")
        return head + "".join(rows) + "\n"

    def info_text(self) -> str:
        name = NAMES[self.family]
        sep = "+===========================+===============+" + "=" * 52 + "+\n"
        out = [
            "+" + "-" * 96 + "+\n",
            "| npu-smi 25.2.0                   Version: 25.2.0" + " " * 47 + "|\n",
            "| NPU   Name                | Health        | Power(W)    Temp(C)           Hugepages-Usage(page)|\n",
            "| Chip                      | Bus-Id        | AICore(%)   Memory-Usage(MB)  HBM-Usage(MB)        |\n",
            sep,
        ]
        for n in range(self.npu_count):
            npu = self.first_npu_id + n
            out.append(
                f"| {npu:<5} {name:<19} | OK            | 95.1        44                0    / 0             |\n"
            )
            for c in range(self.chips_per_npu):
                out.append(
                    f"| {c:<25} | 0000:{0xC1 + n:02X}:00.{c} | 0           0    / 0          3400 / 65536         |\n"
                )
            out.append(sep)
        by_logic = {logic: (npu, chip) for npu, chip, logic in self.logical()}
        head = "NPU ID" if self.family == "950" else "NPU     Chip"
        out.append(
            f"| {head:<25} | Process id    | Process name             | Process memory(MB)      |\n"
        )
        out.append(sep)
        busy = set(self.running)
        for n in range(self.npu_count):
            npu = self.first_npu_id + n
            any_proc = False
            for c in range(self.chips_per_npu):
                logic = n * self.chips_per_npu + c
                if logic in busy:
                    any_proc = True
                    ids = f"{npu}" if self.family == "950" else f"{npu:<7} {c}"
                    out.append(
                        f"| {ids:<25} | {100000 + logic:<13} | VLLMWorker_TP{logic:<11} | 56630                   |\n"
                    )
            if not any_proc:
                out.append(f"| No running processes found in NPU {npu:<61}|\n")
            out.append("+" + "-" * 27 + "+" + "-" * 15 + "+" + "-" * 52 + "+\n")
        del by_logic
        return "".join(out)

    def topo_text(self) -> str:
        ids = sorted(self.affinity)
        if not ids:
            return ""
        head = "\t   " + "".join(f"NPU{i:<8}" for i in ids) + "CPU Affinity\n"
        rows = []
        for i in ids:
            cells = "".join(f"{'X' if j == i else 'HCCS':<11}" for j in ids)
            cpus = list(self.affinity[i])
            written = format_cpulist(cpus) if cpus == sorted(cpus) else ",".join(map(str, cpus))
            rows.append(f"NPU{i:<8}{cells}{written}\n")
        legend = "\nLegend:\n\n  X    = Self\n  HCCS = Connection traversing HCCS.\n"
        return head + "".join(rows) + legend

    def lscpu_e(self) -> str:
        rows = sorted((cpu, node) for node, cpus in self.nodes.items() for cpu in cpus)
        return "CPU NODE\n" + "".join(f"{cpu:>3}    {node}\n" for cpu, node in rows)

    def snapshot(self) -> dict[str, Any]:
        cpus = sum(len(c) for c in self.nodes.values())
        commands: dict[str, Any] = {
            "npu-smi info -m": self.map_text(),
            "npu-smi info": self.info_text(),
            "lscpu -e=CPU,NODE": self.lscpu_e(),
            "lscpu": f"Architecture:        {self.machine}\nCPU(s):              {cpus}\n"
            f"Thread(s) per core:   {self.threads_per_core}\nNUMA node(s):        {len(self.nodes)}\n",
            "ps -Te": "  PID  SPID TTY          TIME CMD\n"
            + "".join(
                f"  812 {t:>5} ?        00:00:00 uvb_poll_window_thread\n" for t in self.uvb_tids
            ),
        }
        topo = self.topo_text()
        if topo:
            commands["npu-smi info -t topo"] = topo
        env = {} if self.visible is None else {"ASCEND_RT_VISIBLE_DEVICES": self.visible}
        status = f"Name:\tpython3\nCpus_allowed_list:\t{format_cpulist(self.allowed)}\n"
        return FakeMachine(
            machine=self.machine,
            device_type=self.family,
            env=env,
            files={"/proc/self/status": status},
            commands=commands,
        ).snapshot()

    def host(self) -> SnapshotHost:
        return SnapshotHost(self.snapshot())


def even_nodes(cpus: int, nodes: int) -> dict[int, list[int]]:
    per = cpus // nodes
    return {n: list(range(n * per, (n + 1) * per if n < nodes - 1 else cpus)) for n in range(nodes)}
