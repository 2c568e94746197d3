"""`topo` and `snapshot` share `plan`'s grammar: --device-type and --pci, usage errors exit 2."""

from __future__ import annotations

import json

import pytest

from accelhost.cli.main import main

GPU_EXAMPLE = "example:gpu-2socket-8gpu-smt"


def _exit_status(argv: list[str]) -> int:
    try:
        return main(argv)
    except SystemExit as exc:  # argparse's own usage errors
        return int(exc.code or 0)


@pytest.mark.parametrize(
    ("argv", "problem"),
    [
        (["topo", "--device-type", "A9"], "unknown device type 'A9'"),
        (["topo", "--snapshot", GPU_EXAMPLE, "--pci", "zz:00.0"], "not a PCI address"),
        (["snapshot", "--device-type", "tpu"], "unknown device type 'tpu'"),
        (["topo", "--devic", "0"], "unrecognized arguments"),
    ],
)
def test_usage_errors_exit_2(
    capsys: pytest.CaptureFixture[str], argv: list[str], problem: str
) -> None:
    assert _exit_status(argv) == 2
    err = capsys.readouterr().err
    assert problem in err and "Traceback" not in err


def test_topo_of_pci_devices_is_the_same_topology_kind(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["topo", "--snapshot", GPU_EXAMPLE, "--pci", "1b:00.0,0000:9d:00.0", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["family"] == "pci"
    assert [(a["index"], a["pci"]) for a in data["accelerators"]] == [
        (0, "0000:1b:00.0"),
        (1, "0000:9d:00.0"),
    ]
    assert data["accelerators"][1]["numa_node"] == 1


def test_device_type_is_case_insensitive(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["topo", "--snapshot", "example:a3-640cpu-16npu", "--device-type", "a3"]) == 0
    assert "accelerators: 16 (A3)" in capsys.readouterr().out
