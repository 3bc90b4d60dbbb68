"""Megatron-LM exporter: every flag of megatron_args.sh is an argument of Megatron-LM core_v0.19.0's parser
(the vendored list: exists, takes a value or not, value among its choices), the rules of that tag's
``validate_args`` that these flags touch hold, and the batch arithmetic is the setup's."""

from __future__ import annotations

import pytest

from tests.export.cases import bash_syntax_ok, export
from tests.export.engines import MEGATRON_ARGS_FILE, megatron_flags, megatron_script
from trainmem.api import build
from trainmem.export import can_export


def validate(launcher: dict[str, str], a: dict[str, list[str]]) -> dict[str, int]:
    """The checks of megatron/training/arguments.py (core_v0.19.0) ``validate_args`` that the exported flags
    meet, and the resulting sizes: world, dp, number of micro-batches."""
    def num(flag: str, default: int = 1) -> int:
        return int(a[flag][0]) if flag in a else default

    world = int(launcher["--nnodes"]) * int(launcher["--nproc-per-node"])
    tp, pp, cp = num("--tensor-model-parallel-size"), num("--pipeline-model-parallel-size"), \
        num("--context-parallel-size")
    assert world % (tp * pp * cp) == 0
    dp = world // (tp * pp * cp)
    mb, gb = num("--micro-batch-size"), num("--global-batch-size")
    assert gb % (mb * dp) == 0, "global batch is not a multiple of micro-batch x dp (microbatches calculator)"
    if "--overlap-param-gather" in a:  # arguments.py:990-995
        assert "--use-distributed-optimizer" in a and "--overlap-grad-reduce" in a
    if a.get("--recompute-granularity") == ["selective"]:  # arguments.py:1385-1388
        assert "--recompute-method" not in a
    if "--optimizer-cpu-offload" in a:  # arguments.py:1803-1807
        assert "--use-precision-aware-optimizer" in a
    if "--expert-model-parallel-size" in a:
        ep, etp = num("--expert-model-parallel-size"), num("--expert-tensor-parallel-size", tp)
        assert (world // pp) % (ep * etp) == 0
    layers = num("--num-layers")
    if "--num-layers-per-virtual-pipeline-stage" in a:  # arguments.py:919-945, 966-975
        per_stage = layers // pp
        assert layers % pp == 0 and per_stage % num("--num-layers-per-virtual-pipeline-stage") == 0
        assert pp > 2 or "--no-overlap-p2p-communication" not in a
        assert "--decoder-first-pipeline-num-layers" not in a
    elif "--decoder-first-pipeline-num-layers" in a:
        middle = layers - num("--decoder-first-pipeline-num-layers") - num("--decoder-last-pipeline-num-layers")
        assert pp > 2 and middle % (pp - 2) == 0 or pp == 2 and middle == 0
    else:
        assert layers % pp == 0
    if a.get("--position-embedding-type") == ["learned_absolute"]:
        assert num("--seq-length") <= num("--max-position-embeddings")
    assert num("--padded-vocab-size") % tp == 0
    return {"world": world, "dp": dp, "microbatches": gb // (mb * dp)}


def test_vendored_list_has_its_header_and_the_flags_the_brief_names() -> None:
    head = MEGATRON_ARGS_FILE.read_text().splitlines()[:4]
    assert "core_v0.19.0" in head[2] and "5be9626709af2722333bf54797c954c09edeada3" in head[2]
    flags = megatron_flags()
    assert len(flags) > 800
    assert flags["--recompute-granularity"] == ("value", ("full", "selective"))
    assert flags["--sequence-parallel"][0] == "store_true"
    assert "--virtual-pipeline-model-parallel-size" not in flags  # the tag has only the layers-per-stage form


def test_llama_3d_interleaved() -> None:
    """Hand-computed: 16 GPUs, tp 2 x pp 2 -> dp 4; micro-batch 2, 8 micro-batches: global batch 64; 32 layers
    over 2 stages x 2 chunks: 8 layers per virtual stage."""
    _, s, files = export("llama-3.1-8b", "megatron", 2, 8, ref="meta-llama/Llama-3.1-8B", engine="megatron", tp=2,
                         pp=2, vpp=2, zero=1, sp=True, micro_batch=2, grad_accum=8, recompute="selective")
    text = files["megatron_args.sh"]
    launcher, a = megatron_script(text)
    sizes = validate(launcher, a)
    assert sizes == {"world": 16, "dp": 4, "microbatches": 8}
    assert a["--global-batch-size"] == ["64"] and a["--micro-batch-size"] == ["2"]
    assert a["--num-layers-per-virtual-pipeline-stage"] == ["8"]
    for flag in ("--sequence-parallel", "--use-distributed-optimizer", "--bf16", "--swiglu",
                 "--untie-embeddings-and-output-weights", "--disable-bias-linear", "--group-query-attention"):
        assert flag in a, flag
    assert a["--recompute-granularity"] == ["selective"] and a["--num-query-groups"] == ["8"]
    assert a["--ffn-hidden-size"] == ["14336"] and a["--padded-vocab-size"] == ["128256"]
    assert a["--tokenizer-model"] == ["meta-llama/Llama-3.1-8B"] and a["--rotary-base"] == ["500000"]
    assert a["--attention-dropout"] == ["0.0"] and a["--hidden-dropout"] == ["0.0"]
    assert "--node-rank" in launcher and "$MEGATRON_LM/pretrain_gpt.py" in text
    bash_syntax_ok(text)


def test_mixtral_expert_parallel_fp8_full_recompute() -> None:
    _, _, files = export("mixtral-8x7b", "megatron", 2, 8, engine="megatron", tp=2, pp=2, ep=2, zero=1,
                         precision="fp8", recompute="full", micro_batch=1, grad_accum=4)
    launcher, a = megatron_script(files["megatron_args.sh"])
    assert validate(launcher, a)["dp"] == 4
    assert a["--num-experts"] == ["8"] and a["--moe-router-topk"] == ["2"] and a["--moe-ffn-hidden-size"] == ["14336"]
    assert a["--expert-model-parallel-size"] == ["2"] and a["--expert-tensor-parallel-size"] == ["2"]
    assert a["--fp8-format"] == ["hybrid"] and "--bf16" in a
    assert a["--recompute-granularity"] == ["full"] and a["--recompute-method"] == ["uniform"]
    assert a["--recompute-num-layers"] == ["1"] and "--moe-layer-freq" not in a


def test_optimizer_offload_fp16_and_sgd() -> None:
    _, _, files = export("llama-2-7b", "megatron", 1, 8, engine="megatron", tp=2, zero=1, offload="optimizer",
                         precision="mixed-fp16", micro_batch=4, grad_accum=2)
    launcher, a = megatron_script(files["megatron_args.sh"])
    validate(launcher, a)
    assert "--optimizer-cpu-offload" in a and "--use-precision-aware-optimizer" in a
    assert "--fp16" in a and "--accumulate-allreduce-grads-in-fp32" in a and "--bf16" not in a
    assert a["--global-batch-size"] == ["32"]
    _, _, files = export("llama-2-7b", "megatron", 1, 2, engine="megatron", optimizer="sgd", precision="fp32")
    _, a = megatron_script(files["megatron_args.sh"])
    assert a["--optimizer"] == ["sgd"] and a["--sgd-momentum"] == ["0.0"]
    assert "--use-distributed-optimizer" not in a and "--bf16" not in a and "--fp16" not in a


@pytest.mark.parametrize("model, present, absent", [
    ("qwen2.5-7b", ["--add-qkv-bias", "--disable-bias-linear"], ["--qk-layernorm"]),
    ("qwen3-8b", ["--qk-layernorm", "--disable-bias-linear"], ["--add-qkv-bias"]),
    ("gpt2", ["--openai-gelu"], ["--disable-bias-linear", "--swiglu", "--untie-embeddings-and-output-weights"]),
    ("qwen1.5-moe-a2.7b", ["--moe-shared-expert-gate", "--moe-shared-expert-intermediate-size"], []),
])
def test_model_families(model: str, present: list[str], absent: list[str]) -> None:
    _, _, files = export(model, "megatron", 1, 1, engine="megatron", seq_len=512)
    launcher, a = megatron_script(files["megatron_args.sh"])
    validate(launcher, a)
    assert all(f in a for f in present) and not any(f in a for f in absent), a
    if model == "gpt2":
        assert a["--position-embedding-type"] == ["learned_absolute"] and a["--normalization"] == ["LayerNorm"]


def test_uneven_stages() -> None:
    """28 layers over pp 3: the estimate's stages hold 10, 9, 9 (remainder to the first): first 10, last 9."""
    _, _, files = export("qwen2.5-7b", "megatron", 1, 3, engine="megatron", pp=3, grad_accum=3)
    launcher, a = megatron_script(files["megatron_args.sh"])
    validate(launcher, a)
    assert a["--decoder-first-pipeline-num-layers"] == ["10"] and a["--decoder-last-pipeline-num-layers"] == ["9"]
    spec, s = build("qwen2.5-7b", engine="megatron", gpus=8, pp=8)  # 28 = 8 * 3 + 4: 4,4,4,4,3,3,3,3
    assert "first/last-stage" in can_export(s, "megatron", spec)


def test_refusals() -> None:
    _, s = build("llama-3.1-8b", engine="megatron", gpus=8, pp=4, vpp=2, grad_accum=6)
    assert "multiple of pp" in can_export(s, "megatron")
    _, s = build("llama-3.1-8b", engine="megatron", optimizer="adamw-8bit")
    assert "adamw-8bit" in can_export(s, "megatron")
    spec, s = build("mixtral-8x7b", engine="megatron", gpus=4, tp=4, ep=2)
    assert "divide dp" in can_export(s, "megatron")
    spec, s = build("gpt2", engine="megatron", gpus=2, tp=2)
    assert "vocab_size(50257)" in can_export(s, "megatron", spec)
    spec, s = build("deepseek-v2-lite", engine="megatron")
    assert "deepseek_v2" in can_export(s, "megatron", spec)
    _, s = build("llama-3.1-8b", engine="fsdp2", gpus=8)
    assert can_export(s, "megatron").startswith("the megatron exporter runs setups estimated for the megatron")


@pytest.mark.parametrize("bad, why", [
    ("--virtual-pipeline-model-parallel-size 2", "not a Megatron-LM"),
    ("--sequence-parallel true", "takes no value"),
    ("--recompute-granularity layer", "not one of"),
    ("--micro-batch-size 1 2", "takes one value"),
])
def test_the_flag_check_can_fail(bad: str, why: str) -> None:
    text = "MODEL_ARGS=(\n  " + bad + "\n)\nDATA_ARGS=(\n  --mock-data\n)\ntorchrun --nnodes 1 --nproc-per-node 1 x\n"
    with pytest.raises(AssertionError, match=why):
        megatron_script(text)


@pytest.mark.parametrize("precision,fields,present,absent", [
    ("mixed-bf16", dict(grad_reduce_16bit=True), ["--bf16", "--grad-reduce-in-bf16"], []),
    ("mixed-fp16", dict(grad_reduce_16bit=True), ["--fp16"], ["--accumulate-allreduce-grads-in-fp32"]),
    ("fp8", dict(grad_reduce_16bit=True, fp8_params=True), ["--grad-reduce-in-bf16", "--fp8-param-gather"], []),
    ("mixed-bf16", {}, ["--bf16"], ["--grad-reduce-in-bf16", "--fp8-param-gather"]),
])
def test_16bit_main_grads_and_fp8_weights(precision: str, fields: dict, present: list[str], absent: list[str]) -> None:
    """NeMo / Megatron-Bridge performance recipes' grad_reduce_in_fp32=False and fp8_param_gather, as
    Megatron-LM core_v0.19.0 flags (arguments.py: --grad-reduce-in-bf16, --fp8-param-gather)."""
    _, _, files = export("llama-3.1-8b", "megatron", 1, 8, engine="megatron", tp=2, zero=1, precision=precision,
                         micro_batch=1, grad_accum=4, **fields)
    launcher, a = megatron_script(files["megatron_args.sh"])
    validate(launcher, a)
    assert all(f in a for f in present), present
    assert not any(f in a for f in absent), absent
