"""The Python API (trainmem.estimate/plan/compare/doctor): equal to the CLI's --json, any model reference, a live
PEFT model read exactly, one-line errors, a light `import trainmem` and a stable public surface."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import trainmem
from trainmem.cli import main

ROOT = Path(__file__).resolve().parents[1]
OOM = ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of "
       "79.10 GiB of which 1.10 GiB is free. Including non-PyTorch memory, this process has 77.98 GiB memory in use. "
       "Of the allocated memory 76.02 GiB is allocated by PyTorch, and 1.21 GiB is reserved by PyTorch but "
       "unallocated.\n")
TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            vocab_size=256, max_position_embeddings=512)


def cli_json(args: list[str], capsys) -> dict:
    rc = main(args)
    out = capsys.readouterr()
    assert rc == 0, out.err
    return json.loads(out.out)


def flags(setup: dict) -> list[str]:
    """The command line of API keywords (snake_case → --kebab-case; True → a bare flag)."""
    out: list[str] = []
    for k, v in setup.items():
        flag = "--" + k.replace("_", "-")
        out += [flag] if v is True else [flag, ",".join(map(str, v)) if isinstance(v, (list, tuple)) else str(v)]
    return out


ESTIMATE_SETUPS = [
    ("llama-3.1-8b", {}),
    ("llama-3.1-8b", {"engine": "fsdp2", "gpus": 8, "seq_len": 4096, "micro_batch": 2, "recompute": "full"}),
    ("qwen2.5-7b", {"engine": "deepspeed", "zero": 2, "gpus": 8, "grad_accum": 4, "precision": "mixed-bf16"}),
    ("llama-3.1-8b", {"lora_rank": 16, "lora_targets": ("q_proj", "v_proj"), "qlora": True, "gpu": "a100-80gb"}),
    ("mixtral-8x7b", {"engine": "megatron", "gpus": 64, "tp": 2, "pp": 4, "ep": 4, "sp": True, "zero": 1,
                      "stage_layers": (7, 9, 9, 7)}),
    ("gpt2", {"optimizer": "sgd-momentum", "gpu_memory": "24GiB", "loop": "script"}),
]


@pytest.mark.parametrize(("model", "setup"), ESTIMATE_SETUPS)
def test_estimate_equals_the_cli(model: str, setup: dict, capsys) -> None:
    got = trainmem.estimate(model, **setup)
    assert got.to_dict() == cli_json(["estimate", model, *flags(setup), "--json"], capsys)
    assert got.peak_allocated_bytes == got.to_dict()["peak_allocated_bytes"] and got["fits"] == got.fits


def test_estimate_explain_and_max_micro_batch_equal_the_cli(capsys) -> None:
    args = ["llama-3.2-1b", "--engine", "fsdp2", "--gpus", "8"]
    assert (trainmem.estimate("llama-3.2-1b", engine="fsdp2", gpus=8, explain=True).to_dict()
            == cli_json(["estimate", *args, "--explain", "--json"], capsys))
    m = trainmem.estimate("llama-3.2-1b", engine="fsdp2", gpus=8, max_micro_batch=True)
    assert isinstance(m, trainmem.MaxMicroBatch) and m.max_micro_batch > 1
    assert m.to_dict() == cli_json(["estimate", *args, "--max-micro-batch", "--json"], capsys)


def test_compare_equals_the_cli(capsys) -> None:
    setup = {"engine": "deepspeed", "zero": 1, "gpus": 8, "micro_batch": 4}
    assert trainmem.compare("llama-3.1-8b", **setup).to_dict() == cli_json(
        ["compare", "llama-3.1-8b", *flags(setup), "--json"], capsys)


def _no_clock(d: dict) -> dict:
    return {k: v for k, v in d.items() if k != "search_seconds"}


def test_plan_equals_the_cli(capsys) -> None:
    got = trainmem.plan("llama-3.1-8b", cluster="8xH100-SXM-80G", global_batch=64, seq_len=4096, top=3,
                        fix={"engine": "fsdp2"})
    want = cli_json(["plan", "llama-3.1-8b", "--cluster", "8xH100-SXM-80G", "--global-batch", "64", "--seq-len",
                     "4096", "--top", "3", "--fix", "engine=fsdp2", "--json"], capsys)
    assert got.plans and _no_clock(got.to_dict()) == _no_clock(want)
    sized = trainmem.plan("llama-3.1-8b", min_gpus=True, gpu="RTX-4090-24G", global_batch=32)
    assert _no_clock(sized.to_dict()) == _no_clock(cli_json(
        ["plan", "llama-3.1-8b", "--min-gpus", "--gpu", "RTX-4090-24G", "--global-batch", "32", "--json"], capsys))
    assert sized.min_gpus["gpus"] >= 1 and "min_gpus" in sized.keys()


def test_doctor_equals_the_cli(tmp_path, capsys) -> None:
    err = tmp_path / "oom.txt"
    err.write_text(OOM)
    setup = {"engine": "fsdp2", "gpus": 8, "micro_batch": 4}
    got = trainmem.doctor("llama-3.1-8b", error=err, **setup)
    assert got.findings and got.to_dict() == cli_json(
        ["doctor", "llama-3.1-8b", "--error", str(err), *flags(setup), "--json"], capsys)
    # a config dict is the same run as its config.json on the command line (the file's path aside)
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(TINY | {"model_type": "llama"}))
    by_dict = json.dumps(trainmem.doctor(json.loads(cfg.read_text()), error=err).to_dict())
    by_path = json.dumps(cli_json(["doctor", str(cfg), "--error", str(err), "--json"], capsys))
    assert by_dict.replace("config dict", "") == by_path.replace(str(cfg), "").replace(str(tmp_path), "")


def test_config_dict_pretrained_config_and_path_agree(tmp_path, capsys) -> None:
    from transformers import LlamaConfig

    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(TINY | {"model_type": "llama"}))
    want = cli_json(["estimate", str(cfg), "--micro-batch", "2", "--json"], capsys)
    for ref in (json.loads(cfg.read_text()), LlamaConfig(**TINY), cfg):
        got = trainmem.estimate(ref, micro_batch=2).to_dict()
        assert json.dumps(got).replace(got["model"], "M") == json.dumps(want).replace(want["model"], "M")


def _tiny_peft(r: int = 8, targets: tuple[str, ...] = ("q_proj", "v_proj"), dtype: str = "float32", **lora: object):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**TINY)).to(getattr(torch, dtype))
    return get_peft_model(model, LoraConfig(r=r, target_modules=list(targets), **lora))


def test_live_peft_model_gives_peft_trainable_count(tmp_path, capsys) -> None:
    model = _tiny_peft()
    trainable, total = model.get_nb_trainable_parameters()
    est = trainmem.estimate(model, micro_batch=2)
    assert est.n_trainable_params == trainable
    assert est.n_params + trainable == total
    assert est.setup["lora_rank"] == 8 and est.setup["lora_targets"] == ["q_proj", "v_proj"]
    assert not [a for a in est.assumptions if a.startswith("warning")]
    # the same as the CLI given the object's config and the LoRA it holds
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(model.get_base_model().config.to_dict()))
    want = cli_json(["estimate", str(cfg), "--micro-batch", "2", "--lora-rank", "8", "--lora-targets", "q_proj,v_proj",
                     "--precision", "fp32", "--json"], capsys)
    got = est.to_dict()
    for d in (got, want):
        d.pop("model")
        d.pop("assumptions")
    assert got == want


def test_live_model_dtype_checkpointing_and_quantization_are_read() -> None:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    model = LlamaForCausalLM(LlamaConfig(**TINY)).to(torch.bfloat16)
    model.activation_checkpointing_enable()
    est = trainmem.estimate(model)
    assert est.setup["precision"] == "bf16" and est.setup["recompute"] == "full"
    assert est.n_trainable_params == est.n_params == sum(p.numel() for p in model.parameters())
    assert trainmem.estimate(model, precision="amp-bf16").setup["precision"] == "amp-bf16"  # a keyword wins
    peft = _tiny_peft(r=4, targets=("q_proj", "k_proj", "v_proj", "o_proj"), dtype="bfloat16")
    peft.get_base_model().config.quantization_config = {"quant_method": "bitsandbytes", "load_in_4bit": True}
    est = trainmem.estimate(peft)
    assert est.setup["qlora"] is True and est.setup["precision"] == "bf16" and est.setup["lora_rank"] == 4
    assert est.n_trainable_params == peft.get_nb_trainable_parameters()[0]
    # frozen parameters outside an adapter: estimated as full fine-tuning, and said so
    model.model.embed_tokens.weight.requires_grad_(False)
    assert any("trainable parameters" in a and a.startswith("warning") for a in trainmem.estimate(model).assumptions)


def test_live_model_plan_reads_lora() -> None:
    got = trainmem.plan(_tiny_peft(), cluster="1xRTX-4090-24G", global_batch=2, seq_len=256, top=1)
    assert got.plans and got.plans[0]["peak_allocated_bytes"] > 0


def test_bad_input_is_one_trainmem_error() -> None:
    import torch
    with pytest.raises(trainmem.ConfigError, match="unknown setup keyword 'seq_length'"):
        trainmem.estimate("llama-3.1-8b", seq_length=4096)
    with pytest.raises(trainmem.ConfigError, match="expected a catalog name"):
        trainmem.estimate(42)
    with pytest.raises(trainmem.UnknownModelError):
        trainmem.estimate("no-such-model-xyz")
    with pytest.raises(trainmem.UnsupportedError, match="without a transformers config"):
        trainmem.estimate(torch.nn.Linear(4, 4))
    with pytest.raises(trainmem.UnsupportedError, match="ranks differ"):
        trainmem.estimate(_tiny_peft(rank_pattern={"v_proj": 4}))
    with pytest.raises(trainmem.ConfigError, match="--global-batch is required"):
        trainmem.plan("llama-3.1-8b", cluster="8xH100-SXM-80G")
    with pytest.raises(trainmem.TrainmemError):
        trainmem.estimate("llama-3.1-8b", engine="nope")


def test_import_trainmem_is_light() -> None:
    code = ("import sys, trainmem; assert trainmem.__version__; "
            "bad = [m for m in ('torch', 'transformers', 'peft', 'pydantic', 'typer', 'rich', 'trainmem.setup') "
            "if m in sys.modules]; assert not bad, bad")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60, cwd=ROOT, env=env)
    # and an estimate by name does not pull torch either
    code = ("import sys, trainmem; trainmem.estimate('llama-3.1-8b'); assert 'torch' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60, cwd=ROOT, env=env)


def test_public_surface_is_stable() -> None:
    assert sorted(trainmem.__all__) == sorted(
        ["__version__", "estimate", "plan", "compare", "doctor", "preflight", "PreflightCallback", "Result", "Estimate",
         "MaxMicroBatch", "Plan", "Comparison", "Diagnosis", "TrainingSetup", "TrainmemError", "ConfigError",
         "UnknownModelError", "UnsupportedError"])
    for name in trainmem.__all__:
        assert getattr(trainmem, name) is not None
    import importlib
    import inspect
    search = importlib.import_module("trainmem.plan.search")  # the subpackages keep working, and stay callable
    assert callable(trainmem.plan) and callable(trainmem.doctor) and trainmem.plan.search is search
    assert sys.modules["trainmem.plan"] is trainmem.plan and trainmem.doctor.run_doctor
    assert "global_batch" in inspect.signature(trainmem.plan).parameters
    with pytest.raises(AttributeError):
        trainmem.no_such_name  # noqa: B018


def test_the_all_extra_holds_every_other_extra() -> None:
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    others = {req for name, reqs in extras.items() if name not in ("all", "dev") for req in reqs}
    assert others and set(extras["all"]) == others
