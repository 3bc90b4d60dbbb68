"""ms-swift as it ships (v4.5.2, tag commit ff5128777, the release trainmem/frameworks/readers/ms_swift.py reads):
``swift sft`` argument defaults (``swift/arguments/``, ``swift/trainers/arguments.py``) over HF Trainer + PEFT.
The same at v4.4.3 (tag commit e1287928b): ``git diff v4.4.3 v4.5.2 -- swift/arguments swift/trainers/arguments.py``
changes none of them. (3602360a5, cited before, is main after v4.5.2: version 4.6.0.dev0.)"""

from __future__ import annotations

from trainmem.frameworks.stack import Default, Stack

__all__ = ["STACK"]

_A = "ms-swift v4.5.2 swift/arguments/"
_T = "ms-swift v4.5.2 swift/trainers/"
_HF = ("torch", "fsdp2", "deepspeed")  # swift sft (HF Trainer); swift megatron sft has its own arguments

STACK = Stack(
    name="ms-swift",
    release="ms-swift v4.5.2",
    engines=("torch", "fsdp2", "deepspeed", "megatron"),
    defaults=(
        Default(field="lora_rank", engines=_HF, value=8,
                source=f"{_A}base_args/base_args.py tuner_type='lora'; tuner_args.py lora_rank=8"),
        Default(field="lora_targets", engines=_HF, value=("all-linear",), when=("lora",),
                source=f"{_A}tuner_args.py target_modules=['all-linear']"),
        Default(field="lora_dropout", engines=_HF, value=0.05, when=("lora",),
                source=f"{_A}tuner_args.py lora_dropout=0.05"),
        Default(field="kbit_prep", engines=_HF, value="none", when=("qlora",),
                source="ms-swift v4.5.2 swift/: no prepare_model_for_kbit_training"),
        Default(field="precision", value="bf16", engines=("torch", "fsdp2"),
                source=f"{_A}base_args/model_args.py torch_dtype=None -> the checkpoint's bfloat16; "
                       "_init_mixed_precision bf16=True"),
        Default(field="recompute", engines=_HF, value="full",
                source=f"{_T}arguments.py gradient_checkpointing=True"),
        Default(field="micro_batch", engines=_HF, value=1,
                source=f"{_T}arguments.py per_device_train_batch_size=1"),
        Default(field="optimizer", engines=_HF, value="adamw", source="HF TrainingArguments optim=adamw_torch_fused"),
        Default(field="optimizer_impl", value="fused", engines=("torch", "fsdp2"),
                source="HF TrainingArguments optim=adamw_torch_fused"),
        Default(field="loop", engines=_HF, value="trainer",
                source=f"{_T}seq2seq_trainer.py Seq2SeqTrainer.compute_loss"),
        Default(field="loss", engines=_HF, value="hf",
                source=f"{_A}base_args/template_args.py padding_free=False, the model's loss"),
    ),
    notes=(
        "ms-swift trains LoRA by default (tuner_type lora): give --lora-rank 0 for full fine-tuning",
        "swift megatron sft (--engine megatron) has Megatron-SWIFT's own defaults, not listed here",
    ),
)
