"""Axolotl as it ships (v0.18.0, commit 067b021c8): the defaults of its config schema
(``src/axolotl/utils/schemas/config.py``, ``training.py``, ``peft.py``) over HF Trainer + PEFT."""

from __future__ import annotations

from trainmem.frameworks.hf_trainer import PEFT_SOURCE, peft_default_targets
from trainmem.frameworks.stack import Default, Stack

__all__ = ["STACK"]

_S = "axolotl v0.18.0 src/axolotl/utils/schemas/"

STACK = Stack(
    name="axolotl",
    release="axolotl v0.18.0",
    engines=("torch", "fsdp2", "deepspeed"),
    defaults=(
        Default(field="precision", value="bf16", engines=("torch", "fsdp2"),
                source=f"{_S}config.py bf16='auto' -> torch_dtype bfloat16 (loaders/model.py model_kwargs['dtype'])"),
        Default(field="optimizer", value="adamw", source=f"{_S}training.py optimizer='adamw_torch_fused'"),
        Default(field="optimizer_impl", value="fused", engines=("torch", "fsdp2"),
                source=f"{_S}training.py optimizer='adamw_torch_fused'"),
        Default(field="recompute", value="none", source=f"{_S}config.py gradient_checkpointing=False"),
        Default(field="loss", value="hf", source=f"{_S}config.py chunked_cross_entropy=None (the model's loss)"),
        Default(field="loop", value="trainer", source="axolotl v0.18.0 core/trainers: HF Trainer.compute_loss"),
        Default(field="seq_len", value=512, source=f"{_S}config.py sequence_len=512"),
        Default(field="micro_batch", value=1, source=f"{_S}training.py micro_batch_size=1"),
        Default(field="grad_accum", value=1, source=f"{_S}training.py gradient_accumulation_steps=1"),
        Default(field="compile", value=False, source=f"{_S}config.py torch_compile=None"),
        Default(field="offload_activations", value=False, source=f"{_S}config.py activation_offloading=False"),
        Default(field="lora_targets", value=peft_default_targets, when=("lora",),
                source=f"{_S}peft.py lora_target_modules=None lora_target_linear=None -> {PEFT_SOURCE}"),
        Default(field="adapter_dtype", value="fp32", when=("lora",),
                source="peft 0.21.2 get_peft_model autocast_adapter_dtype=True"),
    ),
    notes=(
        "sample_packing is off by default: sequences are padded to the longest of the batch, seq_len is an upper bound",
    ),
)
