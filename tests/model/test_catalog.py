"""The bundled catalog: every model equals its transformers build; published totals hold."""

from __future__ import annotations

import json
from importlib import resources

import pytest

from tests.model.meta_build import assert_matches_transformers
from tests.model.test_hf import assert_gpt_oss_matches_transformers
from trainmem.errors import UnknownModelError
from trainmem.model.catalog import find_entry, list_models, load_catalog_spec

# Parameter totals published for these models (the brief's list, cross-checked with the
# parameter counts shown on the hub model pages), written out by hand.
PUBLISHED_TOTALS = {
    "llama-2-7b": 6_738_415_616,
    "llama-2-13b": 13_015_864_320,
    "llama-2-70b": 68_976_648_192,
    "llama-3.1-8b": 8_030_261_248,
    "llama-3-8b": 8_030_261_248,  # derived: llama-3.1-8b's shapes, 8192 context
    "llama-3.1-70b": 70_553_706_496,
    "llama-3.1-405b": 405_853_388_800,
    "llama-3.2-1b": 1_235_814_400,
    "llama-3.2-3b": 3_212_749_824,
    "mistral-7b": 7_241_732_096,
    "mixtral-8x7b": 46_702_792_704,
    "qwen2.5-0.5b": 494_032_768,
    "qwen2.5-1.5b": 1_543_714_304,
    "qwen2.5-7b": 7_615_616_512,
    "qwen2.5-14b": 14_770_033_664,
    "qwen2.5-32b": 32_763_876_352,
    "qwen2.5-72b": 72_706_203_648,
    "qwen3-8b": 8_190_735_360,
    "gemma-2-9b": 9_241_705_984,
    "gemma-2-2b": 2_614_341_888,
    "gemma-3-1b": 999_885_952,
    "phi-3-mini-4k": 3_821_079_552,
    "gpt2": 124_439_808,
    "bert-large-uncased": 335_174_458,
    "roberta-base": 124_697_433,
    "tinyllama-1.1b": 1_100_048_384,
    "qwen3-30b-a3b": 30_532_122_624,
    "qwen1.5-moe-a2.7b": 14_315_784_192,
    "pythia-1b": 1_011_781_632,
    "falcon-7b": 6_921_720_704,
    "deepseek-v2-lite": 15_706_484_224,
    # Added later; each the exact transformers build, matching the card / hub figure in parentheses and, where
    # keras-hub publishes one, its preset's exact count.
    "qwen3-0.6b": 596_049_920,  # 0.6B (0.44B non-embedding); keras-hub qwen3_0.6b_en
    "qwen3-1.7b": 1_720_574_976,  # 1.7B (1.4B non-embedding); keras-hub qwen3_1.7b_en
    "qwen3-4b": 4_022_468_096,  # 4.0B (3.6B non-embedding); keras-hub qwen3_4b_en
    "qwen3-14b": 14_768_307_200,  # 14.8B (13.2B non-embedding); keras-hub qwen3_14b_en
    "qwen3-32b": 32_762_123_264,  # 32.8B (31.2B non-embedding); keras-hub qwen3_32b_en
    "qwen3-235b-a22b": 235_093_634_560,  # 235B total, 22B active; keras-hub qwen3_moe_235b_a22b_en
    "qwen2.5-3b": 3_085_938_688,  # 3.09B (2.77B non-embedding); keras-hub qwen2.5 3B
    "llama-3.3-70b": 70_553_706_496,  # derived: llama-3.1-70b's config
    "mistral-nemo-12b": 12_247_782_400,  # 12.2B (head_dim 128 != 5120/32)
    "mistral-small-24b": 23_572_403_200,  # 24B (23.6B); keras-hub magistral_small (same shapes)
    "mixtral-8x22b": 140_620_634_112,  # 141B total, 39B active
    "phi-4": 14_659_507_200,  # 14B (14.7B)
    "phi-3-medium-4k": 13_960_238_080,  # 14B (14.0B)
    "gemma-2-27b": 27_227_128_320,  # 27.2B; keras-hub gemma2_27b_en
    # Gemma 3 (multimodal configs): the text model only, vocabulary 262,208 (Gemma3TextConfig's default);
    # non-embedding parts equal the Gemma 3 report's 3,209M / 10,759M / 25,600M
    "gemma-3-4b": 3_880_263_168,
    "gemma-3-12b": 11_766_034_176,
    "gemma-3-27b": 27_009_346_304,
    "deepseek-v2": 235_741_434_880,  # 236B total, 21B active
    "yi-34b": 34_388_917_248,  # 34B (34.4B)
    # 32 x (q 4096^2 + k,v 2 x 4096x512 + o 4096^2 + 3 x 4096x11008 + 2 x 4096) + 2 x 64000x4096 + 4096
    "yi-6b": 6_061_035_520,  # 6B (6.06B)
    "qwen-7b": 7_721_324_544,  # 7.7B; Qwen1 remote code, counted by hand in test_qwen1_7b_count_by_hand
    "smollm2-1.7b": 1_711_376_384,  # 1.7B (1.71B)
    # OpenAI's model card gives these to 10 M (test_gpt_oss_totals_match_the_model_card): transformers' build
    "gpt-oss-20b": 20_914_757_184,
    "gpt-oss-120b": 116_829_156_672,
}
# DeepSeek-V3 as transformers builds it (no MTP layer): the paper's "671B".
DEEPSEEK_V3_TOTAL = 671_026_404_352

