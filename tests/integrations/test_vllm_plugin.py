"""The vLLM plugin's logic without vLLM: a stand-in for vLLM's worker wrapper and worker.

Each case runs in a fresh process (the plugin pins the process it runs in). The stand-in
has what the plugin relies on in vLLM 0.32 (vllm/v1/worker/worker_base.py): a wrapper
class whose `worker` attribute is the worker, the worker's `local_rank` and `device`, and
`compile_or_warm_up_model` reached through the wrapper. The real engine is tested in
tests/e2e/test_plugin_e2e.py.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

CHILD = r"""
import json, logging, os, sys
from types import SimpleNamespace

args = json.loads(sys.argv[1])
fmt = logging.Formatter("%(name)s|%(levelname)s|%(message)s")
if args.get("vllm_logging"):  # as vLLM configures it: a handler on "vllm" only
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(fmt)
    vllm_logger = logging.getLogger("vllm")
    vllm_logger.addHandler(handler)
    vllm_logger.setLevel(logging.INFO)
    vllm_logger.propagate = False
else:
    logging.basicConfig(level=logging.INFO, format="%(name)s|%(levelname)s|%(message)s",
                        stream=sys.stderr)
from accelhost.integrations import vllm_plugin

seen = {}

class Worker:
    def __init__(self, local_rank, device_type):
        self.local_rank = local_rank
        self.device = SimpleNamespace(type=device_type)

    def compile_or_warm_up_model(self):
        seen["cpus_during_warm_up"] = sorted(os.sched_getaffinity(0))
        try:
            from vllm_ascend.ascend_config import get_ascend_config
            seen["ascend_binding_during_warm_up"] = get_ascend_config().enable_cpu_binding
        except ImportError:
            pass
        return "compiled"

class Wrapper:  # vLLM's WorkerWrapperBase forwards unknown attributes to its worker
    def __init__(self, worker):
        self.worker = worker
    def __getattr__(self, name):
        return getattr(self.worker, name)

import threading, time
for _ in range(args.get("threads", 0)):  # a runtime's threads, as a warmed-up worker has
    threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
uvb = []  # a thread named as the Ascend 950 host's UVB poll threads
def uvb_thread(ready):
    uvb.append(threading.get_native_id())
    with open(f"/proc/self/task/{uvb[0]}/comm", "w") as fh:
        fh.write("uvb_poll_window_thread")
    ready.set()
    time.sleep(60)
if args.get("uvb"):
    named = threading.Event()
    threading.Thread(target=uvb_thread, args=(named,), daemon=True).start()
    named.wait()
first = vllm_plugin.install(Wrapper, args["plan"])
second = vllm_plugin.install(Wrapper, args["plan"])
result = Wrapper(Worker(args["rank"], args["backend"])).compile_or_warm_up_model()
others = [int(t) for t in os.listdir("/proc/self/task") if int(t) not in uvb]
cpus = sorted({c for t in others for c in os.sched_getaffinity(t)})
if uvb:
    seen["uvb_cpus"] = sorted(os.sched_getaffinity(uvb[0]))
