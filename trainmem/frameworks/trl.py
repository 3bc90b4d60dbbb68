"""TRL's ``SFTTrainer`` with ``SFTConfig()`` defaults and a model given by its id, as TRL 1.16.0 ships
(``tests/frameworks`` reads the defaults from the installed package)."""

from __future__ import annotations

from trainmem.frameworks.hf_trainer import PEFT_SOURCE, peft_default_targets
from trainmem.frameworks.stack import Default, Stack

__all__ = ["STACK"]

_SC = "trl 1.16.0 trainer/sft_config.py SFTConfig"

STACK = Stack(
    name="trl",
    release="trl 1.16.0 SFTTrainer + transformers 5.24.0 + peft 0.21.2",
    engines=("torch", "fsdp2", "deepspeed"),
    defaults=(
        Default(field="precision", value="amp-bf16", engines=("torch", "fsdp2"),
                source=f"{_SC}.bf16=None -> True; trainer/sft_trainer.py model_init_kwargs dtype unset -> float32"),
        Default(field="optimizer", value="adamw", source=f"{_SC}.optim=adamw_torch_fused"),
        Default(field="optimizer_impl", value="fused", engines=("torch", "fsdp2"),
                source=f"{_SC}.optim=adamw_torch_fused (torch.optim.AdamW(fused=True))"),
        Default(field="recompute", value="full",
                source="trl 1.16.0 trainer/base_config.py gradient_checkpointing=True"),
        Default(field="loop", value="trainer", source="trl 1.16.0 trainer/sft_trainer.py SFTTrainer.compute_loss"),
        Default(field="loss", value="fused-linear",
                source="trl 1.16.0 trainer/sft_trainer.py add_fused_lm_head -> kernels/chunked_logprob.py "
                       "ChunkedLogProbFunction (TOKEN_CHUNK_SIZE=4096, chunk_size=32768)"),
        Default(field="seq_len", value=1024, source=f"{_SC}.max_length=1024"),
        Default(field="micro_batch", value=8, source=f"{_SC}.per_device_train_batch_size=8"),
        Default(field="grad_accum", value=1, source=f"{_SC}.gradient_accumulation_steps=1"),
        Default(field="compile", value=False, source=f"{_SC}.torch_compile=False"),
        Default(field="lora_dropout", value=0.05, when=("lora",),
                source="trl 1.16.0 trainer/model_config.py ModelConfig.lora_dropout=0.05 (get_peft_config)"),
        Default(field="offload_activations", value=False, source=f"{_SC}.activation_offloading=False"),
        Default(field="lora_targets", value=peft_default_targets, when=("lora",),
                source=f"{PEFT_SOURCE} (LoraConfig target_modules=None)"),
        Default(field="adapter_dtype", value="bf16", when=("qlora",), engines=("torch", "fsdp2"),
                source="trl 1.16.0 trainer/sft_trainer.py: if _is_quantized_model: param.data = "
                       "param.data.to(torch.bfloat16) for every trainable parameter (since 0.26)"),
        Default(field="kbit_prep", value="none", when=("qlora",),
                source="trl 1.16.0 trainer/sft_trainer.py: no prepare_model_for_kbit_training (called for "
                       "non-sharded k-bit models through 0.21, with peft_module_casting_to_bf16 under bf16)"),
        Default(field="adapter_dtype", value="fp32", when=("lora",),
                source="peft 0.21.2 get_peft_model autocast_adapter_dtype=True; trainer/sft_trainer.py "
                       "autocast_adapter_dtype=False with ZeRO-3 only"),
    ),
    notes=(
        "TRL's fused LM head is counted as Liger's fused linear cross-entropy (its own tiles: 4096 tokens by 32768 "
        "vocabulary columns, in the compute dtype)",
        "sequences are padded to the longest of the batch, not to max_length: seq_len is an upper bound",
        "a model object passed to SFTTrainer keeps its own dtype (from_pretrained loads a 16-bit checkpoint in "
        "16 bits): give --precision bf16 then",
    ),
)
