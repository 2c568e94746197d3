"""The statistics of `bench bind`: known figures in, known medians, intervals, verdicts out."""

from __future__ import annotations

import pytest

from accelhost.bench.bind_stats import (
    BETTER,
    INCONCLUSIVE,
    NO_DIFFERENCE,
    WORSE,
    arm_stats,
    bootstrap_ci,
    compare,
    quantile,
    ratio_of_medians,
    verdict,
)


def test_quantile_interpolates_between_order_statistics():
    values = [10, 1, 9, 2, 8, 3, 7, 4, 6, 5]  # order does not matter
    assert quantile(values, 0.9) == pytest.approx(9.1)
    assert quantile(values, 0.5) == pytest.approx(5.5)
    assert quantile(values, 0.0) == 1
    assert quantile(values, 1.0) == 10
    assert quantile([4.0], 0.9) == 4.0
    with pytest.raises(ValueError):
        quantile([], 0.5)
    with pytest.raises(ValueError):
        quantile([1.0], 1.5)


def test_arm_stats_of_known_figures():
    s = arm_stats([3.0, 1.0, 2.0, 10.0])
    assert s.runs == 4
    assert s.values == (3.0, 1.0, 2.0, 10.0)  # in run order, as measured
    assert s.median == 2.5
    assert s.mean == 4.0
    assert (s.min, s.max) == (1.0, 10.0)
    assert s.spread == pytest.approx((10.0 - 1.0) / 2.5)
    assert s.p90 is None  # fewer than 10 runs


def test_p90_appears_from_ten_runs():
    assert arm_stats(range(1, 10)).p90 is None
    assert arm_stats(range(1, 11)).p90 == pytest.approx(9.1)


def test_an_empty_arm_has_no_figures():
    s = arm_stats([])
    assert s.runs == 0
    assert s.to_dict()["median"] is None and s.to_dict()["values"] == []


def test_ratio_is_bound_over_unbound_and_needs_positive_figures():
    assert ratio_of_medians([1.0, 3.0, 2.0], [4.0, 4.0, 5.0]) == 0.5
    assert ratio_of_medians([], [1.0]) is None
    assert ratio_of_medians([1.0], [0.0, 1.0]) is None
    assert ratio_of_medians([-1.0], [1.0]) is None


def test_constant_arms_give_an_exact_interval():
    assert bootstrap_ci([1.0] * 4, [2.0] * 4) == (0.5, 0.5)


def test_separated_arms_give_an_interval_inside_the_extreme_ratios():
    unbound = [10.0, 10.2, 10.5, 10.9, 11.0, 10.1, 10.7, 10.3]
    bound = [5.0, 5.5, 6.0, 5.2, 5.8, 5.1, 5.9, 5.4]
    lo, hi = bootstrap_ci(bound, unbound)
    # Every resampled median lies within its arm's range, so every ratio lies in
    # [min(bound) / max(unbound), max(bound) / min(unbound)].
    assert 5.0 / 11.0 <= lo <= hi <= 6.0 / 10.0
    assert lo <= ratio_of_medians(bound, unbound) <= hi


def test_the_interval_is_reproducible_and_depends_on_the_seed():
    unbound = [1.0, 1.3, 0.9, 1.6, 1.1, 1.2, 0.8, 1.5]
    bound = [1.1, 0.7, 1.4, 1.0, 0.95, 1.25, 1.35, 0.85]
    first = bootstrap_ci(bound, unbound, seed=7)
    assert bootstrap_ci(bound, unbound, seed=7) == first
    seeds = {bootstrap_ci(bound, unbound, seed=s) for s in range(5)}
    assert len(seeds) > 1


def test_a_narrower_confidence_gives_a_nested_interval():
    unbound = [1.0, 1.3, 0.9, 1.6, 1.1, 1.2, 0.8, 1.5]
    bound = [0.7, 0.9, 1.0, 0.8, 1.2, 0.75, 0.95, 0.85]
    lo95, hi95 = bootstrap_ci(bound, unbound, confidence=0.95)
    lo50, hi50 = bootstrap_ci(bound, unbound, confidence=0.5)
    assert lo95 <= lo50 <= hi50 <= hi95


def test_an_interval_needs_two_figures_per_arm():
    assert bootstrap_ci([1.0], [1.0, 2.0]) is None
    assert bootstrap_ci([1.0, 2.0], [2.0, 3.0]) is not None
    with pytest.raises(ValueError):
        bootstrap_ci([1.0, 2.0], [1.0, 2.0], confidence=1.0)
    with pytest.raises(ValueError):
        bootstrap_ci([1.0, 2.0], [1.0, 2.0], resamples=0)


@pytest.mark.parametrize(
    ("ci", "higher_is_better", "expected"),
    [
        ((0.5, 0.9), False, BETTER),  # bound takes less time
        ((0.5, 0.9), True, WORSE),  # bound gives less throughput
        ((1.1, 1.4), False, WORSE),
        ((1.1, 1.4), True, BETTER),
        ((0.9, 1.1), False, NO_DIFFERENCE),
        ((1.0, 1.0), True, NO_DIFFERENCE),
        (None, False, INCONCLUSIVE),
    ],
)
def test_verdict_from_the_interval_and_the_direction(ci, higher_is_better, expected):
    assert verdict(ci, higher_is_better=higher_is_better) == expected


def test_compare_of_clearly_faster_bound_runs():
    c = compare([2.0, 2.1, 1.9, 2.0], [1.0, 1.1, 0.9, 1.0])
    assert c.unbound.median == 2.0 and c.bound.median == 1.0
    assert c.ratio == 0.5
    assert c.ci is not None and c.ci[1] < 1.0
    assert c.verdict == BETTER
    assert "excludes 1" in c.why
    assert compare([2.0, 2.1, 1.9, 2.0], [1.0, 1.1, 0.9, 1.0], higher_is_better=True).verdict == (
        WORSE
    )


def test_compare_of_one_distribution_twice_is_no_difference():
    same = [1.0, 2.0, 3.0, 4.0, 5.0]
    c = compare(same, list(reversed(same)))
    assert c.ratio == 1.0
    assert c.ci is not None and c.ci[0] < 1.0 < c.ci[1]
    assert c.verdict == NO_DIFFERENCE


def test_compare_with_a_missing_arm_is_inconclusive_and_says_why():
    c = compare([1.0, 2.0, 3.0], [])
    assert c.verdict == INCONCLUSIVE
    assert c.ratio is None and c.ci is None
    assert "unbound 3, bound 0" in c.why
    d = c.to_dict()
    assert d["arms"]["bound"]["runs"] == 0 and d["ci"] is None
