"""The doctor's verdict: exit status, `--brief` line, SKIP never counted as healthy."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from hygiene_fakes import FakeHost

from accelhost.hygiene.report import CheckResult, DoctorReport


def _report(*statuses: str, summary: str = "something") -> DoctorReport:
    return DoctorReport(tuple(CheckResult(f"c{n}", s, summary) for n, s in enumerate(statuses)))


def test_verdict_and_exit_code() -> None:
    assert (_report("OK", "OK").verdict, _report("OK", "OK").exit_code) == ("OK", 0)
    assert (_report("OK", "WARN").verdict, _report("OK", "WARN").exit_code) == ("WARN", 0)
    assert (_report("WARN", "UNKNOWN").verdict, _report("WARN", "UNKNOWN").exit_code) == (
        "UNKNOWN",
        2,
    )
    assert (_report("UNKNOWN", "FAIL").verdict, _report("UNKNOWN", "FAIL").exit_code) == (
        "FAIL",
        1,
    )
    # a skipped check is neither healthy nor a problem; nothing but skips: could not tell
    assert _report("OK", "SKIP").verdict == "OK"
    assert (_report("SKIP").verdict, _report("SKIP").exit_code) == ("UNKNOWN", 2)


def test_brief_is_one_line_of_at_most_80_with_the_worst_finding() -> None:
    long = "x " * 100
    r = DoctorReport(
        (
            CheckResult("hugepages", "WARN", "pool at 95%"),
            CheckResult("orphan_engines", "FAIL", long),
            CheckResult("preflight", "SKIP", "not requested"),
        )
    )
    line = r.brief()
    assert line.startswith("FAIL orphan_engines: x x") and len(line) == 80 and "\n" not in line
    assert _report("OK", "SKIP").brief() == "OK 1 check(s) OK"
    assert _report("SKIP").brief() == "UNKNOWN no check ran"
    assert _report("OK", "WARN", summary="2 leaked").brief() == "WARN c1: 2 leaked"


def _doctor(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "accelhost.cli.main", "doctor", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_brief_on_recorded_hosts(tmp_path: Path) -> None:
    fake = FakeHost()
    fake.proc(201, "VLLM::EngineCore", ppid=1, pgid=200, sid=200)
    snap = tmp_path / "host.json"
    snap.write_text(json.dumps(fake.snapshot()))
    res = _doctor("--snapshot", str(snap), "--brief")
    assert res.returncode == 1
    assert res.stdout.startswith("FAIL orphan_engines: 1 orphan engine process(es)")
    healthy = FakeHost()
    snap.write_text(json.dumps(healthy.snapshot()))
    res = _doctor("--snapshot", str(snap), "--brief", "--check", "orphan_engines")
    assert (res.returncode, res.stdout) == (0, "OK 1 check(s) OK\n")
    # the bundled A2 recording has no process table: the process checks are SKIP, "not in
    # this recording", as the docs promise; nothing failed or could not run: exit 0
    res = _doctor("--snapshot", "example:a2-192cpu-8npu-sees-npu0", "--brief")
    assert res.returncode == 0 and res.stdout.startswith("OK "), res.stdout
    # a check that was not requested is SKIP in the JSON, never OK
    res = _doctor("--snapshot", str(snap), "--json", "--check", "preflight")
    (check,) = json.loads(res.stdout)["checks"]
    assert check["status"] == "SKIP" and res.returncode == 2


def test_help_does_not_load_the_checks_and_names_stay_functions() -> None:
    code = (
        "import sys\n"
        "from accelhost.cli.main import build_parser\n"
        "build_parser(None)\n"
        "loaded = [m for m in ('accelhost.hygiene.doctor.checks', 'accelhost.hygiene.facts.host',"
        " 'accelhost.hygiene.clean.cleaner') if m in sys.modules]\n"
        "import accelhost.hygiene.doctor.preflight\n"
        "from accelhost.hygiene import preflight\n"
        "print(loaded, callable(preflight))\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert res.stdout.strip() == "[] True", res.stdout + res.stderr
