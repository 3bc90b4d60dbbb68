"""``--stack NAME`` (trainmem/frameworks): each stack's values against the framework's shipped defaults — read
from the installed package where it installs without a GPU (transformers, PEFT, TRL, torchtune's config files,
LitGPT, torchtitan, DeepSpeed, Accelerate) —, the way apply_stack fills only what is not given, and a hand-checked
estimate."""

from __future__ import annotations

import dataclasses
import inspect
import json
import re
from pathlib import Path

import pytest

import trainmem
from trainmem.api import build
from trainmem.cli import main
from trainmem.errors import ConfigError
from trainmem.frameworks import STACK_NAMES, apply_stack, get_stack, stack_rows
from trainmem.frameworks.stack import Run

ROOT = Path(__file__).resolve().parents[2]


def value(stack: str, field: str, **fields) -> object:
    """What the stack sets ``field`` to for a run (llama-3.1-8b) with ``fields`` given."""
    _, ts = build("llama-3.1-8b", stack=stack, **fields)
    return getattr(ts, field)


def sources(stack: str) -> dict[str, str]:
    return {d.field: d.source for d in reversed(get_stack(stack).defaults)}


# --------------------------------------------------------------------------- values against the frameworks

def test_hf_trainer_is_training_arguments_defaults() -> None:
    pytest.importorskip("transformers")
    from transformers import TrainingArguments
    a = TrainingArguments(output_dir="/tmp/trainmem-stack-test")
    assert a.optim.value == "adamw_torch_fused"
    assert (value("hf-trainer", "optimizer"), value("hf-trainer", "optimizer_impl")) == ("adamw", "fused")
    assert a.gradient_checkpointing is False and value("hf-trainer", "recompute") == "none"
    assert value("hf-trainer", "micro_batch") == a.per_device_train_batch_size == 8
    assert value("hf-trainer", "grad_accum") == a.gradient_accumulation_steps == 1
    assert a.torch_compile is False and value("hf-trainer", "compile") is False
    assert a.use_liger_kernel is False and value("hf-trainer", "loss") == "hf"
    # no autocast (bf16 = fp16 = False) over a model loaded in the checkpoint's dtype (dtype="auto"): pure bf16
    assert a.bf16 is False and a.fp16 is False and value("hf-trainer", "precision") == "bf16"
    src = Path(inspect.getfile(TrainingArguments)).parent / "modeling_utils.py"
    assert re.search(r'if dtype is None:\s+dtype = "auto"', src.read_text()), "from_pretrained's dtype default moved"


def test_peft_default_targets_are_peft_s() -> None:
    pytest.importorskip("peft")
    from peft.utils.constants import TRANSFORMERS_MODELS_TO_LORA_TARGET_MODULES_MAPPING as peft_map
    from trainmem.frameworks.hf_trainer import PEFT_TARGETS
    for model_type, targets in PEFT_TARGETS.items():
        assert tuple(peft_map[model_type]) == targets, model_type
    assert value("hf-trainer", "lora_targets", lora_rank=8) == ("q_proj", "v_proj")
    assert value("hf-trainer", "adapter_dtype", lora_rank=8) == "fp32"
    _, ts = build("gpt2", stack="hf-trainer", lora_rank=8)
    assert ts.lora_targets == ("c_attn",)


def test_trl_is_sft_config_defaults() -> None:
    pytest.importorskip("trl")
    from trl import SFTConfig
    f = {x.name: x.default for x in dataclasses.fields(SFTConfig)}
    assert f["gradient_checkpointing"] is True and value("trl", "recompute") == "full"
    assert value("trl", "seq_len") == f["max_length"] == 1024
    assert value("trl", "micro_batch") == f["per_device_train_batch_size"] == 8
    assert f["optim"] == "adamw_torch_fused" and value("trl", "optimizer_impl") == "fused"
    assert f["activation_offloading"] is False and value("trl", "offload_activations") is False
    assert f["bf16"] is None and value("trl", "precision") == "amp-bf16"  # None -> True, a float32 model
    import trl
    text = (Path(trl.__file__).parent / "trainer" / "sft_trainer.py").read_text()  # (imports datasets)
    assert "it defaults to `float32`" in text and "add_fused_lm_head(" in text
    assert value("trl", "loss") == "fused-linear"


