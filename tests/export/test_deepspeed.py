"""DeepSpeed exporter: ds_config.json read by DeepSpeed 0.19.5's own DeepSpeedConfig (batch arithmetic with the
data-parallel world size, the ZeRO block through its pydantic model, which refuses unknown keys), with the values
the estimate assumes (trainmem/memory/engines/deepspeed.py)."""

from __future__ import annotations

import json

import pytest

from tests.export.cases import bash_syntax_ok, export
from tests.export.engines import deepspeed_config
from trainmem.memory.engines.deepspeed import DS_MAX_REUSE_DISTANCE, DS_REDUCE_BUCKET


def test_zero3_offload_two_nodes() -> None:
    """Hand-computed: 2 nodes x 8 GPUs, micro-batch 2, accumulation 4: train_batch_size 2 * 4 * 16 = 128."""
    _, s, files = export("llama-3.1-8b", "deepspeed", 2, 8, engine="deepspeed", zero=3, offload="optimizer+params",
                         micro_batch=2, grad_accum=4, recompute="full")
    raw = json.loads(files["ds_config.json"])
    assert (raw["train_batch_size"], raw["train_micro_batch_size_per_gpu"], raw["gradient_accumulation_steps"]) == \
        (128, 2, 4)
    c = deepspeed_config(raw, dp=16)
    assert (c.train_batch_size, c.train_micro_batch_size_per_gpu, c.gradient_accumulation_steps) == (128, 2, 4)
    z = c.zero_config
    assert c.zero_optimization_stage == 3 and c.bfloat16_config.enabled and not c.float16_config.enabled
    assert z.reduce_bucket_size == z.allgather_bucket_size == DS_REDUCE_BUCKET == 500_000_000
    assert z.prefetch_bucket_size == 50_000_000 and z.param_persistence_threshold == 100_000
    assert z.max_reuse_distance == DS_MAX_REUSE_DISTANCE and z.max_live_parameters == 1_000_000_000
    assert z.overlap_comm is True and z.contiguous_gradients is True
    assert z.offload_optimizer.device == "cpu" and z.offload_optimizer.pin_memory
    assert z.offload_param.device == "cpu" and z.offload_param.pin_memory
    assert c.optimizer_name == "adamw" and c.gradient_clipping == 1.0
    assert "activation_checkpointing" in raw
    launch = files["launch.sh"]
    assert 'deepspeed --num_nodes 2 --num_gpus 8 --hostfile "${HOSTFILE:-hostfile}"' in launch
    assert "--deepspeed ds_config.json" in launch and "--gradient_checkpointing" in launch
    bash_syntax_ok(launch)


def test_the_world_size_is_checked() -> None:
    """The same file under another data-parallel size fails DeepSpeed's batch assertion (the check can fail)."""
    _, _, files = export("llama-3.1-8b", "deepspeed", 1, 8, engine="deepspeed", zero=2, micro_batch=4, grad_accum=2)
    deepspeed_config(json.loads(files["ds_config.json"]), dp=8)
    with pytest.raises(AssertionError, match="train_batch_size"):
        deepspeed_config(json.loads(files["ds_config.json"]), dp=4)


def test_zero2_fp16_optimizer_offload() -> None:
    _, _, files = export("llama-2-7b", "deepspeed", 1, 4, engine="deepspeed", zero=2, offload="optimizer",
                         precision="mixed-fp16", micro_batch=1, grad_accum=16)
    c = deepspeed_config(json.loads(files["ds_config.json"]), dp=4)
    z = c.zero_config
    assert c.zero_optimization_stage == 2 and c.float16_config.enabled and not c.bfloat16_config.enabled
    assert c.float16_config.loss_scale == 0  # dynamic loss scaling
    assert z.overlap_comm is False and z.offload_optimizer.device == "cpu" and z.offload_param is None
    assert c.train_batch_size == 64 and "--fp16" in files["launch.sh"]
    assert "--hostfile" not in files["launch.sh"]


def test_zero0_fp32_lion() -> None:
    _, _, files = export("qwen2.5-0.5b", "deepspeed", 1, 2, engine="deepspeed", precision="fp32", optimizer="lion",
                         micro_batch=3, grad_accum=5)
    raw = json.loads(files["ds_config.json"])
    assert raw["zero_optimization"] == {"stage": 0} and "activation_checkpointing" not in raw
    assert "data_types" not in raw  # grad accumulation in the model dtype: the optimizer paths estimated
    c = deepspeed_config(raw, dp=2)
    assert not c.zero_enabled and not c.bfloat16_config.enabled and not c.float16_config.enabled
    assert c.optimizer_name == "lion" and c.train_batch_size == 30


def test_lora_setup_says_what_the_script_does() -> None:
    _, _, files = export("llama-3.1-8b", "deepspeed", 1, 8, engine="deepspeed", zero=3, lora_rank=16,
                         lora_targets="q_proj,v_proj")
    assert "peft.LoraConfig(r=16" in files["launch.sh"] and "['q_proj', 'v_proj']" in files["launch.sh"]
