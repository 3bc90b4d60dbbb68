"""Small HF configs of each family (same structure as the real models, small dims) for measured tests."""

from __future__ import annotations

BASE = dict(vocab_size=512, max_position_embeddings=4096)

TINY = {
    "llama": dict(model_type="llama", hidden_size=256, intermediate_size=688, num_hidden_layers=3,
                  num_attention_heads=8, num_key_value_heads=8, **BASE),
    "llama-gqa": dict(model_type="llama", hidden_size=256, intermediate_size=688, num_hidden_layers=3,
                      num_attention_heads=8, num_key_value_heads=2, **BASE),
    "mistral": dict(model_type="mistral", hidden_size=256, intermediate_size=896, num_hidden_layers=3,
                    num_attention_heads=8, num_key_value_heads=2, sliding_window=None, **BASE),
    "mistral-window": dict(model_type="mistral", hidden_size=256, intermediate_size=896, num_hidden_layers=3,
                           num_attention_heads=8, num_key_value_heads=2, sliding_window=128, **BASE),
    "qwen2": dict(model_type="qwen2", hidden_size=256, intermediate_size=704, num_hidden_layers=3,
                  num_attention_heads=8, num_key_value_heads=2, tie_word_embeddings=True, **BASE),
    "qwen3": dict(model_type="qwen3", hidden_size=256, intermediate_size=768, num_hidden_layers=3,
                  num_attention_heads=8, num_key_value_heads=4, head_dim=32, **BASE),
    "gemma": dict(model_type="gemma", hidden_size=256, intermediate_size=1024, num_hidden_layers=3,
                  num_attention_heads=4, num_key_value_heads=1, head_dim=64, **BASE),
    "gemma2": dict(model_type="gemma2", hidden_size=256, intermediate_size=1024, num_hidden_layers=3,
                   num_attention_heads=4, num_key_value_heads=2, head_dim=64, sliding_window=4096, **BASE),
    "phi3": dict(model_type="phi3", hidden_size=256, intermediate_size=688, num_hidden_layers=3, pad_token_id=0,
                 num_attention_heads=8, num_key_value_heads=8, **BASE),
    "gpt2": dict(model_type="gpt2", n_embd=256, n_layer=3, n_head=8, n_positions=4096, vocab_size=512,
                 resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0),
    "gpt2-dropout": dict(model_type="gpt2", n_embd=256, n_layer=3, n_head=8, n_positions=4096, vocab_size=512),
    "gpt_neox": dict(model_type="gpt_neox", hidden_size=256, intermediate_size=1024, num_hidden_layers=3,
                     num_attention_heads=8, rotary_pct=0.25, **BASE),
    "falcon": dict(model_type="falcon", hidden_size=256, num_hidden_layers=3, num_attention_heads=8,
                   new_decoder_architecture=False, multi_query=True, parallel_attn=True, bias=False,
                   alibi=False, **BASE),
    "falcon-new": dict(model_type="falcon", hidden_size=256, num_hidden_layers=3, num_attention_heads=8,
                       num_kv_heads=2, new_decoder_architecture=True, parallel_attn=True, bias=False,
                       alibi=False, **BASE),
    "qwen2_moe": dict(model_type="qwen2_moe", hidden_size=256, intermediate_size=512, num_hidden_layers=3,
                      num_attention_heads=8, num_key_value_heads=2, num_experts=4, num_experts_per_tok=2,
                      moe_intermediate_size=128, shared_expert_intermediate_size=256, **BASE),
    "mixtral": dict(model_type="mixtral", hidden_size=256, intermediate_size=512, num_hidden_layers=3,
                    num_attention_heads=8, num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2, **BASE),
    # Nemotron-4's structure: LayerNorm1P, relu2 MLP (not gated), RoPE over half of each head, GQA, untied
    "nemotron": dict(model_type="nemotron", hidden_size=256, intermediate_size=1024, num_hidden_layers=3,
                     num_attention_heads=8, num_key_value_heads=2, **BASE),
    # OPT (pre-LN like opt-125m … opt-175b), dropout off here (CPU dropout keeps a mask in the input dtype)
    "opt": dict(model_type="opt", hidden_size=256, ffn_dim=1024, num_hidden_layers=3, num_attention_heads=8,
                dropout=0.0, **BASE),
    # opt-350m's structure: post-LN, 128-wide embeddings projected in and out
    "opt-350m": dict(model_type="opt", hidden_size=256, ffn_dim=1024, num_hidden_layers=3, num_attention_heads=8,
                     dropout=0.0, word_embed_proj_dim=128, do_layer_norm_before=False, **BASE),
}

# gpt-oss-20b's structure (attention sinks, q/k/v/o biases, biased router and experts, clamped SwiGLU, yarn RoPE,
# sliding / full layers) at small dims; head_dim 32 != hidden / heads, as 64 != 2880 / 64 in the real models.
# Kept out of TINY: transformers has no sdpa for gpt_oss, and tests/memory/test_activations_measured.py runs
# every TINY family under sdpa too (tests/memory/test_gpt_oss.py measures this one under eager).
GPT_OSS_TINY = dict(model_type="gpt_oss", hidden_size=256, intermediate_size=256, num_hidden_layers=3,
                    num_attention_heads=8, num_key_value_heads=2, head_dim=32, num_local_experts=4,
                    num_experts_per_tok=2, sliding_window=64,
                    layer_types=["sliding_attention", "full_attention", "sliding_attention"], **BASE)