print(json.dumps({"installed": [first, second], "result": result, "cpus": cpus, **seen}))
"""

VISIBLE = ("ASCEND_RT_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES")


def run(
    plan: str, rank: int, backend: str, env: dict[str, str] | None = None, **more: object
) -> tuple[dict, str]:
    clean = {k: v for k, v in os.environ.items() if k not in VISIBLE}
    spec = {"plan": plan, "rank": rank, "backend": backend, **more}
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(spec)],
        env={**clean, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout), proc.stderr


def plugin_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("vllm.accelhost|")]


@pytest.fixture
def plan(tmp_path: Path) -> str:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({"devices": {"0": {"main": [0]}, "1": {"main": [1]}}}))
    return str(path)


def test_cpu_backend_binds_after_warm_up_to_the_rank_s_device(plan: str) -> None:
    before = sorted(os.sched_getaffinity(0))
    out, err = run(plan, 1, "cpu")
    assert out["installed"] == [True, False]
    assert out["result"] == "compiled"  # the warm-up's own result is passed through
    assert out["cpus_during_warm_up"] == before  # not bound yet while warming up
    assert out["cpus"] == [1]  # every thread on device 1's CPU afterwards
    lines = plugin_lines(err)
    assert len(lines) == 1, err
    assert "INFO" in lines[0] and "bound worker" in lines[0] and "to device 1" in lines[0]
    assert "local rank 1 is the device id" in lines[0]


def test_gpu_backend_takes_the_device_from_the_visible_list(tmp_path: Path) -> None:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({"devices": {"4": {"main": [0]}, "5": {"main": [1]}}}))
    out, err = run(str(path), 1, "cuda", {"CUDA_VISIBLE_DEVICES": "4,5"})
    assert out["cpus"] == [1]
    (line,) = plugin_lines(err)
    assert "to device 5" in line and "cuda backend, local rank 1" in line


def test_a_failed_bind_never_stops_the_engine(tmp_path: Path) -> None:
    before = sorted(os.sched_getaffinity(0))
    out, err = run(str(tmp_path / "missing.json"), 0, "cpu")
    assert out["result"] == "compiled" and out["cpus"] == before
    (line,) = plugin_lines(err)
    assert "not bound" in line and "cannot read plan file" in line


def test_unknown_device_is_logged_not_raised(plan: str) -> None:
    out, err = run(plan, 7, "cpu")
    assert out["result"] == "compiled"
    (line,) = plugin_lines(err)
    assert "not bound" in line and "device 7 is not in the plan" in line


def test_vllm_ascend_own_binding_is_turned_off_before_warm_up(tmp_path: Path, plan: str) -> None:
    # A stand-in vllm_ascend package with the attribute vllm-ascend 0.23 reads
    # (ascend_config.get_ascend_config().enable_cpu_binding, True by default).
    pkg = tmp_path / "site" / "vllm_ascend"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "ascend_config.py").write_text(
        "class _C:\n    enable_cpu_binding = True\n_c = _C()\n"
        "def get_ascend_config():\n    return _c\n"
    )
    env = {
        "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), os.environ.get("PYTHONPATH", "")])
    }
    out, err = run(plan, 0, "npu", {**env, "ASCEND_RT_VISIBLE_DEVICES": "0,1"})
    assert out["ascend_binding_during_warm_up"] is False
    assert out["cpus"] == [0]
    lines = plugin_lines(err)
    assert any("enable_cpu_binding) turned off" in line for line in lines)
    assert sum("bound worker" in line for line in lines) == 1


def test_register_does_nothing_without_a_plan() -> None:
    clean = {k: v for k, v in os.environ.items() if k != "ACCELHOST_PLAN"}
    code = (
        "import sys; from accelhost.integrations import vllm_plugin; vllm_plugin.register(); "
        "print(any(m == 'vllm' or m.startswith('vllm.') for m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=clean, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "False" and out.stderr == ""


def test_the_applier_s_warnings_go_through_vllm_s_logger(plan: str) -> None:
    # vLLM configures only its own logger: the applier's warnings (here: OMP_PROC_BIND in
    # the worker's environment) would otherwise go to Python's bare last-resort output.
    out, err = run(plan, 0, "cpu", {"OMP_PROC_BIND": "TRUE"}, vllm_logging=True)
    assert out["cpus"] == [0]
    warned = [line for line in err.splitlines() if line.startswith("accelhost.apply|WARNING|")]
    assert len(warned) == 1 and "OMP_PROC_BIND=TRUE" in warned[0], err
    assert len(plugin_lines(err)) == 1
    assert not any(line.startswith("process ") for line in err.splitlines())  # no bare line


def test_a_plan_naming_cpus_this_host_lacks_is_not_bound_and_says_why(tmp_path: Path) -> None:
    # Found on the real engine: every thread step fails (the kernel refuses CPUs the host
    # lacks), and the one line must say "not bound" and why, not "bound worker".
    possible = Path("/sys/devices/system/cpu/possible").read_text().strip()
    absent = max(int(part.split("-")[-1]) for part in possible.split(",")) + 1
    path = tmp_path / "plan.json"
    path.write_text(json.dumps({"devices": {"0": {"main": [absent]}}}))
    before = sorted(os.sched_getaffinity(0))
    out, err = run(str(path), 0, "cpu", vllm_logging=True, threads=5)
    assert out["result"] == "compiled" and out["cpus"] == before
    (line,) = plugin_lines(err)
    assert "|WARNING|" in line and "not bound to device 0" in line, line
    assert f"CPUs {absent}: none of these CPUs is allowed" in line, line
    assert "bound worker" not in line
    # One step per thread failed (6); vLLM's log gets the first and the count, not six.
    failed = [ln for ln in err.splitlines() if "|WARNING|step failed" in ln]
    assert len(failed) == 1, err
    assert "6 of 7 binding steps failed" in err, err


def test_a_skipped_950_worker_still_pins_the_uvb_threads(tmp_path: Path) -> None:
    # `plan --json` of a 950 whose worker plan was skipped (no CPU Affinity column), for
    # this machine's CPUs. No device_type: the ARM policy is tested apart (test_plan_edges).
    path = tmp_path / "plan.json"
    reason = "NPU topo affinity not found. action: skip worker CPU binding."
    plan = {
        "visible": [0],
        "devices": {},
        "worker_skipped": reason,
        "host_threads": {"pattern": "uvb_poll_window_thread", "cpus": [1]},
    }
    path.write_text(json.dumps(plan))
    before = sorted(os.sched_getaffinity(0))
    out, err = run(str(path), 0, "npu", vllm_logging=True, uvb=True)
    assert out["result"] == "compiled"
    assert out["uvb_cpus"] == [1]  # as vllm-ascend pins them, worker plan or not
    assert out["cpus"] == before  # the worker itself is left as it was
    (line,) = plugin_lines(err)
    assert "|WARNING|" in line and "not bound to device 0" in line, line
    assert f"worker CPU binding skipped: {reason}" in line, line
    assert re.search(r"; [1-9][0-9]* of [1-9][0-9]* host threads pinned to CPUs 1$", line), line
