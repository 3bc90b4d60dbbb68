"""spec_from_hf_config against the real transformers models, built on the meta device.

Small configs per family exercise biases, tying, MoE layouts, MLA and the falcon variants; a
"minimal" config per family checks that missing keys take the transformers defaults.
"""

from __future__ import annotations

import pytest

from tests.model.meta_build import assert_matches_transformers, build_meta, reference_counts
from trainmem.errors import ConfigError, UnsupportedError
from trainmem.model.hf import SUPPORTED_MODEL_TYPES, spec_from_hf_config

SMALL = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, vocab_size=100)

FAMILY_CONFIGS: dict[str, dict] = {
    "llama-biases": dict(SMALL, model_type="llama", num_key_value_heads=2, attention_bias=True, mlp_bias=True),
    "llama-tied-headdim": dict(SMALL, model_type="llama", tie_word_embeddings=True, head_dim=32),
    "mistral": dict(SMALL, model_type="mistral", num_key_value_heads=2),
    "mistral-headdim-null": dict(SMALL, model_type="mistral", num_key_value_heads=4, head_dim=None),
    "llama-kv-null": dict(SMALL, model_type="llama", num_key_value_heads=None),
    "qwen2-tied": dict(SMALL, model_type="qwen2", num_key_value_heads=2, tie_word_embeddings=True),
    "qwen3-bias": dict(SMALL, model_type="qwen3", num_key_value_heads=2, attention_bias=True, head_dim=16),
    "gemma": dict(SMALL, model_type="gemma", num_key_value_heads=1, head_dim=16),
    "gemma2": dict(SMALL, model_type="gemma2", num_key_value_heads=2, head_dim=32),
    "gemma3_text": dict(SMALL, model_type="gemma3_text", num_key_value_heads=2, head_dim=32),
    "phi3": dict(SMALL, model_type="phi3", num_key_value_heads=2, pad_token_id=0, eos_token_id=1),
    "mixtral": dict(SMALL, model_type="mixtral", num_key_value_heads=2, num_local_experts=4),
    "qwen2_moe-step-onlylayers": dict(SMALL, model_type="qwen2_moe", num_hidden_layers=4, num_key_value_heads=2,
                                      num_experts=4, moe_intermediate_size=32, shared_expert_intermediate_size=48,
                                      decoder_sparse_step=2, mlp_only_layers=[3], qkv_bias=False),
    "qwen3_moe": dict(SMALL, model_type="qwen3_moe", num_hidden_layers=3, num_key_value_heads=2, num_experts=4,
                      num_experts_per_tok=2, moe_intermediate_size=32, mlp_only_layers=[0], head_dim=32),
    "deepseek_v2-no-q-lora": dict(SMALL, model_type="deepseek_v2", num_hidden_layers=3, n_routed_experts=4,
                                  moe_intermediate_size=32, n_shared_experts=2, first_k_dense_replace=1,
                                  q_lora_rank=None, kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=16,
                                  v_head_dim=16, num_experts_per_tok=2, attention_bias=True, mlp_bias=True),
    "deepseek_v3": dict(SMALL, model_type="deepseek_v3", num_hidden_layers=3, n_routed_experts=4,
                        moe_intermediate_size=32, n_shared_experts=1, first_k_dense_replace=1, q_lora_rank=24,
                        kv_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16,
                        num_experts_per_tok=2, n_group=2, topk_group=1),
    "gpt2": dict(model_type="gpt2", n_embd=64, n_layer=2, n_head=4, vocab_size=100, n_positions=32),
    "gpt2-cross-untied-inner": dict(model_type="gpt2", n_embd=64, n_layer=2, n_head=4, vocab_size=100,
                                    n_positions=32, add_cross_attention=True, n_inner=80,
                                    tie_word_embeddings=False),
    "gpt_neox": dict(SMALL, model_type="gpt_neox"),
    "gpt_neox-tied-nobias": dict(SMALL, model_type="gpt_neox", tie_word_embeddings=True, attention_bias=False),
    "falcon-multiquery": dict(SMALL, model_type="falcon"),
    "falcon-new-arch": dict(SMALL, model_type="falcon", new_decoder_architecture=True, num_kv_heads=2, bias=True,
                            tie_word_embeddings=False, ffn_hidden_size=80),
    "falcon-new-arch-1ln": dict(SMALL, model_type="falcon", new_decoder_architecture=True, num_kv_heads=2,
                                num_ln_in_parallel_attn=1),
    "falcon-sequential-alibi": dict(SMALL, model_type="falcon", parallel_attn=False, multi_query=False,
                                    alibi=True, bias=True),
    "bert": dict(SMALL, model_type="bert"),
    "bert-untied": dict(SMALL, model_type="bert", tie_word_embeddings=False),
    "roberta": dict(SMALL, model_type="roberta", type_vocab_size=1, max_position_embeddings=40),
    "nemotron": dict(SMALL, model_type="nemotron", num_key_value_heads=2),
    "nemotron-biases-headdim-tied": dict(SMALL, model_type="nemotron", num_key_value_heads=1, head_dim=24,
                                         attention_bias=True, mlp_bias=True, tie_word_embeddings=True,
                                         partial_rotary_factor=0.25),
    "opt": dict(SMALL, model_type="opt", ffn_dim=96, max_position_embeddings=40),
    "opt-350m-style": dict(SMALL, model_type="opt", ffn_dim=96, max_position_embeddings=40, word_embed_proj_dim=32,
                           do_layer_norm_before=False),
    "opt-nobias-noaffine-untied": dict(SMALL, model_type="opt", ffn_dim=80, enable_bias=False,
                                       layer_norm_elementwise_affine=False, tie_word_embeddings=False,
                                       word_embed_proj_dim=48),
    "opt-removed-final-norm": dict(SMALL, model_type="opt", _remove_final_layer_norm=True),
}

