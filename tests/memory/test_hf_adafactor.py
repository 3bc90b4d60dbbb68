"""transformers' Adafactor (``--optimizer hf-adafactor``, HF Trainer ``optim="adafactor"``): its fp32 factored
state and its one-tensor-at-a-time step (trainmem/memory/hf_adafactor.py), hand-computed and traced with
transformers' own ``Adafactor`` class on fake tensors."""

import pytest

from tests.trace._specs import LLAMA_TINY
from trainmem.errors import ConfigError
from trainmem.memory.hf_adafactor import (hf_adafactor_bytes, hf_adafactor_state_bytes, hf_adafactor_step_temp_bytes,
                                          largest_trainable_numel)
from trainmem.model.hf import spec_from_hf_config
from trainmem.setup import make_setup

SPEC = spec_from_hf_config(LLAMA_TINY, name="llama-tiny")  # h 128, i 256, V 1024, 2 layers, untied head
V, H, I = 1024, 128, 256


def _r(n: int) -> int:  # the caching allocator's 512-B rounding
    return -(-n // 512) * 512


def test_state_is_fp32_row_and_column_factors_per_matrix():
    """Per matrix (out, in): 4·out + 4·in B, each rounded to 512 B; per vector (norms): 4·h. By hand."""
    mats = [(V, H), (V, H)] + 2 * [(H, H)] * 4 + 2 * [(I, H), (I, H), (H, I)]
    vecs = 2 * 2 + 1  # input + post-attention norm per layer, the final norm
    want = sum(_r(4 * r) + _r(4 * c) for r, c in mats) + vecs * _r(4 * H)
    assert hf_adafactor_state_bytes(SPEC, make_setup(precision="fp32", optimizer="hf-adafactor")) == want


def test_step_transient_is_two_fp32_copies_of_the_largest_tensor():
    """fp32 parameters: ``update`` and the tensor computed from it, 8 B per element of the largest tensor (the
    1024 × 128 embedding); 16-bit parameters add ``p.float()`` and ``grad.float()``: 16 B."""
    s = make_setup(precision="fp32", optimizer="hf-adafactor")
    assert largest_trainable_numel(SPEC, s) == V * H
    assert hf_adafactor_step_temp_bytes(V * H, 4) == 8 * V * H
    assert hf_adafactor_step_temp_bytes(V * H, 2) == 16 * V * H
    assert hf_adafactor_bytes(SPEC, s, 4)[1] == 8 * V * H


def test_lora_state_and_largest_tensor_are_the_adapters():
    """LoRA r 8 on q,v: lora_A (8 × 128) and lora_B (128 × 8) per target; the largest is 1024 elements."""
    s = make_setup(precision="bf16", optimizer="hf-adafactor", lora_rank=8, lora_targets=("q_proj", "v_proj"))
    assert largest_trainable_numel(SPEC, s) == 8 * H
    per_pair = (_r(4 * 8) + _r(4 * H)) + (_r(4 * H) + _r(4 * 8))
    assert hf_adafactor_state_bytes(SPEC, s) == 2 * 2 * per_pair


def test_refused_off_the_torch_engine():
    with pytest.raises(ConfigError, match="hf-adafactor"):
        make_setup(engine="fsdp2", gpus=2, optimizer="hf-adafactor")


def test_traced_with_transformers_own_adafactor():
    """The tracer runs transformers.optimization.Adafactor (scale_parameter/relative_step False, as HF Trainer
    builds it): its state equals the estimate's plus its 0-d ``RMS`` tensor per parameter (512 B each, left out
    of the estimate), and its transient peak is the estimate's two fp32 copies of the largest tensor, not
    torch.optim.Adafactor's group-wide temporary (≈ 4 B per parameter)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from trainmem.trace.step import trace_step

    s = make_setup(precision="fp32", optimizer="hf-adafactor", seq_len=64)
    res = trace_step(SPEC, s)
    n_tensors = 1 + 2 * 9 + 1 + 1  # embedding; per layer q,k,v,o,gate,up,down + 2 norms; final norm; lm_head
    states = res.breakdown_at_peak_bytes["optimizer_states"] + res.category_peak_bytes["optimizer_states"]
    assert res.category_peak_bytes["optimizer_states"] == hf_adafactor_state_bytes(SPEC, s) + 512 * n_tensors, states
    step = hf_adafactor_step_temp_bytes(largest_trainable_numel(SPEC, s), 4)
    assert step <= res.category_peak_bytes["temporaries"] <= 1.02 * step
    assert res.category_peak_bytes["temporaries"] < 0.5 * 4 * res.n_params  # (foreach Adafactor's temporary)
