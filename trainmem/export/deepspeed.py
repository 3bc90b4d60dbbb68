"""DeepSpeed exporter: ``ds_config.json`` and ``launch.sh`` for DeepSpeed 0.19.5 (PyPI ``deepspeed==0.19.5``), the
version the memory model reads (trainmem/memory/engines/deepspeed.py).

Key names and defaults are DeepSpeed 0.19.5's: deepspeed/runtime/constants.py (batch sizes,
``gradient_clipping``), deepspeed/runtime/zero/config.py (``DeepSpeedZeroConfig``: ``stage``,
``contiguous_gradients``, ``overlap_comm``, ``reduce_scatter``, ``reduce_bucket_size``, ``allgather_partitions``,
``allgather_bucket_size``, ``stage3_prefetch_bucket_size``, ``stage3_param_persistence_threshold``,
``stage3_max_live_parameters``, ``stage3_max_reuse_distance``), deepspeed/runtime/zero/offload_config.py
(``offload_optimizer`` / ``offload_param``: ``device``, ``pin_memory``), deepspeed/runtime/precision_config.py
(``bf16`` / ``fp16`` blocks) and deepspeed/runtime/activation_checkpointing/config.py. The bucket sizes are
written out at the values the estimate assumes (the DeepSpeed defaults), so a later DeepSpeed default change
cannot silently change the run. ``data_types`` is left out: the gradient accumulation dtype is then the model's
(engine.py ``get_data_types``), so bf16 at ZeRO 0 runs FP16_Optimizer and at ZeRO 1 the ZeRO optimizer
(``_do_optimizer_sanity_check``), the paths the estimate models.

What DeepSpeed cannot run from this config, as trainmem models it: expert parallelism (DeepSpeed-MoE sets
``ep_size`` in the model code, ``deepspeed.moe.layer.MoE``), selective recomputation (HF models checkpoint whole
layers), and optimizers other than Adam, AdamW and Lion (the config's optimizer block builds FusedAdam /
FusedLion, or DeepSpeedCPUAdam / DeepSpeedCPULion when offloaded).
"""

from __future__ import annotations

import json
from typing import Any

from trainmem.export.common import ExportTarget, summary_lines
from trainmem.memory.engines.deepspeed import (DS_MAX_REUSE_DISTANCE, DS_PARAM_PERSISTENCE, DS_PREFETCH_BUCKET,
                                               DS_REDUCE_BUCKET)
from trainmem.model.spec import ModelSpec
from trainmem.setup import TrainingSetup

__all__ = ["PINNED", "DS_MAX_LIVE_PARAMETERS", "reason", "ds_config", "files", "script_requirements"]

PINNED = "DeepSpeed 0.19.5 (pip install deepspeed==0.19.5)"
#: stage3_max_live_parameters default (deepspeed/runtime/zero/config.py:238, v0.19.5), elements.
DS_MAX_LIVE_PARAMETERS = 1_000_000_000
_OPTIMIZERS = {"adamw": "AdamW", "adam": "Adam", "lion": "Lion"}


def reason(setup: TrainingSetup) -> str | None:
    """Why DeepSpeed's config cannot express this setup, or None."""
    s = setup
    if s.engine != "deepspeed":
        return f"the deepspeed exporter runs setups estimated for the deepspeed engine, not {s.engine}"
    if s.ep > 1:
        return ("DeepSpeed sets expert parallelism in the model code (deepspeed.moe.layer.MoE ep_size), "
                "not in ds_config.json; use ep 1")
    if s.recompute == "selective":
        return "DeepSpeed with HF models recomputes whole layers (gradient checkpointing); use recompute full or none"
    if s.recompute_layers is not None:
        return ("HF gradient checkpointing (--gradient_checkpointing) checkpoints every decoder layer; "
                "--recompute-layers needs the training script to wrap the first layers itself")
    if s.optimizer not in _OPTIMIZERS:
        return (f"DeepSpeed's optimizer block has Adam, AdamW and Lion; {s.optimizer} would be a client "
                "optimizer of the training script")
    return None