# Only the keys spec_from_hf_config requires: everything else must default as transformers does.
# 32 heads: every family's default num_key_value_heads (4 to 32) divides them.
_REQUIRED = dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=32)
MINIMAL_CONFIGS: dict[str, dict] = {
    mt: dict(_REQUIRED, model_type=mt, vocab_size=32064)
    for mt in ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3_text", "phi3", "mixtral",
               "qwen2_moe", "qwen3_moe", "deepseek_v2", "deepseek_v3", "gpt_neox", "falcon", "bert", "roberta")
}
MINIMAL_CONFIGS["gpt2"] = dict(model_type="gpt2", n_embd=64, n_layer=2, n_head=4, vocab_size=100)
MINIMAL_CONFIGS["opt"] = dict(_REQUIRED, model_type="opt", vocab_size=32064)
# NemotronConfig has no default for num_key_value_heads (NemotronAttention divides by it): the one extra key
MINIMAL_CONFIGS["nemotron"] = dict(_REQUIRED, model_type="nemotron", vocab_size=32064, num_key_value_heads=8)
MINIMAL_CONFIGS["deepseek_v3"]["num_hidden_layers"] = 4  # default first_k_dense_replace=3: one MoE layer
MINIMAL_CONFIGS["deepseek_v2"]["num_experts_per_tok"] = 2  # default None cannot route

# gpt_oss: its router is ``mlp.router`` (meta_build classifies ``mlp.gate.*`` as the router, so these are compared
# by assert_gpt_oss_matches_transformers below); its expert biases are 2-D grouped tensors, counted in matmul.
GPT_OSS_CONFIGS: dict[str, dict] = {
    "gpt_oss": dict(SMALL, model_type="gpt_oss", num_hidden_layers=3, num_key_value_heads=2, head_dim=16,
                    num_local_experts=4, num_experts_per_tok=2),
    "gpt_oss-nobias-allfull-mha": dict(SMALL, model_type="gpt_oss", num_key_value_heads=4, head_dim=32,
                                       num_experts=3, num_experts_per_tok=3, attention_bias=False,
                                       layer_types=["full_attention", "full_attention"]),
    "gpt_oss-minimal": dict(_REQUIRED, model_type="gpt_oss", vocab_size=32064),  # 128 experts, top-4, head_dim 64
}

GEMMA3_MULTIMODAL = {
    "model_type": "gemma3",
    "architectures": ["Gemma3ForConditionalGeneration"],
    # written sparsely, as the hub's gemma-3 configs are: heads, kv heads, vocab take class defaults
    "text_config": {"model_type": "gemma3_text", "hidden_size": 64, "intermediate_size": 96,
                    "num_hidden_layers": 2, "head_dim": 16},
    "vision_config": {"model_type": "siglip_vision_model", "hidden_size": 32},
}


