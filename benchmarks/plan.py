"""Time to parse and plan an already loaded snapshot, and the CLI's cold start.

    .venv/bin/python benchmarks/plan.py [--repeat N] [--json] [--reference CPU_BINDING_PY]

Parse + plan is measured in-process on the bundled A3 (640 CPUs, 16 NPUs) and 950 (384
CPUs) hosts: the snapshot is loaded once, then `read_topology` + `plan_ascend` run N times
(best and median per run reported). With `--reference`, vllm-ascend's own
`vllm_ascend/cpu_binding.py` (a copy you provide: it is not shipped here) parses the same
recorded A3 outputs and plans in the same run, in turns with accelhost, and the ratio
accelhost / reference is reported (best and median). Cold start is measured against
`python3 -c pass` in the same run, as the extra milliseconds `import accelhost` and
`accelhost plan` cost, and the modules the worker-side import pulls in are listed.
"""

from __future__ import annotations

import argparse
import enum
import gc
import importlib.util
import json
import logging
import re
import statistics
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

from accelhost.host.snapshot import load_snapshot
from accelhost.planner.ascend import plan_ascend
from accelhost.readers.topology import read_topology

AIMS_MS = {"a3-640cpu-16npu": 0.4, "950-384cpu-8npu-sees-0123": 1.4}


def time_plan(name: str, repeat: int) -> dict[str, float]:
    host = load_snapshot(f"example:{name}")
    for _ in range(20):  # warm caches and the regex compiler
        plan_ascend(read_topology(host))
    samples = []
    gc.disable()  # as timeit does: the collector's pauses are not the planner's work
    try:
        for _ in range(repeat):
            t0 = time.perf_counter()
            plan_ascend(read_topology(host))
            samples.append((time.perf_counter() - t0) * 1000)
    finally:
        gc.enable()
    return {"best_ms": min(samples), "median_ms": statistics.median(samples)}


def load_reference(path: str, name: str) -> tuple[Callable[[], Any], Callable[[], None]]:
    """vllm-ascend's cpu_binding.py, loaded from `path` to parse and plan the recorded host
    `name`: (its parse + plan as one call, cleanup). Its commands answer from the snapshot,
    its /proc/self/status is a file holding the recorded one; vLLM's logger, the device type
    and the modules it imports but does not use while planning are stand-ins."""
    snap = json.loads(
        (Path(__file__).parent.parent / f"src/accelhost/data/examples/{name}.json").read_text()
    )
    device_type = enum.Enum("AscendDeviceType", "A2 A3 _310P A5")
    utils = types.ModuleType("vllm_ascend.utils")
    utils.AscendDeviceType = device_type  # type: ignore[attr-defined]
    utils.get_ascend_device_type = lambda: device_type[snap["device_type"]]  # type: ignore[attr-defined]
    quiet = logging.getLogger("cpu_binding_reference")
    quiet.addHandler(logging.NullHandler())
    quiet.propagate = False
    quiet.setLevel(logging.WARNING)
    log = types.ModuleType("vllm.logger")
    log.logger = quiet  # type: ignore[attr-defined]
    stand_ins = {
        "vllm": types.ModuleType("vllm"),
        "vllm.logger": log,
        "vllm_ascend": types.ModuleType("vllm_ascend"),
        "vllm_ascend.utils": utils,
    }
    for optional, real in (("psutil", types.ModuleType("psutil")), ("regex", re)):
        if importlib.util.find_spec(optional) is None:
            stand_ins[optional] = real  # type: ignore[assignment]
    saved = {k: sys.modules.get(k) for k in stand_ins}
    sys.modules.update(stand_ins)
    try:
        spec = importlib.util.spec_from_file_location("cpu_binding_reference", path)
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v
    outputs = snap["commands"]
    mod.execute_command = lambda cmd: (outputs[" ".join(cmd)], 0)
    with tempfile.NamedTemporaryFile("w", suffix="-status", delete=False) as status:
        status.write(snap["files"]["/proc/self/status"])
    mod.ALLOWED_CPUS_PATH = status.name
    mod.ASCEND_RT_VISIBLE_DEVICES = dict(snap["env"]).get("ASCEND_RT_VISIBLE_DEVICES")

    def parse_and_plan() -> Any:
        alloc = mod.CpuAlloc(0)
        alloc.build_cpu_pools()
        alloc.allocate()
        return alloc

    return parse_and_plan, lambda: Path(status.name).unlink()


