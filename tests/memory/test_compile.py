"""``--compile``: what a compiled decoder layer keeps for backward, against the min-cut partitioner itself.

Ground truth (tests/memory/compile_measure.py): one layer of a small transformers model compiled with
AOTAutograd + inductor's decompositions + ``min_cut_rematerialization_partition`` (torch 2.13), run for real on
the CPU, every saved tensor recorded by storage. Dropout is off except in ``gpt2-resid-dropout`` (bool masks:
``rand_like(x) > p``); attention dropout on the CPU takes SDPA's math kernel, CUDA's flash kernel keeps no mask,
so it is not measured here.
"""

from __future__ import annotations

import pytest

from tests.memory.tiny_configs import TINY
from trainmem.errors import ConfigError
from trainmem.memory.activations import layer_saved
from trainmem.memory.compile import COMPILE_FAMILIES, compiled_layer_saved
from trainmem.memory.plan import kept_per_layer
from trainmem.model.hf import spec_from_hf_config
from trainmem.setup import make_setup, validate_for_model

CONFIGS = {fam: TINY[fam] for fam in ("llama", "llama-gqa", "mistral", "qwen2", "qwen3", "gemma", "phi3", "gpt2")}
CONFIGS["gpt2-resid-dropout"] = dict(TINY["gpt2"], resid_pdrop=0.1)
B, S = 2, 48  # (96 tokens: no activation has a weight's shape, so autocast's weight casts are told apart)
#: (family, precision): every family in bf16; the dtype rules (fp32, CPU autocast over fp32 weights) on one
#: RMSNorm family, one LayerNorm family, and autocast on qwen3's q/k norms (fp32 with GQA is refused: CUDA runs
#: SDPA's math kernel for it).
CASES = [(fam, "bf16") for fam in CONFIGS] + [(fam, prec) for fam in ("llama", "gpt2") for prec in ("fp32", "amp-bf16")] \
    + [("qwen3", "amp-bf16")]


def _setup(precision: str, **kw):
    return make_setup(precision=precision, seq_len=S, micro_batch=B, compile=True, **kw)


@pytest.mark.parametrize("fam,prec", CASES, ids=["-".join(c) for c in CASES])
def test_compiled_layer_matches_the_partitioner(fam: str, prec: str) -> None:
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tests.memory.compile_measure import compiled_layer_saved_bytes

    measured, copies = compiled_layer_saved_bytes(
        CONFIGS[fam], dtype=torch.bfloat16 if prec == "bf16" else torch.float32, autocast=prec == "amp-bf16", b=B, s=S)
    spec = spec_from_hf_config(CONFIGS[fam], name=fam)
    est = compiled_layer_saved(spec, _setup(prec), 1).total_bytes
    assert est == pytest.approx(measured - copies, rel=0.002), (fam, prec, est, measured, copies)


