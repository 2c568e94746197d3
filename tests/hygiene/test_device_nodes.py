"""One device-node grammar (`parsers.devnodes`) for `doctor`, `bind --pid` and `run --bind`:
each finds the same processes holding an accelerator, on a recorded host and for real."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hygiene_fakes import FakeHost

from accelhost.apply.identity import held_nodes
from accelhost.hygiene import HygieneOptions, read_facts, run_checks
from accelhost.readers.procs import read_process
from accelhost.supervisor.integrations import holders_of_device

# Every node `devnodes` defines (the truth): nodes of one device, with the id bind and run
# --bind take from them (a render node's number is no id: its PCI address is), the drivers'
# control nodes (held by the doctor's device holders, naming no device), and names near
# them that are no device node.
ONE_DEVICE = {
    "/dev/nvidia0": 0,
    "/dev/nvidia7": 7,
    "/dev/davinci0": 0,
    "/dev/davinci15": 15,
    "/dev/accel/accel0": 0,
    "/dev/dri/renderD128": None,
}
CONTROL = [
    "/dev/nvidiactl",
    "/dev/nvidia-uvm",
    "/dev/nvidia-uvm-tools",
    "/dev/nvidia-modeset",
    "/dev/davinci_manager",
    "/dev/devmm_svm",
    "/dev/hisi_hdc",
    "/dev/kfd",
]
NOT_DEVICE_NODES = [
    "/dev/null",
    "/dev/davinci",
    "/dev/davinci_x",
    "/dev/nvidia",
    "/dev/nvidia-nope",
    "/dev/nvidia-caps/nvidia-cap1",
    "/dev/accel/accel",
    "/dev/accelaccel0",
    "/dev/dri/card0",
    "/dev/dri/renderD",
    "/dev/shm/psm_1",
    "/tmp/davinci0",
]
PID = 4000


def _holder_host(path: str) -> FakeHost:
    fake = FakeHost()
    fake.proc(PID, "python3 serve.py", ppid=1, pgid=PID, fds={3: path, 4: "/dev/null"})
    return fake


def _doctor_holds(fake: FakeHost) -> bool:
    opts = HygieneOptions()
    report = run_checks(read_facts(fake.host(), opts), opts, ("device_holders",))
    return PID in [e["pid"] for e in report.checks[0].evidence]


@pytest.mark.parametrize("path", [*ONE_DEVICE, *CONTROL, *NOT_DEVICE_NODES])
def test_doctor_bind_and_run_read_one_grammar(path: str) -> None:
    """The doctor's holders hold a device node; bind --pid and run --bind, which need the
    device, find the same nodes of one device and no control node (it names none)."""
    fake = _holder_host(path)
    host = fake.host()
    info = read_process(host, PID)
    assert info is not None
    doctor = _doctor_holds(fake)
    bind = [(n.path, n.number) for n in held_nodes(PID, host=host)]
    run = holders_of_device(host, {PID: info}, 0) == [PID]
    assert doctor == (path in ONE_DEVICE or path in CONTROL)
    assert bind == ([(path, ONE_DEVICE[path])] if path in ONE_DEVICE else [])
    assert run == (path in ONE_DEVICE)


# Inside a private mount namespace, /dev is a fresh tmpfs with /dev/accel/accel0 (made with
# /dev/null's numbers); a real process holds it, then the real commands look.
NAMESPACE = r"""
set -e
mount --make-rprivate /
mount -t tmpfs accelhost-test /dev
mknod -m 666 /dev/null c 1 3
mkdir /dev/accel /dev/shm
mknod -m 600 /dev/accel/accel0 c 1 3
sleep 300 < /dev/accel/accel0 &
holder=$!
trap 'kill $holder' EXIT
echo "$holder"
"$PY" -m accelhost.cli.main doctor --json --check device_holders || true
echo
"$PY" -m accelhost.cli.main bind --plan "$PLAN" --pid "$holder" --dry-run --json --no-irq
"""


def test_a_real_holder_of_dev_accel_accel0_is_seen_by_doctor_and_bind(tmp_path: Path) -> None:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare(1) for a private /dev")
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"devices": {"0": {"main": [0]}, "1": {"main": [0]}}}))
    env = {**os.environ, "PY": sys.executable, "PLAN": str(plan)}
    res = subprocess.run(
        ["unshare", "--mount", "sh", "-c", NAMESPACE],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    if res.returncode != 0 and "unshare failed" in res.stderr:
        pytest.skip(f"no mount namespace here: {res.stderr.strip()}")
    assert res.returncode == 0, res.stderr
    first, rest = res.stdout.split("\n", 1)
    holder = int(first)
    doctor, end = json.JSONDecoder().raw_decode(rest.lstrip())
    (check,) = doctor["checks"]
    held = {e["pid"]: e.get("devices") for e in check["evidence"]}
    assert held.get(holder) == ["/dev/accel/accel0"], check
    bind = json.loads(rest.lstrip()[end:])
    assert bind["device_found"]["device"] == 0
    assert "/dev/accel/accel0" in bind["device_found"]["how"]
