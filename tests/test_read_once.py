"""`plan`, `topo` and `snapshot` read each fact of a host once, whatever its family.

Two ways of counting: `CountingHost` counts every command, file, directory, stat and variable
asked of a recorded host; `fake_tools` puts real executables on PATH that log each call,
so a live `accelhost plan` / `topo` is counted where it really runs its commands.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import accelhost
from accelhost.cli import plan as cli_plan
from accelhost.cli import topo as cli_topo
from accelhost.cli.main import main
from accelhost.cli.snapshot import record_snapshot
from accelhost.errors import AccelhostError
from accelhost.host.base import Host
from accelhost.host.once import ReadOnce, read_once
from accelhost.host.snapshot import SnapshotHost, load_snapshot
from accelhost.readers.topology import read_topology
from ascend_hosts import AscendHost, even_nodes
from fakehost import CountingHost, FakeMachine, fake_tools
from gpu.gpu_hosts import QUERY, TOPO, dgx_like


def _plain() -> SnapshotHost:
    machine = FakeMachine(
        files={
            "/proc/self/status": "Name:\tx\nCpus_allowed_list:\t0-3\n",
            "/proc/self/cgroup": "0::/\n",
            "/sys/fs/cgroup/cpuset.cpus.effective": "0-3\n",
        },
        commands={"lscpu -e=CPU,NODE": "CPU NODE\n0 0\n1 0\n2 1\n3 1\n", "lscpu": ""},
    )
    return machine.host()


def _plain_sysfs() -> SnapshotHost:
    """No lscpu: nodes come from sysfs."""
    return dgx_like(nvidia_smi=False, device_type=None).host()


HOSTS: dict[str, tuple[Callable[[], Host], dict[str, Any]]] = {
    "ascend A3 example": (lambda: load_snapshot("example:a3-640cpu-16npu"), {}),
    "ascend 950 example": (lambda: load_snapshot("example:950-384cpu-8npu-sees-0123"), {}),
    "ascend A2 built": (
        lambda: AscendHost("A2", 1, 8, even_nodes(192, 4), range(192), running=[0, 1]).host(),
        {},
    ),
    "nvidia example": (lambda: load_snapshot("example:gpu-2socket-8gpu-smt"), {}),
    "nvidia detected": (lambda: dgx_like(device_type=None).host(), {}),
    "nvidia forced, no nvidia-smi": (
        lambda: dgx_like(nvidia_smi=False).host(),
        {"device_type": "nvidia"},
    ),
    "pci devices": (lambda: dgx_like().host(), {"pci": ["0000:1b:00.0", "0000:9d:00.0"]}),
    "plain host": (_plain, {}),
    "plain host without lscpu": (_plain_sysfs, {}),
}


def _plan(host: Host, **kw: Any) -> None:
    # refusals count too: they must not read twice either
    with contextlib.suppress(AccelhostError):
        accelhost.plan(host, **kw)


@pytest.mark.parametrize("name", list(HOSTS))
def test_plan_and_topo_read_every_fact_once(name: str) -> None:
    make, kw = HOSTS[name]
    counting = CountingHost(make())
    _plan(counting, **kw)
    assert counting.repeated() == {}
    assert counting.files or counting.commands  # it did read the host
    counting = CountingHost(make())
    read_topology(counting, device_type=kw.get("device_type"), pci=kw.get("pci"))
    assert counting.repeated() == {}


def test_nvidia_smi_runs_once_per_plan() -> None:
    counting = CountingHost(dgx_like(device_type=None).host())
    plan = accelhost.plan(counting)
    assert plan.device_type == "nvidia" and len(plan.devices) == 8
    assert counting.commands[QUERY] == 1 and counting.commands[TOPO] == 1


@pytest.mark.parametrize(
    ("command", "argv"),
    [
        ("plan", ["plan", "--json"]),
        ("topo", ["topo", "--json"]),
        ("plan", ["plan", "--json", "--pci", "0000:1b:00.0"]),
        ("topo", ["topo", "--json", "--pci", "0000:1b:00.0"]),
    ],
)
def test_cli_plan_and_topo_read_once(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: str,
    argv: list[str],
) -> None:
    counting = CountingHost(dgx_like(device_type=None).host())
    module = cli_plan if command == "plan" else cli_topo
    monkeypatch.setattr(module, "host_from_args", lambda args: counting)
    assert main(argv) == 0
    json.loads(capsys.readouterr().out)
    assert counting.repeated() == {}
    assert counting.commands[QUERY] == (0 if "--pci" in argv else 1)


def test_snapshot_records_plan_and_doctor_facts_reading_each_once() -> None:
    counting = CountingHost(load_snapshot("example:a3-640cpu-16npu"))
    data = record_snapshot(counting)
    assert counting.repeated() == {}
    assert data["commands"]["npu-smi info -m"]
    assert SnapshotHost(data).device_type == "A3"


def test_read_once_answers_as_the_host_does_and_wraps_once() -> None:
    inner = CountingHost(dgx_like().host())
    once = read_once(inner)
    assert isinstance(once, ReadOnce) and read_once(once) is once
    for _ in range(3):
        assert once.read_file("/proc/self/status") == inner.inner.read_file("/proc/self/status")
        assert once.read_file("/nope") is None
        assert once.list_dir("/sys/devices/system/node") is not None
        assert once.getenv("CUDA_VISIBLE_DEVICES") is None
        first, second = once.run_many([QUERY.split(), TOPO.split()])
        assert first is not None and second is not None and first.stdout.startswith("0, ")
        assert once.run(QUERY.split()) is first
    assert inner.repeated() == {}
    assert inner.files["/nope"] == 1


# ---- real fake tools on PATH: a live host runs each command once ---------------------


def _live_env(monkeypatch: pytest.MonkeyPatch, tools: Path) -> None:
    monkeypatch.setenv("PATH", f"{tools}:/bin:/usr/bin")
    for name in ("CUDA_VISIBLE_DEVICES", "ASCEND_RT_VISIBLE_DEVICES"):
        monkeypatch.delenv(name, raising=False)


def _recorded_commands(example: str) -> dict[str, str]:
    data = load_snapshot(f"example:{example}")
    return {key: res.stdout for key, res in data._commands.items()}


@pytest.mark.parametrize("example", ["a3-640cpu-16npu", "950-384cpu-8npu-sees-0123"])
@pytest.mark.parametrize("command", ["plan", "topo"])
def test_live_ascend_host_runs_each_tool_once(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    example: str,
    command: str,
) -> None:
    log = fake_tools(tmp_path / "bin", _recorded_commands(example), tools=["nvidia-smi"])
    _live_env(monkeypatch, tmp_path / "bin")
    main([command, "--device", "0"] if command == "plan" else [command])
    capsys.readouterr()
    calls = log.calls()
    assert calls["npu-smi info -m"] == 1 and calls["npu-smi info"] == 1
    assert max(calls.values()) == 1, calls


@pytest.mark.parametrize("command", ["plan", "topo"])
def test_live_nvidia_host_runs_nvidia_smi_once(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    command: str,
) -> None:
    # a GPU at a PCI address this machine really has, so sysfs answers for it
    pci = sorted(p.name for p in Path("/sys/bus/pci/devices").iterdir())[0]
    outputs = {QUERY: f"0, {pci}, GPU-0000\n", TOPO: ""}
    log = fake_tools(tmp_path / "bin", outputs, tools=["lscpu"])
    _live_env(monkeypatch, tmp_path / "bin")
    main([command])
    capsys.readouterr()
    calls = log.calls()
    assert calls[QUERY] == 1 and calls[TOPO] == 1
    assert max(calls.values()) == 1, calls


def test_live_plain_host_runs_each_tool_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    log = fake_tools(tmp_path / "bin", {}, tools=["lscpu"])
    _live_env(monkeypatch, tmp_path / "bin")
    assert main(["topo"]) == 0
    assert main(["plan"]) == 1  # nothing to plan on a plain host
    capsys.readouterr()
    # each lscpu query once per accelhost command (two commands ran)
    assert log.calls() == {"lscpu -e=CPU,NODE": 2, "lscpu": 2}


# ---- doctor, clean and watch: each fact once per look ---------------------------------

NV_MEMORY = "nvidia-smi --query-gpu=index,memory.used,memory.total --format=csv,noheader,nounits"
NV_APPS = "nvidia-smi --query-compute-apps=pid,used_memory,gpu_bus_id --format=csv,noheader,nounits"
NV_BUS = QUERY  # the planner's query: the doctor places compute apps by it


def _ascend_doctor_host() -> SnapshotHost:
    """An Ascend-like host as the doctor sees it: npu-smi with a holder, an orphaned
    engine child, a segment, HugePages, an allocator setting and an old /dev/shm file."""
    from hygiene.hygiene_fakes import NOW, FakeHost, npu_smi

    fake = FakeHost()
    fake.commands["npu-smi info"] = npu_smi([30000, 3000], 65536, [(0, 101, "python3", 28000)])
    fake.proc(
        101,
        "python3 -m vllm.entrypoints.openai.api_server",
        ppid=1,
        pgid=101,
        fds={3: "/dev/davinci0", 4: "/dev/davinci_manager"},
        environ={"PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True"},
    )
    fake.proc(102, "VLLM::EngineCore", ppid=1, pgid=101, fds={3: "/dev/davinci1"})
    fake.segment(7, 1 << 20, 102)
    fake.hugepages(2048, 64, 10).hugepages(2048, 32, 5, node=0)
    fake.files["/proc/meminfo"] = "MemTotal: 1000 kB\nHugepagesize: 2048 kB\n"
    fake.files["/proc/101/maps"] = "7f00-7f10 rw-s 00000000 00:1a 77 /dev/shm/psm_held\n"
    old = NOW - 7200
    fake.shm_file("psm_held", 1000, 8, old, 77).shm_file("psm_x", 1000, 8, old, 78)
    return fake.host()


def _nvidia_doctor_host() -> SnapshotHost:
    from hygiene.hygiene_fakes import FakeHost

    fake = FakeHost()
    fake.commands[NV_MEMORY] = "0, 40000, 81559\n1, 500, 81559\n"
    fake.commands[NV_APPS] = "4242, 38000, 00000000:3B:00.0\n"
    fake.commands[NV_BUS] = "0, 00000000:3B:00.0, GPU-a\n1, 00000000:5E:00.0, GPU-b\n"
    fake.proc(4242, "python3 -m sglang.launch_server", ppid=1, pgid=4242, fds={3: "/dev/nvidia0"})
    return fake.host()


DOCTOR_HOSTS: dict[str, Callable[[], Host]] = {
    "ascend-like": _ascend_doctor_host,
    "nvidia-like": _nvidia_doctor_host,
    "recorded vLLM host": lambda: load_snapshot("example:vllm-cpu-orphaned-engine"),
    "A3 example": lambda: load_snapshot("example:a3-640cpu-16npu"),
}


@pytest.mark.parametrize("name", list(DOCTOR_HOSTS))
@pytest.mark.parametrize(
    "argv",
    [
        ["doctor", "--json"],
        ["doctor", "--brief"],
        ["doctor", "--expect-util", "0.5", "--device", "0"],
        ["clean", "--json"],
    ],
)
def test_doctor_and_clean_read_every_fact_once(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    name: str,
    argv: list[str],
) -> None:
    from accelhost.cli import hygiene as cli_hygiene

    counting = CountingHost(DOCTOR_HOSTS[name]())
    monkeypatch.setattr(cli_hygiene, "hygiene_host", lambda args: counting)
    assert main(argv) in (0, 1, 2)
    assert capsys.readouterr().out
    assert counting.repeated() == {}
    assert counting.files["/proc/self/status"] == 1  # Pid and Cpus_allowed_list: one read
    if name == "ascend-like":
        assert counting.commands["npu-smi info"] == 1
        assert counting.files["/proc/101/stat"] == 1 and counting.links["/proc/101/fd/3"] == 1
    if name == "nvidia-like":
        assert counting.commands[NV_MEMORY] == counting.commands[NV_BUS] == 1


def test_watch_reads_each_fact_once_per_round_and_anew_each_round() -> None:
    from accelhost.hygiene import HygieneOptions
    from accelhost.hygiene.watch.watcher import WatchConfig, Watcher

    counting = CountingHost(_ascend_doctor_host())
    watcher = Watcher(lambda: counting, HygieneOptions(), WatchConfig(), lambda event: None)
    watcher.run_once()
    assert counting.repeated() == {}
    watcher.run_once()
    asked = [*counting.commands.values(), *counting.files.values(), *counting.dirs.values()]
    assert max(asked) == 2  # the second round read the host again, once
    assert counting.commands["npu-smi info"] == 2 and counting.files["/proc/102/stat"] == 2


def test_live_doctor_runs_each_tool_and_reads_each_proc_file_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """This machine, with npu-smi and nvidia-smi on PATH that log their calls: one doctor
    run asks each tool each question once, and reads each /proc (per-pid too) file,
    directory and fd link once, however many checks use it."""
    from accelhost.cli import hygiene as cli_hygiene
    from accelhost.host.live import LiveHost

    outputs = {
        **_recorded_commands("a3-640cpu-16npu"),
        NV_MEMORY: "0, 500, 81559\n",
        NV_APPS: "",
        NV_BUS: "0, 00000000:3B:00.0, GPU-a\n",
    }
    log = fake_tools(tmp_path / "bin", outputs)
    _live_env(monkeypatch, tmp_path / "bin")
    counting = CountingHost(LiveHost())
    monkeypatch.setattr(cli_hygiene, "hygiene_host", lambda args: counting)
    assert main(["doctor", "--json"]) in (0, 1, 2)
    report = json.loads(capsys.readouterr().out)
    assert report["checks"]
    calls = log.calls()
    assert calls["npu-smi info"] == 1 and calls[NV_MEMORY] == 1 and calls[NV_BUS] == 1
    assert max(calls.values()) == 1, calls
    assert counting.repeated() == {}
    per_pid = [k for k in counting.files if k.startswith("/proc/") and k.split("/")[2].isdigit()]
    assert len(per_pid) > 3  # it did read the processes, each file once


def test_snapshot_of_a_gpu_host_runs_the_gpu_query_once_for_plan_and_doctor() -> None:
    """The planner and the doctor both need each GPU's PCI address: one query serves both."""
    snap = dgx_like(device_type=None).snapshot()
    snap["commands"][NV_MEMORY] = "".join(f"{i}, 500, 81559\n" for i in range(8))
    snap["commands"][NV_APPS] = "4242, 300, 00000000:1B:00.0\n"
    counting = CountingHost(SnapshotHost(snap))
    data = record_snapshot(counting)
    assert counting.repeated() == {}
    assert counting.commands[QUERY] == 1 and counting.commands[NV_MEMORY] == 1
    from accelhost.hygiene import read_facts

    facts = read_facts(SnapshotHost(data))
    placed = {d.index: [p.pid for p in d.processes] for d in facts.devices}
    assert placed[0] == [4242] and not any(placed[i] for i in range(1, 8))
