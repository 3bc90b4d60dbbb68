"""A model given to the web API as a pasted ``config.json`` object (the CLI takes its path instead).

The pasted object is read by the same reader as a config.json file
(:func:`trainmem.model.hf.spec_from_hf_config`) and validated by :func:`trainmem.api.build_spec`, as
:func:`trainmem.api.build` validates a resolved name.
"""

from __future__ import annotations

from typing import Any

from trainmem.errors import ConfigError
from trainmem.model.spec import ModelSpec
from trainmem.setup import TrainingSetup

__all__ = ["PASTED_NAME", "MAX_CONFIG_KEYS", "pasted_spec", "build_any", "plan_request"]

PASTED_NAME = "pasted config.json"
"""The model name of a pasted config (what the results show as ``model``)."""
MAX_CONFIG_KEYS = 10_000
"""A pasted config with more top-level keys than this is refused (real ones have < 100)."""


def pasted_spec(cfg: dict[str, Any]) -> ModelSpec:
    """The ModelSpec of a pasted config.json object (one line on a malformed one)."""
    from trainmem.model.hf import spec_from_hf_config

    if len(cfg) > MAX_CONFIG_KEYS:
        raise ConfigError(f"model: the pasted config.json has {len(cfg):,} keys (at most {MAX_CONFIG_KEYS:,})")
    return spec_from_hf_config(cfg, name=PASTED_NAME, source=PASTED_NAME)


def build_any(model: str | dict, **fields: object) -> tuple[ModelSpec, TrainingSetup]:
    """:func:`trainmem.api.build` for a model reference, or for a pasted config.json object."""
    if isinstance(model, dict):
        from trainmem.api import build_spec
        return build_spec(pasted_spec(model), **fields)
    from trainmem.api import build
    return build(model, **fields)


def plan_request(model: str | dict, cluster: str, global_batch: int, seq_len: int, precision: str, margin: float,
                 top: int, fix: str | None, extra: dict):  # noqa: ANN201 - PlanRequest
    """The planner's request as ``trainmem plan`` builds it (:func:`trainmem.python_api.plan_request`), for a
    model reference or a pasted config."""
    from trainmem.python_api import plan_request as request

    return request(pasted_spec(model) if isinstance(model, dict) else model, cluster, global_batch, seq_len,
                   precision, margin, top, fix, extra)
