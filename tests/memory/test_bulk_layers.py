"""Simulating the middle of a run of identical layers as one block must not change any result."""

from __future__ import annotations

import pytest

import importlib
from trainmem.memory import estimate
from trainmem.model.resolve import resolve_model
from trainmem.setup import make_setup

CASES = [
    ("llama-3.1-8b", dict()),
    ("llama-3.1-8b", dict(precision="bf16", micro_batch=4, seq_len=4096)),
    ("llama-3.1-8b", dict(precision="bf16", micro_batch=1, seq_len=128)),  # grads outgrow activations
    ("llama-3.1-8b", dict(recompute="full", micro_batch=8, grad_accum=4)),
    ("llama-3.1-8b", dict(attn="eager", precision="bf16", seq_len=1024, micro_batch=2)),
    ("qwen2.5-7b", dict(engine="fsdp2", gpus=8, micro_batch=2, grad_accum=3)),
    ("qwen2.5-7b", dict(engine="fsdp2", gpus=8, zero=2, recompute="full")),
    ("qwen2.5-7b", dict(engine="fsdp2", gpus=64, precision="bf16", seq_len=256)),
    ("mistral-7b", dict(engine="deepspeed", zero=2, gpus=8, micro_batch=4, grad_accum=2)),
    ("mistral-7b", dict(engine="deepspeed", zero=3, gpus=16, micro_batch=2)),
    ("mistral-7b", dict(engine="deepspeed", zero=1, gpus=4, seq_len=256)),
    ("llama-3.1-70b", dict(engine="megatron", tp=4, pp=4, gpus=64, zero=1, grad_accum=16, sp=True)),
    ("deepseek-v3", dict(engine="megatron", tp=2, pp=8, ep=8, gpus=256, zero=1, grad_accum=8)),
    ("mixtral-8x7b", dict(engine="fsdp2", gpus=32, precision="bf16")),
    ("gpt2", dict(micro_batch=8, seq_len=1024, optimizer="sgd-momentum")),
]


@pytest.mark.parametrize("model,kw", CASES)
def test_bulk_equals_layer_by_layer(model: str, kw: dict, monkeypatch) -> None:
    spec, setup = resolve_model(model), make_setup(**kw)
    fast = estimate(spec, setup)
    monkeypatch.setattr(importlib.import_module("trainmem.memory.estimate"), "_BULK", False)
    slow = estimate(spec, setup)
    assert fast.peak_allocated_bytes == slow.peak_allocated_bytes
    assert fast.breakdown_at_peak_bytes == slow.breakdown_at_peak_bytes
    assert fast.static_bytes == slow.static_bytes