def test_checkpointed_compiled_layer_keeps_its_input_only() -> None:
    """torchtitan's apply_ac then apply_compile: the compiled region holds the checkpoint; the partitioner saves
    the block's input (the CPU generator state it also saves is host memory on a GPU)."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tests.memory.compile_measure import compiled_layer_saved_bytes

    measured, _ = compiled_layer_saved_bytes(CONFIGS["llama"], dtype=torch.bfloat16, b=B, s=S, checkpointed=True)
    spec = spec_from_hf_config(CONFIGS["llama"], name="llama")
    assert measured == B * S * 256 * 2  # the layer input, bf16
    assert kept_per_layer(spec, _setup("bf16", recompute="full"))[1] == measured


def test_llama_3_1_8b_compiled_layer_by_hand() -> None:
    """Llama-3.1-8B (h 4096, i 14336, a 32, kv 8, d 128), bf16, per token: input 2h, two rsqrt rows 2·4, two
    norm outputs 2·2h, q 2h, k and v 2·2·1024, attention output 2h (o_proj's input too), logsumexp 4·32,
    o_proj output 2h, gate, up and product 3·2i. Eager keeps each norm's fp32 input copy and normalised value
    (2·(4+2)h) and SiLU's output (2i) instead of the layer input and o_proj's output."""
    from trainmem.model.catalog import load_catalog_spec

    spec = load_catalog_spec("llama-3.1-8b")
    h, i, s = 4096, 14336, 2048
    per_token = 2 * h + 8 + 2 * 2 * h + 2 * h + 2 * 2 * 1024 + 2 * h + 4 * 32 + 2 * h + 3 * 2 * i
    assert compiled_layer_saved(spec, make_setup(precision="bf16", seq_len=s, compile=True), 0).total_bytes \
        == per_token * s
    eager = layer_saved(spec, make_setup(precision="bf16", seq_len=s), 0).total_bytes
    assert eager - per_token * s == (2 * (4 + 2) * h + 2 * i - 2 * h - 2 * h) * s


@pytest.mark.parametrize("kw,needle", [
    (dict(engine="megatron"), "--engine torch or fsdp2"),
    (dict(engine="deepspeed"), "--engine torch or fsdp2"),
    (dict(lora_rank=8), "LoRA"),
    (dict(engine="fsdp2", gpus=2, tp=2), "tensor or context parallelism"),
    (dict(engine="fsdp2", gpus=2, precision="fp8", fp8_backend="te"), "fp8-backend te"),  # (torchao: test_fp8_compile.py)  # (selective: tests/trace/test_compile_sac_trace.py)
    (dict(attn="eager"), "--attn sdpa or flash"),
])
def test_unmodelled_setups_are_refused_in_one_line(kw: dict, needle: str) -> None:
    spec = spec_from_hf_config(TINY["llama"], name="llama")
    with pytest.raises(ConfigError) as err:
        validate_for_model(make_setup(compile=True, seq_len=S, **kw), spec)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_unmodelled_family_is_refused() -> None:
    spec = spec_from_hf_config(TINY["mixtral"], name="mixtral")
    with pytest.raises(ConfigError, match="--compile is modelled for"):
        validate_for_model(make_setup(compile=True, seq_len=S), spec)
    assert "mixtral" not in COMPILE_FAMILIES


def test_cli_compile_flag_and_json_setup(capsys) -> None:
    import json

    from trainmem.cli import main

    assert main(["estimate", "llama-3.1-8b", "--compile", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["setup"]["compile"] is True and any("torch.compile" in a for a in d["assumptions"])
    assert main(["estimate", "llama-3.1-8b", "--json"]) == 0
    e = json.loads(capsys.readouterr().out)
    assert e["setup"]["compile"] is False
    assert d["activation_bytes_per_layer"] < e["activation_bytes_per_layer"]
    assert main(["estimate", "llama-3.1-8b", "--compile", "--engine", "megatron"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "--engine torch or fsdp2" in err, err


def test_every_compile_message_has_its_chinese_entry() -> None:
    from trainmem.memory.compile import compile_assumptions, compile_refusal
    from trainmem.model.catalog import load_catalog_spec
    from trainmem.report.i18n import tr

    spec = load_catalog_spec("llama-3.1-8b")
    setups = [dict(engine="megatron"), dict(engine="deepspeed"), dict(lora_rank=8),
              dict(engine="fsdp2", gpus=2, precision="fp8", fp8_backend="te"),
              dict(attn="eager"), dict(engine="fsdp2", gpus=2, tp=2), dict(precision="fp32", seq_len=S)]
    msgs = [compile_refusal(spec, make_setup(compile=True, **kw)) for kw in setups]
    msgs.append(compile_refusal(load_catalog_spec("mixtral-8x7b"), make_setup(compile=True)))
    msgs += compile_assumptions(make_setup(compile=True, recompute="full"))
    msgs += compile_assumptions(make_setup(compile=True, recompute="full", lora_rank=8))[1:2]
    msgs += compile_assumptions(make_setup(compile=True, recompute="selective", no_compile_loss=True))[1:3]
    for m in msgs:
        assert m and tr(m, "zh") != m, m


def test_plan_compile_keeps_the_configurations_compile_is_modelled_for(capsys) -> None:
    import json

    from trainmem.cli import main

    assert main(["plan", "llama-3.1-8b", "--cluster", "8xH100-SXM-80G", "--global-batch", "64", "--compile",
                 "--json"]) == 0
    plans = json.loads(capsys.readouterr().out)["plans"]
    assert plans and all(p["engine"] in ("torch", "fsdp2") and p["tp"] == p["cp"] == 1 for p in plans), plans


@pytest.mark.parametrize("name", ["llama-3.1-8b", "mistral-nemo-12b", "qwen2.5-7b", "qwen3-14b", "phi-4", "gpt2"])
@pytest.mark.parametrize("precision", ["bf16", "amp-bf16", "fp32"])
def test_a_compiled_layer_never_keeps_more_than_the_eager_one(name: str, precision: str) -> None:
    """The partitioner saves a subset of the values eager autograd keeps, or cheaper stand-ins for them (a
    layer input for an fp32 copy, o_proj's output for the residual sum); never more bytes per layer."""
    from trainmem.api import build
    from trainmem.errors import TrainmemError

    try:
        spec, s = build(name, precision=precision, seq_len=1024, compile=True)
    except TrainmemError:
        pytest.skip("refused under --compile (fp32 with GQA: CUDA's math kernel)")
    eager = layer_saved(spec, s.model_copy(update={"compile": False}), 0).total_bytes
    assert 0 < compiled_layer_saved(spec, s, 0).total_bytes < eager
