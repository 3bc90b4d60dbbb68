"""Ring attention under context parallelism (trainmem.perf.ring) by hand, and its part of a torchtitan step."""

from __future__ import annotations

import pytest

from trainmem.hardware import get_gpu
from trainmem.model.resolve import resolve_model
from trainmem.perf import ring, step_time
from trainmem.perf.collectives import allgather_seconds, p2p_seconds, span
from trainmem.perf.device import device_of
from trainmem.perf.kernels import attention_backward_seconds, attention_forward_seconds, pointwise_seconds
from trainmem.perf.overlap import contention_seconds
from trainmem.setup import make_setup
from tests.perf._fixtures import IB, NVLINK, group

H100 = device_of(get_gpu("H100-SXM-80G"))
SPEC = resolve_model("llama-3.1-8b")


def test_step_keys_and_flops_are_the_causal_total():
    """256k tokens on CP 8: step 0 is causal over 32k local tokens (16384.5 keys per query), each other step
    sees half a 32k block (16384 keys); together the FLOPs of one causal kernel over 256k, ÷ 8."""
    assert ring.ring_step_keys(262144, 8) == (16384.5, 16384.0)
    k0, k1 = ring.ring_step_keys(262144, 8)
    assert k0 + 7 * k1 == pytest.approx((262144 + 1) / 2)
    assert ring.ring_step_keys(8192, 4) == (1024.5, 1024.0)


def test_ring_attention_is_one_kernel_per_step_at_its_own_efficiency():
    """8k tokens, CP 4, 32 heads of 128 on one rank of 2048 tokens: 4 kernels over ~1k keys each, slower than
    one causal kernel over the same FLOPs at 4k keys per query (efficiency s/(s + 240))."""
    peak = 989e12 * 0.84
    fwd, bwd = ring.ring_attention_seconds(2048, 32, 128, 128, 8192, 4, "fa2-hopper", peak)
    per_key = 2.0 * 2048 * 32 * 256
    f0 = attention_forward_seconds(per_key * 1024.5, "fa2-hopper", 1024.5, peak)
    f1 = attention_forward_seconds(per_key * 1024.0, "fa2-hopper", 1024.0, peak)
    assert fwd == pytest.approx(f0 + 3 * f1)
    assert bwd == pytest.approx(attention_backward_seconds(per_key * 1024.5, "fa2-hopper", 1024.5, peak)
                                + 3 * attention_backward_seconds(per_key * 1024.0, "fa2-hopper", 1024.0, peak))
    whole = attention_forward_seconds(per_key * 4096.5, "fa2-hopper", 4096.5, peak)
    # seconds ∝ keys·(keys + 240)/keys = keys + 240 per kernel: (1264.5 + 3·1264) against 4336.5, 16.6 % slower
    assert fwd / whole == pytest.approx((1264.5 + 3 * 1264) / 4336.5)


def test_merge_and_backward_bytes_by_hand():
    # forward: 100 output elements, 10 K/V elements, CP 8, bf16: 100·(6 + 7·38 + 6) + 10·7·4
    assert ring.sdpa_merge_hbm_bytes(100, 10, 8, 2) == 100 * 278 + 280
    # backward: dQ 100·(4 + 8·10 + 6); dK/dV 10·(4 + 10 + 7·(5 + 8) + 8·8 + 7·4 + 6)
    assert ring.ring_backward_hbm_bytes(100, 10, 8, 2) == 100 * 90 + 10 * 203
    assert ring.torch_cp_forward_exposed_seconds(3e-3, 1e-3, 1e-4) == pytest.approx(2.1e-3)
    # all-gather hidden under step 0; 3 exchanges of 0.5 ms under 0.1-ms steps; the last one exposed
    assert ring.torch_cp_backward_exposed_seconds(1e-3, 2e-3, 0.5e-3, 0.1e-3, 4, 0.0) == pytest.approx(1.7e-3)


def test_torchtitan_cp_part_of_a_step_by_hand():
    """fsdp2 (torchtitan) CP 2 on one node, 8k tokens, no recompute: per layer the fp32 merges, the exposed
    K/V all-gathers and the fp32 dK/dV exchanges (NVLink), 32 layers, one micro-batch."""
    s = make_setup(engine="fsdp2", gpus=8, cp=2, seq_len=8192, micro_batch=1, grad_accum=1)
    g = group(count=8)
    t = step_time(SPEC, s, g)
    tokens, heads, kv, c, hbm = 4096, 32, 8, 2, H100.hbm_bytes_per_s
    kv_el = tokens * kv * 256
    peak = H100.peak16_flops * H100.sustained
    per_key = 2.0 * tokens * heads * 256
    k0, k1 = ring.ring_step_keys(8192, 2)
    f0 = attention_forward_seconds(per_key * k0, "fa2-hopper", k0, peak)
    b0 = attention_backward_seconds(per_key * k0, "fa2-hopper", k0, peak)
    b1 = attention_backward_seconds(per_key * k1, "fa2-hopper", k1, peak)
    ag = allgather_seconds(2 * kv_el * c, span(2, 1, 8), NVLINK, IB)
    x = p2p_seconds(4.0 * kv_el, NVLINK)
    fwd = (pointwise_seconds(ring.sdpa_merge_hbm_bytes(tokens * heads * 128, kv_el, 2, c), 16, hbm)
           + max(0.0, ag - f0) + contention_seconds(ag, f0))
    bwd = (pointwise_seconds(ring.ring_backward_hbm_bytes(tokens * heads * 128, kv_el, 2, c), 16, hbm)
           + max(0.0, ag - b0) + max(0.0, x - b1) + x + contention_seconds(ag, b0) + contention_seconds(x, b1))
    assert t.breakdown["cp_comm"] == pytest.approx(32 * (fwd + bwd))
    # full recomputation runs the forward ring twice
    full = step_time(SPEC, make_setup(engine="fsdp2", gpus=8, cp=2, seq_len=8192, recompute="full"), g)
    assert full.breakdown["cp_comm"] == pytest.approx(32 * (2 * fwd + bwd))


def test_context_parallelism_costs_more_at_short_sequences():
    """Per token, CP 4 over 8 GPUs at 8k costs more than FSDP over the same 8 GPUs: short per-step kernels and
    fp32 merges around them."""
    g = group(count=8)
    plain = step_time(SPEC, make_setup(engine="fsdp2", gpus=8, seq_len=8192, grad_accum=4), g)
    cp = step_time(SPEC, make_setup(engine="fsdp2", gpus=8, cp=4, seq_len=8192, grad_accum=4), g)
    assert cp.tokens_per_second_per_gpu < plain.tokens_per_second_per_gpu
