"""Planners: what decides, round after round, which tools to run."""

from __future__ import annotations

from ._base import Planner as Planner
from ._base import PlannerContext as PlannerContext
from ._base import PlannerLike as PlannerLike

__all__ = ["Planner", "PlannerContext", "PlannerLike"]
