"""Accelerate exporter: accelerate_config.yaml loaded by Accelerate 1.15.0's own loader (ClusterConfig refuses
unknown keys), merged by ``accelerate launch``'s parser and ``_validate_launch_command``, turned into the
launcher's environment and the plugin a launched job builds from it; batch arithmetic from launch.sh."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.export.cases import bash_syntax_ok, export, written
from tests.export.engines import accelerate_launch, deepspeed_config
from trainmem.api import build
from trainmem.export import can_export


def launch_batch(text: str) -> tuple[int, int]:
    """(per-device batch, accumulation) that launch.sh hands the script and Accelerator."""
    mb = int(re.search(r"--per_device_train_batch_size (\d+)", text).group(1))
    ga = int(re.search(r"ACCELERATE_GRADIENT_ACCUMULATION_STEPS=(\d+)", text).group(1))
    assert f"--gradient_accumulation_steps {ga}" in text
    return mb, ga


def test_fsdp2_pure_bf16_full_recompute(tmp_path: Path) -> None:
    """Hand-computed: 16 processes over 2 machines; micro-batch 2, accumulation 4: 2 * 4 * 16 = 128."""
    _, s, files = export("llama-3.1-8b", "accelerate", 2, 8, engine="fsdp2", precision="bf16", recompute="full",
                         micro_batch=2, grad_accum=4)
    config, args, env, plugin = accelerate_launch(written(files, tmp_path))
    assert config.distributed_type.value == "FSDP" and (config.num_processes, config.num_machines) == (16, 2)
    assert args.use_fsdp and args.mixed_precision == "no"
    assert env["FSDP_VERSION"] == "2" and env["FSDP_RESHARD_AFTER_FORWARD"] == "true"
    assert plugin.fsdp_version == 2 and plugin.reshard_after_forward is True and plugin.activation_checkpointing
    assert plugin.mixed_precision_policy is None  # fully_shard keeps the bf16 parameters' dtype
    mb, ga = launch_batch(files["launch.sh"])
    assert mb * ga * config.num_processes == s.global_batch == 128
    assert "torch_dtype=torch.bfloat16" in files["launch.sh"] and "gradient_checkpointing_enable" not in \
        files["launch.sh"].split("keep fsdp_activation_checkpointing")[0]
    bash_syntax_ok(files["launch.sh"])


def test_fsdp2_zero2_param_offload(tmp_path: Path) -> None:
    _, _, files = export("llama-3.1-8b", "accelerate", 1, 4, engine="fsdp2", zero=2, precision="fp32",
                         offload="optimizer+params")
    _, _, env, plugin = accelerate_launch(written(files, tmp_path))
    assert plugin.reshard_after_forward is False and env["FSDP_OFFLOAD_PARAMS"] == "true"
    assert type(plugin.cpu_offload).__name__ == "CPUOffloadPolicy"


def test_deepspeed_plugin_reads_the_same_ds_config(tmp_path: Path) -> None:
    _, s, files = export("llama-3.1-8b", "accelerate", 2, 8, engine="deepspeed", zero=3, offload="optimizer+params",
                         micro_batch=2, grad_accum=4)
    assert set(files) == {"accelerate_config.yaml", "launch.sh", "ds_config.json"}
    config, args, env, plugin = accelerate_launch(written(files, tmp_path))
    assert config.distributed_type.value == "DEEPSPEED" and args.use_deepspeed
    assert env["ACCELERATE_DEEPSPEED_CONFIG_FILE"] == "ds_config.json"
    assert plugin.zero_stage == 3 and plugin.gradient_accumulation_steps == 4
    assert plugin.deepspeed_config["zero_optimization"]["offload_param"]["device"] == "cpu"
    assert deepspeed_config(plugin.deepspeed_config, dp=16).train_batch_size == s.global_batch == 128


def test_ddp_and_single_gpu(tmp_path: Path) -> None:
    _, s, files = export("qwen2.5-0.5b", "accelerate", 1, 4, engine="torch", precision="amp-fp16", grad_accum=3)
    config, args, env, plugin = accelerate_launch(written(files, tmp_path / "ddp"))
    assert config.distributed_type.value == "MULTI_GPU" and args.multi_gpu and args.mixed_precision == "fp16"
    mb, ga = launch_batch(files["launch.sh"])
    assert mb * ga * config.num_processes == s.global_batch == 12 and plugin is None
    _, _, files = export("qwen2.5-0.5b", "accelerate", 1, 1, engine="torch")
    config, args, _, _ = accelerate_launch(written(files, tmp_path / "one"))
    assert config.distributed_type.value == "NO" and config.mixed_precision == "bf16"


def test_the_loader_can_fail(tmp_path: Path) -> None:
    _, _, files = export("qwen2.5-0.5b", "accelerate", 1, 2, engine="fsdp2", precision="bf16")
    out = written(files, tmp_path)
    text = (out / "accelerate_config.yaml").read_text()
    (out / "accelerate_config.yaml").write_text(text + "fsdp_versoin: 2\n")
    with pytest.raises(ValueError, match="unknown keys"):
        accelerate_launch(out)
    (out / "accelerate_config.yaml").write_text(text.replace("fsdp_state_dict_type", "fsdp_state_dict_kind"))
    with pytest.raises(AssertionError, match="not accelerate launch arguments"):
        accelerate_launch(out)


@pytest.mark.parametrize("engine, fields, why", [
    ("fsdp2", {"gpus": 8, "tp": 2}, "tp_plan"),
    ("fsdp2", {"gpus": 8}, "reduces gradients in 16 bits"),
    ("fsdp2", {"gpus": 8, "precision": "bf16", "recompute": "selective"}, "whole layers"),
    ("megatron", {"gpus": 8}, "--export megatron"),
    ("deepspeed", {"gpus": 8, "optimizer": "sgd"}, "client optimizer"),
])
def test_refusals(engine: str, fields: dict, why: str) -> None:
    _, s = build("llama-3.1-8b", engine=engine, **fields)
    assert why in can_export(s, "accelerate")
