"""Fuzz the CLI and the library entry point with random model configs and flag combinations.

Configs start from a small valid one per family and get a few fields replaced (wrong types, zero,
negative, huge, unknown names, nested junk) or deleted; flags are drawn from valid and invalid values.
The CLI must exit 0 or 2 (2: one ``error:`` line on stderr, nothing on stdout; never a traceback);
``trainmem.api.build`` + ``trainmem.memory.estimate`` must raise nothing but ``TrainmemError``.
Derandomized (the same inputs on every run) and bounded: 2,200 inputs, ~40 s on two CPU cores.
"""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainmem.api import build
from trainmem.cli import main
from trainmem.errors import TrainmemError
from trainmem.memory import estimate
from trainmem.memory.search import max_micro_batch

_SMALL = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, vocab_size=128, max_position_embeddings=256)
BASES: dict[str, dict] = {
    "llama": dict(_SMALL, model_type="llama"),
    "mistral": dict(_SMALL, model_type="mistral"),
    "qwen2": dict(_SMALL, model_type="qwen2"),
    "qwen3": dict(_SMALL, model_type="qwen3", head_dim=16),
    "gemma2": dict(_SMALL, model_type="gemma2", head_dim=16),
    "gemma3_text": dict(_SMALL, model_type="gemma3_text", head_dim=16),
    "gemma3": {"model_type": "gemma3", "text_config": dict(_SMALL, model_type="gemma3_text", head_dim=16)},
    "phi3": dict(_SMALL, model_type="phi3"),
    "mixtral": dict(_SMALL, model_type="mixtral", num_local_experts=4),
    "qwen2_moe": dict(_SMALL, model_type="qwen2_moe", num_experts=4, moe_intermediate_size=32,
                      shared_expert_intermediate_size=48, num_experts_per_tok=2),
    "qwen3_moe": dict(_SMALL, model_type="qwen3_moe", num_experts=4, moe_intermediate_size=32,
                      num_experts_per_tok=2, head_dim=16),
    "deepseek_v2": dict(_SMALL, model_type="deepseek_v2", n_routed_experts=4, moe_intermediate_size=32,
                        first_k_dense_replace=1, kv_lora_rank=16, q_lora_rank=None, qk_rope_head_dim=8,
                        qk_nope_head_dim=16, v_head_dim=16, num_experts_per_tok=2),
    "deepseek_v3": dict(_SMALL, model_type="deepseek_v3", n_routed_experts=4, moe_intermediate_size=32,
                        first_k_dense_replace=1, kv_lora_rank=16, q_lora_rank=24, qk_rope_head_dim=8,
                        qk_nope_head_dim=16, v_head_dim=16, num_experts_per_tok=2, n_group=2, topk_group=1),
    "gpt2": dict(model_type="gpt2", n_embd=64, n_layer=2, n_head=4, vocab_size=128, n_positions=256),
    "gpt_neox": dict(_SMALL, model_type="gpt_neox"),
    "falcon": dict(_SMALL, model_type="falcon", new_decoder_architecture=True, num_kv_heads=2),
    "bert": dict(_SMALL, model_type="bert"),
    "roberta": dict(_SMALL, model_type="roberta"),
}
FIELDS = sorted({
    *(k for cfg in BASES.values() for k in cfg), "head_dim", "tie_word_embeddings", "hidden_act",
    "hidden_activation", "activation_function", "activation", "rope_scaling", "rope_parameters",
    "partial_rotary_factor", "num_experts", "num_local_experts", "decoder_sparse_step", "mlp_only_layers",
    "n_shared_experts", "attention_bias", "mlp_bias", "qkv_bias", "sliding_window", "use_sliding_window",
    "attention_dropout", "resid_pdrop", "n_inner", "add_cross_attention", "multi_query", "parallel_attn",
    "bias", "alibi", "ffn_hidden_size", "num_ln_in_parallel_attn", "type_vocab_size", "pad_token_id",
    "attn_logit_softcapping", "final_logit_softcapping", "use_parallel_residual", "text_config",
})
_DELETE = object()
_ERROR = ("error: ", "错误：")
"""How the one error line starts (--lang zh translates it)."""

_ints = st.one_of(st.integers(-2, 70), st.sampled_from([0, 1, 2, 3, 4, 8, 16, 2049, 2**20 + 1, 2**31, 2**63, 10**30]))
_rope = st.dictionaries(
    st.sampled_from(["rope_type", "type", "factor", "original_max_position_embeddings", "full_attention",
                     "sliding_attention"]),
    st.one_of(st.sampled_from(["bogus", "linear", "yarn", "llama3", "default", "dynamic"]),
              st.floats(-2, 64), st.integers(-5, 10**6), st.none(),
              st.fixed_dictionaries({"rope_type": st.sampled_from(["linear", "nope"]), "factor": st.floats(-1, 8)})),
    max_size=3)
