"""LoRA targets as one regex (axolotl ``lora_target_modules: '<regex>'``, ms-swift ``target_regex``): PEFT 0.21.2
tuners_utils.py ``check_target_module_exists`` full-matches a str on each module's full name; trainmem maps the
matched linears to paths inside the decoder layers (trainmem/frameworks/readers/peft_regex.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.frameworks.test_readers import CONFIGS
from trainmem.errors import ConfigError
from trainmem.frameworks.readers import merge_fields, read_config
from trainmem.frameworks.readers.peft_regex import RegexTargetError, targets_from_names

_NAMES = {f"model.layers.{i}.{p}": "linear" for i in range(2) for p in ("self_attn.q_proj", "self_attn.v_proj",
                                                                         "mlp.up_proj")}
_NAMES.update({"model.embed_tokens": "Embedding", "lm_head": "linear"})


def test_names_by_hand() -> None:
    args = ("model.layers", 2, {"lm_head": "lm_head"})
    assert targets_from_names(r"model\.layers\.\d+\.self_attn\.(q|v)_proj", _NAMES, *args) == \
        "self_attn.q_proj,self_attn.v_proj"
    assert targets_from_names(r".*(q_proj|lm_head)", _NAMES, *args) == "self_attn.q_proj,lm_head"
    with pytest.raises(RegexTargetError, match="in some decoder layers and not in layer 1"):
        targets_from_names(r"model\.layers\.0\..*", _NAMES, *args)  # a partial-layer match
    with pytest.raises(RegexTargetError, match="matches no module"):
        targets_from_names("q_proj", _NAMES, *args)  # a str is full-matched: a bare name matches nothing
    with pytest.raises(RegexTargetError, match="outside the language model.s decoder layers"):
        targets_from_names(r"model\.embed_tokens", _NAMES, *args)


def test_axolotl_example_regex_on_a_reduced_qwen2_5_vl(tmp_path: Path) -> None:
    """axolotl v0.18.0 examples/qwen2_5-vl/lora-7b.yaml: 'model.language_model.layers.[\\d]+.(mlp|cross_attn|
    self_attn).(up|down|gate|q|k|v|o)_proj' on Qwen2_5_VLForConditionalGeneration (meta build): the seven
    projections of every text layer, none of the vision tower's (model.visual.blocks.*.mlp.*_proj)."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tests.model.test_vlm import _small_qwen
    model = tmp_path / "config.json"
    model.write_text(json.dumps(_small_qwen()))
    got = read_config(str(CONFIGS / "axolotl_qwen2_5-vl_lora-7b.yaml"))
    assert got.lora_regex is not None and "lora_targets" not in got.fields
    fields = merge_fields(got, {}, str(model))
    assert fields["lora_targets"] == ("mlp.down_proj,mlp.gate_proj,mlp.up_proj,self_attn.k_proj,self_attn.o_proj,"
                                      "self_attn.q_proj,self_attn.v_proj")
    assert any("full-matched on the module names" in n for n in got.notes())
    assert merge_fields(got, {"lora_targets": "q_proj"}, str(model))["lora_targets"] == "q_proj"  # a flag wins
    with pytest.raises(ConfigError, match="lora_target_modules is a regex.*give --lora-targets"):
        merge_fields(read_config(str(CONFIGS / "axolotl_qwen2_5-vl_lora-7b.yaml")), {})  # the hub id, offline


def test_python_api_matches_the_regex_on_its_model_as_the_cli_does(tmp_path: Path, capsys) -> None:
    """trainmem.estimate(MODEL, from_file=FILE) with ms-swift's target_regex matches it on MODEL (a path, a config
    dict) as ``trainmem estimate MODEL --from FILE`` does; it matched on the file's model (here a hub id not in the
    catalog, offline: refused) because python_api.build_model passed no model to merge_fields."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import trainmem
    from trainmem.cli import main
    tiny = dict(model_type="llama", hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, vocab_size=256, max_position_embeddings=512)
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(tiny))
    swift = tmp_path / "sft.yaml"
    swift.write_text("model: someone/not-in-the-catalog\ntuner_type: lora\nmax_length: 128\n"
                     "target_regex: 'model\\.layers\\.\\d+\\.self_attn\\.(q|v)_proj'\n")
    assert main(["estimate", str(cfg), "--from", str(swift), "--json"]) == 0, capsys.readouterr().err
    want = json.loads(capsys.readouterr().out)
    assert want["setup"]["lora_targets"] == ["self_attn.q_proj", "self_attn.v_proj"]
    assert trainmem.estimate(str(cfg), from_file=str(swift)).to_dict() == want
    by_dict = trainmem.estimate(tiny, from_file=swift).to_dict()
    assert by_dict["setup"]["lora_targets"] == want["setup"]["lora_targets"]
    assert by_dict["peak_allocated_bytes"] == want["peak_allocated_bytes"]
    # 2 layers x r 8 x (in + out): q_proj 64 -> 64, v_proj 64 -> 32 (2 kv heads of 16)
    assert by_dict["n_trainable_params"] == want["n_trainable_params"] == 2 * 8 * ((64 + 64) + (64 + 32))
