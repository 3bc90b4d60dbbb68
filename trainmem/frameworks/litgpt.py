"""LitGPT 0.5.13 as it ships: ``litgpt finetune_lora`` / ``finetune_full`` with the configs of its config hub
(``config_hub/finetune/llama-3.1-8b/{lora,qlora,full}.yaml`` at v0.5.13: ``precision: bf16-true``, whose measured
table is the hub's README) over the ``setup()`` defaults of ``litgpt/finetune/lora.py`` / ``full.py``
(``tests/frameworks`` reads those from the installed package). Without a config the CLI runs bf16-mixed
(``--precision amp-bf16``)."""

from __future__ import annotations

from trainmem.frameworks.stack import Default, Run, Stack

__all__ = ["STACK", "LM_HEAD_CHUNK_TOKENS"]

_L = "litgpt 0.5.13 litgpt/finetune/lora.py"
_F = "litgpt 0.5.13 litgpt/finetune/full.py"
_H = "litgpt v0.5.13 config_hub/finetune/llama-3.1-8b/"
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
        Default(field="precision", value="bf16", engines=("torch", "fsdp2"),
                source=f"{_H}lora.yaml precision: bf16-true (qlora.yaml, full.yaml too)"),
        Default(field="optimizer", value="paged-adamw", when=("qlora",),
                source="litgpt 0.5.13 litgpt/utils.py instantiate_bnb_optimizer: bnb.optim.PagedAdamW"),
        Default(field="optimizer", value="adamw", source=f"{_L} optimizer='AdamW' (torch.optim.AdamW, foreach)"),
        Default(field="optimizer_impl", value="foreach", engines=("torch", "fsdp2"),
                source=f"{_L} instantiate_torch_optimizer: torch.optim.AdamW without fused"),
        Default(field="recompute", value="full", when=("multi-gpu",),
                source=f"{_L} parallelize_fn(activation_checkpointing=True); "
                       f"{_F} activation_checkpointing_policy={{Block}}"),
        Default(field="recompute", value="none", source=f"{_L} strategy='auto' on one device: no checkpointing"),
        Default(field="loss", value="chunked", source=f"{_L} chunked_cross_entropy(chunk_size=128)"),
        Default(field="loss_chunks", value=_chunks, source=f"{_L} model(input_ids, lm_head_chunk_size=128): "
                                                           "ceil(seq_len / 128) chunks"),
        Default(field="loop", value="script",
                source=f"{_L} fit: logits = model(...); loss = chunked_cross_entropy(logits, ...); "
                       "fabric.backward(loss) with logits alive"),
        Default(field="seq_len", value=512, source=f"{_H}lora.yaml train.max_seq_length: 512"),
        Default(field="micro_batch", value=2, when=("qlora",), source=f"{_H}qlora.yaml train.micro_batch_size: 2"),
        Default(field="micro_batch", value=1, when=("lora",), source=f"{_H}lora.yaml train.micro_batch_size: 1"),
        Default(field="micro_batch", value=4, when=("full",), source=f"{_H}full.yaml train.micro_batch_size: 4"),
        Default(field="adapter_dtype", value=_adapter_dtype, when=("lora",),
                source="litgpt 0.5.13 litgpt/finetune/lora.py fabric.init_module under precision bf16-true"),
        Default(field="lora_targets", value=_targets, when=("lora",),
                source=f"{_L} lora_query=True lora_key=False lora_value=True lora_projection=False lora_mlp=False "
                       "lora_head=False"),
        Default(field="lora_dropout", value=0.05, when=("lora",),
                source="litgpt 0.5.13 finetune/lora.py setup(lora_dropout=0.05)"),
        Default(field="compile", value=False, source=f"{_L} no torch.compile"),
    ),
    notes=(
        "LitGPT's LoRA adapts slices of the fused qkv projection (LoRAQKVLinear): qkv.q,qkv.v with bf16-true; "
        "under bf16-mixed (--precision amp-bf16) counted as PEFT adapters on q_proj and v_proj",
        "sequences are padded to the longest of the batch, not to max_seq_length: seq_len is an upper bound",
    ),
)