def _torchtune_config(name: str) -> dict:
    yaml = pytest.importorskip("yaml")
    import importlib.util
    found = importlib.util.find_spec("recipes")
    if found is None or not found.submodule_search_locations:
        pytest.skip("torchtune's recipes are not installed (pip install --no-deps torchtune==0.6.1)")
    path = Path(list(found.submodule_search_locations)[0]) / "configs" / "llama3_1" / name
    if not path.exists():
        pytest.skip(f"{path} missing")
    return yaml.safe_load(path.read_text())


_TT_NAMES = {"q_proj": "q_proj", "k_proj": "k_proj", "v_proj": "v_proj", "output_proj": "o_proj"}


@pytest.mark.parametrize(("kind", "gpus"), [("lora", 1), ("lora", 8), ("full", 1), ("full", 8)])
def test_torchtune_is_its_llama3_1_configs(kind: str, gpus: int) -> None:
    from trainmem.frameworks.torchtune import CONFIGS
    cfg = _torchtune_config(CONFIGS[(kind, "one-gpu" if gpus == 1 else "multi-gpu")])
    fields = {"lora_rank": 8} if kind == "lora" else {}
    _, ts = build("llama-3.1-8b", stack="torchtune", gpus=gpus, **fields)
    assert cfg["dtype"] == "bf16" and ts.precision == "bf16"
    assert ts.recompute == ("full" if cfg["enable_activation_checkpointing"] else "none")
    assert ts.offload_activations is bool(cfg["enable_activation_offloading"])
    assert ts.compile is bool(cfg["compile"])
    assert ts.micro_batch == cfg["batch_size"] and ts.grad_accum == cfg["gradient_accumulation_steps"]
    assert cfg["loss"]["_component_"] == "torchtune.modules.loss.CEWithChunkedOutputLoss" and ts.loss == "chunked"
    opt = cfg["optimizer"]["_component_"]
    if opt == "bitsandbytes.optim.PagedAdamW8bit":
        assert ts.optimizer == "paged-adamw-8bit"
    else:
        assert opt == "torch.optim.AdamW" and ts.optimizer == "adamw"
        assert ts.optimizer_impl == ("fused" if cfg["optimizer"].get("fused") else "foreach")
    assert ts.optimizer_in_backward is bool(cfg.get("optimizer_in_bwd", False))
    assert ts.engine == ("torch" if gpus == 1 else "fsdp2")
    if kind == "lora":
        m = cfg["model"]
        want = {_TT_NAMES[x] for x in m["lora_attn_modules"]}
        if m["apply_lora_to_mlp"]:
            want |= {"gate_proj", "up_proj", "down_proj"}
        assert not m["apply_lora_to_output"] and set(ts.lora_targets) == want
        assert ts.adapter_dtype == "bf16"


def test_torchtune_chunked_loss_default() -> None:
    import importlib.util
    found = importlib.util.find_spec("torchtune")
    if found is None or not found.submodule_search_locations:
        pytest.skip("torchtune is not installed")
    text = (Path(list(found.submodule_search_locations)[0]) / "modules/loss/ce_chunked_output_loss.py").read_text()
    assert "num_output_chunks: int = 8" in text and "logits.float()" in text
    assert value("torchtune", "loss_chunks", lora_rank=8) == 8