def _zero_block(s: TrainingSetup) -> dict[str, Any]:
    z: dict[str, Any] = {"stage": s.zero}
    if s.zero == 0:
        return z
    z.update({
        "contiguous_gradients": True,
        "overlap_comm": s.zero == 3,  # DeepSpeedZeroConfig.overlap_comm_valid: True only at stage 3
        "reduce_scatter": True,
        "reduce_bucket_size": DS_REDUCE_BUCKET,
        "allgather_partitions": True,
        "allgather_bucket_size": DS_REDUCE_BUCKET,
    })
    if s.zero == 3:
        z.update({
            "stage3_prefetch_bucket_size": DS_PREFETCH_BUCKET,
            "stage3_param_persistence_threshold": DS_PARAM_PERSISTENCE,
            "stage3_max_live_parameters": DS_MAX_LIVE_PARAMETERS,
            "stage3_max_reuse_distance": DS_MAX_REUSE_DISTANCE,
        })
    if s.offload != "none":
        z["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    if s.offload == "optimizer+params":
        z["offload_param"] = {"device": "cpu", "pin_memory": True}
    return z


def _optimizer_block(s: TrainingSetup) -> dict[str, Any]:
    """The optimizer the estimate counts states for; lr is a placeholder (memory does not depend on it)."""
    params: dict[str, Any] = {"lr": 3e-4, "weight_decay": 0.01}
    if s.optimizer == "lion":
        params["betas"] = [0.9, 0.99]
    else:
        params.update({"betas": [0.9, 0.999], "eps": 1e-8})
    if s.optimizer == "adam":
        params["adam_w_mode"] = False  # L2 Adam (FusedAdam adam_w_mode); "AdamW" is decoupled weight decay
    return {"type": _OPTIMIZERS[s.optimizer], "params": params}


def ds_config(setup: TrainingSetup) -> dict[str, Any]:
    """The DeepSpeed config of a deepspeed-engine setup (batch sizes, precision, ZeRO, optimizer)."""
    s = setup
    cfg: dict[str, Any] = {
        "train_batch_size": s.global_batch,
        "train_micro_batch_size_per_gpu": s.micro_batch,
        "gradient_accumulation_steps": s.grad_accum,
        "gradient_clipping": 1.0,
        "optimizer": _optimizer_block(s),
        "bf16": {"enabled": s.precision == "mixed-bf16"},
        "fp16": {"enabled": s.precision == "mixed-fp16"},
        "zero_optimization": _zero_block(s),
    }
    if s.precision == "mixed-fp16":
        cfg["fp16"].update({"loss_scale": 0, "initial_scale_power": 16, "loss_scale_window": 1000,
                            "hysteresis": 2, "min_loss_scale": 1})
    if s.recompute == "full":
        # read by deepspeed.checkpointing (Megatron-DeepSpeed style models); HF models checkpoint with
        # gradient_checkpointing_enable() in the script (see launch.sh)
        cfg["activation_checkpointing"] = {"partition_activations": False, "cpu_checkpointing": False,
                                           "contiguous_memory_optimization": False}
    return cfg


def script_requirements(spec: ModelSpec, setup: TrainingSetup, checkpointing: bool = True) -> list[str]:
    """What the training script itself must do to run the estimated setup (HF transformers + PEFT);
    ``checkpointing``: the script enables gradient checkpointing (False where the engine's config does)."""
    s = setup
    attn = "flash_attention_2" if s.attn == "flash" else s.attn
    first = f'load the model with attn_implementation="{attn}"'
    if s.precision in ("bf16", "fp16"):
        first += f" and torch_dtype=torch.{'bfloat16' if s.precision == 'bf16' else 'float16'} (pure 16-bit: no autocast)"
    out = [first]
    if s.recompute == "full" and checkpointing:
        out.append("checkpoint every decoder layer: model.gradient_checkpointing_enable("
                   "gradient_checkpointing_kwargs={\"use_reentrant\": False}) (HF Trainer: --gradient_checkpointing)")
    if s.is_lora:
        out.append(f"LoRA: peft.LoraConfig(r={s.lora_rank}, lora_alpha={2 * s.lora_rank}, lora_dropout=0.0, "
                   f"bias=\"none\", target_modules={list(s.lora_targets)!r})")
    if s.qlora:
        out.append("QLoRA: BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=\"nf4\", "
                   "bnb_4bit_use_double_quant=True, bnb_4bit_compute_dtype=torch.bfloat16)")
    loss = {"hf": "the model's own cross-entropy (labels passed to the model)",
            "chunked": f"a chunked cross-entropy over {s.loss_chunks} chunks (torchtune/litgpt style)",
            "fused-linear": "Liger's fused linear cross-entropy (HF Trainer: --use_liger_kernel)",
            "fused-ce": "flash-attn's cross-entropy on the 16-bit logits (flash_attn.losses.cross_entropy."
                        "CrossEntropyLoss, inplace_backward=False) in place of the model's own",
            "cce": "Apple's Cut Cross-Entropy (cut_cross_entropy.linear_cross_entropy on the final hidden state and "
                   "the head weight; axolotl's cut_cross_entropy plugin)"}[s.loss]
    out.append(f"loss: {loss}; loop {s.loop}: "
               + ("the logits are dropped before backward" if s.loop == "trainer" else
                  "the model output is kept through backward"))
    return out


def _launch(spec: ModelSpec, setup: TrainingSetup, target: ExportTarget) -> str:
    s = setup
    head = ["#!/usr/bin/env bash", *[f"# {x}" for x in summary_lines(spec, setup, target, PINNED)],
            "# The training script must:", *[f"#  - {x}" for x in script_requirements(spec, setup)]]
    hosts = ' --hostfile "${HOSTFILE:-hostfile}"' if target.nodes > 1 else ""
    run = (f"deepspeed --num_nodes {target.nodes} --num_gpus {target.gpus_per_node}{hosts} "
           '"${TRAIN_SCRIPT:-train.py}" --deepspeed ds_config.json "$@"')
    hf = (f"# deepspeed --num_nodes {target.nodes} --num_gpus {target.gpus_per_node}{hosts} train.py "
          f"--deepspeed ds_config.json --model_name_or_path {target.model_ref} "
          f"--per_device_train_batch_size {s.micro_batch} --gradient_accumulation_steps {s.grad_accum} "
          f"--max_grad_norm 1.0"
          + {"mixed-bf16": " --bf16", "mixed-fp16": " --fp16"}.get(str(s.precision), "")
          + (" --gradient_checkpointing" if s.recompute == "full" else "")
          + (" --use_liger_kernel" if s.loss == "fused-linear" else ""))
    return "\n".join([*head, "set -euo pipefail", 'cd "$(dirname "$0")"', run, "",
                      "# The HF Trainer / Accelerate variant (transformers.Trainer reads the same ds_config.json;",
                      "# its batch and precision flags must match the file):", hf]) + "\n"


def files(spec: ModelSpec, setup: TrainingSetup, target: ExportTarget) -> dict[str, str]:
    return {"ds_config.json": json.dumps(ds_config(setup), indent=2) + "\n",
            "launch.sh": _launch(spec, setup, target)}

