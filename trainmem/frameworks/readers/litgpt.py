"""litgpt YAML (``litgpt finetune lora|full --config FILE``) → setup fields, litgpt v0.5.13 (litgpt/finetune/lora.py,
full.py ``setup``; litgpt/args.py ``TrainArgs``; litgpt/utils.py ``get_default_supported_precision``).

A file with ``lora_*`` keys is ``finetune lora`` (defaults ``lora_r`` 8, ``lora_query`` and ``lora_value`` on), else
``finetune full``. Both default to ``train.global_batch_size`` 16 and ``train.micro_batch_size`` 1; accumulation =
global batch ÷ (devices × num_nodes) ÷ micro-batch (``TrainArgs.gradient_accumulation_iters``). ``precision``:
``bf16-true`` = the pure bf16 recipe, ``bf16-mixed`` = autocast over fp32 weights, ``32-true`` = fp32, default
``bf16-mixed`` on bf16 GPUs. ``quantize: bnb.nf4``/``bnb.nf4-dq`` is QLoRA (one device only). On several devices
LoRA runs ``ModelParallelStrategy`` with FSDP2 ``fully_shard`` per Block and a checkpoint wrapper on every Block
(``parallelize_fn(activation_checkpointing=True)``); full fine-tuning ``FSDPStrategy`` with
``activation_checkpointing_policy={Block}``: fsdp2, ZeRO-3, full recompute. LoRA module flags → PEFT names
(litgpt's fused ``attn`` QKV slices count as the separate projections): ``lora_query`` q_proj, ``lora_key``
k_proj, ``lora_value`` v_proj, ``lora_projection`` o_proj, ``lora_mlp`` gate/up/down_proj, ``lora_head`` lm_head.
"""

from __future__ import annotations

from pathlib import Path

from trainmem.frameworks.readers._base import Reading

__all__ = ["read_litgpt", "is_litgpt"]

_WHO = "litgpt 0.5.13"
_PRECISION = {"bf16-true": "bf16", "bf16-mixed": "amp-bf16", "32-true": "fp32", "16-mixed": "amp-fp16", "16-true": "fp16"}
_FLAGS = (("lora_query", True, ("q_proj",)), ("lora_key", False, ("k_proj",)), ("lora_value", True, ("v_proj",)),
          ("lora_projection", False, ("o_proj",)), ("lora_mlp", False, ("gate_proj", "up_proj", "down_proj")),
          ("lora_head", False, ("lm_head",)))


def is_litgpt(cfg: dict) -> bool:
    train = cfg.get("train")
    return "checkpoint_dir" in cfg or (isinstance(train, dict) and "micro_batch_size" in train and "precision" in cfg)


def read_litgpt(r: Reading, base: Path) -> None:
    ckpt = r.get("checkpoint_dir")
    if ckpt is not None:
        path = Path(str(ckpt)).expanduser()
        path = path if path.is_absolute() else base / path
        parts = Path(str(ckpt)).parts
        ref = str(path) if (path / "config.json").is_file() else "/".join(parts[-2:])
        r.model(ref, "checkpoint_dir")
    lora = any(k.startswith("lora_") for k in r.data)
    devices = _devices(r)
    mb = r.int_or_default("micro_batch", "train.micro_batch_size", 1, f"{_WHO} finetune: train.micro_batch_size=1")
    gb = r.int_("train.global_batch_size") or 16
    per_rank = gb // devices
    if per_rank < mb or per_rank % mb:
        raise r.refuse(f"train.global_batch_size {gb} / {devices} devices is not a multiple of "
                       f"train.micro_batch_size {mb} (litgpt asserts gradient_accumulation_iters > 0)")
    src = "train.global_batch_size" if r.has("train.global_batch_size") else f"{_WHO}: global_batch_size=16"
    r.set("grad_accum", per_rank // mb, f"{src} / devices / micro-batch")
    n = r.int_("train.max_seq_length")
    if n:
        r.set("seq_len", n, "train.max_seq_length")
    _precision(r)
    if lora:
        _lora(r)
    if devices == 1:
        r.default("recompute", "none", f"{_WHO}: no activation checkpointing on one device")
    if devices > 1:
        if r.get("quantize"):
            raise r.refuse("quantize on several devices: litgpt supports quantization on one device only")
        r.set("engine", "fsdp2", "devices > 1 (FSDP, a fully_shard unit per Block)")
        r.set("zero", 3, "devices > 1 (FSDP full sharding)")
        r.set("recompute", "full", "devices > 1 (litgpt checkpoints every Block)")
    _optimizer(r)
    r.use("precision", "quantize", "devices", "num_nodes", "checkpoint_dir")


def _devices(r: Reading) -> int:
    devices = r.get("devices", 1)
    if devices in ("auto", -1):
        raise r.refuse("devices auto: give the number of GPUs (devices: N)")
    if not isinstance(devices, int) or isinstance(devices, bool) or devices < 1:
        raise r.refuse(f"devices must be a positive integer (got {devices!r})")
    nodes = r.int_("num_nodes") or 1
    if devices * nodes > 1:
        r.set("gpus", devices * nodes, "devices × num_nodes")
    return devices * nodes


def _precision(r: Reading) -> None:
    p = r.get("precision")
    quant = r.get("quantize")
    if quant is not None:
        if str(quant) not in ("bnb.nf4", "bnb.nf4-dq"):
            raise r.refuse(f"quantize {quant}: trainmem models NF4 (bnb.nf4, bnb.nf4-dq)")
        if p is None or "mixed" in str(p):
            raise r.refuse("quantize with a -mixed precision (bf16-mixed is the default): litgpt refuses it; "
                           "set precision: bf16-true")
        r.set("qlora", True, "quantize")
    if p is None:
        r.default("precision", "amp-bf16", f"{_WHO}: bf16-mixed on bf16 GPUs")
        return
    if str(p) not in _PRECISION:
        raise r.refuse(f"precision {p}: one of {', '.join(_PRECISION)}")
    r.set("precision", _PRECISION[str(p)], "precision")


def _lora(r: Reading) -> None:
    rank = r.int_("lora_r")
    r.lora_dropout("lora_dropout")
    if rank:
        r.set("lora_rank", rank, "lora_r")
    else:
        r.default("lora_rank", 8, f"{_WHO} finetune lora: lora_r=8")
    targets: list[str] = []
    for key, default, names in _FLAGS:
        if r.bool_(key, default):
            targets.extend(names)
    if not targets:
        raise r.refuse("LoRA on no module: every lora_query/key/value/projection/mlp/head is false")
    r.set("lora_targets", ",".join(targets), "lora_query/key/value/projection/mlp/head")


def _optimizer(r: Reading) -> None:
    opt = r.get("optimizer", "AdamW")
    r.use("optimizer")
    name = opt if isinstance(opt, str) else (opt.get("class_path") if isinstance(opt, dict) else None)
    short = str(name).rsplit(".", 1)[-1]
    table = {"AdamW": "adamw", "Adam": "adam", "SGD": "sgd"}
    if short not in table:
        raise r.refuse(f"optimizer {name} is not modelled (AdamW, Adam, SGD)")
    (r.set if r.has("optimizer") else r.default)("optimizer", table[short],
                                                 "optimizer" if r.has("optimizer") else f"{_WHO}: optimizer=AdamW")
