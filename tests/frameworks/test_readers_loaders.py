"""The readers against the frameworks' own config loaders (installed on CPU): what HfArgumentParser + TRL's
dataclasses, DeepSpeed's ``DeepSpeedConfig`` (after transformers' ``HfTrainerDeepSpeedConfig`` filled the "auto"
values), torchtitan's ``ConfigManager``, Accelerate's ``load_config_from_file`` and Megatron-LM's argument list make
of a file is what the reader makes of it; and trainmem's own exports (checked there with the same loaders) read back
to the setup they were written from."""

from __future__ import annotations

import json
import types
from pathlib import Path

import pytest

from tests.export.engines import deepspeed_config, megatron_flags, require, torchtitan_job_config
from trainmem.api import build
from trainmem.frameworks.readers import merge_fields, read_config
from trainmem.frameworks.readers.hf import OPTIM
from trainmem.frameworks.readers.megatron import parse_megatron_args

CONFIGS = Path(__file__).parent / "configs"


# --------------------------------------------------------------------------- HF TrainingArguments / TRL

def _hf_parse(path: Path, monkeypatch):  # noqa: ANN202 - (SFTConfig, ModelConfig)
    pytest.importorskip("trl")
    import transformers.training_args as ta
    from transformers import HfArgumentParser
    from trl import ModelConfig, SFTConfig
    monkeypatch.setattr(ta, "is_torch_bf16_gpu_available", lambda: True)  # bf16=True is checked against the device
    monkeypatch.setattr(ta.TrainingArguments, "_validate_args", lambda self: None, raising=False)
    body = path.read_text()
    return HfArgumentParser((SFTConfig, ModelConfig)).parse_yaml_file(str(path), allow_extra_keys=True), body


@pytest.mark.parametrize("name", ["trl_zephyr-7b-beta_sft_config_full.yaml", "trl_zephyr-7b-beta_sft_config_qlora.yaml"])
def test_trl_config_as_hf_argument_parser_reads_it(name: str, monkeypatch) -> None:
    import yaml

    (args, model), body = _hf_parse(CONFIGS / name, monkeypatch)
    got = read_config(str(CONFIGS / name)).fields
    # the handbook's files name the weights' dtype torch_dtype, TRL 1.16's ModelConfig dtype (the older key is kept)
    dtype = model.dtype if model.dtype != "float32" else yaml.safe_load(body).get("torch_dtype", model.dtype)
    assert got["micro_batch"] == args.per_device_train_batch_size
    assert got["grad_accum"] == args.gradient_accumulation_steps
    assert (got["recompute"] == "full") == bool(args.gradient_checkpointing)
    assert (got["optimizer"], got.get("optimizer_impl")) == OPTIM[str(getattr(args.optim, "value", args.optim))]
    assert got["precision"] == ("bf16" if args.bf16 and dtype == "bfloat16" else "amp-bf16")
    assert got.get("attn") == {"flash_attention_2": "flash"}.get(model.attn_implementation)
    assert got.get("lora_rank", 0) == (model.lora_r if model.use_peft else 0)
    assert bool(got.get("qlora")) == bool(model.load_in_4bit)
    if model.use_peft:
        assert got["lora_targets"].split(",") == list(model.lora_target_modules)


def test_training_arguments_dump_reads_back(tmp_path) -> None:
    """``TrainingArguments.to_dict()`` (every field, defaults included: the JSON ``HfArgumentParser.parse_json_file``
    reads) → the reader → the values of the object."""
    from transformers import HfArgumentParser, TrainingArguments

    args = TrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=3, gradient_accumulation_steps=5,
                             gradient_checkpointing=True, optim="adamw_torch", use_cpu=True)
    path = tmp_path / "args.json"
    path.write_text(json.dumps({**args.to_dict(), "model_name_or_path": "Qwen/Qwen2.5-0.5B"}))
    (parsed,) = HfArgumentParser((TrainingArguments,)).parse_json_file(str(path), allow_extra_keys=True)
    fs = read_config(str(path))
    assert fs.format == "hf" and fs.model == "qwen2.5-0.5b"
    s = build(fs.model, **merge_fields(fs, {}))[1]
    assert (s.micro_batch, s.grad_accum, s.recompute) == (parsed.per_device_train_batch_size,
                                                         parsed.gradient_accumulation_steps, "full")
    assert (s.optimizer, s.optimizer_impl, s.precision, s.engine) == ("adamw", "foreach", "fp32", "torch")
    defaults = TrainingArguments(output_dir=str(tmp_path), use_cpu=True)
    fs = read_config(_write(tmp_path / "d.json", {"output_dir": "x"}))  # nothing but output_dir: the defaults
    assert fs.fields["micro_batch"] == defaults.per_device_train_batch_size
    assert (fs.fields["optimizer"], fs.fields["optimizer_impl"]) == OPTIM[defaults.optim.value]


