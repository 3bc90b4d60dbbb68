"""Megatron-LM / Megatron-Core core_v0.19.0 as it ships: ``pretrain_gpt.py`` with the argument defaults of
``megatron/training/arguments.py`` (flags off unless given; the list is tests/export/megatron_args_core_v0.19.0.txt)."""

from __future__ import annotations

from trainmem.frameworks.stack import Default, Stack

__all__ = ["STACK"]

_A = "Megatron-LM core_v0.19.0 megatron/training/arguments.py"
_M = ("megatron",)

STACK = Stack(
    name="megatron",
    release="Megatron-LM core_v0.19.0",
    engines=("megatron",),
    defaults=(
        Default(field="engine", value="megatron", source="Megatron-LM core_v0.19.0 pretrain_gpt.py"),
        Default(field="precision", engines=_M, value="fp32", source=f"{_A} --bf16 store_true, --fp16 store_true"),
        Default(field="zero", engines=_M, value=0, source=f"{_A} --use-distributed-optimizer store_true (off)"),
        Default(field="recompute", engines=_M, value="none", source=f"{_A} --recompute-granularity default None"),
        Default(field="sp", engines=_M, value=False, source=f"{_A} --sequence-parallel store_true (off)"),
        Default(field="loop", engines=_M, value="trainer", source="megatron/core/pipeline_parallel/schedules.py "
                                                      "forward_backward_no_pipelining (the loss only)"),
    ),
    notes=(
        "Megatron-LM trains fp32 unless --bf16 or --fp16 is given; NeMo and Megatron-Bridge recipes set "
        "bf16 mixed precision and the distributed optimizer: give --precision mixed-bf16 --zero 1",
    ),
)
