"""HF ``transformers.Trainer`` with a model from ``from_pretrained`` (and PEFT's LoRA), as transformers 5.24.0
and PEFT 0.21.2 ship: ``TrainingArguments()`` defaults (``tests/frameworks`` reads them from the installed
package)."""

from __future__ import annotations

from trainmem.frameworks.stack import Default, Run, Stack

__all__ = ["STACK", "peft_default_targets"]

_TA = "transformers 5.24.0 training_args.py TrainingArguments"

#: PEFT 0.21.2 utils/constants.py TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING, for trainmem's families
#: (model types it lacks — phi3, the MoE families, gpt_oss, nemotron — have no default: PEFT refuses a LoRA
#: config without target_modules there).
PEFT_TARGETS: dict[str, tuple[str, ...]] = {
    **{mt: ("q_proj", "v_proj") for mt in ("llama", "mistral", "mixtral", "qwen2", "qwen3", "gemma", "gemma2",
                                           "gemma3_text", "opt")},
    "gpt2": ("c_attn",), "gpt_neox": ("query_key_value",), "falcon": ("query_key_value",),
    "bert": ("query", "value"), "roberta": ("query", "value"),
}
PEFT_SOURCE = "peft 0.21.2 utils/constants.py TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING"


def peft_default_targets(run: Run) -> tuple[str, ...] | None:
    """PEFT's ``LoraConfig()`` targets for the model's type (``target_modules=None``), None where PEFT has none."""
    return PEFT_TARGETS.get(run.model_type)


STACK = Stack(
    name="hf-trainer",
    release="transformers 5.24.0 Trainer + peft 0.21.2",
    engines=("torch", "fsdp2", "deepspeed"),
    defaults=(
        Default(field="precision", value="bf16", engines=("torch", "fsdp2"),
                source="transformers 5.24.0 modeling_utils.py from_pretrained dtype=None -> 'auto' (the checkpoint's "
                       "16-bit dtype); TrainingArguments bf16=False fp16=False (no autocast)"),
        Default(field="optimizer", value="adamw", source=f"{_TA}.optim=adamw_torch_fused"),
        Default(field="optimizer_impl", value="fused", engines=("torch", "fsdp2"),
                source=f"{_TA}.optim=adamw_torch_fused (torch.optim.AdamW(fused=True))"),
        Default(field="recompute", value="none", source=f"{_TA}.gradient_checkpointing=False"),
        Default(field="loop", value="trainer",
                source="transformers 5.24.0 trainer.py Trainer.compute_loss returns the loss (outputs dropped)"),
        Default(field="loss", value="hf",
                source=f"the model's ForCausalLMLoss (fp32 upcast); {_TA}.use_liger_kernel=False"),
        Default(field="micro_batch", value=8, source=f"{_TA}.per_device_train_batch_size=8"),
        Default(field="grad_accum", value=1, source=f"{_TA}.gradient_accumulation_steps=1"),
        Default(field="compile", value=False, source=f"{_TA}.torch_compile=False"),
        Default(field="lora_targets", value=peft_default_targets, when=("lora",),
                source=f"{PEFT_SOURCE} (LoraConfig target_modules=None)"),
        Default(field="adapter_dtype", value="fp32", when=("lora",),
                source="peft 0.21.2 get_peft_model autocast_adapter_dtype=True"),
    ),
    notes=(
        "an fp32 checkpoint (no 16-bit dtype in its config.json) trains in fp32: give --precision fp32",
    ),
)