@pytest.mark.parametrize("key", sorted(FAMILY_CONFIGS))
def test_small_family_config_matches_transformers(key):
    assert_matches_transformers(spec_from_hf_config(FAMILY_CONFIGS[key], name=key))


@pytest.mark.parametrize("model_type", sorted(MINIMAL_CONFIGS))
def test_missing_keys_take_transformers_defaults(model_type):
    assert_matches_transformers(spec_from_hf_config(MINIMAL_CONFIGS[model_type], name=model_type))


def test_gemma3_multimodal_uses_its_sparse_text_config():
    spec = spec_from_hf_config(GEMMA3_MULTIMODAL, name="g3")
    assert (spec.architecture, spec.model_type) == ("Gemma3ForCausalLM", "gemma3_text")
    assert (spec.num_attention_heads, spec.num_kv_heads, spec.vocab_size) == (8, 4, 262208)
    assert spec.hf_config["model_type"] == "gemma3_text"
    assert_matches_transformers(spec)


def test_every_supported_model_type_is_tested():
    tested = {c["model_type"] for c in (*FAMILY_CONFIGS.values(), *MINIMAL_CONFIGS.values(),
                                        *GPT_OSS_CONFIGS.values())} | {"gemma3"}
    tested |= {"llava", "qwen2_5_vl", "qwen2_vl"}  # vision-language: tests/model/test_vlm.py (meta-built counts)
    tested |= {"llama4"}  # tests/model/test_llama4.py: Scout / Maverick counts against the meta-built model
    # Qwen1 (remote code, no transformers class to compare with): counted by hand in tests/model/test_catalog.py
    # (test_qwen1_7b_count_by_hand) and tests/memory/test_qwen1_bnb_legacy.py
    tested |= {"qwen"}
    assert tested == set(SUPPORTED_MODEL_TYPES)


