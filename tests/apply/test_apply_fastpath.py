"""The bind hot path makes the very steps and results the plain constructors make."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from typing import Any

import pytest

from accelhost.apply.execute import execute
from accelhost.apply.steps import (
    OK,
    SKIPPED,
    StepResult,
    ThreadAffinity,
    step_result,
    thread_step,
)
from accelhost.apply.threads import assign, list_threads, thread_steps
from accelhost.errors import ApplyError
from accelhost.plans import ThreadRole


def test_fast_constructors_make_equal_frozen_objects() -> None:
    fast = thread_step(7, 8, "acl_thread", "acl", (1, 2))
    plain = ThreadAffinity(7, 8, "acl_thread", "acl", (1, 2))
    assert fast == plain and hash(fast) == hash(plain) and repr(fast) == repr(plain)
    assert fast.to_dict() == plain.to_dict() and fast.describe() == plain.describe()
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.tid = 9  # type: ignore[misc]
    result = step_result(fast, OK)
    assert result == StepResult(plain, OK) and result.line == StepResult(plain, OK, "").line
    assert (
        step_result(fast, SKIPPED, "gone").to_dict() == StepResult(plain, SKIPPED, "gone").to_dict()
    )


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
    gone = thread_step(child.pid, 2**22 + 4321, "gone", "main", (0,))
    results = execute([*steps, gone])
    assert [r.status for r in results] == [OK] * len(steps) + [SKIPPED]
    assert all(set(os.sched_getaffinity(s.tid)) == {0} for s in steps)
