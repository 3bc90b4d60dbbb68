"""FSDP2's CPUOffloadPolicy and QLoRA under FSDP2, computed by hand from the engines' sources.

* ``CPUOffloadPolicy`` (torch 2.13 ``_fsdp_collectives.py`` foreach_reduce): each new sharded gradient is copied
  to the pinned host gradient (``new_sharded_grad.to("cpu")``) and no GPU reference is kept, so no gradient
  lives on the GPU across the backward.
* QLoRA: FSDP all-gathers the packed 4-bit data (torchao ``NF4Tensor.fsdp_pre_all_gather``; bitsandbytes with
  ``bnb_4bit_quant_storage``), not 2 B per weight; bitsandbytes' quant state is not a parameter and stays
  whole on every rank, torchao shards it with the data.
"""

from __future__ import annotations

import pytest

from trainmem.api import build
from trainmem.errors import TrainmemError
from trainmem.memory import estimate

GiB = 2**30
# Llama-3.1-405B: hidden 16384, 8 KV heads of 128, MLP 53248, vocabulary 128256, 126 layers
H, KV, I, V = 16384, 8 * 128, 53248, 128256
LAYER_MATMUL = H * (2 * H + 2 * KV) + 3 * H * I          # q, o: h×h; k, v: h×1024; gate, up, down
LAYER_NORMS = 2 * H


def test_fsdp2_cpu_offload_keeps_no_gradient_on_the_gpu() -> None:
    """The issue's case: 70B, FSDP2 × 8, offload, seq 2048, mb 2, full recompute showed 31.1 GiB of sharded
    fp32 gradients at the peak (4 B × 70.55e9 / 8 = 32.9 GiB at the end of backward)."""
    spec, s = build("llama-3.1-70b", engine="fsdp2", gpus=8, precision="amp-bf16", offload="optimizer+params",
                    seq_len=2048, micro_batch=2, recompute="full")
    est = estimate(spec, s)
    assert est.category_peak_bytes.get("gradients", 0) == 0
    assert est.breakdown_at_peak_bytes.get("gradients", 0) == 0
    # host: fp32 parameter shard + fp32 gradient shard + Adam's two fp32 states = 16 B per parameter / 8 ranks
    T = spec.n_params
    assert abs(est.host_memory_bytes - 16 * T // 8) <= 16 * 8
    # without offload the same run holds its sharded gradients on the GPU
    _, s_gpu = build("llama-3.1-70b", engine="fsdp2", gpus=8, precision="amp-bf16", seq_len=2048, micro_batch=2,
                     recompute="full")
    assert estimate(spec, s_gpu).category_peak_bytes["gradients"] >= 0.95 * 4 * T / 8


def test_fsdp2_cpu_offload_under_grad_accumulation_adds_on_the_host() -> None:
    spec, s = build("qwen2.5-0.5b", engine="fsdp2", gpus=2, offload="optimizer+params", grad_accum=3)
    assert estimate(spec, s).category_peak_bytes.get("gradients", 0) == 0


def _unit_packed_bytes(impl: str) -> int:
    q = LAYER_MATMUL
    packed = q // 2
    scales = q // 64 + 4 * (q // (64 * 256))
    return (packed + scales if impl == "torchao" else packed) + 2 * LAYER_NORMS


@pytest.mark.parametrize("impl", ["torchao", "bnb"])
def test_fsdp2_qlora_gathers_packed_nf4(impl: str) -> None:
    """405B QLoRA on 8 GPUs: the peak holds the gathered root (embedding, final norm, head: 16-bit) and at most a
    layer and its prefetched neighbour gathered packed (≈1.5 GiB each) — not a 6 GiB 16-bit layer."""
    spec, s = build("llama-3.1-405b", engine="fsdp2", gpus=8, lora_rank=16, qlora=True, qlora_impl=impl,
                    recompute="full", seq_len=2048)
    assert s.qlora_impl == impl
    est = estimate(spec, s)
    root = 2 * (2 * V * H + H)
    unit16 = 2 * (LAYER_MATMUL + LAYER_NORMS)
    unit4 = _unit_packed_bytes(impl)
    assert unit4 / GiB == pytest.approx(1.53 if impl == "torchao" else 1.48, abs=0.01)
    # the static shard: the 16-bit embeddings and head and the NF4 layers over 8 ranks (+ bnb's whole quant state)
    q = 126 * LAYER_MATMUL
    scales = q // 64 + 4 * (q // (64 * 256))
    frozen16 = spec.n_params - q
    static_params = (q // 2 + scales + 2 * frozen16) // 8 + (scales * 7 // 8 if impl == "bnb" else 0)
    gathered = est.breakdown_at_peak_bytes["parameters"] - static_params
    assert gathered - root <= 2 * unit4 + 2**24        # the adapters' fp32 shard and rounding: < 16 MiB
    assert gathered - root < unit16


def test_qlora_impl_needs_qlora() -> None:
    with pytest.raises(TrainmemError, match="--qlora-impl torchao needs --qlora"):
        build("llama-3.1-8b", qlora_impl="torchao")


def test_qlora_impl_defaults_to_bitsandbytes() -> None:
    _, s = build("llama-3.1-8b", lora_rank=8, qlora=True)
    assert s.qlora_impl == "bnb"
    _, s = build("llama-3.1-8b", lora_rank=8)
    assert s.qlora_impl is None


@pytest.mark.parametrize("impl", ["bnb", "torchao"])
def test_fsdp2_offload_leaves_bitsandbytes_quant_state_on_the_gpu(impl: str) -> None:
    """CPUOffloadPolicy moves the sharded parameters to the host; bitsandbytes' quant state (absmax, nested absmax:
    not a parameter) stays on the GPU whole on every rank, while torchao's scalers are shard data and move with it.
    405B QLoRA on 8 GPUs: the bnb quant state is q/64 + 4·q/(64·256) bytes (≈ 3.0 GiB), on the GPU."""
    spec, s = build("llama-3.1-405b", engine="fsdp2", gpus=8, lora_rank=16, qlora=True, qlora_impl=impl,
                    recompute="full", seq_len=2048, offload="optimizer+params")
    est = estimate(spec, s)
    _, s_ao = build("llama-3.1-405b", engine="fsdp2", gpus=8, lora_rank=16, qlora=True, qlora_impl="torchao",
                    recompute="full", seq_len=2048, offload="optimizer+params")
    q = 126 * LAYER_MATMUL
    scales = q // 64 + 4 * (q // (64 * 256))
    ao = estimate(spec, s_ao)
    if impl == "bnb":
        assert est.static_bytes - ao.static_bytes == pytest.approx(scales, rel=0.01)
        assert ao.host_memory_bytes - est.host_memory_bytes == pytest.approx(scales // 8, rel=0.05)  # (bnb: not on the host)
    else:
        assert est.static_bytes == ao.static_bytes
