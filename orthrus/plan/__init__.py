"""The study plan: what a config asks for, computed by the package (the workflow only runs it)."""

from orthrus.plan.study import PlanError, Study

__all__ = ["PlanError", "Study"]
