"""Encoder–decoder models (trainmem/model/derive_seq2seq.py): T5 / mT5 / FLAN-T5 / BART from transformers itself.

- Exact parameter counts of the real hub configs (tests/model/fixtures_seq2seq/*.json, the config.json files of
  google-t5/t5-small, google/flan-t5-base, google/mt5-small and facebook/bart-base) equal ``sum(p.numel())`` of
  ``AutoModelForSeq2SeqLM`` built from them on the meta device (transformers 5.24), pinned below; one component
  by hand (T5's relative position bias: heads × buckets, in the first layer of each stack only).
- What the layers save: the estimate of a small T5 v1.1 (gated-GELU, relative bias) and a small BART (learned
  positions, post-LN) against a full traced step of trainmem's tracer (fake tensors, the whole optimizer step),
  within 3 %. These two configurations were used to build the description (development data). Measured on them
  (b 4, s 256): T5 bf16 -0.8 %, amp +0.5 %, amp + full recompute within 3 %, fp32 -0.1 %, eager +0.4 %,
  fsdp2 x 2 amp +0.5 %; BART bf16 +0.8 %, amp +2.4 %, recompute +1.8 %, fp32 0.0 %; known misses: BART eager
  +5.1 % (the walk's eager-attention backward transient takes an fp32 softmax; BART's eager_attention_forward
  softmaxes in the scores' dtype) and BART fsdp2 -3.2 %, both on this tiny shape (h 256, 4 heads) only.
- The real configs below against a full trace, once (too slow for the suite: 13–25 s each): t5-small bf16 b 8 s 512
  -0.23 %, mt5-small bf16 b 8 s 512 -0.07 %, flan-t5-base amp-bf16 b 4 s 512 +0.06 % (fsdp2 x 2: -0.09 %),
  bart-base amp-bf16 b 8 s 512 + full recompute +0.28 %, bart-base bf16 eager b 8 s 512 +0.10 %.
- A hold-out run once with the description frozen (same shapes, other families): mT5, UMT5, mBART in bf16 / amp /
  amp + recompute: 9 of 9 within 3 % (largest |error| 2.3 %, mBART recompute). Pegasus and Marian read +3.6 … +9.1 %:
  transformers builds their sinusoidal position tables frozen (requires_grad=False), which the estimate would train;
  that finding decided the refusal below (so they are development data now).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from trainmem.errors import UnsupportedError  # noqa: E402
from trainmem.model.derive_seq2seq import relative_bias_params  # noqa: E402
from trainmem.model.hf import spec_from_hf_config  # noqa: E402
from trainmem.setup import make_setup, validate_for_model  # noqa: E402

FIXTURES = Path(__file__).parent / "fixtures_seq2seq"
#: sum(p.numel()) of AutoModelForSeq2SeqLM.from_config on the meta device, transformers 5.24. (T5Config of 5.24
#: forces tie_word_embeddings=True, configuration_t5.py: FLAN-T5 / mT5's separate lm_head of transformers 4.x —
#: 24,674,304 and 128,057,344 parameters more — is tied to the shared embedding there.)
PINNED = {"t5-small": 60_506_624, "flan-t5-base": 222_903_552, "mt5-small": 172_119_424, "bart-base": 139_420_416}

T5 = {"model_type": "t5", "is_encoder_decoder": True, "d_model": 256, "d_ff": 512, "d_kv": 64, "num_heads": 4,
      "num_layers": 2, "num_decoder_layers": 2, "vocab_size": 512, "relative_attention_num_buckets": 32,
      "feed_forward_proj": "gated-gelu", "tie_word_embeddings": False, "dropout_rate": 0.1,
      "decoder_start_token_id": 0, "pad_token_id": 0, "eos_token_id": 1}
BART = {"model_type": "bart", "is_encoder_decoder": True, "d_model": 256, "encoder_ffn_dim": 512, "decoder_ffn_dim": 512,
        "encoder_attention_heads": 4, "decoder_attention_heads": 4, "encoder_layers": 2, "decoder_layers": 2,
        "vocab_size": 512, "max_position_embeddings": 1024, "dropout": 0.1, "pad_token_id": 1, "bos_token_id": 0,
        "eos_token_id": 2, "decoder_start_token_id": 2}


pytestmark = pytest.mark.usefixtures("derived_cache")  # (tests/model/conftest.py: one cache for the module)


def _meta_build_params(cfg: dict) -> int:
    conf = transformers.AutoConfig.for_model(cfg["model_type"], **{k: v for k, v in cfg.items()
                                                                   if k not in ("model_type", "architectures")})
    with torch.device("meta"):
        model = transformers.AutoModelForSeq2SeqLM.from_config(conf)
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("name", list(PINNED))
def test_real_configs_have_exact_parameter_counts(name):
    cfg = json.loads((FIXTURES / f"{name}.json").read_text())
    spec = spec_from_hf_config(cfg, name=name)
    assert spec.n_params == _meta_build_params(cfg) == PINNED[name]
    enc = cfg.get("num_layers", cfg.get("encoder_layers"))
    dec = cfg.get("num_decoder_layers", cfg.get("decoder_layers", enc))
    assert spec.num_layers == len(spec.params.layers) == enc + dec
    assert spec.derived is not None and spec.architecture.endswith("ForConditionalGeneration")
    assert spec.logits_upcast is False  # (CrossEntropyLoss on the logits as they are)


def test_t5_relative_bias_and_layer_by_hand():
    """t5-small: q/k/v/o are 512×512 without bias (4·512² per attention); the first layer of each stack adds the
    relative position bias, nn.Embedding(32 buckets, 8 heads); decoder layers add cross-attention (4·512² more);
    the MLP is wi 512×2048 + wo 2048×512; two (three) T5LayerNorm weights of 512 per encoder (decoder) layer."""
    spec = spec_from_hf_config(json.loads((FIXTURES / "t5-small.json").read_text()), name="t5-small")
    layers = spec.params.layers
    assert relative_bias_params(8, 32) == 256
    assert layers[0].attention == 4 * 512 * 512 + relative_bias_params(8, 32)
    assert layers[1].attention == 4 * 512 * 512
    assert layers[6].attention == 2 * 4 * 512 * 512 + relative_bias_params(8, 32)  # first decoder layer
    assert layers[7].attention == 2 * 4 * 512 * 512 and layers[7].norms == 3 * 512 and layers[1].norms == 2 * 512
    assert layers[1].mlp == 2 * 512 * 2048
    assert spec.params.final_norm == 2 * 512 and spec.params.embedding == 32128 * 512 and spec.params.lm_head == 0


SETUPS = {
    "bf16": dict(precision="bf16", seq_len=256, micro_batch=4),
    "amp": dict(precision="amp-bf16", seq_len=256, micro_batch=4),
    "recompute": dict(precision="amp-bf16", seq_len=256, micro_batch=4, recompute="full"),
}


@pytest.mark.parametrize("family,key", [("t5", "amp"), ("t5", "recompute"), ("bart", "recompute"), ("mt5", "amp")])
def test_estimate_agrees_with_a_full_trace(family, key):
    from trainmem.trace.compare import compare

    cfg = {"t5": T5, "bart": BART, "mt5": dict(T5, model_type="mt5")}[family]
    spec = spec_from_hf_config(cfg, name=family)
    err = compare(spec, make_setup(**SETUPS[key])).peak_error
    assert abs(err) < 0.03, (family, key, err)


@pytest.mark.parametrize("fields,match", [
    (dict(tp=2, gpus=2, engine="fsdp2"), r"tp\(2\) > 1 is not modelled for t5"),
    (dict(lora_rank=8, qlora=True), "t5: LoRA on an encoder–decoder model is modelled with --engine torch, no QLoRA"),
    (dict(loss="chunked"), "--loss chunked is not modelled for t5"),
])
def test_refused_paths_say_so_in_one_line(fields, match):
    spec = spec_from_hf_config(T5, name="t5")
    with pytest.raises(UnsupportedError, match=match) as err:
        validate_for_model(make_setup(**fields), spec)
    assert "\n" not in str(err.value)


def test_frozen_parameters_are_counted_and_refused_in_one_line():
    """Pegasus's sinusoidal position tables are parameters built with requires_grad=False (modeling_pegasus.py
    ``PegasusSinusoidalPositionalEmbedding``): counted in the parameters, refused for training estimates."""
    cfg = {k: v for k, v in BART.items() if k != "model_type"} | {"model_type": "pegasus"}
    spec = spec_from_hf_config(cfg, name="pegasus")
    assert spec.n_params == _meta_build_params(cfg) and spec.params.position_embedding == 2 * 1024 * 256
    with pytest.raises(UnsupportedError, match=r"builds model\.encoder\.embed_positions\.weight.*frozen") as err:
        validate_for_model(make_setup(seq_len=256), spec)
    assert "\n" not in str(err.value)


def test_cli_estimates_a_t5_config_file_and_refuses_tp_with_exit_2(tmp_path, capsys):
    from trainmem.cli import main

    path = tmp_path / "config.json"
    path.write_text(json.dumps(T5))
    assert main(["estimate", str(path), "--seq-len", "256", "--json"]) in (0, None)
    out = json.loads(capsys.readouterr().out)
    assert out["n_params"] == _meta_build_params(T5)
    assert any("encoder–decoder, derived from transformers" in a for a in out["assumptions"])
    assert main(["estimate", str(path), "--tp", "2", "--gpus", "2", "--engine", "fsdp2"]) == 2
    err = capsys.readouterr().err
    assert "tp(2) > 1 is not modelled for t5" in err and "Traceback" not in err


def test_python_api_on_a_config_dict_with_data_parallel_engines():
    import trainmem

    one = trainmem.estimate(dict(BART), seq_len=256)
    assert one.n_params == _meta_build_params(BART)
    ddp = trainmem.estimate(dict(BART), seq_len=256, gpus=4)
    fsdp = trainmem.estimate(dict(BART), seq_len=256, gpus=4, engine="fsdp2")
    zero3 = trainmem.estimate(dict(BART), seq_len=256, gpus=4, engine="deepspeed", zero=3)
    assert fsdp.peak_allocated_bytes < one.peak_allocated_bytes <= ddp.peak_allocated_bytes
    assert zero3.to_dict()["n_params"] == one.n_params  # (DeepSpeed's fixed buckets dwarf this tiny model)


# --------------------------------------------------------------------------- --target-len (source ≠ target)
def test_two_length_fit_recovers_a_polynomial_by_hand():
    """What a part saves, b·(per sequence) + shared, with every term of the fit (1, s, s², t, t², s·t in 64-token
    units): the exact fit through PAIRS gives the coefficients back, and the walk's SavedPart at (s, t) the bytes."""
    from trainmem.model.derive_seq2seq import PAIRS, TwoLengthFit

    def per(s, t):
        return 3 * s + 2 * s * s // 64 + 5 * t + t * t // 64 + 7 * s * t // 64  # (exact in 64-token units)

    def shared(s, t):
        return 100 + s + 4 * t * t // 64 + s * t // 64

    fit = TwoLengthFit.fit("x", "attention", [shared(s, t) + per(s, t) for s, t in PAIRS],
                           [shared(s, t) + 2 * per(s, t) for s, t in PAIRS])
    assert [round(c, 9) for c in fit.per_seq] == [192, 128, 320, 64, 448]  # (the units: 64·3, 64²·2/64, ...)
    assert [round(c, 9) for c in fit.shared] == [100, 64, 0, 0, 256, 64]
    assert fit.at(1024, 128).bytes_for(4, 1024) == shared(1024, 128) + 4 * per(1024, 128)


