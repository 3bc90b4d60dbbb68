"""LLaMA-Factory 0.9.5 as it ships: ``src/llamafactory/hparams/`` defaults with its example configs
(``examples/train_lora/qwen3_lora_sft.yaml``, ``examples/train_full/qwen3_full_sft.yaml``) over HF Trainer."""

from __future__ import annotations

from trainmem.frameworks.stack import Default, Stack

__all__ = ["STACK"]

_H = "llamafactory 0.9.5 src/llamafactory/hparams/"
_XL = "llamafactory 0.9.5 examples/train_lora/qwen3_lora_sft.yaml"
_XF = "llamafactory 0.9.5 examples/train_full/qwen3_full_sft.yaml"

STACK = Stack(
    name="llama-factory",
    release="llamafactory 0.9.5 (LLaMA-Factory)",
    engines=("torch", "fsdp2", "deepspeed"),
    defaults=(
        Default(field="engine", value="deepspeed", when=("full", "multi-gpu"),
                source=f"{_XF} deepspeed: examples/deepspeed/ds_z3_config.json"),
        Default(field="zero", value=3, when=("full", "multi-gpu"), engines=("deepspeed",),
                source=f"{_XF} deepspeed: ds_z3_config.json (stage 3)"),
        Default(field="precision", value="amp-bf16", when=("full",), engines=("torch", "fsdp2"),
                source="llamafactory 0.9.5 model/adapter.py _setup_full_tuning cast_trainable_params_to_fp32; "
                       f"{_XF} bf16: true"),
        Default(field="precision", value="bf16", when=("lora",), engines=("torch", "fsdp2"),
                source=f"{_H}parser.py compute_dtype=bfloat16 from bf16: true; "
                       "model/patcher.py torch_dtype=compute_dtype"),
        Default(field="adapter_dtype", value="fp32", when=("lora",),
                source="llamafactory 0.9.5 model/adapter.py cast_trainable_params_to_fp32 (not pure_bf16)"),
        Default(field="kbit_prep", value="none", when=("lora",),
                source=f"{_H}model_args.py upcast_layernorm=False (model_utils/checkpointing.py "
                       "prepare_model_for_training; no prepare_model_for_kbit_training)"),
        Default(field="recompute", value="full",
                source=f"{_H}model_args.py disable_gradient_checkpointing=False (model_utils/checkpointing.py)"),
        Default(field="lora_targets", value=("all-linear",), when=("lora",),
                source=f"{_H}finetuning_args.py lora_target='all'"),
        Default(field="optimizer", value="adamw", source="HF TrainingArguments optim=adamw_torch_fused"),
        Default(field="optimizer_impl", value="fused", engines=("torch", "fsdp2"),
                source="HF TrainingArguments optim=adamw_torch_fused"),
        Default(field="loss", value="hf", source=f"{_H}finetuning_args.py use_liger_kernel=False (the model's loss)"),
        Default(field="loop", value="trainer", source="llamafactory 0.9.5 train/sft/trainer.py CustomSeq2SeqTrainer"),
        Default(field="seq_len", value=2048, source=f"{_XL} cutoff_len: 2048"),
        Default(field="micro_batch", value=1, source=f"{_XL} per_device_train_batch_size: 1"),
        Default(field="grad_accum", value=8, when=("lora",), source=f"{_XL} gradient_accumulation_steps: 8"),
        Default(field="grad_accum", value=2, when=("full",), source=f"{_XF} gradient_accumulation_steps: 2"),
    ),
    notes=(
        "gradient checkpointing is reentrant (use_reentrant_gc=True)",
    ),
)
