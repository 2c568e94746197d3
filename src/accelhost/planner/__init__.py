"""Planners: pure functions from a `Topology` to a `Plan`, one per strategy."""

from accelhost.planner.ascend import plan_ascend

__all__ = ["plan_ascend"]
