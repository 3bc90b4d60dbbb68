"""The planner: the fastest strategy that fits a GPU pool (``trainmem plan``), how many GPUs a model
needs, and what each technique saves and costs (``trainmem compare``).

The names are loaded on first use (PEP 562), so that ``trainmem.plan.compare`` — which ``trainmem estimate``
of a run that does not fit imports for its cheapest fix — does not import the whole search."""

from __future__ import annotations

__all__ = ["PlanRequest", "plan", "Knobs"]

_LAZY = {"PlanRequest": "trainmem.plan.search", "plan": "trainmem.plan.search", "Knobs": "trainmem.plan.space"}


def __getattr__(name: str):  # noqa: ANN202
    if name in _LAZY:
        import importlib
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'trainmem.plan' has no attribute {name!r}")
