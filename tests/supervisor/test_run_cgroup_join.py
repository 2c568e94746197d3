"""`run --cgroup` whose cgroup was made but cannot be joined: `run` could not do it, so
exit 1 and one line (docs/run.md), not 126 ("CMD exists but cannot be executed"), and the
cgroup it made is gone. Failed on the code before the fix (exit 126)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from run_support import PY

from accelhost.supervisor.spawn import CgroupError, create_cgroup

# The kernel refusing the join (EBUSY, as a cgroup v2 domain with controllers enabled
# answers), in the child between fork and exec; the cgroup's path is recorded for the test.
_REFUSE_JOIN = """
import errno, os, sys
import accelhost.supervisor.spawn as spawn

def refuse(cgroup, pid):
    with open(os.environ["CGROUP_MADE"], "w") as fh:
        fh.write(cgroup.path)
    raise OSError(errno.EBUSY, os.strerror(errno.EBUSY))

spawn.join_cgroup = refuse
from accelhost.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("version", ["1", "2"])
def test_a_cgroup_that_cannot_be_joined_exits_1_and_is_removed(tmp_path: Path, version: str):
    try:
        create_cgroup(version, f"accelhost-probe-{os.getpid()}").remove()
    except CgroupError:
        pytest.skip(f"no writable cgroup v{version} here")
    made, marker = tmp_path / "made", tmp_path / "started"
    argv = [PY, "-c", _REFUSE_JOIN, "run", "--cgroup", "--cgroup-version", version, "--"]
    try:
        proc = subprocess.run(
            [*argv, "touch", str(marker)],
            env={**os.environ, "CGROUP_MADE": str(made)},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        path = made.read_text()
        assert proc.returncode == 1, proc.stderr
        ours = [ln for ln in proc.stderr.splitlines() if ln.startswith("accelhost: ")]
        assert ours == ["accelhost: --cgroup: cannot join the cgroup: Device or resource busy"]
        assert "accelhost-run-" in path and not os.path.exists(path)
        assert not marker.exists()
    finally:
        if made.exists() and os.path.isdir(made.read_text()):
            os.rmdir(made.read_text())  # only the one this test's run made


def test_a_command_that_cannot_be_executed_is_still_126(tmp_path: Path) -> None:
    script = tmp_path / "not-executable"
    script.write_text("#!/bin/sh\n")
    proc = subprocess.run(
        [PY, "-m", "accelhost.cli.main", "run", "-q", "--", str(script)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 126, proc.stderr