REQUIRED = {"llama-2-7b", "llama-2-13b", "llama-2-70b", "llama-3.1-8b", "llama-3.1-70b", "llama-3.1-405b",
            "llama-3.2-1b", "llama-3.2-3b", "mistral-7b", "mixtral-8x7b", "qwen2.5-0.5b", "qwen2.5-1.5b",
            "qwen2.5-7b", "qwen2.5-14b", "qwen2.5-32b", "qwen2.5-72b", "qwen3-8b", "gemma-2-9b",
            "phi-3-mini-4k", "deepseek-v3", "gpt2", "bert-large-uncased", "tinyllama-1.1b"}

NAMES = [e.name for e in list_models()]
#: GptOssForCausalLM's router is ``mlp.router``: compared by the router-aware reference of tests/model/test_hf.py
GPT_OSS_NAMES = [n for n in NAMES if load_catalog_spec(n).model_type == "gpt_oss"]


#: Remote-code families transformers has no class for (Qwen1's QWenLMHeadModel): counted by hand below.
REMOTE_CODE_NAMES = [n for n in NAMES if load_catalog_spec(n).model_type == "qwen"]


@pytest.mark.parametrize("name", [n for n in NAMES if n not in GPT_OSS_NAMES and n not in REMOTE_CODE_NAMES])
def test_catalog_model_matches_transformers(name):
    assert_matches_transformers(load_catalog_spec(name))


@pytest.mark.parametrize("name", GPT_OSS_NAMES)
def test_catalog_gpt_oss_matches_transformers(name):
    assert_gpt_oss_matches_transformers(load_catalog_spec(name))


