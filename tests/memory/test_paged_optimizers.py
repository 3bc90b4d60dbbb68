"""bitsandbytes' paged optimizers (PagedAdamW, PagedAdamW8bit), computed by hand from bitsandbytes'
``Optimizer8bit.get_state_buffer`` (bitsandbytes/optim/optimizer.py): a parameter of at least 1e5 elements gets
its ``state1``/``state2`` from ``F.get_paged`` — CUDA managed memory, invisible to torch's allocator — and a
smaller one ``torch.zeros_like``."""

from __future__ import annotations

import pytest

from trainmem.api import build
from trainmem.errors import TrainmemError
from trainmem.memory import estimate
from trainmem.memory.states import paged_optimizer_state_bytes

# Qwen2.5-0.5B: hidden 896, 14 heads and 2 KV heads of 64, MLP 4864, 24 layers, vocabulary 151936 (tied)
QWEN_LINEARS = 2 * 896 * 896 + 2 * 896 * 128 + 3 * 896 * 4864      # q, o; k, v; gate, up, down: all >= 1e5
QWEN_PAGED = 24 * QWEN_LINEARS + 151936 * 896                       # + the (tied) embedding
QWEN_SMALL = 24 * (2 * 896 + 896 + 2 * 128) + 896                   # norms and q/k/v biases, final norm


def test_full_fine_tune_pages_every_matrix_and_keeps_norms_and_biases() -> None:
    spec, s = build("qwen2.5-0.5b", optimizer="paged-adamw")
    assert QWEN_PAGED + QWEN_SMALL == spec.n_params
    assert paged_optimizer_state_bytes(spec, s) == 8 * QWEN_PAGED
    _, s8 = build("qwen2.5-0.5b", optimizer="paged-adamw-8bit")
    assert paged_optimizer_state_bytes(spec, s8) == 2 * QWEN_PAGED


def test_paged_state_leaves_the_allocator_figures() -> None:
    spec, s_paged = build("qwen2.5-0.5b", optimizer="paged-adamw")
    _, s_plain = build("qwen2.5-0.5b", optimizer="adamw")
    paged, plain = estimate(spec, s_paged), estimate(spec, s_plain)
    assert paged.paged_optimizer_bytes == 8 * QWEN_PAGED
    # the states left in torch memory: Adam's two fp32 states of the norms and biases (512 B per tensor at most)
    assert 0 <= paged.breakdown_at_peak_bytes["optimizer_states"] - 8 * QWEN_SMALL < 512 * 24 * 5
    # (bitsandbytes updates in place: no foreach temporaries either, so the peak drops by at least the states)
    assert plain.peak_allocated_bytes - paged.peak_allocated_bytes >= 8 * QWEN_PAGED
    # nvidia-smi shows the resident managed memory
    assert paged.device_total_bytes >= 8 * QWEN_PAGED + paged.peak_reserved_bytes


def test_lora_adapters_below_1e5_elements_are_not_paged() -> None:
    """Llama-3.1-8B, q_proj and v_proj: at rank 8 every lora_A (8 × 4096) and lora_B (4096 × 8, 1024 × 8) is under
    1e5 elements; at rank 64, q's A and B and v's A are paged (262,144 each), v's B (1024 × 64) is not."""
    kw = dict(optimizer="paged-adamw", lora_targets="q_proj,v_proj")
    spec, s8 = build("llama-3.1-8b", lora_rank=8, **kw)
    assert paged_optimizer_state_bytes(spec, s8) == 0
    _, s64 = build("llama-3.1-8b", lora_rank=64, **kw)
    assert paged_optimizer_state_bytes(spec, s64) == 8 * 32 * 3 * 64 * 4096


def test_paged_state_beyond_the_gpu_is_paged_out_not_an_oom() -> None:
    """Llama-3.1-8B full fine-tuning with PagedAdamW on one 80 GB GPU: 64 GB of fp32 states cannot all be resident
    beside the fp32 weights and gradients; the driver pages them out, so the run fits if the rest does."""
    spec, s = build("llama-3.1-8b", optimizer="paged-adamw", recompute="full", seq_len=1024)
    est = estimate(spec, s)
    assert est.paged_optimizer_bytes > 60e9
    assert est.fits and est.device_total_bytes == est.gpu_memory_bytes


@pytest.mark.parametrize("kw, msg", [
    (dict(engine="fsdp2", gpus=2), "modelled for --engine torch"),
    (dict(engine="deepspeed", zero=2, gpus=2, offload="optimizer"), "cannot be offloaded"),
])
def test_paged_refusals(kw: dict, msg: str) -> None:
    with pytest.raises(TrainmemError, match=msg):
        build("qwen2.5-0.5b", optimizer="paged-adamw", **kw)
