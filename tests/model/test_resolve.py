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
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "vit", "hidden_size": 8}))  # t5: derived
    with pytest.raises(UnsupportedError):
        resolve_model(str(tmp_path / "config.json"))


def test_a_missing_path_says_no_such_file():
    with pytest.raises(UnknownModelError, match=r"^no such file './missing/config.json' \(a model given as a path") as err:
        resolve_model("./missing/config.json")
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("ref", ["not-a-model", "someone/unknown-model"])
def test_unknown_reference(ref):
    with pytest.raises(UnknownModelError) as err:
        resolve_model(ref)
    message = str(err.value)
    assert "unknown model" in message and "llama-3.1-8b" in message
    assert "config.json" in message and "7B" in message and "\n" not in message


# -- names people type (issue 7, "Names people use") ----------------------------------------------

@pytest.mark.parametrize("ref, name", [
    ("meta-llama/Llama-3.1-8B", "llama-3.1-8b"), ("meta-llama/Meta-Llama-3.1-8B-Instruct", "llama-3.1-8b"),
    ("Qwen/Qwen2.5-7B-Instruct", "qwen2.5-7b"), ("mistralai/Mistral-7B-v0.1", "mistral-7b"),
    ("google/gemma-2-9b-it", "gemma-2-9b"), ("mistralai/Mistral-7B-Instruct-v0.1", "mistral-7b"),
    ("mistralai/Mixtral-8x7B-Instruct-v0.1", "mixtral-8x7b"), ("Qwen/Qwen3-8B-Base", "qwen3-8b"),
    ("llama3.1-8b", "llama-3.1-8b"), ("Llama-3.1-8B", "llama-3.1-8b"), ("LLAMA 3.1 8B", "llama-3.1-8b"),
    ("llama_3.1_8b", "llama-3.1-8b"), ("qwen2.5-7b-instruct", "qwen2.5-7b"), ("Qwen2.5-7B", "qwen2.5-7b"),
    ("mixtral-8x7b-instruct", "mixtral-8x7b"), ("llama2-7b", "llama-2-7b"), ("Llama-2-7b-chat-hf", "llama-2-7b"),
    ("llama-2-7b-hf", "llama-2-7b"), ("gemma-2-9b-it", "gemma-2-9b"),
    ("llama3-8b", "llama-3-8b"), ("llama-3-8b", "llama-3-8b"), ("meta-llama/Meta-Llama-3-8B-Instruct", "llama-3-8b"),
    ("Meta-Llama-3-70B", "llama-3-70b"),
])
def test_names_people_use(ref: str, name: str) -> None:
    assert resolve_model(ref).name == name


@pytest.mark.parametrize("ref, base", [("qwen2.5-7b-instruct", "qwen2.5-7b"), ("Qwen/Qwen2.5-7B-Instruct", "qwen2.5-7b"),
                                       ("Llama-2-7b-chat-hf", "llama-2-7b"), ("google/gemma-2-9b-it", "gemma-2-9b")])
def test_variants_take_their_base_shapes_and_say_so(ref: str, base: str) -> None:
    spec, catalog = resolve_model(ref), load_catalog_spec(base)
    assert spec.params == catalog.params and spec.hidden_size == catalog.hidden_size
    assert spec.alias_note.startswith(f"{ref}: same layer shapes as the catalog's {base} (")
    assert "\n" not in spec.alias_note


def test_plain_spellings_carry_no_note_and_stay_cached() -> None:
    spec = load_catalog_spec("llama-3.1-8b")
    for ref in ("llama3.1-8b", "Llama-3.1-8B", "meta-llama/Meta-Llama-3.1-8B", "llama-3.1-8b"):
        assert resolve_model(ref) is spec
    assert spec.alias_note == ""
    assert resolve_model("phi-3-mini-4k-instruct").alias_note == ""  # the catalog's entry is the instruct model
    assert resolve_model("roberta_base").alias_note == ""  # "base" is part of that name