def _active_per_token(spec) -> int:
    """Parameters one token runs through: every layer's attention, norms and router, top-k of its E experts,
    the final norm and the unembedding (lm_head); not the embedding table (a row lookup)."""
    k, e = spec.num_experts_per_tok, spec.num_experts
    layers = sum(lp.attention + lp.norms + lp.router + lp.experts * k // e for lp in spec.params.layers)
    return layers + spec.params.final_norm + spec.params.lm_head


def test_gpt_oss_totals_match_the_model_card():
    """OpenAI's gpt-oss model card: gpt-oss-120b 116.83B total, 5.13B active per token;
    gpt-oss-20b 20.91B total, 3.61B active. The totals are transformers' build exactly (weights as trained;
    the hub checkpoint packs the expert weights in MXFP4 blocks and scales, which the hub's safetensors
    metadata counts in bytes, not parameters). The active counts match only with the embedding table left out
    and the unembedding (lm_head) counted; with the embedding they would be 4.19B and 5.71B:

    per expert 2880·5760 + 5760 + 2880·2880 + 2880 = 24,891,840; attention 26,550,144; norms 5,760;
    router E·2880 + E (20b: 92,192; 120b: 368,768); unembedding 201,088·2880 = 579,133,440 (+ final norm 2,880
    = 579,136,320).
    - 20b, 24 layers of 32 experts: total 24·(26,550,144 + 5,760 + 92,192 + 32·24,891,840) + 2·579,133,440
      + 2,880 = 20,914,757,184; active 24·(26,550,144 + 5,760 + 92,192 + 4·24,891,840) + 579,136,320
      = 3,608,307,264 (+ the embedding 579,133,440 = 4,187,440,704).
    - 120b, 36 layers of 128: total 36·(26,550,144 + 5,760 + 368,768 + 128·24,891,840) + 1,158,266,880 + 2,880
      = 116,829,156,672; active 36·(26,550,144 + 5,760 + 368,768 + 4·24,891,840) + 579,136,320 = 5,132,849,472
      (+ the embedding = 5,711,982,912).
    """
    for name, total, active, card in (("gpt-oss-20b", 20_914_757_184, 3_608_307_264, (20.91, 3.61)),
                                      ("gpt-oss-120b", 116_829_156_672, 5_132_849_472, (116.83, 5.13))):
        spec = load_catalog_spec(name)
        assert (spec.n_params, _active_per_token(spec)) == (total, active)
        assert (round(total / 1e9, 2), round(active / 1e9, 2)) == card
        assert round((active + spec.params.embedding) / 1e9, 2) != card[1]  # the card leaves the embedding out


def test_gpt_oss_catalog_configs():
    """Both configs as the hub has them: alternating sliding (128) / full layers, sliding first, yarn x32 of
    4096, 131,072 positions, q/k/v/o biases, untied embeddings, the clamped SwiGLU's limit 7.0."""
    for name, layers, experts in (("gpt-oss-20b", 24, 32), ("gpt-oss-120b", 36, 128)):
        spec = load_catalog_spec(name)
        cfg = spec.hf_config
        assert (spec.num_layers, spec.num_experts, spec.num_experts_per_tok) == (layers, experts, 4)
        assert (spec.hidden_size, spec.num_attention_heads, spec.num_kv_heads, spec.head_dim) == (2880, 64, 8, 64)
        assert (spec.moe_intermediate_size, spec.vocab_size, spec.sliding_window) == (2880, 201_088, 128)
        assert cfg["layer_types"] == ["sliding_attention", "full_attention"] * (layers // 2)
        rope = cfg["rope_scaling"]
        assert (rope["rope_type"], rope["factor"], rope["original_max_position_embeddings"]) == ("yarn", 32.0, 4096)
        assert spec.max_position_embeddings == 131_072 and cfg["attention_bias"] and not spec.tie_word_embeddings
        assert cfg["swiglu_limit"] == 7.0
        assert spec.source == f"https://huggingface.co/openai/{name}/blob/main/config.json"


@pytest.mark.parametrize("name", sorted(PUBLISHED_TOTALS))
def test_published_total(name):
    assert load_catalog_spec(name).n_params == PUBLISHED_TOTALS[name]


def test_deepseek_v3_total_and_layout():
    spec = load_catalog_spec("deepseek-v3")
    assert spec.n_params == DEEPSEEK_V3_TOTAL
    assert spec.moe_layer_indices == tuple(range(3, 61))
    assert (spec.num_experts, spec.num_experts_per_tok, spec.num_shared_experts) == (256, 8, 1)
    assert (spec.q_lora_rank, spec.kv_lora_rank, spec.head_dim, spec.v_head_dim) == (1536, 512, 192, 128)
    # routed experts are ~97% of the weights
    assert 0.96 < spec.params.expert_total / spec.n_params < 0.98


def test_catalog_has_the_required_models_and_every_file_is_well_formed():
    assert REQUIRED <= set(NAMES)
    folder = resources.files("trainmem.model").joinpath("configs")
    for item in folder.iterdir():
        raw = json.loads(item.read_text(encoding="utf-8"))
        assert set(raw) == {"name", "hf_id", "source", "aliases", "note", "config"}, item.name
        assert item.name == raw["name"] + ".json"
        assert raw["source"] == f"https://huggingface.co/{raw['hf_id']}/blob/main/config.json"
        assert raw["config"]["model_type"] and raw["note"]


def test_lookup_by_name_hub_id_and_alias_in_any_case():
    spec = load_catalog_spec("llama-3.1-8b")
    assert load_catalog_spec("META-LLAMA/Llama-3.1-8B") is spec
    assert load_catalog_spec("meta-llama/Meta-Llama-3.1-8B") is spec
    assert load_catalog_spec(" Llama3.1-8B ") is spec
    assert spec.name == "llama-3.1-8b" and spec.source.startswith("https://huggingface.co/meta-llama/")
    assert find_entry("gpt2-124m").name == "gpt2"


def test_unknown_catalog_name():
    with pytest.raises(UnknownModelError, match="not in the model catalog; did you mean .*llama-3.2-1b"):
        load_catalog_spec("llama-9-1b")


def test_loose_names_and_derived_entries():
    from trainmem.model.catalog import match_catalog, normalize_model_name
    assert normalize_model_name("meta-llama/Meta-Llama-3.1-8B-Instruct") == ("llama3.18b", frozenset({"instruct"}))
    assert normalize_model_name("someone/Llama-3.1-8B") is None  # organisations the catalog does not know
    assert normalize_model_name("qwen2.5-7b")[0] != normalize_model_name("qwen2-57b")[0]  # dots are kept
    assert match_catalog("mistralai/Mistral-7B-Instruct-v0.2") is None  # not the v0.1 shapes
    derived = {e.name: e for e in list_models() if e.derived_from}
    assert set(derived) == {"llama-3-8b", "llama-3-70b", "llama-3.3-70b"}
    changed = {"llama-3-8b": ("max_position_embeddings", "rope_scaling"),
               "llama-3-70b": ("max_position_embeddings", "rope_scaling"), "llama-3.3-70b": ("eos_token_id",)}
    for entry in derived.values():
        base = find_entry(entry.derived_from)
        assert entry.source.startswith(base.source + " with ")
        keys = changed[entry.name]
        assert {k: v for k, v in entry.config.items() if k not in keys} == \
            {k: v for k, v in base.config.items() if k not in keys}
        assert load_catalog_spec(entry.name).n_params == load_catalog_spec(base.name).n_params
    for name in ("llama-3-8b", "llama-3-70b"):
        assert derived[name].config["max_position_embeddings"] == 8192 and derived[name].config["rope_scaling"] is None
    llama33 = derived["llama-3.3-70b"]
    assert (llama33.derived_from, llama33.hf_id) == ("llama-3.1-70b", "meta-llama/Llama-3.3-70B-Instruct")
    assert llama33.config["eos_token_id"] == [128001, 128008, 128009]
    assert llama33.config["max_position_embeddings"] == 131072 and llama33.config["rope_scaling"]["rope_type"] == "llama3"
    assert match_catalog("meta-llama/Llama-3.3-70B-Instruct") == (llama33, "")  # the hub id is the instruct model


def test_spec_fields_of_catalog_models():
    llama = load_catalog_spec("llama-3.2-1b")
    assert (llama.hidden_size, llama.num_layers, llama.num_kv_heads, llama.head_dim) == (2048, 16, 8, 64)
    assert llama.tie_word_embeddings and llama.params.lm_head == 0
    mixtral = load_catalog_spec("mixtral-8x7b")
    assert mixtral.is_moe and mixtral.params.expert_total == 32 * 8 * 3 * 4096 * 14336
    assert load_catalog_spec("mistral-7b").sliding_window == 4096
    assert load_catalog_spec("qwen2.5-7b").sliding_window is None  # use_sliding_window false
    assert load_catalog_spec("phi-3-mini-4k").sliding_window == 2047
    falcon = load_catalog_spec("falcon-7b")
    assert (falcon.num_kv_heads, falcon.parallel_residual, falcon.norm) == (1, True, "layernorm")
    bert = load_catalog_spec("bert-large-uncased")
    assert bert.is_encoder and bert.params.position_embedding == (512 + 2) * 1024
    assert load_catalog_spec("gpt2").position == "learned"


def test_added_models_shapes():
    """Fields that the added entries get wrong most easily."""
    nemo = load_catalog_spec("mistral-nemo-12b")
    assert (nemo.hidden_size, nemo.num_attention_heads, nemo.head_dim) == (5120, 32, 128)  # 128 != 5120/32
    assert nemo.sliding_window is None and nemo.vocab_size == 131_072
    assert load_catalog_spec("mistral-small-24b").head_dim == 128
    assert load_catalog_spec("phi-4").model_type == "phi3" and load_catalog_spec("phi-3-medium-4k").sliding_window == 2047
    for name, layers in (("gemma-3-4b", 34), ("gemma-3-12b", 48), ("gemma-3-27b", 62)):
        spec = load_catalog_spec(name)  # a multimodal config.json: only its text model is built (and trained)
        assert find_entry(name).config["model_type"] == "gemma3" and "vision_config" in find_entry(name).config
        assert (spec.model_type, spec.architecture, spec.num_layers) == ("gemma3_text", "Gemma3ForCausalLM", layers)
        assert spec.vocab_size == 262_208 and spec.sliding_window == 1024 and spec.tie_word_embeddings
    assert load_catalog_spec("gemma-3-27b").head_dim == 128 and load_catalog_spec("gemma-3-4b").head_dim == 256
    v2 = load_catalog_spec("deepseek-v2")
    assert (v2.num_experts, v2.num_experts_per_tok, v2.num_shared_experts) == (160, 6, 2)
    assert v2.moe_layer_indices == tuple(range(1, 60))


def test_moe_active_parameters_match_the_model_cards():
    """Qwen3-235B-A22B: 22B activated; Mixtral-8x22B: 39B active; DeepSeek-V2: 21B activated. Per token: every
    layer's attention, norms, router, dense MLP and shared experts, top-k of the routed experts, the final norm and
    the unembedding; the figures round alike with the embedding table counted or not."""
    for name, card in (("qwen3-235b-a22b", 22), ("mixtral-8x22b", 39), ("deepseek-v2", 21)):
        spec = load_catalog_spec(name)
        k, e = spec.num_experts_per_tok, spec.num_experts
        active = sum(lp.attention + lp.norms + lp.router + lp.mlp + lp.shared_experts + lp.experts * k // e
                     for lp in spec.params.layers) + spec.params.final_norm + spec.params.lm_head
        assert round(active / 1e9) == round((active + spec.params.embedding) / 1e9) == card, name


def test_qwen1_7b_count_by_hand():
    """Qwen/Qwen-7B (modeling_qwen.py of the hub repo): wte and the untied lm_head 151,936 x 4,096 each; per block
    ln_1 + ln_2 (2 x 4,096), c_attn 4,096 x 12,288 + 12,288 bias, c_proj 4,096 x 4,096 (no_bias), w1 and w2
    4,096 x 11,008 and mlp.c_proj 11,008 x 4,096 (intermediate_size 22,016 // 2); ln_f 4,096."""
    block = 2 * 4096 + 4096 * 12288 + 12288 + 4096 * 4096 + 3 * 4096 * 11008
    assert block == 202_395_648
    total = 2 * 151936 * 4096 + 32 * block + 4096
    spec = load_catalog_spec("Qwen/Qwen-7B-Chat")
    assert spec.n_params == total == 7_721_324_544
    assert (spec.model_type, spec.architecture, spec.intermediate_size, spec.num_kv_heads) == ("qwen", "QWenLMHeadModel", 11008, 32)
    assert not spec.logits_upcast and not spec.tie_word_embeddings