#: (family, setup, source, target): pairs not among the probe's PAIRS. Measured once, b 4 (estimate vs full trace),
#: (s, t) = (256, 256) / (320, 80) / (96, 288): T5 amp -0.17 / +0.71 / -0.22 %, T5 amp + full recompute -0.88 / +6.25 /
#: +0.82 %, T5 bf16 +0.49 / +0.19 / +0.63 %; BART amp +2.07 / +4.47 / +1.75 %, BART amp + recompute +1.50 / +3.33 /
#: +1.26 %, BART bf16 +0.88 / +1.26 / +1.12 %: 15 of 18 within 3 %. The misses all have a source longer than the
#: target, with the estimate's peak in the encoder's backward (the walk's per-layer transients at the source's
#: tokens beside the decoder's gradients; not yet understood). The four below are from the 15 (so: chosen after
#: the measurement, not a hold-out).
TARGET = {
    "t5-summarise": ("t5", dict(precision="amp-bf16"), 320, 80),
    "t5-longer-target": ("t5", dict(precision="amp-bf16"), 96, 288),
    "t5-recompute": ("t5", dict(precision="amp-bf16", recompute="full"), 96, 288),
    "bart-bf16": ("bart", dict(precision="bf16"), 320, 80),
}


@pytest.mark.parametrize("key", list(TARGET))
def test_target_len_estimate_agrees_with_a_full_trace(key):
    """--target-len: the decoder layers, the cross-attention, LM head and loss on the target, the encoder on the
    source; against a full traced step whose labels (the decoder's input, shifted right) are target-long."""
    from trainmem.trace.compare import compare

    family, fields, src, tgt = TARGET[key]
    spec = spec_from_hf_config({"t5": T5, "bart": BART}[family], name=family)
    err = compare(spec, make_setup(seq_len=src, target_len=tgt, micro_batch=4, **fields)).peak_error
    assert abs(err) < 0.03, (key, err)