VALUES = st.one_of(
    _ints, _ints, _ints,
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=6),
    st.sampled_from(["silu", "gelu", "gelu_new", "swishy", "yes", "true", "", "llama", "gemma3_text", "t5"]),
    st.booleans(), st.none(),
    st.lists(st.integers(-2, 10), max_size=4),
    _rope,
)


@st.composite
def configs(draw: st.DrawFn) -> dict:
    cfg = json.loads(json.dumps(BASES[draw(st.sampled_from(sorted(BASES)))]))  # a deep copy
    target = cfg["text_config"] if "text_config" in cfg and draw(st.booleans()) else cfg
    for _ in range(draw(st.integers(0, 4))):
        key = draw(st.sampled_from(FIELDS))
        value = draw(st.one_of(st.just(_DELETE), VALUES))
        if value is _DELETE:
            target.pop(key, None)
        else:
            target[key] = value
    return cfg


_int_flag = st.one_of(st.integers(-1, 16), st.sampled_from([64, 128, 512, 4096, 2**24, 2**24 + 1, 10**12])).map(str)
FLAG_VALUES: dict[str, st.SearchStrategy[str]] = {
    "--seq-len": _int_flag, "--micro-batch": _int_flag, "--grad-accum": _int_flag,
    "--loss-chunks": _int_flag, "--gpus": _int_flag, "--dp": _int_flag, "--tp": _int_flag, "--pp": _int_flag,
    "--cp": _int_flag, "--ep": _int_flag, "--vpp": _int_flag, "--zero": _int_flag, "--lora-rank": _int_flag,
    "--precision": st.sampled_from(["fp32", "bf16", "fp16", "amp-bf16", "amp-fp16", "mixed-bf16", "mixed-fp16", "fp8", "bf16x"]),
    "--optimizer": st.sampled_from(["adamw", "adam", "sgd", "sgd-momentum", "adamw-8bit", "adafactor", "lion", "x"]),
    "--recompute": st.sampled_from(["none", "selective", "full", "some"]),
    "--attn": st.sampled_from(["sdpa", "flash", "eager", "xformers"]),
    "--loop": st.sampled_from(["trainer", "script", "loop"]),
    "--loss": st.sampled_from(["hf", "chunked", "fused-linear", "fused-ce", "x"]),
    "--engine": st.sampled_from(["torch", "fsdp2", "deepspeed", "megatron", "jax"]),
    "--offload": st.sampled_from(["none", "optimizer", "optimizer+params", "disk"]),
    "--lora-targets": st.sampled_from(["q_proj,v_proj", "all-linear", "c_attn", "nope", "", "q_proj v_proj"]),
    "--gpu": st.sampled_from(["H100-SXM-80G", "A100-SXM-80G", "V100-32G", "T4", "nonexistent", ""]),
    "--gpu-memory": st.sampled_from(["96GiB", "94GB", "0GB", "-1GiB", "1e30GiB", "lots"]),
    "--lang": st.sampled_from(["en", "zh", "xx"]),
    "--fp8-backend": st.sampled_from(["torchao", "te", "msamp"]),
    "--stage-layers": st.sampled_from(["8,8", "1,31", "15,16,16,15", "0,32", "8,x", "", "4,4,4,4,4,4,4,4", "-1,33"]),
    "--attn-kernel": st.sampled_from(["fa2", "fa3", "triton", "fa4"]),
    "--backward-prefetch": st.sampled_from(["pre", "post", "both"]),
}
BOOL_FLAGS = ["--sp", "--no-sp", "--no-loss-parallel", "--qlora"]
#: Values each flag accepts: most drawn flag lists stay valid, so that the model config is reached.
_pow2 = st.sampled_from(["1", "2", "4", "8"])
VALID_FLAG_VALUES: dict[str, st.SearchStrategy[str]] = {
    "--seq-len": st.sampled_from(["16", "128", "256", "1024", "4096"]), "--micro-batch": _pow2,
    "--grad-accum": _pow2, "--gpus": _pow2, "--engine": st.sampled_from(["torch", "fsdp2", "deepspeed", "megatron"]),
    "--recompute": st.sampled_from(["none", "selective", "full"]), "--attn": st.sampled_from(["sdpa", "flash", "eager"]),
    "--optimizer": st.sampled_from(["adamw", "sgd-momentum", "adafactor", "lion"]), "--loop": st.just("script"),
    "--loss": st.sampled_from(["chunked", "fused-linear", "fused-ce"]), "--lora-rank": st.sampled_from(["4", "16"]),
}
MODELS = st.one_of(st.just("<config>"), st.just("<config>"), st.just("<config>"),
                   st.sampled_from(["gpt2", "llama-3.2-1b", "qwen1.5-moe-a2.7b", "deepseek-v2-lite", "bert-large-uncased",
                                    "gemma-2-2b", "7B", "0B", "1e400B", "99999999T", "", "no-such-model"]))


