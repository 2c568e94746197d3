"""`accelhost run` with real process trees: statuses, signals, teardown, reaping."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from run_support import (
    helper,
    janitor,
    ours_alive,
    recorded_pids,
    run_cmd,
    state,
    wait_for,
)

# Generous bound for "it did not hang": the grace plus a wide margin for a loaded 2-core box.
MARGIN_S = 15.0


def finish(proc: subprocess.Popen[bytes], timeout: float) -> tuple[int, str]:
    _, err = proc.communicate(timeout=timeout)
    return proc.returncode, err.decode()


def test_exit_status_passes_through(tmp_path: Path) -> None:
    with janitor(tmp_path) as j:
        proc = j.start(run_cmd("--grace", "1", "--", "sh", "-c", "exit 7"))
        code, err = finish(proc, MARGIN_S)
    assert code == 7
    assert "Traceback" not in err


def test_death_by_signal_is_128_plus_n(tmp_path: Path) -> None:
    with janitor(tmp_path) as j:
        proc = j.start(run_cmd("--grace", "1", "--", "sh", "-c", "kill -KILL $$"))
        code, _ = finish(proc, MARGIN_S)
    assert code == 128 + signal.SIGKILL


def test_command_not_found_is_127_with_one_line(tmp_path: Path) -> None:
    with janitor(tmp_path) as j:
        proc = j.start(run_cmd("--", "accelhost-no-such-command-xyz", "--flag"))
        code, err = finish(proc, MARGIN_S)
    assert code == 127
    assert err.strip().splitlines() == [
        "accelhost run: accelhost-no-such-command-xyz: command not found"
    ]


def test_not_executable_is_126(tmp_path: Path) -> None:
    script = tmp_path / "not-executable"
    script.write_text("#!/bin/sh\nexit 0\n")
    with janitor(tmp_path) as j:
        proc = j.start(run_cmd("--", str(script)))
        code, err = finish(proc, MARGIN_S)
    assert code == 126
    assert "cannot execute" in err and "Traceback" not in err


def test_arguments_after_double_dash_reach_the_command(tmp_path: Path) -> None:
    with janitor(tmp_path) as j:
        proc = j.start(
            run_cmd("-q", "--", "python3", "-c", "import sys; print(sys.argv[1:])", "--grace", "x")
        )
        out, err = proc.communicate(timeout=MARGIN_S)
    assert proc.returncode == 0, err
    assert out.decode().strip() == "['--grace', 'x']"


def test_sigterm_ends_child_grandchild_and_setsid_escapee_within_grace(tmp_path: Path) -> None:
    grace = 1.0
    with janitor(tmp_path) as j:
        proc = j.start(run_cmd("--grace", str(grace), "--", *helper("tree", tmp_path)))
        # the command, its child, the double-forked grandchild, the setsid one
        wait_for(lambda: len(recorded_pids(tmp_path)) == 4, what="the tree to start")
        pids = recorded_pids(tmp_path)
        assert all(ours_alive(p, str(tmp_path)) for p in pids)
        started = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code, err = finish(proc, grace + MARGIN_S)
        elapsed = time.monotonic() - started
        left = [p for p in pids if ours_alive(p, str(tmp_path))]
    assert left == []
    assert code == 128 + signal.SIGTERM
    assert elapsed < grace + MARGIN_S
    assert "Traceback" not in err


def test_sigterm_ignorers_are_killed_after_the_grace(tmp_path: Path) -> None:
    grace = 1.0
    with janitor(tmp_path) as j:
        proc = j.start(
            run_cmd("--grace", str(grace), "--", *helper("tree", tmp_path, "--ignore-term"))
        )
        wait_for(lambda: len(recorded_pids(tmp_path)) == 4, what="the tree to start")
        pids = recorded_pids(tmp_path)
        proc.send_signal(signal.SIGTERM)
        code, err = finish(proc, grace + MARGIN_S)
        left = [p for p in pids if ours_alive(p, str(tmp_path))]
    assert left == []
    # the command itself died of the forwarded SIGTERM; its children needed SIGKILL
    assert code == 128 + signal.SIGTERM
    assert "sent SIGKILL to 3 process(es)" in err


def test_leftovers_of_a_clean_exit_are_killed_and_status_stays_0(tmp_path: Path) -> None:
    with janitor(tmp_path) as j:
        proc = j.start(
            run_cmd("--grace", "0.5", "--", *helper("tree", tmp_path, "--ignore-term", "--exit-0"))
        )
        code, err = finish(proc, MARGIN_S)
        pids = recorded_pids(tmp_path)
        left = [p for p in pids if ours_alive(p, str(tmp_path))]
    assert code == 0, err
    assert len(pids) == 4
    assert left == []


def test_no_zombies_stay_under_the_supervisor(tmp_path: Path) -> None:
    with janitor(tmp_path) as j:
        proc = j.start(run_cmd("--grace", "1", "--", *helper("zombies", tmp_path)))
        wait_for(lambda: len(recorded_pids(tmp_path)) == 1, what="the orphans to be made")
        time.sleep(0.5)
        children = []
        for name in os.listdir("/proc"):
            if name.isdigit():
                try:
                    text = Path(f"/proc/{name}/stat").read_text()
                except OSError:
                    continue
                if int(text[text.rfind(")") + 2 :].split()[1]) == proc.pid:
                    children.append(int(name))
        zombies = [p for p in children if state(p) == "Z"]
        assert zombies == []
        proc.send_signal(signal.SIGTERM)
        code, _ = finish(proc, MARGIN_S)
    assert code == 128 + signal.SIGTERM


def test_forwarded_signals_reach_the_command(tmp_path: Path) -> None:
    with janitor(tmp_path) as j:
        proc = j.start(run_cmd("--grace", "1", "--", *helper("signals", tmp_path)))
        wait_for(lambda: len(recorded_pids(tmp_path)) == 1, what="the command to start")
        log = tmp_path / "signals"
        for n, sig in enumerate((signal.SIGUSR1, signal.SIGUSR2, signal.SIGHUP), start=1):
            proc.send_signal(sig)
            wait_for(
                lambda n=n: log.exists() and len(log.read_text().split()) == n,
                what=f"{sig.name} to arrive",
            )
        assert proc.poll() is None  # those are only passed on, not a reason to stop
        proc.send_signal(signal.SIGINT)  # the command exits 5 on SIGINT
        code, _ = finish(proc, MARGIN_S)
    assert log.read_text().split() == ["SIGUSR1", "SIGUSR2", "SIGHUP", "SIGINT"]
    assert code == 5