def test_target_len_moves_the_decoder_only():
    """A shorter target shrinks the decoder's layers and the loss, not the encoder's layers."""
    from trainmem.memory.activations import layer_saved

    spec = spec_from_hf_config(T5, name="t5")
    same, short = make_setup(seq_len=256), make_setup(seq_len=256, target_len=64)
    view = spec.derived.for_layer
    enc = [layer_saved(dataclasses.replace(spec, derived=view(1, s)), s, 1).total_bytes for s in (same, short)]
    dec = [layer_saved(dataclasses.replace(spec, derived=view(3, s)), s, 3).total_bytes for s in (same, short)]
    assert enc[0] == enc[1] and dec[1] < dec[0] / 3


def test_target_len_in_setup_and_assumptions_and_refused_for_a_decoder_only_model(tmp_path, capsys):
    from trainmem.cli import main

    path = tmp_path / "config.json"
    path.write_text(json.dumps(T5))
    assert main(["estimate", str(path), "--seq-len", "256", "--target-len", "64", "--json"]) in (0, None)
    out = json.loads(capsys.readouterr().out)
    assert out["setup"]["target_len"] == 64
    assert any("target 64 tokens (--target-len)" in a for a in out["assumptions"])
    assert main(["estimate", "llama-3.1-8b", "--target-len", "64"]) == 2
    err = capsys.readouterr().err
    assert "--target-len is for encoder–decoder models" in err and "Traceback" not in err
    assert err.strip().count("\n") == 0


