"""The seed article's worked examples (shared/seed, §1.2, §1.3, §4.1), under each accounting."""

from __future__ import annotations

import pytest

from trainmem.memory import accounting as acc
from trainmem.memory import estimate
from trainmem.model.resolve import resolve_model
from trainmem.setup import make_setup
from trainmem.units import GB, GiB, MiB

P7 = 7_000_000_000


def test_16_bytes_per_param_is_112_gb() -> None:
    assert acc.seed_model_states_bytes(P7) == 112 * GB


def test_seed_activation_example_is_512_mib_not_mb() -> None:
    b = acc.seed_activation_bytes(1, 2048, 4096, 32, 2)
    assert b == 512 * MiB == 536_870_912
    assert b != 512 * 10**6


def test_zero2_on_8_gpus_each_accounting() -> None:
    assert acc.seed_zero_bytes(P7, 2, 8) == int(50.75 * GB)            # master weights kept whole
    assert acc.zero_paper_bytes(P7, 2, 8) == int(26.25 * GB)           # 2P + 14P/8
    assert acc.deepspeed_estimator_gpu_bytes(P7, 2, 8) == 2 * P7 + 18 * P7 // 8 == int(29.75 * GB)


def test_zero_paper_stages_7_5b_64_gpus_figure_1() -> None:
    """Rajbhandari et al. 2020, Figure 1: Ψ = 7.5B, N_d = 64: 120 GB, 31.4 GB, 16.6 GB, 1.9 GB."""
    p = 7_500_000_000
    assert acc.zero_paper_bytes(p, 0, 64) / GB == pytest.approx(120.0)
    assert acc.zero_paper_bytes(p, 1, 64) / GB == pytest.approx(31.4, abs=0.05)
    assert acc.zero_paper_bytes(p, 2, 64) / GB == pytest.approx(16.6, abs=0.05)
    assert acc.zero_paper_bytes(p, 3, 64) / GB == pytest.approx(1.9, abs=0.05)


def test_megatron_theoretical() -> None:
    assert acc.megatron_theoretical_bytes(P7, 8, False) == 18 * P7
    assert acc.megatron_theoretical_bytes(P7, 8, True) == 6 * P7 + 12 * P7 // 8


def test_trainmem_zero2_reports_what_deepspeed_allocates() -> None:
    """7B on 8 GPUs, ZeRO-2, bf16: at the backward peak DeepSpeed holds 2P (16-bit params) + 4P/8 (fp32
    master) + 8P/8 (Adam) + 2P/8 (16-bit grad partition) — the ZeRO paper's 26.25 GB — plus its 1e9-byte
    ipg reduce bucket and the activations; at the step it builds the fp32 grad partition (4P/8)."""
    spec = resolve_model("7B")
    e = estimate(spec, make_setup(engine="deepspeed", zero=2, gpus=8))
    bd = e.breakdown_at_peak_bytes
    states = bd["parameters"] + bd["master_weights"] + bd["optimizer_states"] + bd["gradients"]
    assert states == pytest.approx(acc.zero_paper_bytes(P7, 2, 8), rel=1e-6)
    assert bd["communication_buffers"] == pytest.approx(2 * 500_000_000, abs=512)
    assert bd["activations"] > 10 * GiB  # 32 layers × ≈45.6·s·h bytes + logits: far above the seed's 0.5 GiB


def test_model_states_static_between_steps_16p_on_one_gpu_without_activations() -> None:
    """torch engine, amp-bf16 AdamW: fp32 params 4P + Adam 8P stay between steps (set_to_none frees
    grads); the seed's 16P counts 16-bit params + fp32 master, which torch AMP does not have."""
    spec = resolve_model("7B")
    e = estimate(spec, make_setup())
    assert e.static_bytes - e.cuda_only_bytes == pytest.approx(12 * P7, rel=1e-6)
