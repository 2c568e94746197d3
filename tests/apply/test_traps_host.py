"""The warnings before binding read the process through the host door, so a recorded
machine shows each rule; CPU lists go through the one reader of each fact."""

from __future__ import annotations

from accelhost.apply import traps
from fakehost import CountingHost, FakeMachine

CPUSET = "/sys/fs/cgroup/cpuset.cpus.effective"


def _host(allowed: str, cpuset: str, **files: str) -> CountingHost:
    machine = FakeMachine(
        files={
            "/proc/42/status": f"Name:\tworker\nCpus_allowed_list:\t{allowed}\n",
            "/proc/42/cgroup": "0::/\n",
            CPUSET: cpuset,
            **files,
        }
    )
    return CountingHost(machine.host())


def test_allowed_cpus_narrower_than_the_cpuset_are_named() -> None:
    host = _host("3,1", "0-7\n")
    (line,) = traps.narrowed_warning(42, host)
    assert line.startswith("process 42 may run on CPUs 1,3 only")
    assert "cgroup cpuset 0-7" in line
    assert traps.narrowed_warning(42, _host("0-7", "0-7\n")) == []


def test_a_corrupt_cpuset_costs_the_warning_not_the_bind() -> None:
    host = _host("0", "0-99999999\n")  # beyond any kernel: refused by the bounded parser
    assert traps.narrowed_warning(42, host) == []
    assert traps.outside_cpuset_warning(42, [0, 1], host) == []


def test_planned_cpus_outside_the_cpuset_are_named_once_each_read() -> None:
    host = _host("0-3", "0-3\n")
    (line,) = traps.outside_cpuset_warning(42, [2, 3, 4, 5], host)
    assert line.startswith("CPUs 4-5 of the plan are outside the cgroup cpuset 0-3")
    assert host.repeated() == {}


def test_environment_and_container_markers_come_from_the_host() -> None:
    host = _host("0", "0\n", **{"/proc/42/environ": "A=1\0OMP_PROC_BIND=TRUE\0", "/.dockerenv": ""})
    assert traps.process_environ(42, host) == {"A": "1", "OMP_PROC_BIND": "TRUE"}
    assert traps.in_container(host)
    assert not traps.in_container(_host("0", "0\n"))
    (hint,) = traps.host_threads_warning(0, "uvb_poll", host)
    assert "--pid=host" in hint


def test_online_cpus_read_through_the_host() -> None:
    host = _host("0", "0\n", **{"/sys/devices/system/cpu/online": "0-3,8\n"})
    assert traps.online_cpus(host) == (0, 1, 2, 3, 8)
    assert traps.online_cpus(_host("0", "0\n")) is None