def test_llama_3_is_llama_3_1_shapes_with_its_own_context() -> None:
    three, three_one = resolve_model("llama3-8b"), load_catalog_spec("llama-3.1-8b")
    assert three.params == three_one.params and three.n_params == 8_030_261_248
    assert (three.max_position_embeddings, three_one.max_position_embeddings) == (8192, 131072)
    assert three.hf_config.get("rope_scaling") is None and three_one.hf_config["rope_scaling"]
    assert "8192" in three.alias_note and "llama-3.1-8b" in three.alias_note
    assert resolve_model("llama-3-70b").params == load_catalog_spec("llama-3.1-70b").params


@pytest.mark.parametrize("ref, near", [
    ("mistralai/Mistral-7B-Instruct-v0.2", "mistral-7b"),  # v0.2 has other shapes (rope, no sliding window)
    ("llama-9-1b", "llama-3.2-1b"), ("qwen2.5-6b-instruct", "qwen2.5-7b"), ("bert-base-uncased", "bert-large-uncased"),
    ("someone/llama-3.1-8b", "llama-3.1-8b"),  # an unknown organisation's repo may hold anything
])
def test_near_misses_are_refused_with_suggestions(ref: str, near: str) -> None:
    with pytest.raises(UnknownModelError) as err:
        resolve_model(ref)
    msg = str(err.value)
    assert msg.startswith(f"unknown model {ref!r}; did you mean ") and near in msg and "\n" not in msg


def test_a_10000_character_argument_is_one_line_not_oserror() -> None:
    for ref in ("a" * 10_000, "a/" * 3_000, "x" * 300 + "/config.json"):
        with pytest.raises(UnknownModelError) as err:
            resolve_model(ref)
        assert "\n" not in str(err.value) and len(str(err.value)) < 400


@pytest.mark.parametrize("ref", ["~no_such_user_trainmem/config.json", "a\x00b"])
def test_odd_paths_are_unknown_models(ref: str) -> None:
    with pytest.raises(UnknownModelError):
        resolve_model(ref)


@pytest.mark.parametrize("text", ["[" * 100_000 + "]" * 100_000, '{"a":' * 100_000 + "1" + "}" * 100_000])
def test_deeply_nested_json_is_one_line(tmp_path, text: str) -> None:
    (tmp_path / "config.json").write_text(text)
    with pytest.raises(ConfigError, match="nested too deeply") as err:
        resolve_model(str(tmp_path))
    assert "\n" not in str(err.value)


def test_json_that_is_not_an_object(tmp_path) -> None:
    (tmp_path / "config.json").write_text("[1, 2]")
    with pytest.raises(ConfigError, match="not an object"):
        resolve_model(str(tmp_path / "config.json"))


@pytest.mark.parametrize("args, needle", [
    (["estimate", "a" * 10_000], "unknown model 'aaaa"),
    (["estimate", "qwen2.5-6b-instruct"], "did you mean"),
    (["trace", "a" * 10_000], "unknown model"),
])
def test_cli_bad_model_names_one_line_exit_2(args, needle, capsys) -> None:
    from trainmem.cli import main
    rc = main(args)
    out = capsys.readouterr()
    assert rc == 2 and out.out == "" and out.err.count("\n") == 1 and needle in out.err


def test_cli_deep_json_one_line_exit_2(tmp_path, capsys) -> None:
    from trainmem.cli import main
    (tmp_path / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    rc = main(["estimate", str(tmp_path / "config.json")])
    out = capsys.readouterr()
    assert rc == 2 and out.err.count("\n") == 1 and "nested too deeply" in out.err


def test_cli_accepts_short_forms(capsys) -> None:
    from trainmem.cli import main
    for ref in ("llama3-8b", "llama-3-8b", "qwen2.5-7b-instruct", "Qwen/Qwen2.5-7B-Instruct"):
        rc = main(["estimate", ref, "--json"])
        out = capsys.readouterr()
        assert rc == 0, out.err
        assert json.loads(out.out)["n_params"] in (8_030_261_248, 7_615_616_512)
