"""FLOP counts by hand and against published formulas."""

from __future__ import annotations

import pytest

from trainmem.model.hf import spec_from_hf_config
from trainmem.model.resolve import resolve_model
from trainmem.perf.flops import (attention_keys_per_query, layer_linears, matmul_params_per_token,
                                 model_flops_per_token, narayanan_flops_per_iteration)


def _gpt(h: int, layers: int, heads: int, vocab: int, seq: int):
    return spec_from_hf_config({"model_type": "gpt2", "n_embd": h, "n_layer": layers, "n_head": heads,
                                "vocab_size": vocab, "n_positions": seq}, name=f"gpt-{h}")


def test_llama_3_1_8b_by_hand():
    """Per layer: q 4096², k and v 4096·1024, o 4096², gate/up/down 3·4096·14336 = 218,103,808 weights;
    ×32 + LM head 128256·4096 = 7,504,658,432. PaLM FLOPs per token at s = 8192:
    6·N + 6·L·s·a·(d + d) = 45,027,950,592 + 12,884,901,888."""
    spec = resolve_model("llama-3.1-8b")
    assert sum(x.k * x.n for x in layer_linears(spec, False, False)) == 218_103_808
    assert matmul_params_per_token(spec) == 7_504_658_432
    assert model_flops_per_token(spec, 8192) == 45_027_950_592 + 12_884_901_888


def test_layer_linears_match_the_parameter_counts():
    """The GEMM list of a layer holds exactly the layer's matmul weights (biases and norms aside)."""
    for name in ("llama-3.1-8b", "qwen2.5-7b", "mixtral-8x7b", "deepseek-v3", "gpt2", "qwen1.5-moe-a2.7b"):
        spec = resolve_model(name)
        kinds = {i in spec.moe_layer_indices: i for i in range(spec.num_layers)}
        for moe, idx in kinds.items():
            lp = spec.params.layers[idx]
            weights = sum(x.k * x.n * x.count for x in layer_linears(spec, moe, False))
            biases = lp.matmul - weights
            assert 0 <= biases <= 0.01 * lp.matmul, (name, moe, weights, lp.matmul)
            fused = sum(x.k * x.n * x.count for x in layer_linears(spec, moe, True))
            assert fused == weights


def test_gpt3_175b_matches_narayanan_equation():
    """Narayanan et al. 2021 eq. 3 without recomputation, 72·B·s·l·h²·(1 + s/(6h) + V/(12·l·h)), is the
    same count as 6·N + 12·l·h·s for a GPT (4h MLP, tied LM head): agreement within the biases."""
    spec = _gpt(12288, 96, 96, 51200, 2048)
    ours = model_flops_per_token(spec, 2048) * 1536 * 2048
    theirs = narayanan_flops_per_iteration(1536, 2048, 96, 12288, 51200, recompute=False)
    assert ours == pytest.approx(theirs, rel=1e-3)


def test_gpt3_175b_training_compute():
    """Brown et al. 2020 (Table D.1): GPT-3 175B trained on 300B tokens took 3.14e23 FLOPs (6·N·D, no
    attention). Our 6·N for the 175B shape (vocab 50257, seq 2048) times 300B tokens agrees to 1 %."""
    spec = _gpt(12288, 96, 96, 50257, 2048)
    assert 6 * matmul_params_per_token(spec) * 300e9 == pytest.approx(3.14e23, rel=0.01)


def test_moe_counts_top_k_of_e_experts():
    spec = resolve_model("mixtral-8x7b")
    lp = spec.params.layers[0]
    per_layer = lp.attention + lp.router + lp.experts * 2 / 8
    expected = spec.num_layers * per_layer + spec.hidden_size * spec.vocab_size
    assert matmul_params_per_token(spec) == pytest.approx(expected, rel=1e-3)


def test_keys_per_query():
    assert attention_keys_per_query(4, True) == 2.5          # (1 + 2 + 3 + 4) / 4
    assert attention_keys_per_query(4, False) == 4
    assert attention_keys_per_query(8, True, window=4) == pytest.approx((1 + 2 + 3 + 4 * 5) / 8)


def test_alternating_sliding_windows_count_the_full_layers() -> None:
    """gemma2 and gpt_oss slide on every other layer, gemma3 on five of six (transformers' layer_types): the model
    FLOPs count the window only there. gemma-2-2b (26 layers, window 4096) at 8192 tokens: half the layers
    over 4096 keys, half over 8192; Mistral's window applies to every layer."""
    from trainmem.model.resolve import resolve_model
    from trainmem.perf.flops import (attention_forward_flops_per_token, attention_keys_model, matmul_params_per_token,
                                     model_flops_per_token, sliding_layer_share)
    g2, g3, mistral = resolve_model("gemma-2-2b"), resolve_model("gemma-3-1b"), resolve_model("mistral-7b")
    assert sliding_layer_share(g2) == 13 / 26
    assert sliding_layer_share(g3) == sum(1 for i in range(26) if (i + 1) % 6) / 26   # 22 of 26
    assert sliding_layer_share(resolve_model("llama-3.1-8b")) == 0.0
    assert attention_keys_model(g2, 8192) == 0.5 * 4096 + 0.5 * 8192
    want = 6 * matmul_params_per_token(g2) + 3 * 26 * attention_forward_flops_per_token(g2, 6144.0)
    assert model_flops_per_token(g2, 8192) == want
    if mistral.sliding_window:
        assert sliding_layer_share(mistral) == 1.0