# --------------------------------------------------------------------------- LoRA (PEFT) on T5 / BART
def test_peft_default_targets_are_the_installed_peft_mapping():
    """trainmem's default targets mean PEFT's own for t5 / mt5 / bart (peft utils/constants.py
    TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING, 0.21.2)."""
    constants = pytest.importorskip("peft.utils.constants")
    from trainmem.model.derive_seq2seq import PEFT_DEFAULT_TARGETS

    for mt, targets in PEFT_DEFAULT_TARGETS.items():
        assert list(targets) == constants.TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING[mt]


#: (family, --lora-targets or None for trainmem's default): PEFT's defaults, explicit names, all-linear
LORA_COUNTS = [("t5", None), ("t5", "all-linear"), ("t5", "q,k,wo"), ("bart", None), ("bart", "all-linear"),
               ("bart", "q_proj,out_proj,fc1")]


@pytest.mark.parametrize("family,targets", LORA_COUNTS)
def test_lora_trainable_params_equal_peft_own_count(family, targets):
    """n_trainable_params of the estimate = get_peft_model(...).get_nb_trainable_parameters() on a meta build, with
    LoraConfig's target_modules as a user writes them (None: PEFT's default for the family; all-linear leaves the
    LM head out, peft tuners_utils.py ``_maybe_include_all_linear_layers``)."""
    peft = pytest.importorskip("peft")
    from trainmem.memory.estimate import _n_trainable

    cfg = {"t5": T5, "bart": BART}[family]
    extra = {} if targets is None else {"lora_targets": targets}
    setup = make_setup(seq_len=128, lora_rank=8, **extra)
    spec = spec_from_hf_config(cfg, name=family)
    validate_for_model(setup, spec)
    conf = transformers.AutoConfig.for_model(cfg["model_type"], **{k: v for k, v in cfg.items() if k != "model_type"})
    with torch.device("meta"):
        model = transformers.AutoModelForSeq2SeqLM.from_config(conf)
    target = None if targets is None else ("all-linear" if targets == "all-linear" else targets.split(","))
    config = peft.LoraConfig(r=8, target_modules=target, task_type="SEQ_2_SEQ_LM")
    trainable, _ = peft.get_peft_model(model, config).get_nb_trainable_parameters()
    assert _n_trainable(spec, setup) == trainable > 0  # (the estimate's n_trainable_params)


