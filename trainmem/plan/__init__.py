"""The planner: the fastest strategy that fits a GPU pool (``trainmem plan``), how many GPUs a model
needs, and what each technique saves and costs (``trainmem compare``)."""

from trainmem.plan.search import PlanRequest, plan
from trainmem.plan.space import Knobs

__all__ = ["PlanRequest", "plan", "Knobs"]
