"""Library entry points shared by the CLI and the web page."""

from __future__ import annotations

from trainmem.model.resolve import resolve_model
from trainmem.model.spec import ModelSpec
from trainmem.setup import TrainingSetup, make_setup, validate_for_model

__all__ = ["build"]


def build(model: str, **setup_fields: object) -> tuple[ModelSpec, TrainingSetup]:
    """Resolve a model reference and validate a setup against it (raises TrainmemError subclasses)."""
    setup = make_setup(**setup_fields)
    spec = resolve_model(model)
    validate_for_model(setup, spec)
    return spec, setup