def _write(path: Path, obj: dict) -> str:
    path.write_text(json.dumps(obj))
    return str(path)


def test_sft_config_defaults(tmp_path) -> None:
    """What a TRL file leaves out takes SFTConfig's defaults (max_length, gradient_checkpointing, bf16 None → True)."""
    pytest.importorskip("trl")
    import dataclasses

    from trl import SFTConfig
    default = {f.name: f.default for f in dataclasses.fields(SFTConfig)}
    fs = read_config(_write(tmp_path / "s.json", {"output_dir": "x", "dataset_text_field": "text"}))
    assert fs.fields["seq_len"] == default["max_length"]
    assert (fs.fields["recompute"] == "full") == default["gradient_checkpointing"]
    assert default["bf16"] is None and fs.fields["precision"] == "amp-bf16"
    assert fs.fields["micro_batch"] == default["per_device_train_batch_size"]


# --------------------------------------------------------------------------- DeepSpeed through the HF integration

@pytest.mark.parametrize("name,mb,ga", [("llamafactory_qwen3_full_sft.yaml", 1, 2),
                                         ("llamafactory_qwen3_lora_sft_ds3.yaml", 1, 2)])
def test_deepspeed_auto_values_as_the_hf_integration_fills_them(name: str, mb: int, ga: int) -> None:
    require("deepspeed")
    from transformers.integrations.deepspeed import HfTrainerDeepSpeedConfig

    raw = json.loads((CONFIGS / "examples/deepspeed/ds_z3_config.json").read_text())
    args = types.SimpleNamespace(world_size=8, per_device_train_batch_size=mb, gradient_accumulation_steps=ga,
                                 max_grad_norm=1.0, learning_rate=1e-5, adam_beta1=0.9, adam_beta2=0.999,
                                 adam_epsilon=1e-8, weight_decay=0.0, fp16=False, fp16_full_eval=False, bf16=True,
                                 bf16_full_eval=False, save_on_each_node=False)
    hf = HfTrainerDeepSpeedConfig(raw)
    hf.trainer_config_process(args)
    cfg = json.loads(json.dumps(hf.config).replace('"auto"', "1000000"))  # the hidden-size autos: any number
    ds = deepspeed_config(cfg, dp=8)
    ds.bfloat16_enabled, ds.fp16_enabled = ds.bfloat16_config.enabled, ds.float16_config.enabled
    got = read_config(str(CONFIGS / name)).fields
    assert got["zero"] == ds.zero_optimization_stage
    assert got["micro_batch"] == ds.train_micro_batch_size_per_gpu and got["grad_accum"] == ds.gradient_accumulation_steps
    assert got["precision"] == ("mixed-bf16" if ds.bfloat16_enabled else "mixed-fp16" if ds.fp16_enabled else "fp32")


@pytest.mark.parametrize("name", ["deepspeed_configs_zero2.json", "examples/deepspeed/ds_z2_offload_config.json",
                                  "../deepspeed_config_templates/zero_stage1_config.json"])
