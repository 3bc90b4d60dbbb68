"""Accelerate exporter: ``accelerate_config.yaml`` and ``launch.sh`` (``accelerate launch --config_file …``) for
Accelerate 1.15.0 (PyPI ``accelerate==1.15.0``), plus ``ds_config.json`` for its DeepSpeed plugin.

Keys are those of Accelerate 1.15.0's ``accelerate/commands/config/config_args.py`` (``ClusterConfig``:
compute_environment, distributed_type, num_machines, num_processes, machine_rank, mixed_precision, fsdp_config,
deepspeed_config, …) and, inside ``fsdp_config`` / ``deepspeed_config``, names of ``accelerate launch`` arguments
(accelerate/commands/launch.py: fsdp_version, fsdp_reshard_after_forward, fsdp_offload_params,
fsdp_activation_checkpointing, fsdp_auto_wrap_policy, fsdp_state_dict_type; deepspeed_config_file,
zero3_init_flag, deepspeed_multinode_launcher), which ``_validate_launch_command`` copies onto the launch args.

Mapping: fsdp2 → ``distributed_type: FSDP`` with ``fsdp_version: 2`` (zero 3/2 = ``fsdp_reshard_after_forward``
true/false; ``fsdp_offload_params`` = CPUOffloadPolicy; full recompute = ``fsdp_activation_checkpointing``, a
checkpoint wrapper on every transformer layer); deepspeed → ``distributed_type: DEEPSPEED`` reading the same
``ds_config.json`` as the DeepSpeed exporter (bucket sizes and all, through ``deepspeed_config_file``); torch →
``MULTI_GPU`` (DDP) or ``NO`` on one GPU, amp recipes as ``mixed_precision`` (torch.autocast, GradScaler for fp16).
Gradient accumulation reaches ``Accelerator`` as ``ACCELERATE_GRADIENT_ACCUMULATION_STEPS`` (accelerator.py).

What Accelerate cannot run as estimated: tensor, pipeline, context and expert parallelism (no pipeline in its
config; its parallelism_config TP/CP follow transformers' tp_plan, not the torchtitan plan estimated), the
autocast recipes under FSDP2 (``mixed_precision: bf16`` makes MixedPrecisionPolicy reduce in bf16,
utils/dataclasses.py ``FullyShardedDataParallelPlugin.set_mixed_precision``, while the estimate reduces in fp32;
the pure bf16 recipe runs), selective recomputation (per-layer checkpointing only), and the megatron engine (use
the megatron exporter).
"""

from __future__ import annotations

from typing import Any

from trainmem.export import deepspeed as ds
from trainmem.export.common import ExportTarget, comment_block, summary_lines, yaml_text
from trainmem.model.spec import ModelSpec
from trainmem.setup import TrainingSetup

__all__ = ["PINNED", "reason", "accelerate_config", "files"]

PINNED = "Accelerate 1.15.0 (pip install accelerate==1.15.0)"
_AMP = {"amp-bf16": "bf16", "amp-fp16": "fp16"}


def reason(setup: TrainingSetup) -> str | None:
    """Why Accelerate's config cannot express this setup as estimated, or None."""
    s = setup
    if s.engine == "megatron":
        return "Accelerate's Megatron-LM plugin is not exported; use --export megatron"
    if s.engine == "deepspeed":
        return ds.reason(s)
    if (s.tp, s.pp, s.cp, s.ep) != (1, 1, 1, 1):
        return "Accelerate's config has no pipeline parallelism and its TP/CP follow transformers' tp_plan, not " \
               "the torchtitan plan estimated; use --export torchtitan"
    if s.recompute == "selective":
        return "Accelerate checkpoints whole layers only; use recompute full or none"
    if s.recompute_layers is not None:
        return ("Accelerate's activation checkpointing wraps every decoder layer; --recompute-layers is not "
                "expressible (use --export megatron, or recompute full)")
    if s.engine == "fsdp2" and s.precision in ("amp-bf16", "amp-fp16", "fp8"):
        return "Accelerate's FSDP2 mixed precision reduces gradients in 16 bits, the estimate in fp32; use " \
               "--precision bf16 or fp32, or --export torchtitan"
    return None


