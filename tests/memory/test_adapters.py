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
    assert head_adapter_backward_bytes(spec, s) == (4 + 4 + 2 - 2 - 2) * V * T  # (8 B per logit with the grad's 2)
    spec, s = _b(lora_targets="q_proj,v_proj,lm_head", precision="bf16", loss="chunked")  # one of 8 chunks at a time
    assert head_adapter_forward_bytes(spec, s) == 8 * V * T // 8 and head_adapter_saved_bytes(spec, s) == 33_685_504
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
    with pytest.raises(ConfigError, match="lm_head with --loss fused-linear is not modelled"):
        _b(lora_targets="q_proj,lm_head", loss="fused-linear")
    with pytest.raises(ConfigError, match=r"lm_head with tp\(2\) > 1"):
        _b(lora_targets="q_proj,lm_head", engine="fsdp2", gpus=4, tp=2)


def test_paged_optimizer_pages_the_head_adapter() -> None:
    """bitsandbytes pages state buffers of >= 1e5 elements: lora_B of the head (128256 × 16) is one."""
    spec, s = _b(lora_targets="q_proj,lm_head", optimizer="paged-adamw")
    spec0, s0 = _b(lora_targets="q_proj", optimizer="paged-adamw")
    assert paged_optimizer_state_bytes(spec, s) - paged_optimizer_state_bytes(spec0, s0) == 8 * V * R


@pytest.mark.parametrize("groups,enable", [(8, (True, False, True)), (2, (True, False, True)), (2, (False, True, False)),
                                           (1, (True, True, True))])
def test_qkv_slices_saved_tensors_equal_litgpts(groups: int, enable: tuple[bool, bool, bool]) -> None:
    """Real tensors, bf16, ``saved_tensors_hooks`` around litgpt 0.5.13's LoRAQKVLinear: it keeps x once, ``after_A``
    (r·n per token) and, unless all three slices are on, ``zero_pad``'s ``index_copy_`` source (Σ widths); trainmem's
    adapter terms for ``qkv.*`` targets (bf16 adapters, as litgpt runs them) are the same bytes."""
    torch = pytest.importorskip("torch")
    lora = pytest.importorskip("litgpt.lora")
    from trainmem.memory.activations import layer_saved
    from trainmem.model.hf import spec_from_hf_config
    from trainmem.setup import make_setup

    h, d, r, heads, b, s = 256, 32, 8, 8, 2, 64
    mod = lora.LoRAQKVLinear(in_features=h, out_features=(heads + 2 * groups) * d, head_size=d, n_head=heads,
                             n_query_groups=groups, r=r, lora_alpha=16, enable_lora=enable, bias=False)
    mod = mod.to(torch.bfloat16)
    lora.mark_only_lora_as_trainable(mod)
    x = torch.randn(b, s, h, dtype=torch.bfloat16, requires_grad=True)
    params = {p.untyped_storage().data_ptr() for p in mod.parameters()}
    saved: dict[int, int] = {}

    def pack(t):
        if t.untyped_storage().data_ptr() not in params and t.is_floating_point():  # (not lora_ind, int64)
            saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        mod(x)
    spec = spec_from_hf_config(dict(model_type="llama", hidden_size=h, intermediate_size=688, num_hidden_layers=2,
                                    num_attention_heads=heads, num_key_value_heads=groups, head_dim=d,
                                    vocab_size=512), name="litgpt-shape")
    targets = ",".join(x for x, on in zip(("qkv.q", "qkv.k", "qkv.v"), enable) if on)
    setup = make_setup(precision="bf16", seq_len=s, micro_batch=b, lora_rank=r, lora_targets=targets,
                       adapter_dtype="bf16")
    terms = sum(t.bytes for t in layer_saved(spec, setup, 1).terms if t.component == "lora")
    assert terms == sum(saved.values())


def test_qkv_slice_refusals_and_counts() -> None:
    """Falcon-7B (multi-query: 71 heads of 64, one kv head) with litgpt's lora_query + lora_value, rank 16: per
    layer r·(4544 + 4544) + r·(4544 + 64) = 219,136; 32 layers. On Llama the same count as q_proj,v_proj, plus the
    zero_pad source (2·(4096 + 1024) B per token per layer) in the activations."""
    spec, s = build("falcon-7b", lora_rank=16, lora_targets="qkv.q,qkv.v", adapter_dtype="bf16")
    assert lora_param_count(spec, s) == 32 * 219_136 == 7_012_352
    sl = estimate(*_b(lora_targets="qkv.q,qkv.v", adapter_dtype="bf16")).to_dict()
    qv = estimate(*_b(lora_targets="q_proj,v_proj", adapter_dtype="bf16")).to_dict()
    assert sl["n_trainable_params"] == qv["n_trainable_params"]
    assert sl["breakdown_at_peak_bytes"]["activations"] - qv["breakdown_at_peak_bytes"]["activations"] == \
        L * 2 * (H + 1024) * T
    for kw, msg in [(dict(lora_targets="qkv.q"), "use --adapter-dtype bf16"),
                    (dict(lora_targets="qkv.q,q_proj", adapter_dtype="bf16"), "adapted twice"),
                    (dict(lora_targets="qkv.v,all-linear", adapter_dtype="bf16"), "adapted twice")]:
        with pytest.raises(ConfigError, match=msg):
            _b(**kw)
    with pytest.raises(ConfigError, match="need a decoder with q/k/v heads"):
        build("deepseek-v2-lite", lora_rank=8, lora_targets="qkv.q", adapter_dtype="bf16")
