"""The bind hot path makes the very steps and results the plain constructors make."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest
from apply_helpers import assign

from accelhost.apply.execute import execute
from accelhost.apply.steps import (
    OK,
    SKIPPED,
    StepResult,
    ThreadAffinity,
)
from accelhost.apply.threads import list_threads, thread_steps
from accelhost.errors import ApplyError
from accelhost.plans import ThreadRole


def test_the_per_thread_objects_are_slotted_and_report_every_field() -> None:
    """One step and one result per thread: slotted (no per-object dict), and their JSON and
    report line as every other step's."""
    step = ThreadAffinity(7, 8, "acl_thread", "acl", (1, 2))
    result = StepResult(step, SKIPPED, "gone")
    assert not hasattr(step, "__dict__") and not hasattr(result, "__dict__")
    assert step.to_dict() == {
        "kind": "thread",
        "description": "set affinity of thread 8 (acl_thread) of process 7 to CPUs 1-2 [acl]",
        "pid": 7,
        "tid": 8,
        "name": "acl_thread",
        "role": "acl",
        "cpus": [1, 2],
    }
    assert result.to_dict() == {**step.to_dict(), "status": SKIPPED, "detail": "gone"}
    assert StepResult(step, OK).line == f"[ok] {step.describe()}"


def test_thread_steps_equal_list_threads_then_assign(spawn: Callable[..., Any]) -> None:
    child = spawn("acl_thread", "release_thread", "gpu-nccl", "worker", "acl_thread_x")
    cpus = sorted(os.sched_getaffinity(0))
    role_sets = [
        [
            ThreadRole("acl", "acl_thread", (cpus[-1],)),
            ThreadRole("release", "release_thread", (0,)),
        ],
        [ThreadRole("acl", "acl_thread", (1, 0)), ThreadRole("nccl", "nccl|^w", (0,))],
        [ThreadRole("none", "acl", ())],
    ]
    for roles in role_sets:
        for main in ((0,), (), (cpus[-1], 0, 0)):
            slow = [
                ThreadAffinity(child.pid, a.tid, a.name, a.role, a.cpus)
                for a in assign(list_threads(child.pid), main, roles)
            ]
            assert thread_steps(child.pid, main, roles) == slow


def test_thread_steps_of_a_gone_process_is_an_apply_error() -> None:
    with pytest.raises(ApplyError, match="does not exist"):
        thread_steps(2**22 + 4321, (0,), [ThreadRole("bad", "(", (0,))])


def test_execute_reads_back_every_thread(spawn: Callable[..., Any]) -> None:
    child = spawn("acl_thread", "worker")
    steps = thread_steps(child.pid, (0,), [ThreadRole("acl", "acl_thread", (0,))])
    gone = ThreadAffinity(child.pid, 2**22 + 4321, "gone", "main", (0,))
    results = execute([*steps, gone])
    assert [r.status for r in results] == [OK] * len(steps) + [SKIPPED]
    assert all(set(os.sched_getaffinity(s.tid)) == {0} for s in steps)