def test_litgpt_is_its_setup_defaults() -> None:
    pytest.importorskip("litgpt")
    import litgpt.finetune.lora as lora
    from litgpt.utils import get_default_supported_precision
    p = inspect.signature(lora.setup).parameters
    on = [k for k in ("lora_query", "lora_key", "lora_value", "lora_projection", "lora_mlp", "lora_head")
          if p[k].default]
    # the config hub's bf16-true: LoRAQKVLinear's q and v slices, bf16 adapters
    assert on == ["lora_query", "lora_value"] and value("litgpt", "lora_targets", lora_rank=8) == ("qkv.q", "qkv.v")
    assert value("litgpt", "precision") == "bf16" and value("litgpt", "adapter_dtype", lora_rank=8) == "bf16"
    # the CLI without a config: bf16-mixed, fp32 weights and adapters, PEFT-style targets
    assert get_default_supported_precision(training=True) == "bf16-mixed"
    assert value("litgpt", "lora_targets", lora_rank=8, precision="amp-bf16") == ("q_proj", "v_proj")
    assert value("litgpt", "adapter_dtype", lora_rank=8, precision="amp-bf16") == "fp32"
    assert p["train"].default.micro_batch_size == 1 and value("litgpt", "micro_batch", lora_rank=8) == 1
    assert value("litgpt", "seq_len") == 512 and value("litgpt", "micro_batch") == 4  # the hub's full.yaml
    assert p["optimizer"].default == "AdamW" and value("litgpt", "optimizer_impl") == "foreach"
    text = Path(lora.__file__).read_text()
    assert 'raise ValueError("Quantization and mixed precision is not supported.")' in text
    _, ts = build("llama-3.1-8b", stack="litgpt", lora_rank=8, qlora=True)  # --quantize bnb.nf4: bf16-true
    assert (ts.precision, ts.optimizer, ts.adapter_dtype) == ("bf16", "paged-adamw", "bf16")
    assert ts.lora_targets == ("qkv.q", "qkv.v")
    assert "lm_head_chunk_size=128" in text and "fabric.backward(loss" in text
    assert value("litgpt", "loss_chunks", seq_len=4096) == 32  # one chunk per 128 tokens
    assert value("litgpt", "loop") == "script"
    assert value("litgpt", "recompute") == "none" and value("litgpt", "recompute", gpus=8) == "full"
    assert value("litgpt", "micro_batch", lora_rank=8, qlora=True) == 2


def test_torchtitan_is_job_config_defaults() -> None:
    import importlib.util
    if importlib.util.find_spec("torchtitan") is None:  # (its package __init__ needs triton: not imported)
        pytest.skip("torchtitan is not installed (scripts/install-engines.sh)")
    from tests.export.engines import _torchtitan_config_only
    with _torchtitan_config_only():
        from torchtitan.config.job_config import JobConfig
        j = JobConfig()
    assert j.optimizer.name == "AdamW" and j.optimizer.implementation == "fused"
    assert (value("torchtitan", "optimizer"), value("torchtitan", "optimizer_impl")) == ("adamw", "fused")
    assert (j.training.mixed_precision_param, j.training.mixed_precision_reduce) == ("bfloat16", "float32")
    assert value("torchtitan", "precision") == "amp-bf16" and value("torchtitan", "engine") == "fsdp2"
    assert j.training.seq_len == 2048 and j.training.local_batch_size == 8  # without a config; llama3_8b.toml:
    assert value("torchtitan", "seq_len") == 8192 and value("torchtitan", "micro_batch") == 1
    assert j.compile.enable is False and value("torchtitan", "compile") is False
    _, ts = build("llama-3.1-8b", stack="torchtitan")  # run_train.sh's allocator setting: a field trainmem lacks
    assert any(n.startswith("expandable_segments true: the torchtitan default, not modelled by trainmem (")
               for n in ts.notes)
    assert (j.activation_checkpoint.mode, j.activation_checkpoint.selective_ac_option) == ("selective", "2")
    assert value("torchtitan", "recompute") == "selective"  # llama3_8b.toml: selective_ac_option = 'op'
    assert value("torchtitan", "recompute_layers") is None


