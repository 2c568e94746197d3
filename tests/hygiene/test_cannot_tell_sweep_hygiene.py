"""The sweep of doctor and watch for "OK" or "0" said of what was not read: a device
tool's [N/A], a missing tool while engines hold devices, processes hidden by hidepid."""

from __future__ import annotations

from hygiene_fakes import FakeHost
from prometheus_client import generate_latest

from accelhost.hygiene import HygieneOptions, read_facts, run_checks
from accelhost.hygiene.doctor.checks import check_orphan_engines
from accelhost.hygiene.doctor.preflight import preflight_from_facts
from accelhost.hygiene.judge.findings import find
from accelhost.hygiene.watch.watcher import WatchConfig, Watcher

GPU_QUERY = "nvidia-smi --query-gpu=index,memory.used,memory.total --format=csv,noheader,nounits"
APPS = "nvidia-smi --query-compute-apps=pid,used_memory,gpu_bus_id --format=csv,noheader,nounits"
BUS = "nvidia-smi --query-gpu=index,pci.bus_id,uuid --format=csv,noheader"
OPTS = HygieneOptions()


def _status(fake: FakeHost, name: str, opts: HygieneOptions = OPTS) -> tuple[str, str]:
    (result,) = run_checks(read_facts(fake.host(), opts), opts, (name,)).checks
    return result.status, result.summary


def _two_gpus(gpu1: str) -> FakeHost:
    """gpu0 idle and measured; gpu1 as given (`[N/A]`: the driver gives no figure)."""
    fake = FakeHost()
    fake.commands[GPU_QUERY] = f"0, 0, 81559\n1, {gpu1}, 81559\n"
    fake.commands[APPS] = ""
    fake.commands[BUS] = "0, 00000000:3B:00.0, GPU-a\n1, 00000000:5E:00.0, GPU-b\n"
    return fake


def test_a_device_without_a_memory_figure_is_not_accounted_for_nor_has_room() -> None:
    """gpu1's memory.used is [N/A]: unattributed_memory said "2 device(s): memory accounted
    for" and the preflight without --device "2 devices have room": both OK, gpu1 unread."""
    fake = _two_gpus("[N/A]")
    status, summary = _status(fake, "unattributed_memory")
    assert status == "UNKNOWN" and "gpu1: the device tool gives no memory figure" in summary
    opts = HygieneOptions(expect_util=0.5)
    status, summary = _status(fake, "preflight", opts)
    assert status == "UNKNOWN" and "gpu1" in summary
    facts = read_facts(fake.host(), opts)
    # named, it is the device with no figure, not a device that is "not found"
    one = preflight_from_facts(facts, 0.5, [1])
    assert one.status == "UNKNOWN" and "not found" not in one.reason and "gpu1" in one.reason
    assert preflight_from_facts(facts, 0.5, [0]).status == "OK"  # gpu0 alone is measured
    assert _status(_two_gpus("1000"), "preflight", opts)[0] == "OK"


def test_no_device_tool_is_skip_and_an_open_device_without_its_tool_is_unknown() -> None:
    """No npu-smi and no nvidia-smi: unattributed_memory said OK ("no device memory
    source"); nothing was checked. With an engine holding /dev/davinci0 (a DaemonSet image
    without npu-smi) the memory it holds cannot be read: UNKNOWN."""
    plain = FakeHost()
    assert _status(plain, "unattributed_memory")[0] == "SKIP"
    plain.proc(
        4242,
        "VLLM::Worker",
        ppid=1,
        pgid=4242,
        fds={3: "/dev/davinci0", 4: "/dev/davinci_manager"},
    )
    plain.pids.append(4242)
    status, summary = _status(plain, "unattributed_memory")
    assert status == "UNKNOWN" and "/dev/davinci0 is open" in summary
    render = FakeHost().proc(77, "Xorg", ppid=1, pgid=77, fds={3: "/dev/dri/renderD128"})
    render.pids.append(77)  # no tool reports a render node's memory: nothing to read
    assert _status(render, "unattributed_memory")[0] == "SKIP"


def test_processes_hidden_by_hidepid_may_be_orphans() -> None:
    """/proc mounted hidepid=invisible, the reader not root: other users' processes are not
    listed, so "no engine process outlived its launcher" (OK) and the watch's orphan
    count 0 were said of processes never seen."""
    fake = FakeHost()
    fake.files["/proc/self/mountinfo"] = (
        "22 1 0:21 / /proc rw,nosuid - proc proc rw,hidepid=invisible\n"
    )
    facts = read_facts(fake.host(), OPTS)
    assert facts.processes_partial is not None
    result = check_orphan_engines(find(facts, OPTS), OPTS)
    assert result.status == "UNKNOWN" and "hidepid=invisible" in result.summary
    host = fake.host()
    watcher = Watcher(lambda: host, OPTS, WatchConfig(), lambda _e: None)
    watcher.run_once()
    text = generate_latest(watcher.registry).decode()
    assert 'accelhost_check_status{check="orphan_engines",state="UNKNOWN"} 1.0' in text
    assert "accelhost_orphan_processes " not in text
    # the same host as root (nothing hidden) is judged: OK, and a count of 0
    del fake.files["/proc/self/mountinfo"]
    assert check_orphan_engines(find(read_facts(fake.host(), OPTS), OPTS), OPTS).status == "OK"
