"""Megatron-Bridge v0.6.0 as it ships: its Llama 3 8B H100 bf16 pretraining recipe
(``src/megatron/bridge/recipes/llama/h100/llama3.py`` ``llama3_8b_pretrain_2gpu_h100_bf16_config`` over
``recipes/common.py`` ``_pretrain_common``) on Megatron-Core: unlike Megatron-LM's argument defaults, bf16 mixed
precision and the distributed optimizer."""

from __future__ import annotations

from trainmem.frameworks.stack import Default, Stack

__all__ = ["STACK"]

_R = "Megatron-Bridge v0.6.0 src/megatron/bridge/recipes/llama/h100/llama3.py llama3_8b_pretrain_2gpu_h100_bf16_config"
_M = ("megatron",)

STACK = Stack(
    name="megatron-bridge",
    release="Megatron-Bridge v0.6.0",
    engines=_M,
    defaults=(
        Default(field="engine", value="megatron", source="Megatron-Bridge v0.6.0 training/pretrain.py (Megatron-Core)"),
        Default(field="precision", value="mixed-bf16", engines=_M,
                source="Megatron-Bridge v0.6.0 src/megatron/bridge/recipes/common.py _pretrain_common "
                       "mixed_precision='bf16_mixed'"),
        Default(field="zero", value=1, engines=_M, source=f"{_R}: cfg.ddp.use_distributed_optimizer = True"),
        Default(field="grad_reduce_16bit", value=False, engines=_M, source=f"{_R}: cfg.ddp.grad_reduce_in_fp32 = True"),
        Default(field="recompute", value="none", engines=_M, source=f"{_R}: cfg.model.recompute_granularity = None"),
        Default(field="sp", value=False, engines=_M, source=f"{_R}: cfg.model.sequence_parallel = False"),
        Default(field="seq_len", value=8192, source=f"{_R}: cfg.model.seq_length = 8192"),
        Default(field="micro_batch", value=1, source=f"{_R}: cfg.train.micro_batch_size = 1"),
        Default(field="loop", value="trainer", engines=_M,
                source="megatron/core/pipeline_parallel/schedules.py (the loss only)"),
    ),
    notes=(
        "the recipe sets context parallelism 2 (cfg.model.context_parallel_size = 2): give --cp 2 to run it as written",
    ),
)