def test_deepspeed_is_its_config_parser() -> None:
    pytest.importorskip("deepspeed")
    from tests.export.engines import deepspeed_config
    cfg = deepspeed_config({"train_batch_size": 1}, dp=1)
    assert cfg.zero_optimization_stage == 0 and value("deepspeed", "zero") == 0
    assert not cfg.bfloat16_config.enabled and not cfg.float16_config.enabled
    assert value("deepspeed", "precision") == "fp32"
    assert cfg.train_micro_batch_size_per_gpu == 1 and value("deepspeed", "micro_batch") == 1


def test_accelerate_defaults_to_no_mixed_precision() -> None:
    pytest.importorskip("accelerate")
    import accelerate.state as st
    assert 'parse_choice_from_env("ACCELERATE_MIXED_PRECISION", "no")' in Path(st.__file__).read_text()
    assert value("accelerate", "precision") == "fp32" and value("accelerate", "loop") == "script"


# --------------------------------------------------------------------------- how a stack is applied

def test_no_stack_changes_nothing() -> None:
    _, plain = build("llama-3.1-8b", lora_rank=8)
    assert plain.stack is None and not any("stack" in n for n in plain.notes)
    from trainmem.frameworks import Target
    fields: dict = {"lora_rank": 8}
    target = Target(fields=frozenset(), refusal=lambda f: None)
    assert apply_stack(fields, target) == [] and fields == {"lora_rank": 8}
    fields = {"stack": "torchtune", "lora_rank": 8}  # a field the target lacks is listed, not set
    notes = apply_stack(fields, target)
    assert fields == {"stack": "torchtune", "lora_rank": 8}
    assert "recompute full: the torchtune default, not modelled by trainmem (torchtune 0.6.1 " \
           "recipes/configs/llama3_1/8B_lora_single_device.yaml enable_activation_checkpointing: True)" in notes


def test_torchtune_lora_estimate_by_hand() -> None:
    """Llama-3.2-1B, torchtune LoRA r 8 on q, v, o and the MLP, bf16 adapters (hand count): per layer
    8·(2048+2048) + 8·(2048+512) + 8·(2048+2048) + 3·8·(2048+8192) = 331,776; 16 layers: A = 5,308,416.
    Parameters 2·P + 2·A (bf16 base and adapters), AdamW states 2 · 2 B · A (bf16, as torchtune keeps them)."""
    a = 16 * (8 * 4096 + 8 * 2560 + 8 * 4096 + 3 * 8 * 10240)
    assert a == 5_308_416
    r = trainmem.estimate("llama-3.2-1b", stack="torchtune", lora_rank=8)
    assert r.n_trainable_params == a
    assert r.category_peak_bytes["optimizer_states"] == 4 * a
    assert r.category_peak_bytes["parameters"] == 2 * r.n_params + 2 * a
    same = trainmem.estimate("llama-3.2-1b", lora_rank=8, precision="bf16", optimizer="adamw", optimizer_impl="fused",
                             recompute="full", loss="chunked", loss_chunks=8, micro_batch=2, grad_accum=8,
                             lora_targets="q_proj,v_proj,o_proj,gate_proj,up_proj,down_proj", adapter_dtype="bf16")
    assert r.peak_allocated_bytes == same.peak_allocated_bytes and r.peak_reserved_bytes == same.peak_reserved_bytes
    plain = trainmem.estimate("llama-3.2-1b", lora_rank=8)  # trainmem's defaults: fp32 adapters, q k v o, AdamW
    assert plain.category_peak_bytes["optimizer_states"] == 8 * plain.n_trainable_params
    assert r.setup["stack"] == "torchtune" and plain.setup["stack"] is None


