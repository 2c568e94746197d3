"""accelhost.bind_current_process inside a real worker process (a child, not pytest)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

WORKER = textwrap.dedent(
    r"""
    import json, logging, os, sys, threading
    logging.basicConfig(level=logging.INFO, format="%(name)s %(levelname)s %(message)s",
                        stream=sys.stderr)
    import accelhost
    stop = threading.Event()
    def acl():
        with open(f"/proc/self/task/{threading.get_native_id()}/comm", "w") as fh:
            fh.write("acl_thread")
        stop.wait()
    t = threading.Thread(target=acl, daemon=True)
    t.start()
    while not any(
        open(f"/proc/self/task/{x}/comm").read().strip() == "acl_thread"
        for x in os.listdir("/proc/self/task")
    ):
        pass
    plan, kwargs = json.loads(sys.argv[1]), json.loads(sys.argv[2])
    try:
        report = accelhost.bind_current_process(plan, **kwargs)
        out = {"ok": report.ok, "skipped": report.skipped, "steps": len(report.results)}
    except accelhost.AccelhostError as exc:
        out = {"raised": type(exc).__name__, "message": str(exc)}
    out["cpus"] = {
        open(f"/proc/self/task/{x}/comm").read().strip():
            sorted(os.sched_getaffinity(int(x)))
        for x in os.listdir("/proc/self/task")
    }
    stop.set()
    print(json.dumps(out))
    """
)


def run_worker(plan: dict, **kwargs: object) -> tuple[dict, str]:
    res = subprocess.run(
        [sys.executable, "-c", WORKER, json.dumps(plan), json.dumps(kwargs)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout), res.stderr


GENERIC = {"devices": {"0": {"main": [0], "acl": [1], "release": [1]}}}
ASCEND = {"device_type": "A3", **GENERIC}


def test_worker_binds_itself():
    out, log = run_worker(GENERIC, device=0)
    assert out["ok"] and out["cpus"] == {"python": [0], "acl_thread": [1]}
    assert "accelhost.apply INFO bound process" in log


def test_ascend_plans_bind_only_on_arm_unless_any_arch():
    import platform

    if platform.machine() in ("aarch64", "arm64"):
        pytest.skip("this host is ARM")
    out, log = run_worker(ASCEND, device=0)
    assert out["skipped"] == "CPU binding skipped: non-ARM CPU detected."
    assert out["cpus"] == {"python": [0, 1], "acl_thread": [0, 1]}
    assert "CPU binding skipped: non-ARM CPU detected." in log
    out, _ = run_worker(ASCEND, device=0, any_arch=True)
    assert out["ok"] and out["cpus"] == {"python": [0], "acl_thread": [1]}


def test_dry_run_in_the_worker_changes_nothing():
    out, _ = run_worker(GENERIC, device=0, dry_run=True)
    assert out["steps"] == 3 and out["cpus"] == {"python": [0, 1], "acl_thread": [0, 1]}


def test_never_raises_unless_strict():
    out, log = run_worker(GENERIC, device=7)
    assert out["skipped"].startswith("device 7 is not in the plan")
    assert out["ok"] is False  # skipped is not ok
    assert "CPU binding skipped: device 7" in log
    out, _ = run_worker(GENERIC, device=7, strict=True)
    assert out["raised"] == "PlanError"
    bad = {"devices": {"0": {"main": [0], "acl": [4095]}}}
    out, log = run_worker(bad, device=0)
    assert out["ok"] is False and "step failed" in log
    out, _ = run_worker(bad, device=0, strict=True)
    assert out["raised"] == "ApplyError" and "acl_thread" in out["message"]


def test_a_bind_that_did_nothing_is_not_ok(tmp_path):
    """A missing plan file or a device not in the plan: skipped, not ok, never raised."""
    missing = str(tmp_path / "no-such-plan.json")
    code = (
        "import json, sys, accelhost\n"
        "for plan, device in ((sys.argv[1], 0), (json.loads(sys.argv[2]), 7)):\n"
        "    r = accelhost.bind_current_process(plan, device)\n"
        "    print(json.dumps([r.ok, r.exit_status, r.skipped]))\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code, missing, json.dumps(GENERIC)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    (ok1, status1, why1), (ok2, status2, why2) = map(json.loads, res.stdout.splitlines())
    assert (ok1, status1) == (False, 1) and why1.startswith(f"cannot read plan file {missing}")
    assert (ok2, status2) == (False, 1) and why2.startswith("device 7 is not in the plan")


def test_worker_import_pulls_in_only_what_it_needs():
    """Importing the worker entry point loads the plan types and errors, nothing else of
    accelhost; the first call loads the applier (the one bind driver), never the CLI."""
    code = (
        "import sys, json, accelhost.apply.worker, accelhost; accelhost.bind_current_process\n"
        "mods = lambda: sorted(m for m in sys.modules if m.startswith('accelhost'))\n"
        "heavy = ('argparse', 'accelhost.cli', 'prometheus_client', 'subprocess', 'ctypes')\n"
        "at_import = mods()\n"
        "bad = [m for m in sys.modules if m.startswith(heavy)]\n"
        "plan = {'devices': {'0': {'main': sorted(__import__('os').sched_getaffinity(0))}}}\n"
        "accelhost.bind_current_process(plan, 0, dry_run=True, irq=False)\n"
        "after = [m for m in mods() if m.startswith(('accelhost.cli', 'accelhost.hygiene'))]\n"
        "print(json.dumps({'import': at_import, 'bad': bad, 'after_call': after}))"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["import"] == [
        "accelhost",
        "accelhost.apply",
        "accelhost.apply.worker",
        "accelhost.errors",
        "accelhost.formats",
        "accelhost.plans",
    ]
    assert out["bad"] == [] and out["after_call"] == []


def test_thread_roles_take_the_same_grammar_in_the_worker():
    out, _ = run_worker(GENERIC, device=0, thread_roles=["busy=^acl@0"])
    assert out["ok"] and out["cpus"] == {"python": [0], "acl_thread": [0]}
    out, log = run_worker(GENERIC, device=0, thread_roles=["busy=acl:0"])
    assert out["skipped"].startswith("--thread-role 'busy=acl:0'") and "COUNT '0'" in log
