"""Impossible models and oversized requests: one line on stderr, exit code 2, nothing on stdout, for
every command (issue 7: each of these ended in a traceback or in confident numbers)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from trainmem.api import STEP_LIMITS, TRACE_LIMITS
from trainmem.cli import main
from trainmem.memory.search import MICRO_BATCH_CAP
from trainmem.model.catalog import list_models
from trainmem.model.hf import MAX_LAYERS

_CONFIGS = Path(__file__).resolve().parents[1] / "trainmem" / "model" / "configs"


def _catalog_config(name: str) -> dict:
    return json.loads((_CONFIGS / f"{name}.json").read_text())["config"]


LLAMA = dict(_catalog_config("llama-3.2-1b"), hidden_size=256, intermediate_size=512, num_hidden_layers=2,
             num_attention_heads=8, num_key_value_heads=2, vocab_size=1000)
LLAMA.pop("head_dim", None)
MIXTRAL = dict(_catalog_config("mixtral-8x7b"), hidden_size=256, intermediate_size=512, num_hidden_layers=2,
               num_attention_heads=8, num_key_value_heads=2, vocab_size=1000)

#: (config, what the one-line error names)
BAD_MODELS: dict[str, tuple[dict, str]] = {
    "hidden-4097-32-heads": (dict(LLAMA, hidden_size=4097, num_attention_heads=32, num_key_value_heads=8),
                             "num_attention_heads(32) does not divide hidden_size(4097)"),
    "kv-5-of-32": (dict(LLAMA, hidden_size=4096, num_attention_heads=32, num_key_value_heads=5),
                   "num_key_value_heads(5) does not divide num_attention_heads(32)"),
    "heads-0": (dict(LLAMA, num_attention_heads=0), "num_attention_heads(0)"),
    "vocab-0": (dict(LLAMA, vocab_size=0), "vocab_size(0)"),
    "unknown-activation": (dict(LLAMA, hidden_act="swishy"), "hidden_act='swishy'"),
    "unknown-rope-type": (dict(LLAMA, rope_scaling={"rope_type": "bogus", "factor": 2.0}), "rope_type='bogus'"),
    "tie-yes": (dict(LLAMA, tie_word_embeddings="yes"), "tie_word_embeddings='yes'"),
    "experts-0": (dict(MIXTRAL, num_local_experts=0), "num_local_experts(0)"),
    "top-k-above-experts": (dict(MIXTRAL, num_experts_per_tok=9), "num_experts_per_tok(9)"),
    "head-dim-0": (dict(LLAMA, head_dim=0), "head_dim(0)"),
    # also refused (not in the list)
    "layers-0": (dict(LLAMA, num_hidden_layers=0), "num_hidden_layers(0)"),
    "intermediate-negative": (dict(LLAMA, intermediate_size=-1), "intermediate_size=-1"),
    "max-positions-0": (dict(LLAMA, max_position_embeddings=0), "max_position_embeddings(0)"),
    "hidden-float": (dict(LLAMA, hidden_size=256.0), "hidden_size=256.0"),
    "attention-bias-1": (dict(LLAMA, attention_bias=1), "attention_bias=1"),
    "rope-scaling-string": (dict(LLAMA, rope_scaling="yarn"), "rope_scaling='yarn'"),
    "layers-above-limit": (dict(LLAMA, num_hidden_layers=MAX_LAYERS + 1), f"limit of {MAX_LAYERS:,}"),
    "vocab-above-limit": (dict(LLAMA, vocab_size=2**40), "vocab_size"),
    "odd-rope-head-dim": (dict(LLAMA, head_dim=33), "even rotary dimension"),
}


def run(args: list[str], capsys) -> tuple[int, str, str]:
    rc = main(args)
    out = capsys.readouterr()
    return rc, out.out, out.err


def assert_one_line_error(rc: int, out: str, err: str, needle: str = "") -> None:
    assert rc == 2, (rc, out, err)
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("error: "), err
    assert "Traceback" not in err
    assert needle in err, err


@pytest.mark.parametrize("command", ["estimate", "explain", "trace"])
@pytest.mark.parametrize("key", sorted(BAD_MODELS))
def test_impossible_model_is_refused_before_any_work(key: str, command: str, tmp_path, capsys) -> None:
    cfg, needle = BAD_MODELS[key]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    assert_one_line_error(*run([command, str(path), "--seq-len", "128"], capsys), needle)


@pytest.mark.parametrize("command", ["estimate", "trace"])
def test_model_argument_of_10000_characters(command: str, capsys) -> None:
    # resolve.py (the model-names work): OSError "File name too long" before it was caught
    assert_one_line_error(*run([command, "x" * 10_000], capsys))


@pytest.mark.parametrize("command", ["estimate", "trace"])
def test_deeply_nested_json(command: str, tmp_path, capsys) -> None:
    # resolve.py (the model-names work): json.loads raised RecursionError
    path = tmp_path / "config.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    assert_one_line_error(*run([command, str(path)], capsys))


# --------------------------------------------------------------------------- size guards
@pytest.mark.parametrize("flag,field", [("--seq-len", "seq_len"), ("--micro-batch", "micro_batch"),
                                        ("--grad-accum", "grad_accum"), ("--gpus", "gpus")])
def test_step_above_its_limit_is_refused_with_the_limit(flag: str, field: str, capsys) -> None:
    limit = STEP_LIMITS[field]
    assert_one_line_error(*run(["estimate", "llama-3.1-8b", flag, str(limit + 1)], capsys), f"{limit:,}")


@pytest.mark.parametrize("flags", [
    ["--seq-len", str(STEP_LIMITS["seq_len"])],
    ["--micro-batch", str(STEP_LIMITS["micro_batch"])],
    ["--grad-accum", str(STEP_LIMITS["grad_accum"])],
    ["--gpus", str(STEP_LIMITS["gpus"]), "--engine", "fsdp2"],
    ["--gpus", "1000000", "--engine", "megatron", "--tp", "8", "--pp", "8", "--grad-accum", "1024"],
])
def test_estimate_at_the_step_limits_is_fast(flags: list[str], capsys) -> None:
    t0 = time.perf_counter()
    rc, out, err = run(["estimate", "llama-3.1-8b", "--json", *flags], capsys)
    assert rc == 0, err
    assert time.perf_counter() - t0 < 10
    json.loads(out)


def test_estimate_at_the_layer_limit_is_fast(tmp_path, capsys) -> None:
    # heterogeneous layers (dense every 7th, MoE every 3rd) defeat the simulation of identical runs
    cfg = dict(_catalog_config("qwen1.5-moe-a2.7b"), num_hidden_layers=MAX_LAYERS, decoder_sparse_step=3,
               mlp_only_layers=list(range(0, MAX_LAYERS, 7)))
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    t0 = time.perf_counter()
    rc, _, err = run(["estimate", str(path), "--recompute", "full", "--json"], capsys)
    assert rc == 0, err
    assert time.perf_counter() - t0 < 15


def test_trace_has_lower_limits(tmp_path, capsys) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(dict(LLAMA, num_hidden_layers=TRACE_LIMITS["num_layers"] + 1)))
    assert_one_line_error(*run(["trace", str(path), "--seq-len", "128"], capsys), "cannot trace num layers")
    assert_one_line_error(*run(["trace", "llama-3.2-1b", "--grad-accum", "64"], capsys), "grad accum")
    rc, out, _ = run(["estimate", str(path), "--seq-len", "128", "--json"], capsys)
    assert rc == 0 and json.loads(out)["fits"]


def test_max_micro_batch_says_when_it_is_capped(capsys) -> None:
    rc, out, err = run(["estimate", "llama-3.2-1b", "--max-micro-batch", "--seq-len", "16",
                        "--gpu-memory", "1000000GiB", "--json"], capsys)
    assert rc == 0, err
    d = json.loads(out)
    assert d["capped"] is True and d["max_micro_batch"] == d["cap"] == MICRO_BATCH_CAP
    rc, out, _ = run(["estimate", "llama-3.2-1b", "--max-micro-batch", "--seq-len", "16",
                      "--gpu-memory", "1000000GiB"], capsys)
    assert rc == 0 and "cap" in out
    rc, out, _ = run(["estimate", "llama-3.1-8b", "--max-micro-batch", "--engine", "fsdp2", "--gpus", "8",
                      "--json"], capsys)
    assert json.loads(out)["capped"] is False


# --------------------------------------------------------------------------- trace validates like estimate
@pytest.mark.parametrize("args,needle", [
    (["trace", "llama-3.2-1b", "--lang", "xx"], "lang"),
    (["trace", "llama-3.2-1b", "--gpu", "nonexistent"], "nonexistent"),
    (["trace", "llama-3.2-1b", "--engine", "megatron", "--gpus", "2", "--tp", "2"], "cannot trace"),
])
def test_trace_refuses_what_estimate_refuses(args: list[str], needle: str, capsys) -> None:
    assert_one_line_error(*run(args, capsys), needle)


def test_trace_help_lists_what_it_cannot_trace(capsys, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    rc, out, _ = run(["trace", "--help"], capsys)
    assert rc == 0
    text = " ".join(out.split())
    assert "Not traced yet" in text and "--offload" in text and "--attn flash" in text


# --------------------------------------------------------------------------- defaults per model
@pytest.mark.parametrize("name", [m.name for m in list_models()])
def test_every_catalog_model_estimates_with_default_flags(name: str, capsys) -> None:
    rc, out, err = run(["estimate", name, "--json"], capsys)
    assert rc == 0, err
    json.loads(out)


@pytest.mark.parametrize("name,seq_len,note", [
    ("gpt2", 1024, "seq_len 1024"), ("bert-large-uncased", 512, "seq_len 512"),
    ("roberta-base", 512, "seq_len 512"), ("llama-3.1-8b", 2048, None)])
def test_seq_len_defaults_to_a_shorter_context(name: str, seq_len: int, note: str | None, capsys) -> None:
    rc, out, _ = run(["estimate", name, "--json"], capsys)
    d = json.loads(out)
    assert d["setup"]["seq_len"] == seq_len
    assert (note is None) == (not any(a.startswith("seq_len ") for a in d["assumptions"]))
    if note:
        assert any(a.startswith(note) for a in d["assumptions"])


def test_gemma2_defaults_to_eager_attention(capsys) -> None:
    rc, out, _ = run(["estimate", "gemma-2-2b", "--json"], capsys)
    d = json.loads(out)
    assert d["setup"]["attn"] == "eager" and any(a.startswith("attn eager") for a in d["assumptions"])
    assert_one_line_error(*run(["estimate", "gemma-2-2b", "--attn", "sdpa"], capsys), "sdpa")


def test_roberta_positions_stop_at_512(capsys) -> None:
    assert_one_line_error(*run(["estimate", "roberta-base", "--seq-len", "513"], capsys), "512 positions")


def test_seq_len_past_a_rope_context_is_a_warning(capsys) -> None:
    rc, out, _ = run(["estimate", "llama-2-7b", "--seq-len", "8192", "--json"], capsys)
    assert rc == 0
    assert any(a.startswith("warning: seq_len(8192)") and "4096" in a for a in json.loads(out)["assumptions"])
    # llama-3.1: 131072 positions (llama3 rope scaling): no warning at 32k
    rc, out, _ = run(["estimate", "llama-3.1-8b", "--seq-len", "32768", "--json"], capsys)
    assert not any(a.startswith("warning") for a in json.loads(out)["assumptions"])
