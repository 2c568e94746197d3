"""What a fresh process loads before it answers (issue 26, point 10): start-up is fixed cost
on every call of a node agent or a script, so a command loads what it uses. Checked by the
modules a real run imported, never by a clock."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest


def _loaded(*argv: str) -> set[str]:
    """The modules `accelhost ARGV...` had imported when it finished."""
    code = (
        "import json, sys\n"
        "from accelhost.cli.main import main\n"
        "try:\n"
        f"    main({list(argv)!r})\n"
        "except SystemExit:\n"
        "    pass\n"
        "sys.stderr.write('\\n' + json.dumps(sorted(sys.modules)))\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    return set(json.loads(res.stderr.strip().splitlines()[-1]))


@pytest.mark.parametrize("argv", [["--version"], ["--help"], [], ["bogus"]])
def test_the_top_level_loads_no_command_module(argv: list[str]) -> None:
    """`accelhost --help` (no command, a wrong one, --version) needs the commands' names and
    help lines only: no command's module, nor what their options import."""
    loaded = _loaded(*argv)
    assert not {m for m in loaded if m.startswith(("accelhost.cli.", "accelhost.hygiene"))} - {
        "accelhost.cli.main",
    }
    for module in ("accelhost.planner", "accelhost.supervisor", "dataclasses", "pathlib"):
        assert module not in loaded, module


def test_a_command_loads_its_own_module_only() -> None:
    loaded = _loaded("plan", "--help")
    assert "accelhost.cli.plan" in loaded
    for module in ("topo", "bind", "hygiene", "run", "bench", "snapshot"):
        assert f"accelhost.cli.{module}" not in loaded, module


def test_an_ascend_plan_loads_no_gpu_reader_nor_the_supervisor() -> None:
    loaded = _loaded("plan", "--snapshot", "example:a3-640cpu-16npu")
    assert "accelhost.planner.ascend" in loaded  # it did plan
    for module in (
        "accelhost.readers.gpu",
        "accelhost.parsers.nvidia_smi",
        "accelhost.planner.gpu",
        "accelhost.supervisor.options",
        "importlib.resources",  # the bundled examples are files beside the package
    ):
        assert module not in loaded, module


@pytest.mark.parametrize("name", ["uuid", "datetime"])
def test_the_doctors_parser_does_not_load_the_cleaners_clock(name: str) -> None:
    """clean's --journal default is read by every hygiene command's parser; the journal's
    run id and time stamps are made only when clean journals."""
    assert name not in _loaded("doctor", "--help")


def test_gpu_names_still_resolve_from_the_planner_package() -> None:
    from accelhost import planner

    assert planner.DEFAULT_STRATEGY in planner.STRATEGIES and callable(planner.plan_gpus)
