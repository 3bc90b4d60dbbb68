"""LLM Foundry (v0.7.0-542, commit 8c8dd48f7) as it ships: ``scripts/train/train.py`` with
``scripts/train/yamls/pretrain/mpt-7b.yaml`` on Composer, MPT's own defaults
(``llmfoundry/models/mpt/modeling_mpt.py``, ``llmfoundry/models/layers/attention.py``)."""

from __future__ import annotations

from trainmem.frameworks.stack import Default, Stack

__all__ = ["STACK"]

_Y = "llm-foundry 8c8dd48 scripts/train/yamls/pretrain/mpt-7b.yaml"

STACK = Stack(
    name="llm-foundry",
    release="llm-foundry (8c8dd48f7)",
    engines=("fsdp2",),
    defaults=(
        Default(field="engine", value="fsdp2", when=("multi-gpu",), source=f"{_Y} fsdp_config sharding_strategy: "
                                                                       "FULL_SHARD (Composer FSDP1)"),
        Default(field="zero", value=3, engines=("fsdp2",), source=f"{_Y} fsdp_config sharding_strategy: FULL_SHARD"),
        Default(field="backward_prefetch", value="post", engines=("fsdp2",),
                source="composer FSDP backward_prefetch BACKWARD_POST (its default)"),
        Default(field="precision", value="amp-bf16", engines=("torch", "fsdp2"),
                source=f"{_Y} precision: amp_bf16 fsdp_config mixed_precision: PURE"),
        Default(field="recompute", value="full", source=f"{_Y} fsdp_config activation_checkpointing: true"),
        Default(field="loss", value="fused-ce", source="llm-foundry 8c8dd48 llmfoundry/models/mpt/modeling_mpt.py "
                                                       "loss_fn='fused_crossentropy'"),
        Default(field="attn", value="flash", source="llm-foundry 8c8dd48 llmfoundry/models/layers/attention.py "
                                                    "attn_impl='flash'"),
        Default(field="seq_len", value=2048, source=f"{_Y} max_seq_len: 2048"),
        Default(field="micro_batch", value=8, source=f"{_Y} device_train_microbatch_size: 8"),
        Default(field="loop", value="trainer", source="composer Trainer: the loss from ComposerMPTCausalLM.loss"),
    ),
    notes=(
        "the optimizer is Composer's DecoupledAdamW (a per-parameter loop), counted as torch.optim.AdamW foreach",
    ),
)
