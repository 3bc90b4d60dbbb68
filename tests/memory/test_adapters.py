"""LoRA adapters: on the output head (``--lora-targets ...,lm_head``) and in bf16 (``--adapter-dtype bf16``).
Hand-computed on Llama-3.1-8B (h 4096, kv 8 × 128, V 128256, 32 layers), micro-batch 1 × 2048 tokens, rank 16.
The traced counterparts are tests/trace/test_lora_head_trace.py."""

from __future__ import annotations

import pytest

from trainmem.api import build
from trainmem.errors import ConfigError
from trainmem.memory.estimate import estimate
from trainmem.memory.lora_head import (head_adapter_backward_bytes, head_adapter_forward_bytes,
                                       head_adapter_saved_bytes)
from trainmem.memory.states import lora_param_count, paged_optimizer_state_bytes

H, V, T, R, L = 4096, 128256, 2048, 16, 32
QV_PER_LAYER = R * (H + H) + R * (H + 1024)          # q_proj 4096→4096, v_proj 4096→1024
HEAD = R * (H + V)                                   # lora_A 16×4096, lora_B 128256×16


def _b(**kw):
    return build("llama-3.1-8b", lora_rank=R, seq_len=T, **kw)


def test_head_adapter_parameter_count() -> None:
    spec, s = _b(lora_targets="q_proj,v_proj,lm_head")
    assert lora_param_count(spec, s) == L * QV_PER_LAYER + HEAD == 8_933_376
    spec, s = _b(lora_targets="all-linear")  # PEFT's all-linear leaves the output layer out
    spec2, s2 = _b(lora_targets="all-linear,lm_head")
    assert lora_param_count(spec2, s2) - lora_param_count(spec, s) == HEAD


def test_head_adapter_saved_and_transient_bytes_per_dtype() -> None:
    # bf16 base, fp32 adapters, no autocast: lora_A keeps x's fp32 copy (4·h), lora_B the fp32 rank activation
    spec, s = _b(lora_targets="q_proj,v_proj,lm_head", precision="bf16")
    assert head_adapter_saved_bytes(spec, s) == (4 * H + 4 * R) * T == 33_685_504
    assert head_adapter_forward_bytes(spec, s) == (2 + 4 + 4 - 2) * V * T == 2_101_346_304
    assert head_adapter_backward_bytes(spec, s) == (4 + 2 + 4) * V * T
    # autocast: 16-bit casts kept (2·h, 2·r) and the cached 16-bit adapter weights; the fp32 x copy a frame local
    spec, s = _b(lora_targets="q_proj,v_proj,lm_head", precision="amp-bf16")
    assert head_adapter_saved_bytes(spec, s) == (2 * H + 2 * R) * T + 2 * HEAD == 21_078_016
    assert head_adapter_forward_bytes(spec, s) == 4 * V * T + 4 * H * T == 1_084_227_584
    # bf16 adapters: x itself (the final norm's output) and the bf16 rank activation
    spec, s = _b(lora_targets="q_proj,v_proj,lm_head", precision="bf16", adapter_dtype="bf16")
    assert head_adapter_saved_bytes(spec, s) == (2 * H + 2 * R) * T
    assert head_adapter_forward_bytes(spec, s) == 4 * V * T
    spec, s = _b(lora_targets="q_proj,v_proj")
    assert head_adapter_saved_bytes(spec, s) == head_adapter_forward_bytes(spec, s) == 0


def test_bf16_adapters_states_and_activations() -> None:
    n = L * QV_PER_LAYER
    fp32 = estimate(*_b(lora_targets="q_proj,v_proj")).to_dict()
    bf16 = estimate(*_b(lora_targets="q_proj,v_proj", adapter_dtype="bf16")).to_dict()
    assert fp32["n_trainable_params"] == bf16["n_trainable_params"] == n == 6_815_744
    f, b = fp32["breakdown_at_peak_bytes"], bf16["breakdown_at_peak_bytes"]
    assert f["optimizer_states"] == 2 * 4 * n and b["optimizer_states"] == 2 * 2 * n  # AdamW in the param dtype
    assert f["parameters"] - b["parameters"] == 2 * n
    # per layer, amp-bf16: fp32 adapters keep a 16-bit cast of x per adapter (2·h each), 2·r, and the cached
    # 16-bit adapter weights; bf16 adapters keep x once (shared by q and v) and 2·r each, no weight copies
    fp32_layer = 2 * (2 * H + 2 * R) * T + 2 * QV_PER_LAYER
    bf16_layer = 2 * H * T + 2 * (2 * R) * T
    assert f["activations"] - b["activations"] == L * (fp32_layer - bf16_layer) == 550_502_400


def test_adapter_dtype_refusals_and_default() -> None:
    assert _b()[1].adapter_dtype == "fp32"
    assert build("llama-3.1-8b")[1].adapter_dtype is None
    for kw, msg in [(dict(adapter_dtype="bf16", precision="fp32"), "needs a bf16 base"),
                    (dict(adapter_dtype="bf16", precision="amp-fp16"), "needs a bf16 base"),
                    (dict(adapter_dtype="bf16", engine="deepspeed"), "deepspeed casts the whole model")]:
        with pytest.raises(ConfigError, match=msg):
            _b(**kw)
    with pytest.raises(ConfigError, match="needs LoRA"):
        build("llama-3.1-8b", adapter_dtype="bf16")


def test_head_target_refusals() -> None:
    with pytest.raises(ConfigError, match="lm_head with --loss chunked is not modelled"):
        _b(lora_targets="q_proj,lm_head", loss="chunked")
    with pytest.raises(ConfigError, match=r"lm_head with tp\(2\) > 1"):
        _b(lora_targets="q_proj,lm_head", engine="fsdp2", gpus=4, tp=2)


def test_paged_optimizer_pages_the_head_adapter() -> None:
    """bitsandbytes pages state buffers of >= 1e5 elements: lora_B of the head (128256 × 16) is one."""
    spec, s = _b(lora_targets="q_proj,lm_head", optimizer="paged-adamw")
    spec0, s0 = _b(lora_targets="q_proj", optimizer="paged-adamw")
    assert paged_optimizer_state_bytes(spec, s) - paged_optimizer_state_bytes(spec0, s0) == 8 * V * R