#: LoRA r 8 (--engine torch, no recompute) against a full traced step, measured once at b 4, s 256: T5 amp +0.15 %,
#: amp + lora_dropout 0.1 +0.15 %; BART amp +1.84 %, amp + lora_dropout 0.1 +1.77 %; at b 2, s 128 (below, for speed):
#: T5 amp -0.10 %, BART amp + dropout +0.86 %. Full recompute read -4.7 % (T5 bf16) and -3.2 % (BART bf16) at b 4,
#: s 256: refused (below; what the trace holds that the walk lacks: trainmem/model/derive_seq2seq.py's docstring).
#: The same two tiny configs built the seq2seq description (development data).
LORA_SETUPS = [("t5", dict(precision="amp-bf16")), ("bart", dict(precision="amp-bf16", lora_dropout=0.1))]


@pytest.mark.parametrize("family,fields", LORA_SETUPS)
def test_lora_estimate_agrees_with_a_full_trace(family, fields):
    from trainmem.trace.compare import compare

    spec = spec_from_hf_config({"t5": T5, "bart": BART}[family], name=family)
    err = compare(spec, make_setup(seq_len=128, micro_batch=2, lora_rank=8, **fields)).peak_error
    assert abs(err) < 0.03, (family, fields, err)


@pytest.mark.parametrize("fields", [dict(lora_rank=8, qlora=True), dict(lora_rank=8, recompute="full"),
                                    dict(lora_rank=8, lora_targets="q,lm_head"),
                                    dict(lora_rank=8, engine="fsdp2", gpus=2)])
def test_lora_paths_not_modelled_are_refused_in_one_line(fields):
    spec = spec_from_hf_config(T5, name="t5")
    with pytest.raises(UnsupportedError, match="LoRA on an encoder–decoder model is modelled with --engine torch") as err:
        validate_for_model(make_setup(**fields), spec)
    assert "\n" not in str(err.value)
