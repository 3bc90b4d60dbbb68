"""DeepSpeed JSON (``ds_config.json``) → setup fields, DeepSpeed 0.19.5 (deepspeed/runtime/config.py,
runtime/constants.py, runtime/zero/config.py, runtime/zero/offload_config.py).

``"auto"`` values are what the HF integration fills from the ``TrainingArguments`` (transformers 5.24
integrations/deepspeed.py ``HfTrainerDeepSpeedConfig.trainer_config_process``): ``train_micro_batch_size_per_gpu``
← ``per_device_train_batch_size``, ``gradient_accumulation_steps`` ← ``gradient_accumulation_steps``,
``train_batch_size`` ← world size × both, ``fp16.enabled`` ← ``fp16``, ``bf16.enabled`` ← ``bf16``. A file read on
its own (not through an HF/axolotl/LLaMA-Factory config) leaves them to the command line and the defaults.

DeepSpeed without an ``optimizer`` section runs the client's optimizer (the HF Trainer's ``optim``); with one,
``Adam``/``AdamW`` is its FusedAdam (adamw), ``Lion`` its FusedLion. Buffer sizes that differ from DeepSpeed's defaults
(``reduce_bucket_size`` …) are kept at the defaults trainmem models and said so.
"""

from __future__ import annotations

from typing import Any

from trainmem.frameworks.readers._base import Reading, positive_int

__all__ = ["read_deepspeed", "is_deepspeed", "DS_DEFAULTS"]

#: zero_optimization buffer/threshold keys and their DeepSpeed 0.19.5 defaults (runtime/zero/config.py
#: ``DeepSpeedZeroConfig``): trainmem models these values; another one is stated as approximated.
DS_DEFAULTS: dict[str, Any] = {
    "reduce_bucket_size": 5e8, "allgather_bucket_size": 5e8, "stage3_prefetch_bucket_size": 5e7,
    "stage3_param_persistence_threshold": 1e5, "stage3_max_live_parameters": 1e9, "stage3_max_reuse_distance": 1e9,
    "contiguous_gradients": True, "sub_group_size": 1e9,
}
_OFFLOAD_DEVICES = ("cpu", "nvme")


def is_deepspeed(cfg: dict) -> bool:
    """A DeepSpeed config: its top-level keys (deepspeed/runtime/constants.py)."""
    return any(k in cfg for k in ("zero_optimization", "train_micro_batch_size_per_gpu", "train_batch_size")) or (
        isinstance(cfg.get("bf16"), dict) or isinstance(cfg.get("fp16"), dict))