def test_explicit_flags_win() -> None:
    _, ts = build("llama-3.1-8b", stack="torchtune", lora_rank=8, recompute="none", precision="amp-bf16",
                  micro_batch=1)
    assert (ts.recompute, ts.precision, ts.micro_batch) == ("none", "amp-bf16", 1)
    assert ts.loss == "chunked" and ts.grad_accum == 8  # the rest from the stack
    assert not any(n.startswith(("recompute ", "precision ", "micro_batch ")) for n in ts.notes)
    # a stack value that an explicit flag contradicts is not applied, and said so
    _, ts = build("llama-3.1-8b", stack="torchtune", optimizer="adafactor", lora_rank=8)
    assert ts.optimizer == "adafactor" and ts.optimizer_impl == "foreach"
    assert any(n.startswith("optimizer_impl fused: the torchtune default, not applied: --optimizer-impl fused")
               for n in ts.notes)
    # the engine given: hf-trainer under DeepSpeed keeps DeepSpeed's recipe
    _, ts = build("llama-3.1-8b", stack="hf-trainer", engine="deepspeed", zero=2, gpus=8)
    assert ts.precision == "mixed-bf16" and ts.optimizer_impl == "foreach"
    assert not any(n.startswith("warning:") for n in ts.notes)
    _, ts = build("llama-3.1-8b", stack="torchtune", engine="deepspeed", gpus=8)
    assert "warning: torchtune runs on torch, fsdp2, not the deepspeed engine: its defaults are applied where the " \
           "engine takes them" in ts.notes
    from tests.report.test_zh import assert_chinese
    from trainmem.report.i18n import tr
    assert_chinese(tr(next(n for n in ts.notes if n.startswith("warning:")), "zh"))


def test_stack_bf16_gives_way_on_a_gpu_without_bf16() -> None:
    _, ts = build("llama-3.1-8b", stack="torchtune", lora_rank=8, gpu="V100-32G")
    assert ts.precision != "bf16" and ts.adapter_dtype == "fp32"
    assert any(n.startswith("precision bf16: the torchtune default, not applied: gpu V100-SXM2-32G has no bfloat16 "
                            "support")
               for n in ts.notes)
    trainmem.estimate("llama-3.1-8b", stack="torchtune", lora_rank=8, gpu="V100-32G")


def test_stack_engine_makes_parallel_flags_valid() -> None:
    _, ts = build("llama-3.1-8b", stack="megatron", gpus=8, tp=2, pp=2)
    assert ts.engine == "megatron" and ts.precision == "fp32" and ts.zero == 0
    _, ts = build("llama-3.1-8b", stack="megatron-bridge", gpus=8, tp=2)  # the recipe: bf16, distributed optimizer
    assert (ts.engine, ts.precision, ts.zero, ts.grad_reduce_16bit, ts.seq_len) == ("megatron", "mixed-bf16", 1, False,
                                                                                     8192)
    _, ts = build("llama-3.1-8b", stack="torchtitan", gpus=8, tp=2)
    assert ts.engine == "fsdp2" and ts.sp


