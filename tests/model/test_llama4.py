"""Llama 4 (trainmem/model/vlm.py for Llama4ForConditionalGeneration, trainmem/model/derive.py for its text model).

- Parameters: Llama-4-Scout-17B-16E-Instruct and Llama-4-Maverick-17B-128E-Instruct (fixtures_llama4/: their hub
  config.json, written from the published files; no network) equal transformers 5.24's meta build, pinned
  (108,641,793,536 and 401,583,781,376; the hub pages say 109B and 402B); tower 850,960,896 + projector 20,971,520.
  A tiny llama4 against a meta build made here. The text model alone (model_type llama4_text) is the text part.
- Layer kinds: NoPE layers (``no_rope_layers``: every 4th) run no RoPE (and no qk_norm), MoE and dense layers
  interleave (Maverick): each is probed apart.
- Activations: a tiny Maverick-like llama4_text (MoE every 2nd layer, NoPE every 4th) against a full trace within
  3 % (measured: bf16 -0.0 %, eager -0.3 %, amp -2.3 %, full recompute 0.0 %; a Scout-like one, MoE in every layer:
  bf16 -0.0, eager -0.2, recompute 0.0, amp -3.9 % — the miss: backward temporaries of the all-experts bmm, which
  the deriver does not measure). The tower's fit (1 and 2 tiles) against a measurement of 3 tiles within 3 %.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from trainmem.errors import UnsupportedError  # noqa: E402
from trainmem.memory.estimate import estimate  # noqa: E402
from trainmem.model.hf import spec_from_hf_config  # noqa: E402
from trainmem.setup import make_setup  # noqa: E402

_FIX = Path(__file__).parent / "fixtures_llama4"
SCOUT = json.loads((_FIX / "Llama-4-Scout-17B-16E-Instruct.json").read_text())
MAVERICK = json.loads((_FIX / "Llama-4-Maverick-17B-128E-Instruct.json").read_text())

TINY_TEXT = dict(model_type="llama4_text", hidden_size=128, intermediate_size=256, intermediate_size_mlp=256,
                 num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2, head_dim=32, vocab_size=512,
                 num_local_experts=4, num_experts_per_tok=1, interleave_moe_layer_step=2, use_qk_norm=False,
                 max_position_embeddings=4096, pad_token_id=0)
"""Maverick's layout, reduced: MoE at layers 1 and 3, NoPE at layer 3 (no_rope_layer_interval 4), no qk_norm."""


def _tiny_vlm() -> dict:
    c = copy.deepcopy(SCOUT)
    c["text_config"] = dict(SCOUT["text_config"], **TINY_TEXT)
    c["text_config"].pop("no_rope_layers")
    c["vision_config"].update(hidden_size=64, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                              image_size=56, vision_output_dim=128, projector_input_dim=128,
                              projector_output_dim=128)  # (fc1 takes hidden / ratio² = 256: the pixel shuffle's)
    return c


@pytest.fixture(scope="module")
def cache(derived_cache):
    return derived_cache  # (tests/model/conftest.py: one cache for the module)


@pytest.fixture(scope="module")
def tiny(cache):
    return spec_from_hf_config(_tiny_vlm(), name="llama4-tiny")


def _meta_total(cfg: dict) -> int:
    raw = {k: v for k, v in cfg.items() if k not in ("architectures", "transformers_version", "torch_dtype")}
    config = transformers.AutoConfig.for_model(raw.pop("model_type"), **raw)
    with torch.device("meta"):
        model = transformers.Llama4ForConditionalGeneration._from_config(config)
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("cfg, total", [(SCOUT, 108_641_793_536), (MAVERICK, 401_583_781_376)],
                         ids=["scout", "maverick"])
def test_hub_configs_have_the_meta_builds_parameters(cache, cfg, total):
    spec = spec_from_hf_config(cfg, name="llama4")
    assert spec.n_params == total
    assert (spec.vision.tower_params, spec.vision.projector_params) == (850_960_896, 20_971_520)
    assert spec.vision.tokens_per_image == 144 and spec.vision.patches_per_token == 4  # (336/14)² / 4, + CLS
    text = spec_from_hf_config(cfg["text_config"], name="llama4-text")  # model_type llama4_text: the text alone
    assert text.n_params == total - spec.vision.params and text.vision is None


def test_tiny_equals_a_meta_build_and_nope_and_moe_layers_are_kinds(tiny):
    assert tiny.n_params == _meta_total(_tiny_vlm())
    # layer 0 dense RoPE, 1 MoE RoPE, 2 dense RoPE, 3 MoE NoPE (transformers: no_rope_layers[3] = 0)
    assert tiny.derived.layer_kinds == (0, 1, 0, 2)
    assert "every expert on every token" in tiny.derived.note


def test_tower_fit_agrees_with_a_measurement_it_was_not_fitted_on(tiny):
    from trainmem.model import vlm

    vt = tiny.vision
    fit = vt.fit("16", "sdpa", "trained", False)
    traced = vlm._measure_at(vt, "16", "sdpa", "trained", False, 3, (0, 0))
    assert traced[0] > 0
    assert fit.saved_bytes(3, vt.tokens_per_image * vt.patches_per_token + vt.extra_positions) == pytest.approx(
        traced[0], rel=0.03)


def test_estimate_with_tiles_and_refusals(tiny):
    trained = estimate(tiny, make_setup(seq_len=256, precision="bf16", image_tokens=8, train_vision=True))
    frozen = estimate(tiny, make_setup(seq_len=256, precision="bf16", image_tokens=8))
    assert trained.n_trainable_params - frozen.n_trainable_params == tiny.vision.params
    assert trained.peak_allocated_bytes > frozen.peak_allocated_bytes
    with pytest.raises(UnsupportedError, match="multiple of 4"):  # (a 56-px tile: 16 patches, shuffled to 4 tokens)
        estimate(tiny, make_setup(seq_len=256, image_tokens=6))


def test_text_model_agrees_with_a_full_trace(tiny):
    """The tiny VLM's language model alone (its text config as vlm.py hands it on: the disk cache of the probe the
    estimate above made is reused) against a full trace of Llama4ForCausalLM."""
    from trainmem.trace.compare import compare

    spec = spec_from_hf_config(dict(tiny.derived.config), name="llama4-text-tiny")
    assert spec.derived.layer_kinds == (0, 1, 0, 2)
    err = compare(spec, make_setup(precision="bf16", seq_len=256, micro_batch=2)).peak_error
    assert abs(err) < 0.03, err


def test_a_text_model_with_image_tokens_names_llama4_among_the_towers():
    """--image-tokens on a model without a tower is refused naming the families that have one, read from vlm.py's
    registry: llama4 (Llama4ForConditionalGeneration) among them; the list was written by hand and lacked it."""
    from trainmem.api import build
    from trainmem.model.vlm import VLM_MODEL_TYPES
    from trainmem.report.i18n import tr

    spec, ts = build("llama-3.1-8b", seq_len=256, image_tokens=64)
    with pytest.raises(UnsupportedError, match="has no vision tower") as err:
        estimate(spec, ts)
    msg = str(err.value)
    assert "llama4" in VLM_MODEL_TYPES and all(f in msg for f in VLM_MODEL_TYPES) and "\n" not in msg
    assert "llama4" in tr(msg, "zh") and "没有视觉塔" in tr(msg, "zh")
