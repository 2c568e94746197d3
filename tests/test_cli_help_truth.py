"""What `--help` says of an option is what the command does.

A device list is offered only where the command takes one: `bind`, `exec`, `verify`, `unbind`, `run --expect-util` and `bench bind` act on one device
and refuse a list ("takes one device"); their help used to offer `e.g. 0-3,5` all the
same. `plan` and the doctor's preflight do take lists.
"""

from __future__ import annotations

import re

import pytest

from accelhost.cli.main import main

ONE = {
    "bind": ["bind", "--plan", "p.json", "--pid", "1"],
    "exec": ["exec", "--plan", "p.json", "--", "true"],
    "verify": ["verify", "--plan", "p.json", "--pid", "1"],
    "unbind": ["unbind", "--irq"],
    "run": ["run", "--expect-util", "0.9", "--", "true"],
    "bench bind": ["bench", "bind", "--plan", "p.json", "--", "true"],
}
LIST = {"plan": ["plan"], "doctor": ["doctor"]}


def _device_help(words: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[str, str]:
    """The metavar and the help paragraph of --device in `accelhost WORDS --help`."""
    with pytest.raises(SystemExit):
        main([*words, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    found = re.search(r"--device (\w+), --devices \w+ (.*?e\.g\. [0-9,-]+)\)", text)
    assert found, text
    return found.group(1), found.group(2)


@pytest.mark.parametrize("name", sorted(ONE))
def test_one_device_commands_offer_one_device(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _, text = _device_help(name.split(), capsys)
    assert "0-3,5" not in text and "e.g. 3" in text
    argv = ONE[name]
    cut = argv.index("--") if "--" in argv else len(argv)
    assert main([*argv[:cut], "--device", "0,1", *argv[cut:]]) == 2
    assert "takes one device, got --device 0,1" in capsys.readouterr().err


@pytest.mark.parametrize("name", sorted(LIST))
def test_list_commands_offer_a_list(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    _, text = _device_help(name.split(), capsys)
    assert "e.g. 0-3,5" in text


@pytest.mark.parametrize("name", ["doctor", "clean", "watch", "bind", "verify"])
def test_device_glob_help_names_only_nodes_every_command_knows(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """One grammar (`devnodes`) for the doctor and the binder: every node the shared help
    names is a device node to the doctor, every node of one device to the binder too,
    /dev/accel/accelN included."""
    from accelhost.apply.identity import nodes_of_targets
    from accelhost.hygiene.options import HygieneOptions

    with pytest.raises(SystemExit):
        main([name, "--help"])
    text = " ".join(capsys.readouterr().out.split())
    found = re.search(r"--device-glob GLOB (.*?\))", text)
    assert found, text
    named = re.findall(r"/dev/[\w/*]+", found.group(1))
    assert "/dev/accel/accelN" in named
    for node in named:
        sample = node.replace("N", "0").replace("*", "128")
        assert HygieneOptions().is_device_path(sample), node
        if sample != node:  # a node of one device: bind takes the device from it
            assert nodes_of_targets([sample]), node


def test_bench_pipeline_help_gives_the_stage_times_grammar_and_defaults(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A bare `--pre-time 1` is 1 ms, not 1 s: the help has to say so, and the defaults."""
    from accelhost.bench.pipeline import parse_duration

    with pytest.raises(SystemExit):
        main(["bench", "pipeline", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    for stage, default in (("pre", "10ms"), ("device", "50ms"), ("post", "20ms")):
        found = re.search(rf"--{stage}-time TIME (.*?\(default (\w+)\))", text)
        assert found, text
        assert "a bare number is milliseconds" in found.group(1)
        assert found.group(2) == default
    assert parse_duration("1") == pytest.approx(0.001)


def test_bench_bind_help_names_every_exit_1_cause_docs_bench_md_names(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """docs/bench.md: 1 when an arm has no figure, the runs stopped early, or the binding
    failed; the help used to leave out the runs that stop early (a command that cannot
    start, or no figure from the first 2 rounds)."""
    with pytest.raises(SystemExit):
        main(["bench", "bind", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    one = text[text.index("Exit status:") :].split(", 2 bad usage")[0]
    for cause in ("an arm has no figure", "the runs stopped early", "the binding failed"):
        assert cause in one, one
