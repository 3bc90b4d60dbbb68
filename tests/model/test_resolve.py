"""resolve_model: catalog, paths, bare sizes, and the errors for anything else."""

from __future__ import annotations

import json

import pytest

from trainmem.errors import ConfigError, UnknownModelError, UnsupportedError
from trainmem.model import resolve_model
from trainmem.model.catalog import load_catalog_spec
from trainmem.model.resolve import parse_size


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # tests never reach for the hub


def test_catalog_reference():
    assert resolve_model("Qwen/Qwen2.5-7B") is load_catalog_spec("qwen2.5-7b")


@pytest.mark.parametrize("text, n", [("7B", 7_000_000_000), ("0.5b", 500_000_000), ("70B", 70_000_000_000),
                                     ("1.5B", 1_500_000_000), ("405b", 405_000_000_000),
                                     ("175B", 175_000_000_000), ("350M", 350_000_000), ("1T", 10**12)])
def test_bare_size_has_exactly_the_requested_count(text, n):
    assert parse_size(text) == n
    spec = resolve_model(text)
    assert spec.n_params == n and spec.approximate_shape and spec.name == text
    assert spec.source.startswith("bare size: exact parameter count, Llama-2-style shape for activations (h=")
    shape_params = spec.n_params - spec.params.other
    assert abs(spec.params.other) <= 0.10 * n  # the shape is a near neighbour, not a wild guess
    assert shape_params > 0 and spec.vocab_size == 32000 and not spec.tie_word_embeddings
    assert spec.hidden_size % spec.num_attention_heads == 0 and spec.head_dim == 128
    assert spec.hf_config["model_type"] == "llama" and spec.architecture == "LlamaForCausalLM"


def test_bare_sizes_near_llama2_take_its_published_shapes():
    seven, thirteen, seventy = resolve_model("7B"), resolve_model("13b"), resolve_model("70B")
    assert (seven.hidden_size, seven.num_layers, seven.intermediate_size) == (4096, 32, 11008)
    assert (thirteen.hidden_size, thirteen.num_layers, thirteen.intermediate_size) == (5120, 40, 13824)
    assert (seventy.hidden_size, seventy.num_layers, seventy.num_kv_heads) == (8192, 80, 8)
    assert seven.params.other == 7_000_000_000 - 6_738_415_616
    assert "h=4096, L=32" in seven.source
    small, big = resolve_model("1.5B"), resolve_model("175B")
    assert small.hidden_size < seven.hidden_size < big.hidden_size
    assert small.num_layers < seven.num_layers < big.num_layers


@pytest.mark.parametrize("text", ["7", "B", "7 GB", "-1B", "0B", "1.5e9", "7Bx"])
def test_not_a_size(text):
    assert parse_size(text) is None


def test_config_path_and_folder(tmp_path):
    cfg = dict(model_type="llama", hidden_size=64, intermediate_size=96, num_hidden_layers=2,
               num_attention_heads=4, vocab_size=100)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    from_file = resolve_model(str(tmp_path / "config.json"))
    from_dir = resolve_model(str(tmp_path))
    assert from_file.n_params == from_dir.n_params > 0
    assert from_dir.source == str((tmp_path / "config.json").resolve())
    assert not from_dir.approximate_shape


def test_bad_paths(tmp_path):
    with pytest.raises(UnknownModelError, match="no config.json"):
        resolve_model(str(tmp_path))
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ConfigError, match="JSON"):
        resolve_model(str(tmp_path))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "t5", "hidden_size": 8}))
    with pytest.raises(UnsupportedError):
        resolve_model(str(tmp_path / "config.json"))


@pytest.mark.parametrize("ref", ["not-a-model", "someone/unknown-model", "./missing/config.json"])
def test_unknown_reference(ref):
    with pytest.raises(UnknownModelError) as err:
        resolve_model(ref)
    message = str(err.value)
    assert "unknown model" in message and "llama-3.1-8b" in message
    assert "config.json" in message and "7B" in message and "\n" not in message
