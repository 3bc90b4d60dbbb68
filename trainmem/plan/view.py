"""A light stand-in for :class:`~trainmem.setup.TrainingSetup` for ranking candidates by step time.

The planner predicts the step time of tens of thousands of configurations; validating a pydantic
setup for each costs more than the prediction itself. A :class:`SetupView` carries the same
attributes (every model field, engine defaults resolved as the validators resolve them, and the
derived properties), without validation: a configuration whose memory is estimated is validated
for real first (:func:`trainmem.setup.make_setup`), so an invalid one never reaches a plan."""

from __future__ import annotations

from trainmem.setup import TrainingSetup

__all__ = ["SetupView", "FIELDS"]

FIELDS = tuple(TrainingSetup.model_fields)
_DEFAULTS = {name: f.default for name, f in TrainingSetup.model_fields.items()}


class SetupView:
    def __init__(self, **fields: object) -> None:
        d = self.__dict__
        d.update(_DEFAULTS)
        d.update(fields)

    def __setattr__(self, name: str, value: object) -> None:  # read-only, like the frozen setup
        raise AttributeError("SetupView is read-only")

    def replace(self, **fields: object) -> "SetupView":
        """A view with ``fields`` changed (as ``TrainingSetup.model_copy(update=...)``)."""
        return SetupView(**{**self.__dict__, **fields})

    tokens_per_micro_batch = TrainingSetup.tokens_per_micro_batch
    global_batch = TrainingSetup.global_batch
    fsdp_applied = TrainingSetup.fsdp_applied
    fsdp_shard_degree = TrainingSetup.fsdp_shard_degree
    is_lora = TrainingSetup.is_lora