def time_against_reference(path: str, name: str, repeat: int) -> dict[str, float]:
    """accelhost and the reference in turns on the same recorded host; both plans checked
    equal first, so that the two do the same job."""
    reference, cleanup = load_reference(path, name)
    try:
        host = load_snapshot(f"example:{name}")
        ours = plan_ascend(read_topology(host))
        theirs = reference()
        for dev in ours.devices:
            got = (
                theirs.assign_main[dev.device],
                theirs.assign_acl[dev.device],
                theirs.assign_rel[dev.device],
            )
            assert got == (list(dev.main), list(dev.acl), list(dev.release)), dev.device
        contenders = {"accelhost": lambda: plan_ascend(read_topology(host)), "reference": reference}
        samples: dict[str, list[float]] = {k: [] for k in contenders}
        for _ in range(20):
            for fn in contenders.values():
                fn()
        gc.disable()
        try:
            for _ in range(repeat):
                for key, fn in contenders.items():
                    t0 = time.perf_counter()
                    fn()
                    samples[key].append((time.perf_counter() - t0) * 1000)
        finally:
            gc.enable()
    finally:
        cleanup()
    ours_s, ref_s = samples["accelhost"], samples["reference"]
    return {
        "accelhost_best_ms": min(ours_s),
        "accelhost_median_ms": statistics.median(ours_s),
        "reference_best_ms": min(ref_s),
        "reference_median_ms": statistics.median(ref_s),
        "ratio_best": min(ours_s) / min(ref_s),
        "ratio_median": statistics.median(ours_s) / statistics.median(ref_s),
    }


def time_command(argv: list[str], repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        samples.append((time.perf_counter() - t0) * 1000)
    return statistics.median(samples)


def worker_import_modules() -> list[str]:
    code = (
        "import sys; before = set(sys.modules); import accelhost; "
        "accelhost.bind_current_process; "
        "print('\\n'.join(sorted(m for m in set(sys.modules) - before "
        "if m.split('.')[0] in ('accelhost', 'argparse', 'rich', 'prometheus_client', "
        "'psutil', 'click', 'typer'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return out.stdout.split()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=2000, help="plan runs per host")
    parser.add_argument("--starts", type=int, default=15, help="process starts per command")
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--reference",
        metavar="CPU_BINDING_PY",
        help="vllm-ascend's vllm_ascend/cpu_binding.py: time it on the A3 host in turns "
        "with accelhost (it imports `regex`: installed, it is used, else `re` stands in)",
    )
    args = parser.parse_args()

    results: dict[str, object] = {}
    for name, aim in AIMS_MS.items():
        res = time_plan(name, args.repeat)
        results[name] = {**res, "aim_ms": aim, "meets_aim": res["median_ms"] < aim}
    if args.reference:
        results["vs_reference_a3"] = {
            **time_against_reference(args.reference, "a3-640cpu-16npu", args.repeat),
            "regex": "regex" if importlib.util.find_spec("regex") else "re (stand-in)",
            "aim_ratio": 0.5,
        }
    py = sys.executable
    base = time_command([py, "-c", "pass"], args.starts)
    imp = time_command([py, "-c", "import accelhost"], args.starts)
    worker = time_command(
        [py, "-c", "import accelhost; accelhost.bind_current_process"], args.starts
    )
    cli = time_command(
        [py, "-m", "accelhost.cli.main", "plan", "--snapshot", "example:a3-640cpu-16npu", "--json"],
        args.starts,
    )
    results["cold_start"] = {
        "python_pass_ms": base,
        "import_accelhost_extra_ms": imp - base,
        "worker_import_extra_ms": worker - base,
        "cli_plan_a3_extra_ms": cli - base,
        "aim_import_extra_ms": 50.0,
    }
    results["worker_import_pulls_in"] = worker_import_modules()
    if args.json:
        json.dump(results, sys.stdout, indent=2)
        print()
        return 0
    print(f"{'host':<28} {'best ms':>8} {'median ms':>10} {'aim ms':>7}  meets aim")
    for name in AIMS_MS:
        r = results[name]
        assert isinstance(r, dict)
        print(
            f"{name:<28} {r['best_ms']:>8.3f} {r['median_ms']:>10.3f} {r['aim_ms']:>7.1f}  "
            f"{'yes' if r['meets_aim'] else 'no'}"
        )
    ref = results.get("vs_reference_a3")
    if isinstance(ref, dict):
        print(
            f"vllm-ascend cpu_binding.py on A3: {ref['reference_best_ms']:.3f} ms best, "
            f"{ref['reference_median_ms']:.3f} ms median ({ref['regex']}); accelhost / "
            f"reference {ref['ratio_best']:.2f}x best, {ref['ratio_median']:.2f}x median "
            "(aim <= 0.5)"
        )
    cs = results["cold_start"]
    assert isinstance(cs, dict)
    print()
    print(f"python3 -c pass                  {cs['python_pass_ms']:7.1f} ms")
    print(f"import accelhost                 +{cs['import_accelhost_extra_ms']:6.1f} ms (aim < 50)")
    print(f"worker-side import               +{cs['worker_import_extra_ms']:6.1f} ms")
    print(f"accelhost plan --snapshot A3     +{cs['cli_plan_a3_extra_ms']:6.1f} ms")
    print("worker-side import pulls in: " + ", ".join(results["worker_import_pulls_in"]))  # type: ignore[arg-type]
    return 0


if __name__ == "__main__":
    sys.exit(main())
