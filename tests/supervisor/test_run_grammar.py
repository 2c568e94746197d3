"""`accelhost run`'s command line: the shared grammar, usage errors (2) versus "could not
do it" (1), and the preflight options shared with `doctor`."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from run_support import janitor, run_cmd

from accelhost.cli.main import build_parser
from accelhost.remove import DEFAULT_GRACE_S

MARGIN_S = 30.0
A2 = "example:a2-192cpu-8npu-sees-npu0"


def finish(proc: subprocess.Popen[bytes], timeout: float = MARGIN_S) -> tuple[int, str]:
    _, err = proc.communicate(timeout=timeout)
    return proc.returncode, err.decode()


def parse(*argv: str) -> object:
    return build_parser("run").parse_args(["run", *argv])


def test_grace_is_the_shared_option_with_the_shared_default() -> None:
    args = parse("--", "true")
    assert args.grace == DEFAULT_GRACE_S == 30.0  # type: ignore[attr-defined]
    assert parse("--grace", "2.5", "--", "true").grace == 2.5  # type: ignore[attr-defined]


def test_expect_util_is_doctors_name_and_has_no_other() -> None:
    new = parse("--expect-util", "0.85", "--device", "3", "--", "true")
    assert new.expect_util == 0.85  # type: ignore[attr-defined]
    assert new.device == [3]  # type: ignore[attr-defined]
    with pytest.raises(SystemExit):
        parse("--preflight-util", "0.85", "--device", "3", "--", "true")


def test_device_takes_the_shared_list_grammar() -> None:
    assert parse("--expect-util", "0.5", "--devices", "0-2", "--", "true").device == [0, 1, 2]  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("options", "needle"),
    [
        ([], "no command given"),
        (["--fail-on-exit", "VLLM::(Engine"], "--fail-on-exit"),
        (["--grace", "-1"], "--grace: must not be negative"),
        (["--grace", "nan"], "--grace: must be a number of seconds"),
        (["--kill-wait", "-2"], "--kill-wait: must not be negative"),
        (["--expect-util", "1.5"], "--expect-util must be in (0, 1]"),
        (["--device", "0"], "--device goes with --expect-util"),
        (["--expect-util", "0.5", "--device", "0,1"], "takes one device, got --device 0,1"),
        (["--bind-delay", "3"], "--bind-delay needs --bind"),
        (["--private-ipc", "--keep-shm"], "do not go together"),
        (["--snapshot", "/nonexistent/host.json", "--expect-util", "0.5"], "--snapshot: "),
    ],
)
def test_usage_errors_are_one_line_and_status_2(
    tmp_path: Path, options: list[str], needle: str
) -> None:
    marker = tmp_path / "started"
    command = [] if needle == "no command given" else ["--", "touch", str(marker)]
    with janitor(tmp_path) as j:
        proc = j.start(run_cmd(*options, *command))
        code, err = finish(proc)
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("accelhost run: ") and needle in err
    assert "Traceback" not in err
    assert not marker.exists()


@pytest.mark.parametrize("bad", [["--device", "x", "--expect-util", "0.5"], ["--gra", "1"]])
def test_argparse_rejections_are_status_2_too(tmp_path: Path, bad: list[str]) -> None:
    marker = tmp_path / "started"
    with janitor(tmp_path) as j:
        proc = j.start(run_cmd(*bad, "--", "touch", str(marker)))
        code, err = finish(proc)
    assert code == 2, err
    assert "Traceback" not in err and not marker.exists()


def test_a_failed_preflight_is_could_not_do_it_status_1(tmp_path: Path) -> None:
    marker = tmp_path / "started"
    with janitor(tmp_path) as j:
        proc = j.start(
            run_cmd("--snapshot", A2, "--expect-util", "0.99", "--device", "0", "--")
            + ["touch", str(marker)]
        )
        code, err = finish(proc)
    assert code == 1, err
    # vLLM's own sentence, with the recorded device's numbers
    assert re.fullmatch(
        r"accelhost: preflight: npu0: Free memory on device \([\d.]+/64\.0 GiB\) on startup is "
        r"less than desired GPU memory utilization \(0\.99, 63\.36 GiB\)\. Decrease GPU memory "
        r"utilization or reduce GPU memory used by other processes\.",
        err.strip(),
    ), err
    assert not marker.exists()
