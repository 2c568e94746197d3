"""One --thread-role grammar for every command: NAME=PATTERN:COUNT takes COUNT CPUs of the
pool, NAME=PATTERN@CPULIST names them; bad specs are usage errors (exit 2); a role that
matches no thread is a warning. Real processes, affinities read back from /proc."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from apply_helpers import thread_cpus

from accelhost.errors import UsageError
from accelhost.planner.roles import RoleSpec, add_roles, parse_role_spec
from accelhost.plans import DevicePlan, Plan, ThreadRole

GPU = "example:gpu-cpuset-slice"  # device 0: pool 0-7,112-119


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("nccl=^NCCL:2", RoleSpec("nccl", "^NCCL", 2)),
        ("io=a=b:c:1", RoleSpec("io", "a=b:c", 1)),
        ("engine=EngineCore_\\d+:4", RoleSpec("engine", "EngineCore_\\d+", 4)),
        ("nccl=^NCCL@40-41", RoleSpec("nccl", "^NCCL", 0, (40, 41))),
        ("nccl=^NCCL@0-10:2", RoleSpec("nccl", "^NCCL", 0, (0, 2, 4, 6, 8, 10))),
        ("mail=a@b:3", RoleSpec("mail", "a@b", 3)),  # "b:3" is no CPU list: a COUNT role
        ("at=x@y@5", RoleSpec("at", "x@y", 0, (5,))),
    ],
)
def test_parse_both_forms(text: str, parsed: RoleSpec) -> None:
    assert parse_role_spec(text) == parsed


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("nccl", "expected NAME=PATTERN:COUNT"),
        ("nccl=NCCL", "expected NAME=PATTERN:COUNT"),
        ("=NCCL:2", "must be a word"),
        ("nccl=:2", "the pattern is empty"),
        ("nccl=@2", "the pattern is empty"),
        ("nccl=(:2", "is not a regular expression"),
        ("nccl=NCCL:0", "COUNT '0'"),
        ("nccl=NCCL:two", "COUNT 'two'"),
        # The old bind meaning of ':' (a CPU list) is refused with a pointer to '@'.
        ("nccl=NCCL:2-3", "a CPU list is written after @"),
        ("nccl=NCCL@99999", "8192"),
    ],
)
def test_bad_specs_are_usage_errors_that_say_what_is_wrong(text: str, match: str) -> None:
    with pytest.raises(UsageError, match=match):
        parse_role_spec(text)


def test_a_cpulist_role_leaves_main_and_a_count_role_carves_it() -> None:
    plan = Plan("nvidia", "exclusive", (0,), (DevicePlan(0, (0, 1, 2, 3), main=(0, 1, 2, 3)),))
    dev = add_roles(plan, thread_roles=[parse_role_spec("io=^io@9")]).device(0)
    assert dev.main == (0, 1, 2, 3) and dev.thread_roles == (ThreadRole("io", "^io", (9,)),)
    dev = add_roles(plan, thread_roles=[parse_role_spec("nccl=^NCCL:2")]).device(0)
    assert dev.main == (0, 1) and dev.thread_roles == (ThreadRole("nccl", "^NCCL", (2, 3)),)


# ---- the same meaning in every command ------------------------------------------------------


def test_readme_nccl_role_means_two_cpus_of_the_pool_in_plan_and_bind(spawn, plan_file, cli):
    """README: `--thread-role nccl=^NCCL:2`. In `plan` and in `bind` alike the NCCL threads
    get the last two CPUs of the pool and the rest stay on main (it used to pin them to
    CPU 2 in bind)."""
    planned = cli("plan", "--snapshot", GPU, "--thread-role", "nccl=^NCCL:2", "--json")
    assert planned.rc == 0, planned.err
    roles = json.loads(planned.out)["devices"]["0"]["thread_roles"]
    assert roles == {"nccl": {"pattern": "^NCCL", "cpus": [118, 119]}}

    child = spawn("NCCL main", "worker")
    pool = {"devices": {"0": {"pool": [0, 1, 2, 3], "main": [0, 1, 2, 3]}}}
    args = ("bind", "--plan", plan_file(pool), "--device", "0", "--pid", str(child.pid))
    dry = cli(*args, "--thread-role", "nccl=^NCCL:2", "--dry-run", "--json")
    assert dry.rc == 0, dry.err
    cpus = {s["name"]: s["cpus"] for s in json.loads(dry.out)["steps"] if s["kind"] == "thread"}
    assert cpus == {"python": [0, 1], "NCCL main": [2, 3], "worker": [0, 1]}


def test_count_role_in_bind_is_applied_for_real(spawn, plan_file, cli):
    child = spawn("NCCL main", "worker")
    path = plan_file({"devices": {"0": {"main": [0, 1]}}})
    args = ("--plan", path, "--device", "0", "--pid", str(child.pid), "--thread-role")
    res = cli("bind", *args, "nccl=^NCCL:1")
    assert res.rc == 0, res.err
    assert thread_cpus(child.pid, child.tid("NCCL main")) == [1]
    assert thread_cpus(child.pid, child.tid("worker")) == [0]
    assert thread_cpus(child.pid, child.pid) == [0]
    # verify takes the same spec with the same meaning
    assert cli("verify", *args, "nccl=^NCCL:1").rc == 0
    os_moved = cli("verify", *args, "nccl=^NCCL@0")  # another meaning: CPU 0 for NCCL
    assert os_moved.rc == 1
    assert "(NCCL main) drifted: plan CPUs 0 [nccl], actual 1" in os_moved.out


def test_cpulist_role_with_a_stride_in_bind(spawn, plan_file, cli):
    child = spawn("NCCL main", "worker")
    path = plan_file({"devices": {"0": {"main": [0]}}})
    res = cli(
        "bind", "--plan", path, "--device", "0", "--pid", str(child.pid),
        "--thread-role", "nccl=^NCCL@1-1:2",
    )  # fmt: skip
    assert res.rc == 0, res.err
    assert thread_cpus(child.pid, child.tid("NCCL main")) == [1]
    assert thread_cpus(child.pid, child.tid("worker")) == [0]


def test_exec_keeps_a_count_role_out_of_the_commands_cpus(plan_file):
    path = plan_file({"devices": {"0": {"main": [0, 1]}}})
    res = subprocess.run(
        [sys.executable, "-m", "accelhost.cli.main", "exec", "--plan", path, "--device", "0",
         "--thread-role", "nccl=^NCCL:1", "--", "cat", "/proc/self/status"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "Cpus_allowed_list:\t0\n" in res.stdout
    assert "thread role 'nccl': CPUs 1 are kept for threads matching '^NCCL'" in res.stderr


def test_a_role_that_matches_no_thread_is_a_warning(spawn, plan_file, cli):
    child = spawn("worker")
    path = plan_file({"devices": {"0": {"main": [0, 1]}}})
    args = ("bind", "--plan", path, "--device", "0", "--pid", str(child.pid))
    res = cli(*args, "--thread-role", "nccl=^NCCL:1")
    assert res.rc == 0, res.err
    warning = (
        f"accelhost: warning: thread role 'nccl' (pattern '^NCCL') matched no thread of "
        f"process {child.pid}: CPUs 1 stay unused"
    )
    assert warning in res.err
    js = cli(*args, "--thread-role", "nccl=^NCCL:1", "--json")
    assert any("'nccl'" in w and "matched no thread" in w for w in json.loads(js.out)["warnings"])
    ver = cli("verify", *args[1:], "--thread-role", "nccl=^NCCL:1")
    assert ver.rc == 0 and "warning: thread role 'nccl'" in ver.out


@pytest.mark.parametrize("command", ["bind", "exec", "verify", "plan", "run"])
def test_a_bad_role_spec_is_exit_2_and_one_line_in_every_command(command, plan_file, cli):
    path = plan_file({"devices": {"0": {"main": [0]}}})
    common = {
        "bind": ("--plan", path, "--device", "0", "--pid", "1"),
        "exec": ("--plan", path, "--device", "0"),
        "verify": ("--plan", path, "--device", "0", "--pid", "1"),
        "plan": ("--snapshot", GPU),
        "run": ("--bind", "0", "--plan", path),
    }[command]
    tail = ("--", "true") if command in ("exec", "run") else ()
    res = cli(command, *common, "--thread-role", "nccl=NCCL:2-3", *tail)
    assert res.rc == 2
    assert res.err.count("\n") == 1 and "a CPU list is written after @" in res.err


# ---- --device and what each command needs ---------------------------------------------------


def test_device_grammar(spawn, plan_file, cli, tmp_path):
    child = spawn("worker")
    path = plan_file({"devices": {"0": {"main": [0]}, "1": {"main": [1]}}})
    pid = ("--pid", str(child.pid))
    several = cli("bind", "--plan", path, "--device", "0-1", *pid)
    assert several.rc == 2 and "bind takes one device, got --device 0,1" in several.err
    missing = cli("bind", "--plan", path, *pid)
    assert missing.rc == 2 and "give --device" in missing.err
    alias = cli("bind", "--plan", path, "--devices", "1", *pid)
    assert alias.rc == 0, alias.err
    assert thread_cpus(child.pid, child.pid) == [1]
    assert cli("verify", "--plan", path, "--device", "1", *pid).rc == 0
    no_device = cli("exec", "--plan", path, "--", "true")
    assert no_device.rc == 2 and "give --device" in no_device.err
    unbind = cli("unbind", "--irq", "--device", "0,1", "--state-dir", str(tmp_path))
    assert unbind.rc == 2 and "unbind takes one device" in unbind.err
    with pytest.raises(SystemExit) as bad:  # argparse's own usage error
        cli("verify", "--plan", path, "--device", "x", *pid)
    assert bad.value.code == 2


def test_verify_with_nothing_to_check_is_a_usage_error(plan_file, cli):
    path = plan_file({"devices": {"0": {"main": [0]}}})  # no IRQ CPUs, no --pid
    res = cli("verify", "--plan", path, "--device", "0")
    assert res.rc == 2 and "nothing to check: give --pid PID" in res.err
    with_irq = plan_file({"devices": {"0": {"main": [0], "irq": [1]}}})
    res = cli("verify", "--plan", with_irq, "--device", "0", "--no-irq")
    assert res.rc == 2 and "--no-irq" in res.err