def read_deepspeed(r: Reading, hf: dict[str, Any] | None = None, prefix: str = "") -> None:
    """Set ``r``'s fields from the DeepSpeed config at ``prefix`` (``""``: the file itself; ``"deepspeed."``: an
    inline dict). ``hf``: what the HF arguments resolve ``"auto"`` to (keys micro_batch, grad_accum, precision16
    = "bf16" | "fp16" | None)."""
    p = prefix
    src = p.rstrip(".") or "deepspeed"
    r.set("engine", "deepspeed", src)
    mb = _auto_int(r, p + "train_micro_batch_size_per_gpu", hf, "micro_batch")
    ga = _auto_int(r, p + "gradient_accumulation_steps", hf, "grad_accum")
    if mb:
        r.set("micro_batch", mb, p + "train_micro_batch_size_per_gpu")
    if ga:
        r.set("grad_accum", ga, p + "gradient_accumulation_steps")
    tb = r.get(p + "train_batch_size")
    if positive_int(tb) and mb and (ga or 1) and tb % (mb * (ga or 1)) == 0:
        r.set("gpus", tb // (mb * (ga or 1)), p + "train_batch_size / (micro-batch × accumulation)")
    elif positive_int(tb):
        raise r.refuse(f"{p}train_batch_size {tb} is not a multiple of micro-batch × accumulation")
    _precision(r, p, hf)
    _zero(r, p)
    _optimizer(r, p)
    dt = r.get(p + "data_types.grad_accum_dtype")
    if dt is not None and str(dt).lower() in ("fp32", "float32") and r.out.fields.get("precision") == "mixed-bf16":
        raise r.refuse(f"{p}data_types.grad_accum_dtype fp32 with bf16 runs DeepSpeed's BF16_Optimizer, which "
                       "trainmem does not model")
    r.use(p + "data_types.grad_accum_dtype")


def _auto_int(r: Reading, key: str, hf: dict | None, name: str) -> int | None:
    if r.get(key) == "auto":
        return (hf or {}).get(name)
    return r.int_(key)


def _precision(r: Reading, p: str, hf: dict | None) -> None:
    """bf16/fp16 ``enabled`` (DeepSpeed's default: neither, fp32); an unresolved ``"auto"`` leaves it unset."""
    state: dict[str, bool | None] = {}
    for kind in ("bf16", "fp16"):
        on = r.get(f"{p}{kind}.enabled", False)
        if on == "auto":
            on = None if hf is None else hf.get("precision16") == kind
        elif not isinstance(on, bool):
            raise r.refuse(f"{p}{kind}.enabled must be true, false or auto (got {on!r})")
        state[kind] = on
    r.use(p + "bf16", p + "fp16", p + "amp")
    if state["bf16"] and state["fp16"]:
        raise r.refuse(f"{p}bf16.enabled and {p}fp16.enabled are both true (DeepSpeed refuses it)")
    if state["bf16"]:
        r.set("precision", "mixed-bf16", p + "bf16.enabled")
    elif state["fp16"]:
        r.set("precision", "mixed-fp16", p + "fp16.enabled")
    elif None not in state.values():
        r.set("precision", "fp32", f"{p}bf16/fp16 not enabled")


def _zero(r: Reading, p: str) -> None:
    z = p + "zero_optimization"
    stage = r.get(z + ".stage", 0 if r.has(z) else None)
    if stage is not None:
        if type(stage) is not int or not 0 <= stage <= 3:
            raise r.refuse(f"{z}.stage must be 0, 1, 2 or 3 (got {stage!r})")
        r.set("zero", stage, z + ".stage")
    dev = {k: str(r.get(f"{z}.{k}.device", "none")).lower() for k in ("offload_optimizer", "offload_param")}
    if dev["offload_param"] in _OFFLOAD_DEVICES:
        if dev["offload_optimizer"] not in _OFFLOAD_DEVICES:
            raise r.refuse(f"{z}.offload_param without offload_optimizer is not modelled (trainmem's parameter "
                           "offload moves the optimizer too)")
        r.set("offload", "optimizer+params", z + ".offload_param.device")
    elif dev["offload_optimizer"] in _OFFLOAD_DEVICES:
        r.set("offload", "optimizer", z + ".offload_optimizer.device")
    r.use(z + ".offload_optimizer", z + ".offload_param", z + ".stage")
    section = r.data
    for part in z.split("."):
        section = section.get(part, {}) if isinstance(section, dict) else {}
    for k, v in (section.items() if isinstance(section, dict) else ()):
        if k not in DS_DEFAULTS:
            continue  # stage and offload read above; the others (overlap_comm, ...) change no size: ignored
        r.use(f"{z}.{k}")
        if v == "auto":
            r.out.statements.append(f"{z}.{k} auto (the HF integration fills it from hidden_size) is modelled at "
                                  f"DeepSpeed's default {DS_DEFAULTS[k]:g}")
        elif v != DS_DEFAULTS[k]:
            r.out.statements.append(f"{z}.{k} {v} is modelled at DeepSpeed's default {DS_DEFAULTS[k]:g}")


def _optimizer(r: Reading, p: str) -> None:
    kind = r.get(p + "optimizer.type")
    r.use(p + "optimizer")
    if kind is None:
        return
    k = str(kind).lower()
    if k in ("adam", "adamw", "fusedadam", "cpuadam"):
        r.set("optimizer", "adamw", p + "optimizer.type")
    elif k in ("lion", "fusedlion"):
        r.set("optimizer", "lion", p + "optimizer.type")
    else:
        raise r.refuse(f"{p}optimizer.type {kind} is not modelled (trainmem models DeepSpeed's Adam/AdamW and Lion)")
