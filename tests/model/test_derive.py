"""The deriver (trainmem/model/derive.py): a family without a layer description, described from transformers.

- Exact parameter counts of real configs, pinned from the transformers 5.24 meta-device build and equal to the
  models' published totals; the components add up to ``sum(p.numel())`` of a real (CPU) build of a small copy.
- What a layer saves: the estimate of a derived model against a full trace of the same model (trainmem's tracer:
  the whole optimizer step on fake tensors), within 3 %. The deriver was built on the development families (olmo2,
  starcoder2, phi). A first hold-out (granite, glm4, cohere, stablelm, olmo, bloom), run once with the deriver
  frozen, gave 21 of 23 setups within 3 %; its misses showed two general flaws, fixed since (so these families are
  no longer held out): GLM-4 rebuilds its rotary cos/sin in every layer, a tensor shared by the micro-batch's
  sequences (+3.4 % from a fit without a shared term: now six runs, per-sequence and shared terms), and a norm after
  the MLP (OLMo-2, GLM-4) opens the layer's backward with its own transient (-3.0 % under recompute). Cohere stays
  a strict xfail: its logit_scale multiplies the b·s·V logits, a head the deriver does not measure (-5.4 %); BLOOM
  (eager only) is -3.3 %: its hand-written GELU backward's temporaries are not measured (saved tensors are).
  A second hold-out (helium, smollm3, exaone4, arcee, ernie4_5, seed_oss), run once after those fixes: 24 of 24
  setups within 3 % (largest |error| 2.8 %, exaone4 under recompute).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from trainmem.errors import ConfigError, UnsupportedError  # noqa: E402
from trainmem.model.hf import spec_from_hf_config  # noqa: E402
from trainmem.setup import make_setup, validate_for_model  # noqa: E402


pytestmark = pytest.mark.usefixtures("derived_cache")  # (tests/model/conftest.py: one cache for the module)


# Real config.json values (the files on the hub; the fields that shape the parameters).
REAL = {
    # microsoft/phi-2 config.json: parallel attention + MLP, partial rotary 0.4, biases, untied head with bias
    "phi-2": ({"architectures": ["PhiForCausalLM"], "model_type": "phi", "hidden_act": "gelu_new", "hidden_size": 2560,
               "intermediate_size": 10240, "layer_norm_eps": 1e-05, "max_position_embeddings": 2048,
               "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 32,
               "partial_rotary_factor": 0.4, "qk_layernorm": False, "resid_pdrop": 0.1, "embd_pdrop": 0.0,
               "attention_dropout": 0.0, "rope_theta": 10000.0, "tie_word_embeddings": False, "vocab_size": 51200},
              2_779_683_840),
    # allenai/OLMo-2-0425-1B config.json: post-norm with QK-norm over the whole projection
    "olmo-2-0425-1b": ({"architectures": ["Olmo2ForCausalLM"], "model_type": "olmo2", "attention_bias": False,
                        "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 8192, "num_attention_heads": 16,
                        "num_hidden_layers": 16, "num_key_value_heads": 16, "max_position_embeddings": 4096,
                        "rms_norm_eps": 1e-06, "rope_theta": 500000, "tie_word_embeddings": False,
                        "vocab_size": 100352}, 1_484_916_736),
    # bigcode/starcoder2-3b config.json: LayerNorm + bias, GELU MLP (c_fc/c_proj), GQA 24/2, tied head
    "starcoder2-3b": ({"architectures": ["Starcoder2ForCausalLM"], "model_type": "starcoder2", "hidden_size": 3072,
                       "intermediate_size": 12288, "num_hidden_layers": 30, "num_attention_heads": 24,
                       "num_key_value_heads": 2, "vocab_size": 49152, "max_position_embeddings": 16384,
                       "sliding_window": 4096, "use_bias": True, "norm_epsilon": 1e-5,
                       "hidden_act": "gelu_pytorch_tanh"}, 3_030_371_328),
    # ibm-granite/granite-3.0-2b-base config.json: llama-shaped with muP multipliers, tied head
    "granite-3.0-2b": ({"architectures": ["GraniteForCausalLM"], "model_type": "granite", "hidden_size": 2048,
                        "intermediate_size": 8192, "num_hidden_layers": 40, "num_attention_heads": 32,
                        "num_key_value_heads": 8, "vocab_size": 49155, "tie_word_embeddings": True,
                        "max_position_embeddings": 4096, "embedding_multiplier": 12.0, "residual_multiplier": 0.22,
                        "attention_multiplier": 0.015625, "logits_scaling": 8.0}, 2_533_531_648),
    # THUDM/GLM-4-9B-0414 config.json: sandwich norms, fused gate_up, partial rotary 0.5, q/k/v biases
    "glm-4-9b-0414": ({"architectures": ["Glm4ForCausalLM"], "model_type": "glm4", "hidden_size": 4096,
                       "intermediate_size": 13696, "num_hidden_layers": 40, "num_attention_heads": 32,
                       "num_key_value_heads": 2, "head_dim": 128, "vocab_size": 151552, "partial_rotary_factor": 0.5,
                       "attention_bias": True, "tie_word_embeddings": False, "max_position_embeddings": 32768},
                      9_400_279_040),
}


@pytest.mark.parametrize("name", list(REAL))
def test_real_configs_have_exact_parameter_counts(name):
    cfg, expected = REAL[name]
    spec = spec_from_hf_config(cfg, name=name)
    assert spec.n_params == expected
    assert spec.derived is not None and spec.architecture == cfg["architectures"][0]


def test_phi2_counts_by_component_by_hand():
    """Phi-2 from its modules (modeling_phi.py @ 5.24): q/k/v/dense with bias, fc1/fc2 with bias, one LayerNorm
    per layer (parallel block), final LayerNorm, untied lm_head with bias."""
    spec = spec_from_hf_config(REAL["phi-2"][0], name="phi-2")
    h, i, V, L = 2560, 10240, 51200, 32
    layer = spec.params.layers[0]
    assert layer.attention == 4 * (h * h + h)
    assert layer.mlp == 2 * h * i + i + h
    assert layer.norms == 2 * h
    assert layer.matmul == 4 * h * h + 2 * h * i
    assert (spec.params.embedding, spec.params.lm_head, spec.params.final_norm) == (V * h, V * h + V, 2 * h)
    assert spec.n_params == V * h + L * (layer.attention + layer.mlp + layer.norms) + 2 * h + V * h + V
    assert (spec.norm, spec.position, spec.mlp_gated, spec.rotary_dim) == ("layernorm", "rope", False, 32)


TINY = dict(hidden_size=256, intermediate_size=688, num_hidden_layers=3, num_attention_heads=8,
            num_key_value_heads=2, vocab_size=512, max_position_embeddings=4096)


@pytest.mark.parametrize("mt", ["olmo2", "starcoder2", "phi", "glm4", "cohere"])
def test_components_sum_to_a_real_build(mt):
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = dict(TINY, model_type=mt, pad_token_id=0)
    spec = spec_from_hf_config(cfg, name=mt)
    conf = AutoConfig.for_model(mt, **{k: v for k, v in cfg.items() if k != "model_type"})
    model = AutoModelForCausalLM.from_config(conf)
    assert spec.n_params == sum(p.numel() for p in model.parameters())
    assert spec.params.layers_total == sum(p.numel() for p in model.model.layers.parameters())


SETUPS = {
    "bf16": dict(precision="bf16", seq_len=512, micro_batch=4),
    "amp": dict(precision="amp-bf16", seq_len=256, micro_batch=4),
    "eager": dict(precision="bf16", seq_len=256, micro_batch=4, attn="eager"),
    "recompute": dict(precision="amp-bf16", seq_len=256, micro_batch=4, recompute="full"),
}
DEVELOPMENT = ("olmo2", "starcoder2", "phi")
FIRST_HOLD_OUT = ("granite", "glm4", "cohere", "stablelm", "olmo")
HOLD_OUT = ("helium", "smollm3", "exaone4", "arcee", "ernie4_5", "seed_oss")
#: What the tiny config needs for the family to build (head_dim defaults of 128 > 256 / 8; pad ids in the vocabulary).
_EXTRA = {"glm4": {"pad_token_id": 0}, "helium": {"head_dim": 32}, "smollm3": {"pad_token_id": 0},
          **{mt: {"head_dim": 32, "pad_token_id": 0} for mt in ("exaone4", "arcee", "ernie4_5", "seed_oss")}}
_MISSES = {("cohere", "bf16"): "-5.4 %: CohereForCausalLM multiplies the logits by logit_scale (a b·s·V tensor the "
                               "deriver does not measure: it measures layers, the head is the generic one)"}


def _cases(families, keys=tuple(SETUPS)):
    out = []
    for mt in families:
        for key in keys:
            marks = [pytest.mark.xfail(strict=True, reason=_MISSES[(mt, key)])] if (mt, key) in _MISSES else []
            out.append(pytest.param(mt, key, marks=marks, id=f"{mt}-{key}"))
    return out


def _peak_error(mt: str, setup: dict) -> float:
    from trainmem.trace.compare import compare

    spec = spec_from_hf_config(dict(TINY, model_type=mt, **_EXTRA.get(mt, {})), name=mt)
    return compare(spec, make_setup(**setup)).peak_error


@pytest.mark.parametrize("mt,key", _cases(HOLD_OUT))
def test_hold_out_families_agree_with_a_full_trace(mt, key):
    err = _peak_error(mt, SETUPS[key])
    assert abs(err) < 0.03, (mt, key, err)


@pytest.mark.parametrize("mt,key", _cases(FIRST_HOLD_OUT, ("bf16", "recompute")))
def test_first_hold_out_families_agree_with_a_full_trace(mt, key):
    err = _peak_error(mt, SETUPS[key])
    assert abs(err) < 0.03, (mt, key, err)


@pytest.mark.parametrize("mt", DEVELOPMENT)
def test_development_families_agree_with_a_full_trace(mt):
    for key in ("amp", "recompute"):
        err = _peak_error(mt, SETUPS[key])
        assert abs(err) < 0.03, (mt, key, err)


def test_bloom_eager_only_and_alibi():
    from trainmem.trace.compare import compare

    spec = spec_from_hf_config(dict(TINY, model_type="bloom"), name="bloom")
    assert spec.position == "alibi"
    with pytest.raises(UnsupportedError, match="no sdpa implementation.*--attn eager"):
        validate_for_model(make_setup(), spec)
    # (known residual, -3.3 %: BloomGelu's hand-written backward makes several fp32-width temporaries of the MLP
    # width; the deriver measures what layers save, and the walk's MLP backward transient is the generic one)
    assert abs(compare(spec, make_setup(precision="bf16", seq_len=256, micro_batch=4, attn="eager")).peak_error) < 0.05


def test_saved_bytes_fit_is_linear_and_quadratic_in_the_sequence():
    """Fits through two different sets of sequence lengths agree on points outside both (eager: s² softmax;
    GLM-4: rotary cos/sin rebuilt in every layer, shared by the sequences)."""
    from trainmem.model.derive import _measure

    for mt, attn in (("olmo2", "eager"), ("glm4", "sdpa")):
        spec = spec_from_hf_config(dict(TINY, model_type=mt, **_EXTRA.get(mt, {})), name=mt)
        probe = _measure(spec.derived, "16", attn)
        if attn == "eager":
            assert any(p.per_token_seq_bytes > 0 for p in probe.parts)  # the softmax is quadratic
        else:
            assert any(p.shared_per_seq_bytes > 0 for p in probe.parts)  # GLM-4's per-layer cos/sin
        other = _measure(spec.derived, "16", attn, (96, 160, 224))
        for b, s in ((3, 192), (1, 512), (4, 1024)):
            got = sum(p.bytes_for(b, s) for p in probe.parts)
            assert got == pytest.approx(sum(p.bytes_for(b, s) for p in other.parts), abs=8), (mt, b, s)


def test_derived_matches_a_described_family_exactly():
    """llama run through the deriver (as if undescribed) saves what the hand-written description says it saves."""
    from trainmem.memory.activations import layer_saved
    from trainmem.model.derive import derive_spec

    cfg = dict(TINY, model_type="llama")
    described = spec_from_hf_config(cfg, name="llama")
    derived = derive_spec(cfg, name="llama")
    assert derived.n_params == described.n_params
    for prec in ("bf16", "amp-bf16", "fp32"):
        for attn in ("sdpa", "eager"):
            st = make_setup(precision=prec, attn=attn, seq_len=256, micro_batch=2)
            assert layer_saved(derived, st, 1).total_bytes == layer_saved(described, st, 1).total_bytes, (prec, attn)


@pytest.mark.parametrize("fields,match", [
    (dict(tp=2, gpus=2, engine="fsdp2"), r"tp\(2\) > 1 is not modelled for olmo2"),
    (dict(pp=2, gpus=2, engine="megatron"), r"pp\(2\) > 1"),
    (dict(engine="megatron"), "--engine megatron is not modelled for olmo2"),
    (dict(lora_rank=8), "LoRA/QLoRA is not modelled"),
    (dict(recompute="selective"), "--recompute selective is not modelled"),
])
def test_refused_engine_paths_say_so_in_one_line(fields, match):
    spec = spec_from_hf_config(dict(TINY, model_type="olmo2"), name="olmo2")
    with pytest.raises(UnsupportedError, match=match) as err:
        validate_for_model(make_setup(**fields), spec)
    assert "\n" not in str(err.value)


def test_assumptions_say_it_was_derived_and_the_engine_paths(tmp_path, monkeypatch):
    from trainmem.memory import estimate

    monkeypatch.setenv("TRAINMEM_CACHE_DIR", str(tmp_path))  # (its own: what this run writes)
    spec = spec_from_hf_config(dict(TINY, model_type="olmo2"), name="olmo2")
    notes = estimate(spec, make_setup(precision="bf16", seq_len=256)).assumptions
    note = next(n for n in notes if "derived from transformers" in n)
    assert "engine paths: torch, fsdp2, deepspeed" in note and "no tp/pp/cp/ep" in note
    assert list(tmp_path.glob("derived/*-16-sdpa.json")) and list(tmp_path.glob("derived/*-spec.json"))  # on disk


def test_no_causal_lm_class_and_moe_are_refused():
    with pytest.raises(UnsupportedError) as err:  # (encoder–decoder models: tests/model/test_derive_seq2seq.py)
        spec_from_hf_config(dict(TINY, model_type="vit"), name="vit")
    assert "'vit'" in str(err.value) and "llama" in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(UnsupportedError, match="Mamba-1"):  # (MoE and Mamba-2: tests/model/test_derive_moe_mamba.py)
        spec_from_hf_config(dict(TINY, model_type="jamba", pad_token_id=0), name="jamba")
    with pytest.raises((ConfigError, UnsupportedError)):
        spec_from_hf_config(dict(TINY, model_type="no_such_family"), name="x")


def test_without_torch_one_clear_line(monkeypatch):
    import trainmem.model.derive as d

    monkeypatch.setattr(d, "_import_torch", lambda: (None, None))
    monkeypatch.setattr(d, "_torch_installed", lambda: False)
    with pytest.raises(UnsupportedError) as err:
        spec_from_hf_config(dict(TINY, model_type="olmo2"), name="olmo2")
    msg = str(err.value)
    assert "olmo2" in msg and "pip install 'trainmem[trace]'" in msg and "\n" not in msg


def test_cli_estimates_a_derived_config_and_refuses_tp_with_exit_2(tmp_path, capsys):
    import json

    from trainmem.cli import main

    (tmp_path / "config.json").write_text(json.dumps(dict(TINY, model_type="olmo2")))
    assert main(["estimate", str(tmp_path), "--seq-len", "256", "--json"]) in (0, None)
    out = json.loads(capsys.readouterr().out)
    assert out["n_params"] == spec_from_hf_config(dict(TINY, model_type="olmo2"), name="o").n_params
    assert any("derived from transformers" in a for a in out["assumptions"])
    assert main(["estimate", str(tmp_path), "--tp", "2", "--gpus", "2", "--engine", "fsdp2"]) == 2
    err = capsys.readouterr().err
    assert "tp(2) > 1 is not modelled for olmo2" in err and "Traceback" not in err


def test_python_api_on_a_config_dict_and_a_live_module_agree():
    import trainmem
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = dict(TINY, model_type="olmo2")
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model("olmo2", **{k: v for k, v in cfg.items()
                                                                              if k != "model_type"}))
    a, b = trainmem.estimate(cfg, seq_len=256), trainmem.estimate(model, seq_len=256)
    assert a.n_params == b.n_params == sum(p.numel() for p in model.parameters())
    assert a.peak_allocated_bytes == b.peak_allocated_bytes


def test_a_run_that_reaches_the_sliding_window_is_probed_there():
    """StarCoder2 (window 4096): from kv_length >= window transformers passes an explicit sliding mask
    (masking_utils._ignore_causal_mask_sdpa), so CUDA's SDPA leaves the flash kernel; probed at s = 64..192 the
    3B model at s = 4096 read -4.3 % against the full trace, probed from the window on it agrees (tiny copy here)."""
    from trainmem.model.derive import SEQ_LENS, probe_lengths
    from trainmem.trace.compare import compare

    assert probe_lengths(None, 8192) == SEQ_LENS and probe_lengths(4096, 2048) == SEQ_LENS
    assert probe_lengths(4096, 4096) == (4096, 4160, 4224) and probe_lengths(96, 64) == (31, 62, 93)
    spec = spec_from_hf_config(dict(TINY, model_type="starcoder2", sliding_window=256), name="sc2")
    assert spec.derived.sliding_window == 256
    for seq in (128, 512):
        err = compare(spec, make_setup(precision="bf16", seq_len=seq, micro_batch=2)).peak_error
        assert abs(err) < 0.03, (seq, err)
