"""LoRA targets as PEFT takes them: module names per family, all-linear, one-line errors, exact counts.

The trainable counts are checked against PEFT's own ``get_peft_model(...).get_nb_trainable_parameters()``
on the transformers model built on the meta device (tests/model/meta_build.py).
"""

from __future__ import annotations

import pytest

from tests.model.meta_build import build_meta
from tests.model.test_hf import FAMILY_CONFIGS
from trainmem.errors import ConfigError
from trainmem.model.hf import spec_from_hf_config
from trainmem.model.lora_targets import (check_lora_targets, lora_param_count_model, normalize_targets,
                                         peft_target_modules)
from trainmem.setup import make_setup, validate_for_model

RANK = 4

# (family config, targets as a user types them); all-linear and the family's own PEFT names
PEFT_CASES = [
    ("llama-biases", "q_proj,v_proj"),
    ("llama-biases", "all-linear"),
    ("qwen2-tied", "ALL-LINEAR"),
    ("mistral", "q_proj k_proj v_proj o_proj gate_proj up_proj down_proj"),
    ("gemma2", "self_attn.o_proj, mlp.down_proj"),
    ("phi3", "qkv_proj,gate_up_proj"),
    ("phi3", "all-linear"),
    ("mixtral", "q_proj,v_proj"),
    ("qwen2_moe-step-onlylayers", "all-linear"),           # dense + shared-expert MLPs, shared_expert_gate
    ("qwen2_moe-step-onlylayers", "gate_proj,up_proj,down_proj"),
    ("deepseek_v3", "q_a_proj,q_b_proj,kv_a_proj_with_mqa,kv_b_proj,o_proj"),
    ("deepseek_v2-no-q-lora", "q_proj,kv_a_proj_with_mqa"),
    ("gpt2", "c_attn"),
    ("gpt2", "all-linear"),                                 # Conv1D layers; lm_head excluded
    ("gpt2-cross-untied-inner", "c_attn,c_proj"),
    ("gpt_neox", "query_key_value,dense"),
    ("falcon-new-arch", "query_key_value dense_h_to_4h"),
    ("falcon-multiquery", "all-linear"),
    ("bert", "query,key,value"),
    ("bert", "dense"),                                      # also cls.predictions.transform.dense
    ("roberta", "all-linear"),                              # lm_head.dense, not lm_head.decoder
    ("nemotron", "all-linear"),                             # up_proj / down_proj, no gate
    ("nemotron-biases-headdim-tied", "q_proj,o_proj,up_proj"),
    ("opt", "all-linear"),                                  # q/k/v/out_proj, fc1, fc2
    ("opt-350m-style", "all-linear"),                       # + decoder.project_in / project_out
    ("opt-350m-style", "q_proj,v_proj,out_proj,fc2"),
    # the output head (named only: all-linear leaves it out); tied embeddings: the adapter wraps the head alone
    ("llama-biases", "q_proj,v_proj,lm_head"),
    ("qwen2-tied", "lm_head"),
    ("gpt2", "c_attn,lm_head"),
    ("gpt_neox", "query_key_value,lm_head"),
    ("opt-350m-style", "q_proj,lm_head"),                   # lm_head reads project_out's w-wide output
]


def _peft_targets(spec, typed: str):
    """What a PEFT user passes: the names as typed (a list), or the all-linear string."""
    t = normalize_targets(typed)
    return "all-linear" if t == ("all-linear",) else list(t)


@pytest.mark.parametrize("fam,typed", PEFT_CASES, ids=[f"{f}:{t}" for f, t in PEFT_CASES])
def test_trainable_count_equals_peft(fam: str, typed: str) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    peft = pytest.importorskip("peft")
    spec = spec_from_hf_config(FAMILY_CONFIGS[fam], name=fam)
    check_lora_targets(spec, (typed,), RANK)
    model = build_meta(spec.architecture, spec.hf_config)
    config = peft.LoraConfig(r=RANK, lora_alpha=16, bias="none", target_modules=_peft_targets(spec, typed))
    trainable, _ = peft.get_peft_model(model, config).get_nb_trainable_parameters()
    assert lora_param_count_model(spec, (typed,), RANK) == trainable
    # the tracer's target_modules (matched module paths) adapt the same modules
    model = build_meta(spec.architecture, spec.hf_config)
    config = peft.LoraConfig(r=RANK, lora_alpha=16, bias="none", target_modules=peft_target_modules(spec, (typed,)))
    assert peft.get_peft_model(model, config).get_nb_trainable_parameters()[0] == trainable


def _spec(fam: str):
    return spec_from_hf_config(FAMILY_CONFIGS[fam], name=fam)