def test_deepspeed_config_as_deepspeed_reads_it(name: str) -> None:
    require("deepspeed")
    raw = json.loads((CONFIGS / name).read_text())
    filled = {**raw, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 1, "train_batch_size": 16}
    for kind in ("bf16", "fp16"):
        if isinstance(filled.get(kind), dict) and filled[kind].get("enabled") == "auto":
            filled[kind] = {**filled[kind], "enabled": False}
    cfg = json.loads(json.dumps(filled).replace('"auto"', "1000000"))
    ds = deepspeed_config(cfg, dp=8)
    got = read_config(str(CONFIGS / name)).fields
    assert got["zero"] == ds.zero_optimization_stage
    device = getattr(ds.zero_config.offload_optimizer, "device", None) if ds.zero_config.offload_optimizer else None
    assert (got.get("offload") == "optimizer") == (str(getattr(device, "value", device)) in ("cpu", "nvme"))
    if raw.get("fp16", {}).get("enabled") is True:
        assert ds.float16_config.enabled and got["precision"] == "mixed-fp16"


# --------------------------------------------------------------------------- torchtitan, Accelerate, Megatron

@pytest.mark.parametrize("name", ["torchtitan_llama3_8b.toml", "torchtitan_llama3_70b.toml"])
def test_torchtitan_config_as_config_manager_reads_it(name: str) -> None:
    require("torchtitan")
    job = torchtitan_job_config(CONFIGS / name)
    got = read_config(str(CONFIGS / name))
    f = got.fields
    assert f["micro_batch"] == job.training.local_batch_size and f["seq_len"] == job.training.seq_len
    assert f.get("tp", 1) == job.parallelism.tensor_parallel_degree
    ac = job.activation_checkpoint
    assert f["recompute"] == (ac.mode if ac.mode != "selective" or ac.selective_ac_option == "op" else None)
    assert f["optimizer_impl"] == job.optimizer.implementation
    assert f["precision"] == ("amp-bf16" if job.training.mixed_precision_param == "bfloat16" else "fp32")
    assert got.model == {"8B": "llama-3.1-8b", "70B": "llama-3.1-70b"}[job.model.flavor]


@pytest.mark.parametrize("name", ["accelerate_fsdp.yaml", "accelerate_deepspeed.yaml", "accelerate_multi_gpu.yaml"])
def test_accelerate_config_as_accelerate_reads_it(name: str) -> None:
    require("accelerate")
    from accelerate.commands.config.config_args import load_config_from_file

    cfg = load_config_from_file(str(CONFIGS / name))
    got = read_config(str(CONFIGS / name)).fields
    assert got["gpus"] == cfg.num_processes
    kind = str(getattr(cfg.distributed_type, "value", cfg.distributed_type))
    assert got["engine"] == {"FSDP": "fsdp2", "DEEPSPEED": "deepspeed", "MULTI_GPU": "torch", "NO": "torch"}[kind]
    if kind == "FSDP":
        strategy = str(cfg.fsdp_config.get("fsdp_sharding_strategy", "FULL_SHARD"))
        assert got["zero"] == (3 if strategy in ("FULL_SHARD", "1") else 2)
        assert (got.get("recompute") == "full") == bool(cfg.fsdp_config.get("fsdp_activation_checkpointing"))
    mp = str(getattr(cfg.mixed_precision, "value", cfg.mixed_precision))
    if kind == "MULTI_GPU":
        assert got["precision"] == {"bf16": "amp-bf16", "fp16": "amp-fp16"}.get(mp, "fp32")


def test_megatron_script_flags_are_megatron_flags() -> None:
    """Every flag the reader takes from Megatron-LM's example script is an argument of Megatron-LM core_v0.19.0
    (the vendored parser list), a store_true read as a switch and a value flag with its value."""
    table = megatron_flags()
    flags, _ = parse_megatron_args((CONFIGS / "megatron_train_llama3_8b_h100_fp8.sh").read_text())
    launcher = {"--nproc-per-node", "--nnodes"}
    for flag, value in flags.items():
        if flag in launcher:
            continue
        kind, choices = table[flag]
        assert (kind in ("store_true", "store_false")) == (value is True), (flag, kind, value)
        assert not choices or value in choices, (flag, value, choices)
    assert flags["--micro-batch-size"] == "1" and flags["--global-batch-size"] == "128" and flags["--nnodes"] == "1"


# --------------------------------------------------------------------------- trainmem's exports read back

