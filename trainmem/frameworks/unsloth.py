"""Unsloth as it ships (commit 015bdef0d9, 2026-08-22): ``FastLanguageModel.from_pretrained`` and
``get_peft_model`` defaults (``unsloth/models/loader.py``, ``unsloth/models/llama.py``) under TRL."""

from __future__ import annotations

from trainmem.frameworks.stack import Default, Run, Stack

__all__ = ["STACK"]

_LD = "unsloth 015bdef unsloth/models/loader.py FastLanguageModel.from_pretrained"
_GP = "unsloth 015bdef unsloth/models/llama.py get_peft_model"


def unsloth_kernels(run: Run) -> str | None:
    """``unsloth`` where get_peft_model's fast patching runs and trainmem describes it: a Llama or Mistral model
    (trainmem/memory/unsloth.py), LoRA without dropout (llama.py: "Dropout = 0 is supported for fast patching")."""
    if run.model_type in ("llama", "mistral") and not run.fields.get("lora_dropout"):
        return "unsloth"
    return None

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
        Default(field="kernels", value=unsloth_kernels, when=("lora",), engines=("torch",),
                source="unsloth 015bdef unsloth/kernels/fast_lora.py LoRA_MLP/LoRA_QKV/LoRA_W save_for_backward"
                       "(X, e, g / X / A, B, X), rms_layernorm.py save_for_backward(X, W, r), rope_embedding.py "
                       "ctx.cos, ctx.sin (= ef70177a24)"),
        Default(field="optimizer", value="adamw", source="trl SFTConfig optim=adamw_torch_fused"),
        Default(field="optimizer_impl", value="fused", engines=("torch",),
                source="trl SFTConfig optim=adamw_torch_fused"),
        Default(field="loop", value="trainer", source="unsloth patches TRL's SFTTrainer"),
    ),
    notes=(
        "Unsloth's own Triton kernels (RoPE, RMSNorm, LoRA MLP/QKV/O) are counted for Llama and Mistral (--kernels "
        "unsloth); on other families they save fewer tensors than the transformers modules trainmem counts",
        "use_gradient_checkpointing='unsloth' is counted as torchtune's OffloadActivations (5 checkpointed inputs "
        "in flight), not unsloth_zoo's own offloaded checkpointer",
    ),
)
