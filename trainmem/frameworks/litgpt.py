"""LitGPT 0.5.13 as it ships: ``litgpt finetune_lora`` / ``finetune_full`` with their ``setup()`` defaults
(``litgpt/finetune/lora.py``, ``full.py``; ``tests/frameworks`` reads them from the installed package)."""

from __future__ import annotations

from trainmem.frameworks.stack import Default, Run, Stack

__all__ = ["STACK", "LM_HEAD_CHUNK_TOKENS"]

_L = "litgpt 0.5.13 litgpt/finetune/lora.py"
_F = "litgpt 0.5.13 litgpt/finetune/full.py"
LM_HEAD_CHUNK_TOKENS = 128
"""``model(input_ids, lm_head_chunk_size=128)`` and ``chunked_cross_entropy(chunk_size=128)``: 128 tokens a chunk."""


def _targets(run: Run) -> tuple[str, ...]:
    """``lora_query`` + ``lora_value``: slices of the fused qkv (``LoRAQKVLinear``, trainmem's ``qkv.q,qkv.v``) with
    bf16-true, whose adapters are in the model's bf16; under bf16-mixed (fp32 adapters) PEFT-style ``q_proj,v_proj``,
    the same parameter count on a family with separate q/k/v projections (trainmem/model/lora_targets.py)."""
    return ("qkv.q", "qkv.v") if run.fields.get("precision") == "bf16" else ("q_proj", "v_proj")


def _adapter_dtype(run: Run) -> str | None:
    """bf16-true keeps the adapters in bf16 (``fabric.init_module`` in the precision's dtype); bf16-mixed in fp32."""
    return "bf16" if run.fields.get("precision") == "bf16" else None


def _chunks(run: Run) -> int:
    """Chunks of 128 tokens over the sequence (litgpt's chunk size is in tokens, trainmem's count in chunks)."""
    return max(1, min(65536, -(-run.seq_len // LM_HEAD_CHUNK_TOKENS)))


STACK = Stack(
    name="litgpt",
    release="litgpt 0.5.13",
    engines=("torch", "fsdp2"),
    defaults=(
        Default(field="engine", value="fsdp2", when=("multi-gpu",),
                source=f"{_L} ModelParallelStrategy(parallelize_fn): fully_shard per Block; {_F} FSDPStrategy"),
        Default(field="precision", value="bf16", engines=("torch", "fsdp2"), when=("qlora",),
                source=f"{_L} quantize bnb.nf4 refuses mixed precision: bf16-true (BitsandbytesPrecision)"),
        Default(field="precision", value="amp-bf16", engines=("torch", "fsdp2"),
                source="litgpt 0.5.13 litgpt/utils.py get_default_supported_precision(training=True) = bf16-mixed"),
        Default(field="optimizer", value="paged-adamw", when=("qlora",),
                source="litgpt 0.5.13 litgpt/utils.py instantiate_bnb_optimizer: bnb.optim.PagedAdamW"),
        Default(field="optimizer", value="adamw", source=f"{_L} optimizer='AdamW' (torch.optim.AdamW, foreach)"),
        Default(field="optimizer_impl", value="foreach", engines=("torch", "fsdp2"),
                source=f"{_L} instantiate_torch_optimizer: torch.optim.AdamW without fused"),
        Default(field="recompute", value="full", when=("multi-gpu",),
                source=f"{_L} parallelize_fn(activation_checkpointing=True); {_F} activation_checkpointing_policy={{Block}}"),
        Default(field="recompute", value="none", source=f"{_L} strategy='auto' on one device: no checkpointing"),
        Default(field="loss", value="chunked", source=f"{_L} chunked_cross_entropy(chunk_size=128)"),
        Default(field="loss_chunks", value=_chunks, source=f"{_L} model(input_ids, lm_head_chunk_size=128): "
                                                           "ceil(seq_len / 128) chunks"),
        Default(field="loop", value="script",
                source=f"{_L} fit: logits = model(...); loss = chunked_cross_entropy(logits, ...); "
                       "fabric.backward(loss) with logits alive"),
        Default(field="micro_batch", value=1, source=f"{_L} TrainArgs(micro_batch_size=1)"),
        Default(field="adapter_dtype", value=_adapter_dtype, when=("lora",),
                source="litgpt 0.5.13 litgpt/finetune/lora.py fabric.init_module under precision bf16-true"),
        Default(field="lora_targets", value=_targets, when=("lora",),
                source=f"{_L} lora_query=True lora_key=False lora_value=True lora_projection=False lora_mlp=False "
                       "lora_head=False"),
        Default(field="compile", value=False, source=f"{_L} no torch.compile"),
    ),
    notes=(
        "LitGPT's LoRA adapts slices of the fused qkv projection (LoRAQKVLinear): qkv.q,qkv.v with bf16-true "
        "(--precision bf16); under bf16-mixed counted as PEFT adapters on q_proj and v_proj",
    ),
)