EXPORTS = [
    ("deepspeed", "ds_config.json", dict(engine="deepspeed", zero=2, offload="optimizer", gpus=8, micro_batch=2,
                                          grad_accum=4, precision="mixed-bf16")),
    ("deepspeed", "ds_config.json", dict(engine="deepspeed", zero=3, offload="optimizer+params", gpus=8,
                                          precision="mixed-fp16")),
    ("accelerate", "accelerate_config.yaml", dict(engine="fsdp2", zero=3, gpus=8, recompute="full", precision="bf16")),
    ("accelerate", "accelerate_config.yaml", dict(engine="deepspeed", zero=2, gpus=4, micro_batch=2, grad_accum=2,
                                                  precision="mixed-bf16")),
    ("torchtitan", "torchtitan.toml", dict(engine="fsdp2", gpus=8, tp=2, micro_batch=2, recompute="selective")),
    ("torchtitan", "torchtitan.toml", dict(engine="fsdp2", gpus=8, pp=2, micro_batch=1, grad_accum=4)),
    ("torchtitan", "torchtitan.toml", dict(engine="fsdp2", gpus=16, cp=2, precision="fp8", recompute="full")),
    ("megatron", "megatron_args.sh", dict(engine="megatron", gpus=8, tp=2, pp=2, micro_batch=1, grad_accum=4, zero=1,
                                          recompute="selective", sp=True)),
    ("megatron", "megatron_args.sh", dict(engine="megatron", gpus=16, tp=4, pp=2, vpp=2, micro_batch=2, grad_accum=8,
                                          precision="fp8", fp8_params=True, zero=1, grad_reduce_16bit=True)),
]


@pytest.mark.parametrize("target,name,flags", EXPORTS, ids=lambda x: str(x))
def test_exports_read_back(tmp_path, target: str, name: str, flags: dict) -> None:
    from trainmem.export import ExportTarget, export_files

    spec, setup = build("llama-3.1-8b", **flags)
    files = export_files(spec, setup, ExportTarget(model_ref="meta-llama/Llama-3.1-8B", nodes=1,
                                                   gpus_per_node=setup.gpus), target)
    for fname, text in files.items():
        (tmp_path / fname).write_text(text)
    got = read_config(str(tmp_path / name))
    # Accelerate's YAML holds neither the micro-batch (a script argument) nor the weights' dtype (the script's)
    given = {k: flags[k] for k in ("micro_batch", "precision") if target == "accelerate" and k in flags}
    again = build("llama-3.1-8b", **merge_fields(got, given))[1]
    same = setup.model_dump(exclude={"stack", "loop", "optimizer_impl"})
    assert again.model_dump(exclude={"stack", "loop", "optimizer_impl"}) == same


# --------------------------------------------------------------------------- every torchtune recipe config

def _torchtune_recipes() -> list[tuple[str, str, Path]]:
    """(recipe, config name, YAML path) of torchtune 0.6.1's own registry (torchtune/_recipe_registry.py, run as a
    file: importing torchtune needs torchao) for its LoRA and full fine-tuning recipes."""
    import importlib.util
    import runpy
    spec = importlib.util.find_spec("recipes")
    origin = importlib.util.find_spec("torchtune") if spec is None else None
    if spec is None or origin is None and spec.submodule_search_locations is None:
        return []
    site = Path(next(iter(spec.submodule_search_locations))).parent
    registry = site / "torchtune" / "_recipe_registry.py"
    if not registry.is_file():
        return []
    out = []
    for recipe in runpy.run_path(str(registry))["_ALL_RECIPES"]:
        if recipe.name in ("lora_finetune_single_device", "lora_finetune_distributed", "full_finetune_single_device",
                           "full_finetune_distributed"):
            out += [(recipe.name, c.name, site / "recipes" / "configs" / c.file_path) for c in recipe.configs]
    return out


TORCHTUNE = _torchtune_recipes()


