"""DeepSpeed 0.19.5 as it ships: a ``ds_config`` with only the batch set, parsed by
``deepspeed.runtime.config.DeepSpeedConfig`` (``tests/frameworks`` checks the values with DeepSpeed's parser)."""

from __future__ import annotations

from trainmem.frameworks.stack import Default, Stack

__all__ = ["STACK"]

_C = "deepspeed 0.19.5 deepspeed/runtime/"
_D = ("deepspeed",)

STACK = Stack(
    name="deepspeed",
    release="DeepSpeed 0.19.5",
    engines=("deepspeed",),
    defaults=(
        Default(field="engine", value="deepspeed", source=f"{_C}engine.py DeepSpeedEngine"),
        Default(field="precision", engines=_D, value="fp32", source=f"{_C}constants.py FP16_ENABLED_DEFAULT=False; "
                                                        "precision_config.py bf16.enabled=False"),
        Default(field="zero", engines=_D, value=0, source=f"{_C}zero/config.py DeepSpeedZeroConfig.stage=0"),
        Default(field="offload", engines=_D, value="none",
                source=f"{_C}zero/config.py offload_optimizer=None offload_param=None"),
        Default(field="micro_batch", engines=_D, value=1, source=f"{_C}constants.py train_micro_batch_size_per_gpu=1"),
    ),
    notes=(
        "the training loop is the user's: trainmem's default (the output dropped before backward) unless --loop script",
    ),
)
