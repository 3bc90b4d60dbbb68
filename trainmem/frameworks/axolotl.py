"""Axolotl as it ships (v0.18.0, commit 067b021c8): its Llama-3 example configs — axolotl runs only from a config —
``examples/llama-3/qlora.yml`` (QLoRA), ``lora-1b.yml`` (LoRA on a 16-bit base; ``lora-8b.yml`` loads the base in
8 bits, which trainmem does not model) and ``fft-8b.yaml`` (full fine-tuning), over the schema's defaults
(``src/axolotl/utils/schemas/``) and HF Trainer + PEFT."""

from __future__ import annotations

from trainmem.frameworks.stack import Default, Stack

__all__ = ["STACK"]

_S = "axolotl v0.18.0 src/axolotl/utils/schemas/"
_X = "axolotl v0.18.0 examples/llama-3/"
_Q, _L, _F = _X + "qlora.yml", _X + "lora-1b.yml", _X + "fft-8b.yaml"

STACK = Stack(
    name="axolotl",
    release="axolotl v0.18.0",
    engines=("torch", "fsdp2", "deepspeed"),
    defaults=(
        Default(field="precision", value="bf16", engines=("torch", "fsdp2"),
                source=f"{_Q} bf16: auto -> torch_dtype bfloat16 (loaders/model.py model_kwargs['dtype'])"),
        Default(field="optimizer", value="paged-adamw", when=("qlora",), source=f"{_Q} optimizer: paged_adamw_32bit"),
        Default(field="optimizer", value="adamw-8bit", when=("lora",), source=f"{_L} optimizer: adamw_8bit"),
        Default(field="optimizer", value="paged-adamw-8bit", when=("full",),
                source=f"{_F} optimizer: paged_adamw_8bit"),
        Default(field="recompute", value="full", source=f"{_Q} gradient_checkpointing: true"),
        Default(field="attn", value="flash", source=f"{_Q} attn_implementation: flash_attention_2"),
        Default(field="loss", value="hf", source=f"{_S}config.py chunked_cross_entropy=None (the model's loss)"),
        Default(field="loop", value="trainer", source="axolotl v0.18.0 core/trainers: HF Trainer.compute_loss"),
        Default(field="seq_len", value=4096, when=("qlora",), source=f"{_Q} sequence_len: 4096 sample_packing: true"),
        Default(field="seq_len", value=2048, when=("lora",), source=f"{_L} sequence_len: 2048 sample_packing: true"),
        Default(field="seq_len", value=8192, when=("full",), source=f"{_F} sequence_len: 8192 sample_packing: true"),
        Default(field="micro_batch", value=2, when=("lora",), source=f"{_Q} micro_batch_size: 2"),
        Default(field="micro_batch", value=1, when=("full",), source=f"{_F} micro_batch_size: 1"),
        Default(field="grad_accum", value=4, when=("qlora",), source=f"{_Q} gradient_accumulation_steps: 4"),
        Default(field="grad_accum", value=2, when=("lora",), source=f"{_L} gradient_accumulation_steps: 2"),
        Default(field="grad_accum", value=8, when=("full",), source=f"{_F} gradient_accumulation_steps: 8"),
        Default(field="lora_targets", value=("all-linear",), when=("qlora",), source=f"{_Q} lora_target_linear: true"),
        Default(field="lora_targets", when=("lora",),
                value=("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"),
                source=f"{_L} lora_target_modules: [gate_proj, down_proj, up_proj, q_proj, v_proj, k_proj, o_proj]"),
        Default(field="compile", value=False, source=f"{_S}config.py torch_compile=None"),
        Default(field="offload_activations", value=False, source=f"{_S}config.py activation_offloading=False"),
        Default(field="adapter_dtype", value="fp32", when=("lora",),
                source="peft 0.21.2 get_peft_model autocast_adapter_dtype=True"),
        Default(field="kbit_prep", value="none", when=("qlora",),
                source="axolotl v0.18.0 src/axolotl/loaders/model.py: prepare_model_for_kbit_training, then "
                       "_convert_embedding_modules_dtype(torch_dtype) puts norms, embed_tokens and lm_head back "
                       "(needs_fa2_dtype for lora/qlora, not QLoRA + FSDP)"),
    ),
    notes=(
        "the examples pack samples (sample_packing: true): every row is sequence_len tokens long",
    ),
)