def assert_gpt_oss_matches_transformers(spec) -> None:
    """:func:`assert_matches_transformers` for GptOssForCausalLM: its router lives at ``mlp.router`` (weight and
    bias), which the reference's name rules file under "mlp"; a gpt_oss layer has no dense MLP, so every
    non-expert ``mlp.`` parameter is the router's."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    model = build_meta(spec.architecture, spec.hf_config)
    ref = reference_counts(model)
    assert all(not n.startswith(("model.layers.0.mlp.gate", "model.layers.0.mlp.down", "model.layers.0.mlp.up"))
               for n, _ in model.named_parameters())
    p = spec.params
    assert (p.total, p.embedding, p.position_embedding, p.final_norm, p.lm_head, p.other) == (
        ref.total, ref.embedding, ref.position_embedding, ref.final_norm, ref.lm_head, ref.other)
    assert len(p.layers) == len(ref.layers) == spec.num_layers
    for i, layer in enumerate(p.layers):
        theirs = dict(ref.layers[i])
        theirs["router"] = theirs.pop("mlp", 0)
        ours = {k: getattr(layer, k) for k in ("attention", "norms", "mlp", "experts", "shared_experts", "router",
                                              "matmul")}
        assert ours == {k: theirs.get(k, 0) for k in ours}, f"layer {i}"


@pytest.mark.parametrize("key", sorted(GPT_OSS_CONFIGS))
def test_gpt_oss_configs_match_transformers(key):
    assert_gpt_oss_matches_transformers(spec_from_hf_config(GPT_OSS_CONFIGS[key], name=key))


def test_gpt_oss_layer_counts_by_hand():
    """GPT_OSS_CONFIGS["gpt_oss"]: h 64, 4 heads and 2 kv heads of 16, 4 experts of width 96, vocab 100.
    attention: q 64·64 + 64, k and v 64·32 + 32 each, o 64·64 + 64, sinks 4 = 4,160 + 2·2,080 + 4,160 + 4 = 12,484;
    experts: 4 · (64·192 + 192 + 96·64 + 64) = 4 · 18,688 = 74,752; router 4·64 + 4 = 260; norms 2·64 = 128;
    matmul: 4,096 + 2·2,048 + 4,096 (q, k, v, o weights) + 74,752 (the grouped expert tensors, their 2-D biases
    with them) + 256 (router weight) = 87,296."""
    spec = spec_from_hf_config(GPT_OSS_CONFIGS["gpt_oss"], name="g")
    layer = spec.params.layers[0]
    assert (layer.attention, layer.experts, layer.router, layer.norms, layer.mlp) == (12_484, 74_752, 260, 128, 0)
    assert layer.matmul == 87_296
    # embedding 100·64, untied lm_head 100·64, final norm 64; 3 layers of 12,484 + 74,752 + 260 + 128 = 87,624
    assert spec.n_params == 6_400 + 6_400 + 64 + 3 * 87_624
    assert (spec.num_experts, spec.num_experts_per_tok, spec.moe_intermediate_size) == (4, 2, 96)
    assert spec.moe_layer_indices == (0, 1, 2) and spec.norm == "rmsnorm" and spec.mlp_gated


def test_gpt_oss_sliding_window_follows_layer_types():
    """GptOssConfig: layer_types defaults to sliding_attention, full_attention, ... (sliding first), window 128;
    a config whose layers are all full_attention has no window in effect."""
    default = spec_from_hf_config(GPT_OSS_CONFIGS["gpt_oss-minimal"], name="g")
    assert default.sliding_window == 128 and (default.head_dim, default.num_kv_heads) == (64, 8)
    assert (default.num_experts, default.num_experts_per_tok) == (128, 4)
    assert spec_from_hf_config(GPT_OSS_CONFIGS["gpt_oss-nobias-allfull-mha"], name="g").sliding_window is None
    assert spec_from_hf_config(dict(GPT_OSS_CONFIGS["gpt_oss"], sliding_window=32), name="g").sliding_window == 32


def test_spec_fields_of_the_moe_and_mla_configs():
    moe = spec_from_hf_config(FAMILY_CONFIGS["qwen2_moe-step-onlylayers"], name="q")
    assert moe.moe_layer_indices == (1,) and moe.is_moe
    assert (moe.num_experts, moe.moe_intermediate_size, moe.num_shared_experts) == (4, 32, 1)
    assert moe.params.layers[0].experts == 0 and moe.params.layers[1].mlp == 0
    ds = spec_from_hf_config(FAMILY_CONFIGS["deepseek_v2-no-q-lora"], name="d")
    assert (ds.head_dim, ds.v_head_dim, ds.q_lora_rank, ds.kv_lora_rank) == (24, 16, None, 16)
    assert ds.moe_layer_indices == (1, 2) and ds.shared_expert_intermediate_size == 64
    falcon = spec_from_hf_config(FAMILY_CONFIGS["falcon-multiquery"], name="f")
    assert falcon.num_kv_heads == 1 and falcon.parallel_residual and falcon.position == "rope"
    assert spec_from_hf_config(FAMILY_CONFIGS["falcon-sequential-alibi"], name="f").position == "alibi"
    bert = spec_from_hf_config(FAMILY_CONFIGS["bert"], name="b")
    assert bert.is_encoder and bert.architecture == "BertForMaskedLM" and bert.norm == "layernorm"
    gemma2 = spec_from_hf_config(FAMILY_CONFIGS["gemma2"], name="g")
    assert (gemma2.attn_logit_softcapping, gemma2.final_logit_softcapping, gemma2.sliding_window) == (50.0, 30.0, 4096)


# --------------------------------------------------------------------------- bad input
def test_unsupported_model_type_names_the_supported_ones():
    with pytest.raises(UnsupportedError) as err:
        spec_from_hf_config(dict(SMALL, model_type="vit"), name="vit")  # t5 is derived since 9c51de5
    message = str(err.value)
    assert "'vit'" in message and "llama" in message and "deepseek_v3" in message and "\n" not in message


@pytest.mark.parametrize("missing", ["hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size"])
def test_missing_shape_key_is_a_config_error_naming_it(missing):
    cfg = {k: v for k, v in dict(SMALL, model_type="llama").items() if k != missing}
    with pytest.raises(ConfigError, match=missing):
        spec_from_hf_config(cfg, name="x")


def test_other_malformed_configs():
    with pytest.raises(ConfigError, match="model_type"):
        spec_from_hf_config(dict(SMALL), name="x")
    with pytest.raises(ConfigError, match="hidden_size"):
        spec_from_hf_config(dict(SMALL, model_type="qwen2", hidden_size="64"), name="x")
    with pytest.raises(ConfigError, match="text_config"):
        spec_from_hf_config({"model_type": "gemma3"}, name="x")
    with pytest.raises(ConfigError, match=r"num_attention_heads\(4\) does not divide hidden_size\(66\)"):
        spec_from_hf_config(dict(SMALL, model_type="llama", hidden_size=66), name="x")
    with pytest.raises(ConfigError):
        spec_from_hf_config(["not", "a", "dict"], name="x")  # type: ignore[arg-type]


def test_static_name_lists_match_transformers():
    pytest.importorskip("torch")
    from transformers.activations import ACT2FN
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    from trainmem.model.hf import KNOWN_ACTIVATIONS, KNOWN_ROPE_TYPES
    assert KNOWN_ACTIVATIONS == set(ACT2FN)
    assert KNOWN_ROPE_TYPES == set(ROPE_INIT_FUNCTIONS) | {"default"}


@pytest.mark.parametrize("cfg,needle", [
    (dict(SMALL, model_type="llama", hidden_size=66, head_dim=16),
     r"num_attention_heads\(4\) does not divide hidden_size\(66\)"),
    (dict(SMALL, model_type="llama", num_key_value_heads=3), r"num_key_value_heads\(3\) does not divide"),
    (dict(SMALL, model_type="llama", tie_word_embeddings="yes"), "tie_word_embeddings='yes' is not a boolean"),
    (dict(SMALL, model_type="gpt2", activation_function="gelu_newer"), "activation_function='gelu_newer'"),
    (dict(SMALL, model_type="qwen2", num_key_value_heads=4, rope_scaling={"type": "su"}), "rope_type='su'"),
    (dict(SMALL, model_type="gemma3_text", head_dim=16,
          rope_parameters={"full_attention": {"rope_type": "linear", "factor": 8.0},
                           "sliding_attention": {"rope_type": "nope"}}), "rope_type='nope'"),
    (dict(SMALL, model_type="mixtral", num_key_value_heads=4, num_local_experts=0), r"num_local_experts\(0\)"),
    (dict(SMALL, model_type="qwen3_moe", num_experts=4, num_experts_per_tok=5), r"num_experts_per_tok\(5\)"),
    (dict(SMALL, model_type="deepseek_v2", n_routed_experts=4, num_experts_per_tok=None), r"num_experts_per_tok\(0\)"),
    (dict(SMALL, model_type="deepseek_v3", num_hidden_layers=4, n_routed_experts=6, num_experts_per_tok=2,
          n_group=4), r"n_group\(4\)"),
    (dict(SMALL, model_type="qwen2_moe", mlp_only_layers=5), "mlp_only_layers=5"),
    (dict(SMALL, model_type="bert", num_hidden_layers=0), r"num_hidden_layers\(0\)"),
    (dict(SMALL, model_type="falcon", hidden_size=2**21), "limit of 1,048,576"),
    # GptOssConfig.validate_layer_type: one entry per layer, each a layer type; GptOssModel.forward's mask
    # mapping has full_attention and sliding_attention only (another allowed type is a KeyError there)
    (dict(SMALL, model_type="gpt_oss", layer_types=["sliding_attention"]),
     r"layer_types has 1 entries for num_hidden_layers\(2\)"),
    (dict(SMALL, model_type="gpt_oss", layer_types=["sliding_attention", "chunked_attention"]),
     "layer_types entry 'chunked_attention' is not sliding_attention or full_attention"),
    (dict(SMALL, model_type="gpt_oss", layer_types="sliding_attention"),
     "layer_types='sliding_attention' is not a list"),
    (dict(SMALL, model_type="gpt_oss", num_key_value_heads=2, num_local_experts=0),
     r"num_local_experts\(0\)"),
    (dict(SMALL, model_type="gpt_oss", num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=5),
     r"num_experts_per_tok\(5\)"),
    (dict(SMALL, model_type="gpt_oss", num_key_value_heads=2, head_dim=15),
     r"even rotary dimension, got head_dim\(15\)"),
    # NemotronConfig has no default kv heads (NemotronAttention: num_heads // None); a null factor leaves
    # rope_parameters without the partial_rotary_factor NemotronAttention reads
    (dict(SMALL, model_type="nemotron"), "lacks 'num_key_value_heads'"),
    (dict(SMALL, model_type="nemotron", num_key_value_heads=None), "lacks 'num_key_value_heads'"),
    (dict(SMALL, model_type="nemotron", num_key_value_heads=2, partial_rotary_factor=None),
     "partial_rotary_factor=null"),
    (dict(SMALL, model_type="nemotron", num_key_value_heads=2, partial_rotary_factor=1.5),
     r"partial_rotary_factor=1.5 is not a number in \(0, 1\]"),
    (dict(SMALL, model_type="nemotron", num_key_value_heads=2, head_dim=15, partial_rotary_factor=1.0),
     r"even rotary dimension, got head_dim\(15\)"),
    (dict(SMALL, model_type="nemotron", num_key_value_heads=2, hidden_act="squared_relu"),
     "hidden_act='squared_relu'"),
    (dict(SMALL, model_type="opt", num_attention_heads=3), r"num_attention_heads\(3\) does not divide hidden_size\(64\)"),
    (dict(SMALL, model_type="opt", activation_function="relu3"), "activation_function='relu3'"),
    (dict(SMALL, model_type="opt", do_layer_norm_before="no"), "do_layer_norm_before='no' is not a boolean"),
    (dict(SMALL, model_type="opt", layerdrop=1.5), r"layerdrop=1.5 is not a probability"),
])
def test_what_transformers_refuses_is_one_config_error(cfg, needle):
    with pytest.raises(ConfigError, match=needle) as err:
        spec_from_hf_config(cfg, name="x")
    assert "\n" not in str(err.value)


def test_nemotron_and_opt_fields():
    """Nemotron: LayerNorm1P (weight and bias) norms, relu2 not gated, RoPE over int(d · 0.5) dims by default
    (rope_parameters' factor wins over the top-level key, as NemotronConfig resolves it), untied. OPT: learned
    positions with fairseq's offset of 2 rows, project_in with them and project_out in ``other`` (opt-350m style),
    post-LN without a final norm, hidden dropout 0.1 by default."""
    n = spec_from_hf_config(FAMILY_CONFIGS["nemotron"], name="n")
    assert (n.norm, n.mlp_gated, n.hidden_act, n.position, n.rotary_dim) == ("layernorm", False, "relu2", "rope", 8)
    assert not n.tie_word_embeddings and n.params.layers[0].norms == 4 * 64 and n.params.final_norm == 2 * 64
    tied = spec_from_hf_config(FAMILY_CONFIGS["nemotron-biases-headdim-tied"], name="n")
    assert (tied.head_dim, tied.rotary_dim, tied.num_kv_heads) == (24, 6, 1)
    both = dict(FAMILY_CONFIGS["nemotron"], partial_rotary_factor=0.25,
                rope_parameters={"rope_type": "default", "rope_theta": 1e4, "partial_rotary_factor": 0.75})
    assert spec_from_hf_config(both, name="n").rotary_dim == 12  # int(16 · 0.75)
    o = spec_from_hf_config(FAMILY_CONFIGS["opt-350m-style"], name="o")
    assert (o.position, o.norm, o.hidden_act, o.hidden_dropout, o.tie_word_embeddings) == ("learned", "layernorm",
                                                                                          "relu", 0.1, True)
    assert o.params.position_embedding == (40 + 2) * 64 + 32 * 64 and o.params.other == 64 * 32
    assert o.params.embedding == 100 * 32 and o.params.final_norm == 0 and o.params.lm_head == 0
    assert spec_from_hf_config(FAMILY_CONFIGS["opt"], name="o").params.final_norm == 2 * 64


def test_what_transformers_accepts_is_accepted():
    # explicit head_dim where the family does not check hidden % heads (Qwen3-0.6B: 16 heads of 128 on 1024)
    qwen3 = dict(SMALL, model_type="qwen3", num_key_value_heads=4, hidden_size=66, head_dim=16)
    assert spec_from_hf_config(qwen3, name="q").head_dim == 16
    # qwen2_moe without experts is a dense model in transformers
    dense = dict(SMALL, model_type="qwen2_moe", num_key_value_heads=4, num_experts=0)
    assert not spec_from_hf_config(dense, name="q").is_moe
    # nested rope parameters of transformers 5 and the legacy "type" key
    spec_from_hf_config(dict(SMALL, model_type="llama", rope_scaling={"type": "linear", "factor": 2.0}), name="l")
