"""Unsloth as it ships (commit 015bdef0d9, 2026-08-22): ``FastLanguageModel.from_pretrained`` and
``get_peft_model`` defaults (``unsloth/models/loader.py``, ``unsloth/models/llama.py``) under TRL."""

from __future__ import annotations

from trainmem.frameworks.stack import Default, Stack

__all__ = ["STACK"]

_LD = "unsloth 015bdef unsloth/models/loader.py FastLanguageModel.from_pretrained"
_GP = "unsloth 015bdef unsloth/models/llama.py get_peft_model"

STACK = Stack(
    name="unsloth",
    release="unsloth (2026-08-22, 015bdef0d9)",
    engines=("torch",),
    defaults=(
        Default(field="lora_rank", value=16, source=f"{_GP} r=16"),
        Default(field="qlora", value=True, when=("lora",), source=f"{_LD} load_in_4bit=True"),
        Default(field="qlora_impl", value="bnb", when=("qlora",), source=f"{_LD} load_in_4bit=True (bitsandbytes)"),
        Default(field="lora_targets", value=("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                                             "down_proj"), when=("lora",),
                source=f"{_GP} target_modules=[q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj]"),
        Default(field="precision", value="bf16", engines=("torch",),
                source=f"{_LD} dtype=None -> bfloat16 where supported"),
        Default(field="recompute", value="full", source=f"{_GP} use_gradient_checkpointing='unsloth'"),
        Default(field="offload_activations", value=True,
                source=f"{_GP} use_gradient_checkpointing='unsloth' (offloaded to CPU)"),
        Default(field="loss", value="fused-linear",
                source="unsloth 015bdef unsloth/models/llama.py CausalLM forward: unsloth_fused_ce_loss "
                       "(UNSLOTH_RETURN_LOGITS=0, EMPTY_LOGITS)"),
        Default(field="optimizer", value="adamw", source="trl SFTConfig optim=adamw_torch_fused"),
        Default(field="optimizer_impl", value="fused", engines=("torch",),
                source="trl SFTConfig optim=adamw_torch_fused"),
        Default(field="loop", value="trainer", source="unsloth patches TRL's SFTTrainer"),
    ),
    notes=(
        "Unsloth's own Triton kernels (RoPE, RMSNorm, SwiGLU, LoRA MLP) save fewer tensors than the "
        "transformers modules trainmem models",
    ),
)