def _mixed_precision(s: TrainingSetup) -> str:
    """torch.autocast recipes; "no" for fp32 and the pure 16-bit recipes (the script loads the model in 16 bits)."""
    return _AMP.get(str(s.precision), "no")


def accelerate_config(setup: TrainingSetup, target: ExportTarget) -> dict[str, Any]:
    """The ClusterConfig mapping of ``accelerate_config.yaml``."""
    s = setup
    kind = {"fsdp2": "FSDP", "deepspeed": "DEEPSPEED"}.get(s.engine, "MULTI_GPU" if s.gpus > 1 else "NO")
    cfg: dict[str, Any] = {
        "compute_environment": "LOCAL_MACHINE", "distributed_type": kind, "num_machines": target.nodes,
        "num_processes": target.world_size, "machine_rank": 0, "main_training_function": "main",
        "mixed_precision": _mixed_precision(s), "use_cpu": False, "debug": False, "gpu_ids": "all",
        "rdzv_backend": "static", "same_network": True,
    }
    if kind == "DEEPSPEED":
        # with deepspeed_config_file the precision comes from ds_config.json alone: a mixed_precision key would
        # be refused (DeepSpeedPlugin._deepspeed_config_checks), as `accelerate config` leaves it unset
        del cfg["mixed_precision"]
    if kind == "FSDP":
        cfg["fsdp_config"] = {
            "fsdp_version": 2, "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
            "fsdp_reshard_after_forward": s.zero == 3, "fsdp_offload_params": s.offload == "optimizer+params",
            "fsdp_activation_checkpointing": s.recompute == "full", "fsdp_state_dict_type": "SHARDED_STATE_DICT",
            "fsdp_cpu_ram_efficient_loading": False,
        }
    elif kind == "DEEPSPEED":
        cfg["deepspeed_config"] = {"deepspeed_config_file": "ds_config.json", "zero3_init_flag": s.zero == 3}
        if target.nodes > 1:
            cfg["deepspeed_config"]["deepspeed_multinode_launcher"] = "standard"
    return cfg


def _launch(spec: ModelSpec, setup: TrainingSetup, target: ExportTarget) -> str:
    s = setup
    lines = ["#!/usr/bin/env bash", comment_block(summary_lines(spec, setup, target, PINNED)).rstrip("\n"),
             "# The training script (Accelerator or transformers.Trainer) must:",
             *[f"#  - {x}" for x in ds.script_requirements(spec, setup, s.engine != "fsdp2")]]
    if s.engine == "fsdp2":
        lines.append("#  - keep fsdp_activation_checkpointing as the only checkpointing (no "
                     "gradient_checkpointing_enable())" if s.recompute == "full" else
                     "#  - not enable gradient checkpointing")
    lines += ["set -euo pipefail", 'cd "$(dirname "$0")"',
              f"export ACCELERATE_GRADIENT_ACCUMULATION_STEPS={s.grad_accum}"]
    multi = (' --machine_rank "${NODE_RANK:?set NODE_RANK}" --main_process_ip "${MASTER_ADDR:?set MASTER_ADDR}"'
             ' --main_process_port "${MASTER_PORT:-29500}"') if target.nodes > 1 else ""
    lines.append(f'accelerate launch --config_file accelerate_config.yaml{multi} "${{TRAIN_SCRIPT:-train.py}}" '
                 f"--model_name_or_path {target.model_ref} --per_device_train_batch_size {s.micro_batch} "
                 f'--gradient_accumulation_steps {s.grad_accum} --max_seq_length {s.seq_len} "$@"')
    return "\n".join(lines) + "\n"


def files(spec: ModelSpec, setup: TrainingSetup, target: ExportTarget) -> dict[str, str]:
    header = comment_block(summary_lines(spec, setup, target, PINNED))
    out = {"accelerate_config.yaml": yaml_text(accelerate_config(setup, target), header),
           "launch.sh": _launch(spec, setup, target)}
    if setup.engine == "deepspeed":
        out["ds_config.json"] = ds.files(spec, setup, target)["ds_config.json"]
    return out