def test_unknown_stack_is_one_line(capsys) -> None:
    rc = main(["estimate", "llama-3.1-8b", "--stack", "nemo-rl"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1
    assert "stack: not a known framework; one of: " in err and all(n in err for n in STACK_NAMES)
    with pytest.raises(ConfigError, match="not a known framework"):
        trainmem.estimate("llama-3.1-8b", stack="nemo-rl")
    rc = main(["estimate", "llama-3.1-8b", "--stack", "TorchTune", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["setup"]["stack"] == "torchtune"


@pytest.mark.parametrize("stack", STACK_NAMES)
@pytest.mark.parametrize("fields", [{}, {"lora_rank": 16}, {"gpus": 8}, {"gpus": 8, "lora_rank": 16}],
                         ids=["full-1", "lora-1", "full-8", "lora-8"])
def test_every_stack_builds_and_says_it_in_chinese(stack: str, fields: dict) -> None:
    from tests.report.test_zh import assert_chinese
    from trainmem.report.i18n import tr
    if stack in ("megatron", "megatron-bridge") and fields.get("lora_rank"):
        fields = {**fields, "engine": "fsdp2"}  # LoRA is not modelled on the megatron engine
    spec, ts = build("llama-3.1-8b", **fields, stack=stack)
    lines = [n for n in ts.notes if "default" in n or n.startswith(f"{stack}: ")]
    assert lines and lines[0].startswith(f"stack {stack}: the defaults of ")
    refused = [n for n in lines if "not applied" in n]
    if stack == "torchtitan" and fields.get("lora_rank"):  # torchtitan has no LoRA: its layer AC is not expressible
        assert refused == [n for n in refused if n.startswith("recompute_layers ")]
    else:
        assert not refused, refused
    for n in lines:
        assert_chinese(tr(n, "zh"))
    trainmem.estimate("llama-3.1-8b", **fields, stack=stack)


def test_defaults_name_their_release() -> None:
    for name in STACK_NAMES:
        st = get_stack(name)
        head = st.release.split()[0].lower()
        for d in st.defaults:
            assert d.source.strip(), (name, d.field)
        assert any(head in d.source.lower() for d in st.defaults), (name, head)


def test_run_conditions() -> None:
    r = Run(fields={"gpus": 8, "lora_rank": 4}, seq_len=2048, num_layers=32)
    assert r.lora and r.gpus == 8 and r.engine == "torch"
    with pytest.raises(ValueError, match="unknown condition"):
        from trainmem.frameworks.stack import Default
        Default(field="x", value=1, source="s", when=("two-gpus",))


def test_docs_table_is_the_stacks() -> None:
    from benchmarks.stacks_table import markdown
    assert (ROOT / "docs" / "stacks.md").read_text() == markdown(), "regenerate: python benchmarks/stacks_table.py"
    assert all(stack_rows(n) for n in STACK_NAMES)


def test_explain_lists_the_stack_choices(capsys) -> None:
    from tests.report.test_zh import assert_chinese
    assert main(["explain", "llama-3.2-1b", "--stack", "torchtune", "--lora-rank", "8"]) == 0
    out = capsys.readouterr().out
    assert "Assumptions:" in out and "recompute full: the torchtune default (torchtune 0.6.1 " in out
    assert main(["explain", "llama-3.2-1b", "--stack", "torchtune", "--lora-rank", "8", "--lang", "zh"]) == 0
    out = capsys.readouterr().out
    assert "recompute full：torchtune 的默认值" in out
    assert_chinese(out[out.index("recompute full："):])


def test_plan_takes_the_stack_s_engines_and_defaults(capsys) -> None:
    from trainmem.frameworks import plan_stack
    extra, engines = plan_stack("torchtune", {"lora_rank": 8, "optimizer": None}, 2048, 8)
    assert engines == ("torch", "fsdp2")
    assert (extra["loss"], extra["loss_chunks"], extra["loop"]) == ("chunked", 8, "trainer")
    assert extra["optimizer"] == "adamw"
    assert extra["lora_targets"] == "q_proj,v_proj,o_proj,gate_proj,up_proj,down_proj"
    extra, _ = plan_stack("torchtune", {"optimizer": "sgd"}, 2048, 8)
    assert extra["optimizer"] == "sgd"  # the flag given wins
    with pytest.raises(ConfigError, match="runs on megatron; the plan asks for deepspeed"):
        plan_stack("megatron", {}, 2048, 8, engines=("deepspeed",))
    args = ["plan", "llama-3.2-1b", "--cluster", "8xH100-SXM-80G", "--global-batch", "32", "--seq-len", "2048",
            "--top", "3", "--json"]
    assert main([*args, "--stack", "torchtitan"]) == 0
    plans = json.loads(capsys.readouterr().out)["plans"]
    assert plans and {p["engine"] for p in plans} == {"fsdp2"}
    api = trainmem.plan("llama-3.2-1b", cluster="8xH100-SXM-80G", global_batch=32, seq_len=2048, top=3,
                        stack="torchtitan").to_dict()
    for a, b in zip(api["plans"], plans, strict=True):  # the Python API is the CLI's
        assert {k: v for k, v in a.items() if k != "search_seconds"} == {k: v for k, v in b.items()
                                                                         if k != "search_seconds"}
