"""Statistics of a bound/unbound comparison: pure functions over lists of figures.

Medians, not means, carry the comparison: one run of a shared host hit by a cron job
moves a mean a lot and a median not at all. The confidence interval of the ratio of
medians comes from a percentile bootstrap, because the distribution of run times (right
skewed, sometimes bimodal) is nothing a t-interval assumes. The generator is seeded, so
the same figures always give the same interval and verdict.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

BETTER = "better"
WORSE = "worse"
NO_DIFFERENCE = "no difference"
INCONCLUSIVE = "inconclusive"

P90_MIN_RUNS = 10  # below this a 90th percentile is the maximum by another name
MIN_RUNS = 2  # per arm, for an interval: one figure says nothing about spread
DEFAULT_CONFIDENCE = 0.95
DEFAULT_RESAMPLES = 2000
DEFAULT_SEED = 0


def quantile(values: Sequence[float], q: float) -> float:
    """The q-quantile by linear interpolation between order statistics (numpy's default).

    [1..10] at 0.9 is 9.1: position (n - 1) * q = 8.1, between the 9th and 10th value.
    """
    if not values:
        raise ValueError("quantile of no values")
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"quantile {q} is not between 0 and 1")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (pos - lo) * (ordered[hi] - ordered[lo])


@dataclass(frozen=True)
class ArmStats:
    """What one arm's counted figures say; all None when the arm has none."""

    values: tuple[float, ...]
    mean: float | None
    median: float | None
    min: float | None
    max: float | None
    p90: float | None
    spread: float | None  # (max - min) / median: how far to trust one run of this arm

    @property
    def runs(self) -> int:
        return len(self.values)

    def to_dict(self) -> dict[str, Any]:
        return {"runs": self.runs, **asdict(self), "values": list(self.values)}


def arm_stats(values: Sequence[float]) -> ArmStats:
    vals = tuple(float(v) for v in values)
    if not vals:
        return ArmStats(vals, None, None, None, None, None, None)
    med = statistics.median(vals)
    lo, hi = min(vals), max(vals)
    p90 = quantile(vals, 0.9) if len(vals) >= P90_MIN_RUNS else None
    spread = (hi - lo) / abs(med) if med else None
    return ArmStats(vals, statistics.fmean(vals), med, lo, hi, p90, spread)


def ratio_of_medians(bound: Sequence[float], unbound: Sequence[float]) -> float | None:
    """median(bound) / median(unbound); None when either is empty or a ratio has no sense.

    A ratio needs positive figures (times, throughputs, latencies): with a zero or a
    negative figure "twice as fast" means nothing, so no ratio is made.
    """
    if not bound or not unbound or min(*bound, *unbound) <= 0:
        return None
    return statistics.median(bound) / statistics.median(unbound)


def bootstrap_ci(
    bound: Sequence[float],
    unbound: Sequence[float],
    *,
    confidence: float = DEFAULT_CONFIDENCE,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> tuple[float, float] | None:
    """Percentile bootstrap interval of median(bound) / median(unbound).

    Each resample draws each arm with replacement at its own size (the arms are
    independent samples, not pairs: pairing by round would assume the drift the
    interleaving exists to spread). None when the ratio is undefined or an arm has fewer
    than MIN_RUNS figures.
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence {confidence} is not between 0 and 1")
    if resamples < 1:
        raise ValueError("resamples must be at least 1")
    if len(bound) < MIN_RUNS or len(unbound) < MIN_RUNS or ratio_of_medians(bound, unbound) is None:
        return None
    rng = random.Random(seed)
    b, u = list(bound), list(unbound)
    median, choices = statistics.median, rng.choices
    ratios = [median(choices(b, k=len(b))) / median(choices(u, k=len(u))) for _ in range(resamples)]
    tail = (1.0 - confidence) / 2.0
    return quantile(ratios, tail), quantile(ratios, 1.0 - tail)


def verdict(ci: tuple[float, float] | None, *, higher_is_better: bool = False) -> str:
    """better / worse when the interval excludes 1, else no difference.

    The ratio is bound / unbound, so an interval wholly below 1 means the bound arm's
    figure is lower: better for a time, worse for a throughput.
    """
    if ci is None:
        return INCONCLUSIVE
    lo, hi = ci
    if hi < 1.0:
        return WORSE if higher_is_better else BETTER
    if lo > 1.0:
        return BETTER if higher_is_better else WORSE
    return NO_DIFFERENCE


@dataclass(frozen=True)
class Comparison:
    """Both arms, the ratio of medians with its interval, and what that means."""

    unbound: ArmStats
    bound: ArmStats
    ratio: float | None
    ci: tuple[float, float] | None
    verdict: str
    why: str  # one line: what the verdict rests on
    higher_is_better: bool
    confidence: float = DEFAULT_CONFIDENCE
    resamples: int = DEFAULT_RESAMPLES
    seed: int = DEFAULT_SEED

    def to_dict(self) -> dict[str, Any]:
        arm_names = ("unbound", "bound")
        rest = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in arm_names}
        arms = {"unbound": self.unbound.to_dict(), "bound": self.bound.to_dict()}
        return {"arms": arms, **rest, "ci": list(self.ci) if self.ci is not None else None}


def compare(
    unbound: Sequence[float],
    bound: Sequence[float],
    *,
    higher_is_better: bool = False,
    seed: int = DEFAULT_SEED,
) -> Comparison:
    ratio = ratio_of_medians(bound, unbound)
    ci = bootstrap_ci(bound, unbound, seed=seed)
    result = verdict(ci, higher_is_better=higher_is_better)
    why = _why(result, len(unbound), len(bound), ratio, higher_is_better)
    return Comparison(
        arm_stats(unbound), arm_stats(bound), ratio, ci, result, why, higher_is_better, seed=seed
    )


def _why(result: str, n_unbound: int, n_bound: int, ratio: float | None, hib: bool) -> str:
    pct = f"{DEFAULT_CONFIDENCE * 100:g} %"
    good = "higher" if hib else "lower"
    if result == INCONCLUSIVE:
        if min(n_unbound, n_bound) < MIN_RUNS:
            return (
                f"an interval needs at least {MIN_RUNS} figures per arm "
                f"(unbound {n_unbound}, bound {n_bound})"
            )
        return "no ratio: a figure is zero or negative"
    if result == NO_DIFFERENCE:
        return f"the {pct} interval of the ratio contains 1"
    assert ratio is not None
    side = "lower" if ratio < 1.0 else "higher"
    return f"the {pct} interval of the ratio excludes 1: bound is {side}, {good} is better"