@pytest.mark.parametrize("fam,typed,msg", [
    ("gpt2", "c_atn", "'c_atn' is not a linear module of gpt2; valid: c_attn, c_proj, c_fc, all-linear"),
    ("llama-biases", "q_proj,v_projj", "'v_projj' is not a linear module of llama"),
    ("gpt2", "q_proj", "valid: c_attn"),
    ("falcon-new-arch", "query,value", "valid: query_key_value, dense, dense_h_to_4h, dense_4h_to_h, all-linear"),
    ("mixtral", "w1,w3", "PEFT maps 'w1' onto the stacked routed experts"),
    ("mixtral", "all-linear", "valid: q_proj, k_proj, v_proj, o_proj"),
    ("deepseek_v3", "gate_proj,up_proj", "PEFT maps 'gate_proj' onto the stacked routed experts"),
    ("deepseek_v3", "q_proj", "valid: q_a_proj, q_b_proj, kv_a_proj_with_mqa, kv_b_proj, o_proj"),
    ("qwen2_moe-step-onlylayers", "gate", "'gate' is not a linear module of qwen2_moe (routed experts"),
])
def test_unknown_targets_are_refused(fam: str, typed: str, msg: str) -> None:
    with pytest.raises(ConfigError, match=msg.replace("(", r"\(").replace(")", r"\)")) as err:
        validate_for_model(make_setup(lora_rank=8, lora_targets=typed, seq_len=16), _spec(fam))
    assert "\n" not in str(err.value)


def test_rank_bounded_by_adapted_dims() -> None:
    spec = _spec("llama-biases")  # k_proj: 64 -> 32
    check_lora_targets(spec, ("q_proj",), 64)
    with pytest.raises(ConfigError, match=r"lora-rank\(33\) > min\(in_features\(64\), out_features\(32\)\) = 32 "
                                          r"of self_attn.k_proj"):
        check_lora_targets(spec, ("all-linear",), 33)
    # all-linear adapts qwen2_moe's 1-wide shared_expert_gate at any rank (as PEFT does); naming it bounds r
    moe = _spec("qwen2_moe-step-onlylayers")
    check_lora_targets(moe, ("all-linear",), 16)
    with pytest.raises(ConfigError, match="of mlp.shared_expert_gate"):
        check_lora_targets(moe, ("shared_expert_gate",), 2)


def test_names_case_commas_and_spaces() -> None:
    spec = _spec("gpt2")
    a = lora_param_count_model(spec, ("c_attn,c_proj",), 8)
    assert a == lora_param_count_model(spec, ("C_ATTN  c_proj",), 8) == lora_param_count_model(spec, ("c_attn", "c_proj"), 8)
    assert a > 0


def test_default_targets_mean_attention_on_other_families() -> None:
    """trainmem's default (q/k/v/o_proj) on a family without those modules: its attention projections."""
    s = make_setup(lora_rank=8, seq_len=16)
    gpt2 = _spec("gpt2")
    validate_for_model(s, gpt2)
    assert lora_param_count_model(gpt2, s.lora_targets, 8) == lora_param_count_model(gpt2, ("c_attn", "attn.c_proj"), 8)


@pytest.mark.parametrize("heads,groups,enable", [(8, 8, (True, False, True)), (8, 2, (True, False, True)),
                                                 (8, 2, (False, True, False)), (8, 1, (True, True, True))])
def test_qkv_slices_count_equals_litgpt(heads: int, groups: int, enable: tuple[bool, bool, bool]) -> None:
    """litgpt 0.5.13's LoRAQKVLinear (``lora_query/key/value`` on its fused ``attn.qkv``): one lora_A (r·n × h) and
    one lora_B (Σ widths × r); trainmem's ``qkv.q/k/v`` targets on the same shape give its trainable count."""
    pytest.importorskip("torch")
    lora = pytest.importorskip("litgpt.lora")
    h, d, r, layers = 256, 32, 8, 2
    cfg = lora.Config(n_layer=layers, n_head=heads, n_query_groups=groups, n_embd=h, head_size=d, block_size=128,
                      padded_vocab_size=512, vocab_size=512, bias=False, mlp_class_name="LLaMAMLP",
                      intermediate_size=688, norm_class_name="RMSNorm", lora_r=r, lora_alpha=16,
                      lora_query=enable[0], lora_key=enable[1], lora_value=enable[2])
    model = lora.GPT(cfg)
    lora.mark_only_lora_as_trainable(model)
    litgpt_count = sum(p.numel() for p in model.parameters() if p.requires_grad)
    spec = spec_from_hf_config(dict(model_type="llama", hidden_size=h, intermediate_size=688, num_hidden_layers=layers,
                                    num_attention_heads=heads, num_key_value_heads=groups, head_dim=d,
                                    vocab_size=512), name="litgpt-shape")
    targets = tuple(x for x, on in zip(("qkv.q", "qkv.k", "qkv.v"), enable) if on)
    assert lora_param_count_model(spec, targets, r) == litgpt_count
    widths = (heads * d, groups * d, groups * d)
    assert litgpt_count == layers * sum(r * (h + w) for w, on in zip(widths, enable) if on)
