"""Real npu-smi output shapes (tests/ascend_smi/*.txt, each naming its public source) fed to
the parsers, the Ascend reader and the doctor's device reader: each answer is true or says
it cannot tell; never a chip dropped, a wrong chip / logical id, a wrong memory figure or a
traceback.

A fixture's `# ` lines at the top are its sources; the rest is the output as the tool prints
it. `npu-smi info -m` texts are written here in the layout npu-smi prints them (a tab, then
30-wide columns), since no public report shows them for these hosts.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from accelhost.errors import ParseError
from accelhost.host.snapshot import SnapshotHost
from accelhost.hygiene.facts.devices import read_ascend
from accelhost.parsers.npusmi import parse_npu_map, parse_npu_smi_info, parse_npu_topo
from accelhost.planner.ascend import running_npus
from accelhost.readers.topology import read_ascend_topology
from fakehost import FakeMachine

SMI = Path(__file__).parent / "ascend_smi"


def load(name: str) -> str:
    lines = (SMI / name).read_text().splitlines(keepends=True)
    while lines and lines[0].startswith("# "):
        lines.pop(0)
    return "".join(lines)


def test_every_fixture_names_its_source() -> None:
    for path in sorted(SMI.glob("*.txt")):
        assert path.read_text().startswith("# source: https://"), path.name


def a3_map(cards: range) -> str:
    """`npu-smi info -m` of an A3: two dies per card, logic = phy = 2 x card + die, an Mcu."""
    row = "\t{:<30} {:<30} {:<30} {:<30} {}\n"
    out = row.format("NPU ID", "Chip ID", "Chip Logic ID", "Chip Phy-ID", "Chip Name")
    for card in cards:
        for die in (0, 1):
            out += row.format(card, die, 2 * card + die, 2 * card + die, "Ascend910")
        out += row.format(card, 2, "-", "-", "Mcu")
    return out


def host(commands: dict[str, object]) -> SnapshotHost:
    return FakeMachine(
        machine="aarch64",
        files={"/proc/self/status": "Cpus_allowed_list:\t0-639\n"},
        commands={"lscpu -e=CPU,NODE": "CPU NODE\n0 0\n", **commands},
    ).host()


# ---- A3: `Chip  Phy-ID` chip rows (npu-smi 24.1 and later) ----------------------------


def test_a3_every_die_is_a_chip_with_its_bus_and_hbm() -> None:
    info = parse_npu_smi_info(load("info_a3_16chip_procs_25.2.3.txt"))
    assert len(info.chips) == 16
    assert [(c.npu_id, c.chip_id, c.phy_id) for c in info.chips] == [
        (n, d, 2 * n + d) for n in range(8) for d in (0, 1)
    ]
    assert info.chips[1][:7] == (0, 1, "Ascend910", "0000:9f:00.0", 52948, 65536, "OK")
    assert info.chips[15].bus_id == "0000:83:00.0" and info.chips[15].hbm_used_mb == 50242
    assert info.names == ("Ascend910",)
    assert len(info.processes) == 14
    assert [(p.npu_id, p.chip_id, p.pid, p.name, p.memory_mb) for p in info.processes[4:6]] == [
        (0, 1, 3328327, "", 50119),
        (1, 0, 3330598, "", 50117),
    ]


def test_a3_reader_maps_processes_and_bus_ids_to_logical_npus() -> None:
    topo = read_ascend_topology(
        host(
            {
                "npu-smi info -m": a3_map(range(8)),
                "npu-smi info": load("info_a3_16chip_procs_25.2.3.txt"),
            }
        ),
        None,
    )
    assert topo.family == "A3" and not topo.notes and not topo.unread
    assert [a.index for a in topo.accelerators] == list(range(16))
    assert topo.accelerators[15].pci == "0000:83:00.0"
    assert running_npus(topo) == [0, 1, 2, 3, 12, 13, 14, 15]


def test_a3_doctor_sees_each_die_with_its_memory_and_processes() -> None:
    errors: dict[str, str] = {}
    devices = read_ascend(host({"npu-smi info": load("info_a3_16chip_procs_25.2.3.txt")}), errors)
    assert not errors and devices is not None
    assert [d.index for d in devices] == list(range(16))
    die1 = devices[1]
    assert (die1.used_mib, die1.total_mib, die1.bus_id) == (52948, 65536, "0000:9f:00.0")
    assert [(p.pid, p.memory_mib) for p in die1.processes] == [(3328327, 50119)]
    assert sum(len(d.processes) for d in devices) == 14
    assert devices[4].processes == () and devices[4].used_mib == 3128


def test_a3_container_names_its_dies_by_their_host_davinci_number() -> None:
    # the container sees card 2 only; its dies are /dev/davinci4 and 5, not 0 and 1
    errors: dict[str, str] = {}
    devices = read_ascend(
        host({"npu-smi info": load("info_a3_container_card2_24.1.rc3.7.txt")}), errors
    )
    assert not errors and devices is not None
    assert [(d.index, d.node, d.used_mib, d.bus_id) for d in devices] == [
        (4, "/dev/davinci4", 3411, "0000:95:00.0"),
        (5, "/dev/davinci5", 3208, "0000:97:00.0"),
    ]


def test_a3_npu_smi_26_with_a_process_id_in_container_column() -> None:
    info = parse_npu_smi_info(load("info_a3_container_column_26.0.rc2.txt"))
    assert [(c.npu_id, c.chip_id, c.phy_id, c.hbm_used_mb) for c in info.chips] == [
        (0, 0, 0, 3419),
        (0, 1, 1, 2874),
        (7, 1, 15, 31877),
    ]
    assert [(p.npu_id, p.chip_id, p.pid, p.name, p.memory_mb) for p in info.processes] == [
        (0, 0, 632268, "python3.1", 197)
    ]


# ---- 310P: `Chip    Device` chip rows, DDR memory, physical card ids -------------------


def test_310p_duo_card_two_chips_with_ddr_memory() -> None:
    info = parse_npu_smi_info(load("info_310p3_duo_card_25.2.0.txt"))
    assert [
        (c.npu_id, c.chip_id, c.phy_id, c.bus_id, c.hbm_used_mb, c.hbm_total_mb) for c in info.chips
    ] == [
        (2, 0, None, "0000:01:00.0", 1529, 44280),
        (2, 1, None, "0000:01:00.0", 1412, 43693),
    ]
    errors: dict[str, str] = {}
    devices = read_ascend(host({"npu-smi info": load("info_310p3_duo_card_25.2.0.txt")}), errors)
    assert not errors and devices is not None
    assert [(d.index, d.used_mib, d.total_mib) for d in devices] == [
        (0, 1529, 44280),
        (1, 1412, 43693),
    ]


def test_310p_physical_card_ids_are_read_not_refused() -> None:
    text = load("info_310p_physical_ids_25.2.0.txt")
    info = parse_npu_smi_info(text)
    assert [c.npu_id for c in info.chips] == [0, 32, 96, 32768, 32800, 32896]
    assert {(c.hbm_used_mb, c.hbm_total_mb) for c in info.chips} <= {
        (1851, 21527),
        (1852, 21527),
        (1853, 21527),
    }
    assert info.processes == () and info.id_column == "NPU Chip"
    row = "\t{:<30} {:<30} {:<30} {}\n"
    mapping = row.format("NPU ID", "Chip ID", "Chip Logic ID", "Chip Name") + "".join(
        row.format(npu, 0, logic, "Ascend 310P3")
        for logic, npu in enumerate((0, 32, 96, 32768, 32800, 32896))
    )
    entries = parse_npu_map(mapping)
    assert [(e.npu_id, e.logical_id) for e in entries][3] == (32768, 3)
    topo = read_ascend_topology(host({"npu-smi info -m": mapping, "npu-smi info": text}), None)
    assert topo.family == "310P"
    assert [(a.index, a.npu_id, a.pci) for a in topo.accelerators][3] == (3, 32768, "0000:81:00.0")
    errors: dict[str, str] = {}
    devices = read_ascend(host({"npu-smi info": text}), errors)
    assert not errors and devices is not None and [d.index for d in devices] == list(range(6))


def test_310b_bus_id_na_is_no_bus_id() -> None:
    # npu-smi prints "NA" in the Bus-Id cell of a board without PCIe (310B, its source)
    text = (
        "| NPU     Name                  | Health          | Power(W)     Temp(C)           Hugepages-Usage(page) |\n"
        "| Chip    Device                | Bus-Id          | AICore(%)    Memory-Usage(MB)                        |\n"
        "| 0       310B1                 | Alarm           | 9.0          57                15    / 15            |\n"
        "| 0       0                     | NA              | 0            7356 / 11577                            |\n"
    )
    (chip,) = parse_npu_smi_info(text).chips
    assert (chip.bus_id, chip.health, chip.hbm_used_mb, chip.hbm_total_mb) == (
        None,
        "Alarm",
        7356,
        11577,
    )


# ---- A2: one chip per card; topology ----------------------------------------------------


def test_a2_idle_host_and_its_topology() -> None:
    info = parse_npu_smi_info(load("info_a2_910b3_8npu_24.1.rc1.txt"))
    assert [(c.npu_id, c.chip_id, c.phy_id) for c in info.chips] == [(n, 0, None) for n in range(8)]
    assert info.chips[7].bus_id == "0000:42:00.0" and info.chips[7].hbm_used_mb == 3315
    assert info.processes == () and info.id_column is None
    affinity = parse_npu_topo(load("topo_a2_910b3_8npu.txt"))
    assert {n: (cpus[0], cpus[-1]) for n, cpus in affinity.items()} == {
        0: (144, 167),
        1: (144, 167),
        2: (96, 119),
        3: (96, 119),
        4: (0, 23),
        5: (0, 23),
        6: (48, 71),
        7: (48, 71),
    }


# ---- failures ---------------------------------------------------------------------------


@pytest.mark.parametrize("rc", [1, 255])
def test_a_failed_npu_smi_is_cannot_tell_with_its_status(rc: int) -> None:
    failed = {"stdout": load("fail_dcmi_8005.txt"), "rc": rc}
    h = host({"npu-smi info -m": failed, "npu-smi info": failed, "npu-smi info -t topo": failed})
    topo = read_ascend_topology(h, None)
    assert topo.accelerators == ()
    assert topo.unread == (
        f"`npu-smi info -m` failed with status {rc}",
        f"`npu-smi info` failed with status {rc}",
    )
    errors: dict[str, str] = {}
    assert read_ascend(h, errors) == [] and errors["devices"].endswith(f"status {rc}")


def test_a_failure_printed_with_status_0_is_still_no_answer() -> None:
    failed = load("fail_dcmi_8005.txt")
    h = host({"npu-smi info -m": failed, "npu-smi info": failed})
    with pytest.raises(ParseError, match="npu-smi info -m"):
        read_ascend_topology(h, None)
    errors: dict[str, str] = {}
    assert read_ascend(h, errors) == [] and "no chip table" in errors["devices"]


def test_chip_names_as_npu_smi_info_m_writes_them_tell_the_family() -> None:
    """`npu-smi info -m` names a chip `Ascend 910B3` (a blank after Ascend), `npu-smi info`
    `910B3`: both tell the family (the blank made the -m names tell none)."""
    from accelhost.family import family_from_chip_names

    for names, family in [
        (["Ascend 910B3"], "A2"),
        (["910B3"], "A2"),
        (["Ascend 310P3"], "310P"),
        (["Ascend910"], "A3"),
        (["Ascend950DT"], "950"),
        (["Ascend 910B3", "Ascend 310P3"], None),
    ]:
        assert family_from_chip_names(names) == family, names
