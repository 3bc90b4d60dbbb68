"""Accelerate 1.15.0 as it ships: ``accelerate launch`` without a config (``accelerate/state.py``) running the
loop of its examples (``examples/nlp_example.py``)."""

from __future__ import annotations

from trainmem.frameworks.stack import Default, Stack

__all__ = ["STACK"]

STACK = Stack(
    name="accelerate",
    release="Accelerate 1.15.0",
    engines=("torch", "fsdp2", "deepspeed"),
    defaults=(
        Default(field="engine", value="torch",
                source="accelerate 1.15.0 accelerate/state.py distributed_type MULTI_GPU (DDP) without a config"),
        Default(field="precision", value="fp32", source="accelerate 1.15.0 accelerate/state.py "
                                                        "ACCELERATE_MIXED_PRECISION default 'no'"),
        Default(field="loop", value="script", source="accelerate 1.15.0 examples/nlp_example.py outputs = "
                                                     "model(**batch); loss = outputs.loss; accelerator.backward(loss)"),
        Default(field="optimizer", value="adamw", source="accelerate 1.15.0 examples/nlp_example.py "
                                                         "torch.optim.AdamW"),
        Default(field="optimizer_impl", value="foreach", engines=("torch", "fsdp2"),
                source="torch.optim.AdamW's CUDA default (foreach)"),
    ),
    notes=(),
)
