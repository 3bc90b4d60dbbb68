"""Accelerate YAML (``accelerate launch --config_file FILE``) → setup fields, Accelerate 1.15.0
(accelerate/commands/config/config_args.py ``ClusterConfig``; commands/launch.py; utils/dataclasses.py
``FullyShardedDataParallelPlugin``, ``DeepSpeedPlugin``).

``distributed_type`` NO / MULTI_GPU (DDP: torch), FSDP (fsdp2; ``fsdp_reshard_after_forward`` true or v1's
``fsdp_sharding_strategy`` FULL_SHARD = ZeRO-3, else ZeRO-2; ``fsdp_offload_params`` = CPUOffloadPolicy;
``fsdp_activation_checkpointing`` = full recompute), DEEPSPEED (``deepspeed_config``: ``zero_stage``,
``offload_optimizer_device``, ``offload_param_device``, ``gradient_accumulation_steps``, or
``deepspeed_config_file`` read relative to this file). ``mixed_precision`` bf16/fp16 is torch.autocast (amp-*);
under FSDP it is the MixedPrecisionPolicy, which gathers and reduces in bf16: the bf16 recipe, as trainmem's
Accelerate exporter writes it. ``num_processes`` × … is the world size.
"""

from __future__ import annotations

from pathlib import Path

from trainmem.frameworks.readers._base import Reading, load_text, parse_mapping
from trainmem.frameworks.readers.deepspeed import read_deepspeed

__all__ = ["read_accelerate", "is_accelerate"]



def is_accelerate(cfg: dict) -> bool:
    return "distributed_type" in cfg or "compute_environment" in cfg


def read_accelerate(r: Reading, base: Path) -> None:
    kind = str(r.get("distributed_type", "NO")).upper()
    n = r.int_("num_processes")
    if n:
        r.set("gpus", n, "num_processes")
    mp = str(r.get("mixed_precision", "no")).lower()
    if mp not in ("no", "bf16", "fp16", "fp8"):
        raise r.refuse(f"mixed_precision {mp}: one of no, bf16, fp16, fp8")
    if mp == "fp8":
        raise r.refuse("mixed_precision fp8 under Accelerate is not modelled; use bf16")
    if kind in ("NO", "MULTI_GPU"):
        r.set("engine", "torch", f"distributed_type {kind}")
        if mp == "no":
            r.default("precision", "fp32", "mixed_precision no: no autocast, fp32 weights unless the script loads "
                                           "them in bf16 (then give --precision bf16)")
        else:
            r.set("precision", f"amp-{mp}", "mixed_precision")
    elif kind == "FSDP":
        _fsdp(r, mp)
    elif kind == "DEEPSPEED":
        _deepspeed(r, base, mp)
    else:
        raise r.refuse(f"distributed_type {kind}: trainmem models NO, MULTI_GPU, FSDP and DEEPSPEED")


def _fsdp(r: Reading, mp: str) -> None:
    f = "fsdp_config."
    reshard = r.get(f + "fsdp_reshard_after_forward", r.get(f + "fsdp_sharding_strategy", True))
    text = str(reshard).upper()
    if text in ("HYBRID_SHARD", "HYBRID_SHARD_ZERO2", "4", "5", "NO_SHARD", "3"):
        raise r.refuse(f"fsdp_config sharding {reshard}: trainmem models full sharding and SHARD_GRAD_OP")
    zero = 3 if reshard is True or text in ("FULL_SHARD", "1", "TRUE") else 2
    r.set("engine", "fsdp2", "distributed_type FSDP")
    r.set("zero", zero, "fsdp_config.fsdp_reshard_after_forward")
    if r.bool_(f + "fsdp_offload_params"):
        r.set("offload", "optimizer+params", "fsdp_config.fsdp_offload_params")
    if r.bool_(f + "fsdp_activation_checkpointing"):
        r.set("recompute", "full", "fsdp_config.fsdp_activation_checkpointing")
    if mp == "bf16":
        r.set("precision", "bf16", "mixed_precision bf16 (FSDP MixedPrecisionPolicy: bf16 gathers and reduction)")
    elif mp == "fp16":
        r.set("precision", "amp-fp16", "mixed_precision fp16")
    else:
        r.default("precision", "fp32", "mixed_precision no: no autocast, fp32 weights unless the script loads them in "
                                       "bf16 (then give --precision bf16)")


def _deepspeed(r: Reading, base: Path, mp: str) -> None:
    d = "deepspeed_config."
    file = r.get(d + "deepspeed_config_file")
    hf = {"precision16": mp if mp in ("bf16", "fp16") else None}
    if file:
        path = Path(str(file)).expanduser()
        path = path if path.is_absolute() else base / path
        if not path.is_file():
            raise r.refuse(f"deepspeed_config.deepspeed_config_file {file}: no such file (read relative to {base})")
        sub = Reading(str(path), "deepspeed", r.out.fields["stack"], parse_mapping(load_text(str(path)), str(path), "json"))
        read_deepspeed(sub, hf)
        r.absorb(sub.finish(), skip=("gpus",))
        r.use("deepspeed_config")
        return
    r.set("engine", "deepspeed", "distributed_type DEEPSPEED")
    r.set("precision", {"bf16": "mixed-bf16", "fp16": "mixed-fp16"}.get(mp, "fp32"), "mixed_precision")
    stage = r.get(d + "zero_stage")
    if stage is not None:
        if type(stage) is not int or not 0 <= stage <= 3:
            raise r.refuse(f"deepspeed_config.zero_stage must be 0-3 (got {stage!r})")
        r.set("zero", stage, "deepspeed_config.zero_stage")
    dev = {k: str(r.get(d + k, "none")).lower() for k in ("offload_param_device", "offload_optimizer_device")}
    if dev["offload_param_device"] in ("cpu", "nvme"):
        r.set("offload", "optimizer+params", "deepspeed_config.offload_param_device")
    elif dev["offload_optimizer_device"] in ("cpu", "nvme"):
        r.set("offload", "optimizer", "deepspeed_config.offload_optimizer_device")
    ga = r.int_(d + "gradient_accumulation_steps")
    if ga:
        r.set("grad_accum", ga, "deepspeed_config.gradient_accumulation_steps")
    r.use(d + "zero3_init_flag", d + "zero3_save_16bit_model", d + "deepspeed_multinode_launcher",
          d + "gradient_clipping")
