"""torchtune 0.6.1 as it ships: its recipes (``recipes/lora_finetune_single_device.py`` …) run with the configs
of ``recipes/configs/llama3_1/`` (``8B_lora_single_device.yaml``, ``8B_lora.yaml``, ``8B_full_single_device.yaml``,
``8B_full.yaml``, ``8B_qlora_single_device.yaml``); ``tests/frameworks`` reads those files from the installed
package."""

from __future__ import annotations

from trainmem.frameworks.stack import Default, Stack

__all__ = ["STACK", "CONFIGS"]

_C = "torchtune 0.6.1 recipes/configs/llama3_1/"
#: The config each condition pair reads (LoRA / full, one GPU / several).
CONFIGS = {("lora", "one-gpu"): "8B_lora_single_device.yaml", ("lora", "multi-gpu"): "8B_lora.yaml",
           ("full", "one-gpu"): "8B_full_single_device.yaml", ("full", "multi-gpu"): "8B_full.yaml"}
_LS, _LM, _FS, _FM = (_C + CONFIGS[k] for k in (("lora", "one-gpu"), ("lora", "multi-gpu"), ("full", "one-gpu"),
                                                ("full", "multi-gpu")))

STACK = Stack(
    name="torchtune",
    release="torchtune 0.6.1",
    engines=("torch", "fsdp2"),
    defaults=(
        Default(field="engine", value="fsdp2", when=("multi-gpu",),
                source="torchtune 0.6.1 recipes/*_distributed.py training.shard_model (fully_shard)"),
        Default(field="precision", value="bf16", engines=("torch", "fsdp2"),
                source=f"{_C}*.yaml dtype: bf16 (training.set_default_dtype(torch.bfloat16), no autocast)"),
        Default(field="optimizer", value="paged-adamw-8bit", when=("full", "one-gpu"),
                source=f"{_FS} optimizer: bitsandbytes.optim.PagedAdamW8bit"),
        Default(field="optimizer_in_backward", value=True, when=("full", "one-gpu"),
                source=f"{_FS} optimizer_in_bwd: True"),
        Default(field="optimizer", value="adamw", source=f"{_LS} optimizer: torch.optim.AdamW fused: True"),
        Default(field="optimizer_impl", value="fused", engines=("torch", "fsdp2"), when=("lora",),
                source=f"{_LS} optimizer: torch.optim.AdamW fused: True"),
        Default(field="optimizer_impl", value="fused", engines=("torch", "fsdp2"), when=("full", "multi-gpu"),
                source=f"{_FM} optimizer: torch.optim.AdamW fused: True"),
        Default(field="recompute", value="none", when=("lora", "multi-gpu"),
                source=f"{_LM} enable_activation_checkpointing: False"),
        Default(field="recompute", value="full", source=f"{_LS} enable_activation_checkpointing: True"),
        Default(field="loss", value="chunked", source=f"{_LS} loss: torchtune.modules.loss.CEWithChunkedOutputLoss"),
        Default(field="loss_chunks", value=8,
                source="torchtune 0.6.1 modules/loss/ce_chunked_output_loss.py num_output_chunks=8"),
        Default(field="loop", value="trainer",
                source="torchtune 0.6.1 recipes/lora_finetune_single_device.py _loss_step: del logits before backward"),
        Default(field="micro_batch", value=2, source=f"{_LS} batch_size: 2"),
        Default(field="grad_accum", value=8, when=("lora",), source=f"{_LS} gradient_accumulation_steps: 8"),
        Default(field="grad_accum", value=1, when=("full",), source=f"{_FM} gradient_accumulation_steps: 1"),
        Default(field="zero", value=3, engines=("fsdp2",),
                source="torchtune 0.6.1 training/_distributed.py shard_model reshard_after_forward=True"),
        Default(field="lora_targets", value=("q_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"),
                when=("lora",),
                source=f"{_LS} lora_attn_modules: [q_proj, v_proj, output_proj] apply_lora_to_mlp: True "
                       "apply_lora_to_output: False"),
        Default(field="qlora_impl", value="torchao", when=("qlora",),
                source="torchtune 0.6.1 modules/low_precision/nf4_linear.py torchao NF4Tensor"),
        Default(field="adapter_dtype", value="bf16", when=("lora",),
                source=f"{_LS} dtype: bf16 (training.set_default_dtype; training.validate_expected_param_dtype)"),
        Default(field="compile", value=False, source=f"{_LS} compile: False"),
        Default(field="offload_activations", value=False, source=f"{_LS} enable_activation_offloading: False"),
    ),
    notes=(
        "full distributed fine-tuning shards tok_embeddings and output as their own FSDP units "
        "(custom_sharded_layers); trainmem wraps each decoder layer and the root",
    ),
)