@pytest.mark.skipif(not TORCHTUNE, reason="torchtune's recipes are not installed (pip install --no-deps torchtune==0.6.1)")
@pytest.mark.parametrize("recipe,name,path", TORCHTUNE, ids=[c[1] for c in TORCHTUNE])
def test_every_torchtune_config(recipe: str, name: str, path: Path) -> None:
    """Each config of torchtune's LoRA/full recipes: read as its recipe runs it (single device: torch; distributed:
    FSDP2), its batch, accumulation, dtype and checkpointing as written; a builder outside the catalog is said so."""
    import yaml
    from trainmem.errors import ConfigError
    raw = yaml.safe_load(path.read_text())
    try:
        got = read_config(str(path))
    except ConfigError as e:  # a value trainmem cannot express: said in one line naming the file
        assert str(e).startswith(f"--from {path}"), e
        return
    f = got.fields
    assert f["engine"] == ("fsdp2" if recipe.endswith("distributed") else "torch"), (recipe, f)
    assert f.get("micro_batch") == raw.get("batch_size")
    assert f.get("grad_accum") == raw.get("gradient_accumulation_steps")
    assert f["precision"] == {"bf16": "bf16", "fp32": "fp32"}[raw.get("dtype", "bf16")]
    if "enable_activation_checkpointing" in raw:
        assert f["recompute"] == ("full" if raw["enable_activation_checkpointing"] else "none")
    assert (f.get("lora_rank", 0) > 0) == recipe.startswith("lora"), f
    assert got.model is not None or got.model_error.startswith("model._component_ ")


# --------------------------------------------------------------------------- litgpt's setup() defaults

def _litgpt_setup_defaults(module: str) -> dict[str, object]:
    """The defaults of ``litgpt.finetune.<module>.setup`` read from the installed source (importing litgpt needs
    lightning): the literal ones evaluated, ``TrainArgs(...)`` as its keyword values."""
    import ast
    import importlib.util
    spec = importlib.util.find_spec("litgpt")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("litgpt is not installed (pip install --no-deps litgpt==0.5.13)")
    tree = ast.parse((Path(next(iter(spec.submodule_search_locations))) / "finetune" / f"{module}.py").read_text())
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "setup")
    out: dict[str, object] = {}
    for arg, default in zip(fn.args.args[-len(fn.args.defaults):], fn.args.defaults):
        if isinstance(default, ast.Call) and getattr(default.func, "id", "") == "TrainArgs":
            out.update({f"train.{k.arg}": ast.literal_eval(k.value) for k in default.keywords})
        else:
            try:
                out[arg.arg] = ast.literal_eval(default)
            except ValueError:
                pass
    return out


@pytest.mark.parametrize("module", ["lora", "full"])
def test_litgpt_defaults_are_its_setup_defaults(tmp_path, module: str) -> None:
    """A litgpt file with nothing but the checkpoint (and, for LoRA, its rank) takes setup()'s defaults."""
    d = _litgpt_setup_defaults(module)
    path = tmp_path / "c.yaml"
    path.write_text("checkpoint_dir: checkpoints/meta-llama/Meta-Llama-3.1-8B\n"
                    + ("lora_alpha: 16\n" if module == "lora" else ""))
    f = read_config(str(path)).fields
    assert d["precision"] is None and f["precision"] == "amp-bf16"  # get_default_supported_precision: bf16-mixed
    assert d["devices"] == 1 and "gpus" not in f and f["recompute"] == "none"
    assert f["micro_batch"] == d["train.micro_batch_size"]
    assert f["grad_accum"] == d["train.global_batch_size"] // d["train.micro_batch_size"]
    assert f["optimizer"] == {"AdamW": "adamw"}[d["optimizer"]]
    if module == "lora":
        assert f["lora_rank"] == d["lora_r"]
        flags = {"lora_query": "q_proj", "lora_key": "k_proj", "lora_value": "v_proj", "lora_projection": "o_proj"}
        assert f["lora_targets"].split(",") == [v for k, v in flags.items() if d[k]]
        assert not d["lora_mlp"] and not d["lora_head"]
    else:
        assert "lora_rank" not in f


def test_activation_checkpointing_is_the_new_name(tmp_path) -> None:
    """transformers 5.24: ``activation_checkpointing`` wins over its deprecated alias ``gradient_checkpointing``."""
    from transformers import TrainingArguments
    args = TrainingArguments(output_dir=str(tmp_path), activation_checkpointing=False, gradient_checkpointing=True,
                             use_cpu=True)
    fs = read_config(_write(tmp_path / "a.json", {"output_dir": "x", "activation_checkpointing": False,
                                                   "gradient_checkpointing": True}))
    assert (fs.fields["recompute"] == "full") == args.activation_checkpointing
