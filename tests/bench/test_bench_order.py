"""The order of runs: warm-ups first, then rounds of both arms, the first arm alternating."""

from __future__ import annotations

import os
import sys

import pytest
from bench_helpers import bench_json

from accelhost.bench.bind_runner import BOUND, UNBOUND, schedule


def test_schedule_alternates_the_first_arm_of_each_round():
    """Counted rounds are numbered from 1 (not after the warm-ups), unbound first in 1."""
    slots = schedule(3, 1)
    assert [(s.index, s.arm, s.round, s.warmup) for s in slots] == [
        (1, UNBOUND, 1, True),
        (2, BOUND, 1, True),
        (3, UNBOUND, 1, False),
        (4, BOUND, 1, False),
        (5, BOUND, 2, False),
        (6, UNBOUND, 2, False),
        (7, UNBOUND, 3, False),
        (8, BOUND, 3, False),
    ]


@pytest.mark.parametrize(("repeats", "warmup"), [(1, 0), (4, 0), (5, 2), (10, 1)])
def test_every_arm_runs_repeats_times_and_each_round_runs_both(repeats, warmup):
    slots = schedule(repeats, warmup)
    counted = [s for s in slots if not s.warmup]
    assert sum(s.arm == BOUND for s in counted) == repeats
    assert sum(s.arm == UNBOUND for s in counted) == repeats
    assert sum(s.warmup for s in slots) == 2 * warmup
    assert all(s.warmup for s in slots[: 2 * warmup])
    for warm, rounds in ((True, warmup), (False, repeats)):
        for r in range(1, rounds + 1):
            arms = sorted(s.arm for s in slots if s.round == r and s.warmup == warm)
            assert arms == [BOUND, UNBOUND]
    firsts = [s.arm for s in counted[::2]]
    assert all(a != b for a, b in zip(firsts, firsts[1:], strict=False))


def test_schedule_refuses_nonsense():
    with pytest.raises(ValueError):
        schedule(0, 0)
    with pytest.raises(ValueError):
        schedule(1, -1)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs 2 CPUs to tell arms apart")
def test_the_runs_happen_in_the_scheduled_order(tmp_path):
    """Each run appends the number of CPUs it saw: 1 is a bound run, more is unbound."""
    log = tmp_path / "order"
    cmd = (
        "import os, sys; n = len(os.sched_getaffinity(0))\n"
        "open(sys.argv[1], 'a').write('%d\\n' % n); print('n=%d' % n)"
    )
    data = bench_json(
        "--cpus", "0", "--repeats", "3", "--warmup", "1", "--metric", "n=([0-9]+)",
        "--", sys.executable, "-c", cmd, str(log),
    )  # fmt: skip
    seen = ["bound" if line == "1" else "unbound" for line in log.read_text().split()]
    assert seen == [s.arm for s in schedule(3, 1)]
    assert [r["arm"] for r in data["runs"]] == seen
    assert [r["warmup"] for r in data["runs"]] == [True, True] + [False] * 6
