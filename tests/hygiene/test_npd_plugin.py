"""The Node Problem Detector plugin in contrib/: a valid custom-plugin config whose command
follows NPD's contract (exit 0 OK, 1 NonOK, 2 Unknown; one short line of output)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from accelhost.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "contrib/node-problem-detector/accelhost-plugin.json"
VERDICT = re.compile(r"^(OK|WARN|FAIL|UNKNOWN) ")


def _seconds(text: str) -> float:
    m = re.fullmatch(r"(\d+)s", text)
    assert m, text
    return float(m.group(1))


def test_plugin_config_is_a_custom_plugin_calling_doctor_brief() -> None:
    cfg = json.loads(PLUGIN.read_text())
    assert cfg["plugin"] == "custom"
    plugin = cfg["pluginConfig"]
    (rule,) = cfg["rules"]
    assert rule["path"].endswith("/accelhost") and rule["args"][:2] == ["doctor", "--brief"]
    args = build_parser("doctor").parse_args(rule["args"])
    assert args.command == "doctor" and args.brief
    # NPD kills the plugin at its timeout; it must end before the next invocation
    assert _seconds(rule["timeout"]) <= _seconds(plugin["timeout"])
    assert _seconds(plugin["timeout"]) < _seconds(plugin["invoke_interval"])
    assert plugin["max_output_length"] >= 80  # doctor --brief prints at most 80
    (condition,) = cfg["conditions"]
    assert rule["condition"] == condition["type"] and rule["type"] == "permanent"


def test_the_rule_command_keeps_the_contract_here() -> None:
    (rule,) = json.loads(PLUGIN.read_text())["rules"]
    res = subprocess.run(
        [sys.executable, "-m", "accelhost.cli.main", *rule["args"]],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    (line,) = res.stdout.splitlines()
    assert len(line) <= 80 and VERDICT.match(line), line
    verdict = line.split()[0]
    assert res.returncode == {"OK": 0, "WARN": 0, "FAIL": 1, "UNKNOWN": 2}[verdict]
