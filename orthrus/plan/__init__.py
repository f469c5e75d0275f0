"""The study plan: what a config asks for, computed by the package (the workflow only runs it)."""

from orthrus.plan.study import Study

__all__ = ["Study"]