@st.composite
def flag_lists(draw: st.DrawFn) -> list[str]:
    """No flags, valid values of a few flags, or anything (a third each)."""
    mode = draw(st.sampled_from(["none", "valid", "any"]))
    if mode == "none":
        return []
    table = VALID_FLAG_VALUES if mode == "valid" else FLAG_VALUES
    args: list[str] = []
    for flag in draw(st.lists(st.sampled_from(sorted(table)), min_size=1, max_size=4, unique=True)):
        args += [flag, draw(table[flag])]
    if mode == "any":
        args += draw(st.lists(st.sampled_from(BOOL_FLAGS), max_size=1))
    return args


@pytest.fixture(scope="module")
def cfg_path(tmp_path_factory: pytest.TempPathFactory):
    return tmp_path_factory.mktemp("fuzz") / "config.json"


def _fuzz(max_examples: int):  # noqa: ANN202
    return settings(max_examples=max_examples, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                           HealthCheck.data_too_large])


def _write(path, cfg: dict) -> None:  # noqa: ANN001
    path.write_text(json.dumps(cfg))


@_fuzz(900)
@given(cfg=configs(), model=MODELS, flags=flag_lists(),
       extra=st.lists(st.sampled_from(["--json", "--explain", "--max-micro-batch"]), max_size=2, unique=True))
def test_cli_estimate_exits_0_or_2_with_one_line(cfg_path, capsys, cfg, model, flags, extra) -> None:
    _write(cfg_path, cfg)
    args = ["estimate", str(cfg_path) if model == "<config>" else model, *flags, *extra]
    rc = main(args)
    out, err = capsys.readouterr()
    assert rc in (0, 2), (args, cfg, err)
    assert "Traceback" not in err
    if rc == 2:
        assert out == "" and err.startswith(_ERROR) and err.count("\n") == 1, (args, cfg, err)
    else:
        assert err == "" and out
        if "--json" in extra:
            json.loads(out)


@_fuzz(200)
@given(cfg=configs(), flags=flag_lists())
def test_cli_explain_exits_0_or_2_with_one_line(cfg_path, capsys, cfg, flags) -> None:
    _write(cfg_path, cfg)
    rc = main(["explain", str(cfg_path), *flags])
    out, err = capsys.readouterr()
    assert rc in (0, 2), (flags, cfg, err)
    if rc == 2:
        assert out == "" and err.startswith(_ERROR) and err.count("\n") == 1, (flags, cfg, err)


_FIELD_VALUES = st.one_of(_ints, st.floats(allow_nan=True), st.text(max_size=4), st.booleans(), st.none(),
                          st.sampled_from(["fsdp2", "deepspeed", "megatron", "amp-bf16", "full", "flash", "chunked"]))
_FIELDS = ["seq_len", "micro_batch", "grad_accum", "precision", "optimizer", "recompute", "attn", "loop", "loss",
           "loss_chunks", "engine", "gpus", "dp", "tp", "pp", "cp", "ep", "vpp", "sp", "zero", "offload", "lora_rank",
           "lora_targets", "qlora", "gpu", "gpu_memory", "notes", "no_such_field"]


@_fuzz(1100)
@given(cfg=configs(), fields=st.dictionaries(st.sampled_from(_FIELDS), _FIELD_VALUES, max_size=4),
       search=st.booleans())
def test_library_raises_only_trainmem_errors(cfg_path, cfg, fields, search) -> None:
    _write(cfg_path, cfg)
    try:
        spec, setup = build(str(cfg_path), **fields)
        est = max_micro_batch(spec, setup)[1] if search else estimate(spec, setup)
    except TrainmemError as err:
        assert "\n" not in str(err)
        return
    if est is not None:
        assert est.peak_allocated_bytes > 0 and math.isfinite(est.peak_allocated_bytes / 2**30)
        json.dumps(est.to_dict())
