"""Every command-line option is defined once (pip's `cmdoptions` shape): in
`accelhost.cli.options` when several commands take it, else in its command's module.

Read from the sources with `ast`, so a second definition fails here even before anyone
notices that its help (or its meaning) drifted from the first.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

import accelhost.cli
from accelhost.cli.main import build_parser

CLI = Path(accelhost.cli.__file__).parent


def option_definitions(paths: list[Path]) -> dict[str, list[str]]:
    """Option literal -> every `file:line` where a call to `add_argument` names it."""
    found: dict[str, list[str]] = defaultdict(list)
    for path in paths:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_argument"
            ):
                continue
            for arg in node.args:
                if isinstance(arg, ast.Constant) and str(arg.value).startswith("-"):
                    found[str(arg.value)].append(f"{path.name}:{node.lineno}")
    return found


def test_the_check_sees_an_option_written_twice(tmp_path: Path) -> None:
    one = tmp_path / "one.py"
    two = tmp_path / "two.py"
    one.write_text("def f(p):\n    p.add_argument('--pid', type=int)\n")
    two.write_text("def g(q):\n    q.group.add_argument('--json', '--pid', help='x')\n")
    found = option_definitions([one, two])
    assert found["--pid"] == ["one.py:2", "two.py:2"]
    assert found["--json"] == ["two.py:2"]


def test_no_option_literal_is_passed_to_add_argument_twice() -> None:
    found = option_definitions(sorted(CLI.glob("*.py")))
    assert "--device" in found and "--grace" in found  # the sources were read
    twice = {flag: where for flag, where in found.items() if len(where) > 1}
    assert not twice, f"options defined more than once: {twice}"


def _subparsers(parser: object) -> dict[str, object]:
    import argparse

    assert isinstance(parser, argparse.ArgumentParser)
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _option(parser: object, flag: str) -> object:
    import argparse

    assert isinstance(parser, argparse.ArgumentParser)
    return next(a for a in parser._actions if flag in a.option_strings)


@pytest.mark.parametrize(
    ("flag", "commands"),
    [
        ("--device", ["plan", "bind", "exec", "verify", "unbind", "doctor", "watch", "run"]),
        ("--thread-role", ["plan", "bind", "exec", "verify", "run"]),
        ("--device-glob", ["bind", "verify", "doctor", "clean", "watch"]),
        ("--pci", ["topo", "plan", "bind", "exec", "verify", "snapshot"]),
        ("--grace", ["clean", "watch", "run"]),
    ],
)
def test_a_shared_option_has_one_type_metavar_and_default(flag: str, commands: list[str]) -> None:
    """The composed definitions agree: the same dest, type, metavar, default and action in
    every command that takes the option (only a short context in the help may differ)."""
    sub = _subparsers(build_parser())
    shapes = set()
    for name in commands:
        a = _option(sub[name], flag)
        shapes.add(
            (a.dest, a.type, a.metavar, repr(a.default), type(a).__name__, tuple(a.option_strings))  # type: ignore[attr-defined]
        )
    assert len(shapes) == 1, shapes


def test_plan_help_says_host_ids_as_bind_help_does() -> None:
    sub = _subparsers(build_parser())
    for name in ("plan", "bind"):
        text = _option(sub[name], "--device").help  # type: ignore[attr-defined]
        assert "host ids" in text and "logical" not in text, (name, text)


@pytest.mark.parametrize(
    ("argv", "old"),
    [
        (["doctor", "--engine-pattern", "x"], "--engine-pattern"),
        (["clean", "--min-age", "5"], "--min-age"),
        (["run", "--preflight-util", "0.5", "--", "true"], "--preflight-util"),
    ],
)
def test_a_first_release_has_no_old_option_names(
    argv: list[str], old: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """0.1.0 had no earlier release: one name per option (--engine-child, --shm-min-age,
    --expect-util), and the old ones are unknown, not quietly taken."""
    from accelhost.cli.main import main

    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    assert f"unrecognized arguments: {old}" in capsys.readouterr().err


def test_no_parser_takes_an_abbreviated_option(capsys: pytest.CaptureFixture[str]) -> None:
    """Every command and sub-command refuses a prefix of one of its options (`--snap` for
    `--snapshot`): the parsers are all made with allow_abbrev off."""
    from accelhost.cli.main import main

    pending = [build_parser()]
    seen = 0
    while pending:
        parser = pending.pop()
        assert parser.allow_abbrev is False, parser.prog  # type: ignore[attr-defined]
        pending.extend(_subparsers(parser).values())  # type: ignore[arg-type]
        seen += 1
    assert seen > len(["topo", "plan", "bind", "doctor", "run", "bench"])
    for argv in (["topo", "--snap", "x"], ["bench", "pipeline", "--pre-t", "1"]):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2
        assert f"unrecognized arguments: {argv[-2]}" in capsys.readouterr().err
