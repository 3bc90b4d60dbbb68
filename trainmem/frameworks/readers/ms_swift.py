"""ms-swift ``swift sft`` configs (JSON or YAML) → setup fields, ms-swift v4.5.2 (ff5128777, the release of
``--stack ms-swift`` too; the memory defaults are also v4.4.3's: ``git diff v4.4.3 v4.5.2 -- swift/arguments
swift/trainers/arguments.py`` changes no default read here).

``swift sft FILE.yaml`` (or ``.json``): swift/cli/main.py ``parse_yaml_args`` turns each key into ``--key value``
(a list into several values, an ``ENV`` mapping into environment variables) for ``SftArguments``
(swift/arguments/sft_args.py: ``TunerArguments``, ``BaseArguments``, ``Seq2SeqTrainingArguments`` and
swift/trainers/arguments.py ``TrainArgumentsMixin``). ms-swift 3.x's ``train_type`` is read as v4's ``tuner_type``.

Defaults for what the file leaves out: ``tuner_type`` lora, ``lora_rank`` 8, ``lora_dropout`` 0.05,
``target_modules ['all-linear']`` (tuner_args.py; swift/pipelines/train/tuner.py ``get_target_modules``: every
linear but the LM head, of the language model only on a multimodal model with ``freeze_vit`` / ``freeze_aligner``
true, their defaults), ``per_device_train_batch_size`` 1, ``gradient_accumulation_steps`` ceil(16 / micro-batch /
world size), ``gradient_checkpointing`` True, ``optim`` adamw_torch_fused (TrainingArguments). ``max_length`` unset
is the model's ``max_model_len`` (base_args.py): refused unless ``--seq-len`` is given.

Precision (base_args/model_args.py ``_init_mixed_precision``): the model is loaded in ``torch_dtype`` (None: the
checkpoint's config.json dtype, bfloat16 assumed); bf16 weights train with ``bf16`` autocast (the pure bf16 recipe),
float32 weights with ``fp16`` autocast (amp-fp16), float16 weights with fp16 (LoRA only: the HF Trainer's GradScaler
refuses fp16 gradients); ``bf16`` / ``fp16`` in the file override those. LoRA adapters are PEFT's fp32 unless
``lora_dtype`` bfloat16. ``deepspeed: zero0 … zero3_offload`` are the JSONs ms-swift ships (swift/config/*.json,
below), ``fsdp: fsdp2`` its swift/config/fsdp2.json (full_shard, activation_checkpointing).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from trainmem.frameworks.readers._base import Reading, load_text, parse_mapping
from trainmem.frameworks.readers.deepspeed import read_deepspeed
from trainmem.frameworks.readers.hf import hf_deepspeed, hf_fsdp, hf_optim
from trainmem.frameworks.readers.peft_regex import check_regex

__all__ = ["read_ms_swift", "is_ms_swift", "SWIFT_DEEPSPEED", "SWIFT_FSDP2"]

_WHO = "ms-swift 4.5.2"
_KEYS = ("tuner_type", "train_type", "target_modules", "target_regex", "attn_impl", "quant_method", "quant_bits",
         "freeze_vit", "freeze_aligner", "freeze_llm", "model_author", "split_dataset_ratio", "tuner_backend",
         "torch_dtype", "max_length", "lora_rank", "dataset")


def _zero_section(stage: int, offload: bool) -> dict[str, Any]:
    device = "cpu" if offload else "none"
    if stage < 3:
        out: dict[str, Any] = {"stage": stage}
        if stage:
            out["offload_optimizer"] = {"device": device, "pin_memory": True}
        return {**out, "allgather_partitions": True, "allgather_bucket_size": 2e8, "overlap_comm": False,
                "reduce_scatter": True, "reduce_bucket_size": 2e8, "contiguous_gradients": True}
    out = {"stage": 3, "offload_optimizer": {"device": device, "pin_memory": True},
           "offload_param": {"device": device, "pin_memory": True}, "overlap_comm": False,
           "contiguous_gradients": True, "sub_group_size": 1e9, "reduce_bucket_size": "auto"}
    if not offload:
        out.update({"zero_quantized_weights": False, "zero_quantized_gradients": False})
    return {**out, "stage3_prefetch_bucket_size": "auto", "stage3_param_persistence_threshold": "auto",
            "stage3_max_live_parameters": 1e9, "stage3_max_reuse_distance": 1e9,
            "stage3_gather_16bit_weights_on_model_save": True}


def _ds(stage: int, offload: bool = False) -> dict[str, Any]:
    return {"fp16": {"enabled": "auto", "loss_scale": 0, "loss_scale_window": 1000, "initial_scale_power": 16,
                     "hysteresis": 2, "min_loss_scale": 1},
            "bf16": {"enabled": "auto"}, "zero_optimization": _zero_section(stage, offload),
            "gradient_accumulation_steps": "auto", "gradient_clipping": "auto", "steps_per_print": 2000,
            "train_batch_size": "auto", "train_micro_batch_size_per_gpu": "auto", "wall_clock_breakdown": False}


#: ``deepspeed: NAME`` → the JSON ms-swift ships (swift/config/NAME.json, v4.5.2; sft_args.py ``_init_deepspeed``).
SWIFT_DEEPSPEED: dict[str, dict[str, Any]] = {
    "zero0": _ds(0), "zero1": _ds(1), "zero2": _ds(2), "zero3": _ds(3),
    "zero2_offload": _ds(2, True), "zero3_offload": _ds(3, True)}
#: ``fsdp: fsdp2`` → swift/config/fsdp2.json's ``fsdp`` and ``fsdp_config`` (v4.5.2; sft_args.py ``_init_fsdp``).
SWIFT_FSDP2: dict[str, Any] = {
    "fsdp": "full_shard auto_wrap",
    "fsdp_config": {"fsdp_version": 2, "reshard_after_forward": True, "auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
                    "cpu_ram_efficient_loading": True, "state_dict_type": "SHARDED_STATE_DICT",
                    "activation_checkpointing": True}}


def is_ms_swift(cfg: dict) -> bool:
    """A ``swift sft`` file: ``tuner_type`` / ``train_type``, or the model as a string under ``model`` (torchtune's is
    a mapping; HF/TRL/LLaMA-Factory say ``model_name_or_path``) with one of ms-swift's argument names."""
    if "tuner_type" in cfg or "train_type" in cfg:
        return True
    return isinstance(cfg.get("model"), str) and any(k in cfg for k in _KEYS)


def read_ms_swift(r: Reading, base: Path) -> None:
    if r.has("model"):
        r.model(str(r.get("model")), "model")
    world = _world(r)
    kind = _tuner(r)
    _lengths(r)
    mb = r.int_or_default("micro_batch", "per_device_train_batch_size", 1,
                          f"{_WHO} trainers/arguments.py: per_device_train_batch_size=1")
    ga = r.int_or_default("grad_accum", "gradient_accumulation_steps", max(1, math.ceil(16 / mb / world)),
                          f"{_WHO} trainers/arguments.py: gradient_accumulation_steps=ceil(16 / {mb} / world size "
                          f"{world})")
    gc = r.bool_("gradient_checkpointing")
    if gc is None:
        r.default("recompute", "full", f"{_WHO} trainers/arguments.py: gradient_checkpointing=True")
    else:
        r.set("recompute", "full" if gc else "none", "gradient_checkpointing")
    _attention(r)
    _refusals(r)
    hf_optim(r, "optim", f"{_WHO} (TrainingArguments)")
    if r.bool_("use_liger_kernel"):
        r.set("loss", "fused-linear", "use_liger_kernel")
    if r.bool_("torch_compile"):
        r.set("compile", True, "torch_compile")
    _multimodal(r, kind)
    weights, autocast = _dtypes(r, kind)
    fsdp_zero = _fsdp(r, base)
    auto = {"micro_batch": mb, "grad_accum": ga, "precision16": autocast}
    if not _deepspeed(r, base, auto):
        _precision(r, kind, weights, autocast, fsdp_zero)
    r.use("torch_dtype", "bf16", "fp16", "tuner_type", "train_type", "ENV", "tuner_backend")


def _world(r: Reading) -> int:
    """``ENV: {NPROC_PER_NODE, NNODES}`` (torchrun's world size, swift/cli/main.py ``get_torchrun_args``) → gpus."""
    env = r.get("ENV") if isinstance(r.get("ENV"), dict) else {}
    procs, nodes = env.get("NPROC_PER_NODE"), env.get("NNODES", 1)
    try:
        n = int(procs) * int(nodes) if procs is not None else None
    except (TypeError, ValueError):
        raise r.refuse(f"ENV NPROC_PER_NODE / NNODES must be integers (got {procs!r} / {nodes!r})") from None
    if n is None:
        return 1
    if n < 1:
        raise r.refuse(f"ENV NPROC_PER_NODE × NNODES must be at least 1 (got {n})")
    r.set("gpus", n, "ENV NPROC_PER_NODE × NNODES")
    return n


def _tuner(r: Reading) -> str:
    key = "tuner_type" if r.has("tuner_type") or not r.has("train_type") else "train_type"
    kind = str(r.get(key, "lora"))
    if kind not in ("lora", "full"):
        raise r.refuse(f"{key} {kind}: trainmem models lora and full")
    quant = _quant(r)
    if kind == "full":
        if quant:
            raise r.refuse(f"quant_method {r.get('quant_method')} with {key} full: a quantized base trains only "
                           "with adapters")
        r.set("lora_rank", 0, f"{key} full")
        r.use("lora_rank", "lora_dropout", "target_modules", "target_regex", "lora_dtype", "lora_bias")
        return kind
    rank = r.int_("lora_rank")
    if rank:
        r.set("lora_rank", rank, "lora_rank")
    else:
        r.default("lora_rank", 8, f"{_WHO}{'' if r.has(key) else ' base_args.py: tuner_type=lora;'} tuner_args.py: "
                                  "lora_rank=8")
    p = r.fraction("lora_dropout")
    if p is not None:
        r.set("lora_dropout", p, "lora_dropout")
    else:
        r.default("lora_dropout", 0.05, f"{_WHO} tuner_args.py: lora_dropout=0.05")
    _targets(r)
    dtype = r.get("lora_dtype")
    if dtype in ("bfloat16", "bf16"):
        r.set("adapter_dtype", "bf16", "lora_dtype")
    elif dtype not in (None, "float32", "fp32"):
        raise r.refuse(f"lora_dtype {dtype}: trainmem models float32 (PEFT's default) and bfloat16 adapters")
    if r.bool_("use_dora"):
        raise r.refuse("use_dora (DoRA's magnitude vectors and weight norms) is not modelled")
    if r.get("lora_bias", "none") != "none" or r.get("modules_to_save") or r.get("target_parameters"):
        raise r.refuse("lora_bias all / modules_to_save / target_parameters (biases, whole modules or parameters "
                       "trained beside LoRA) are not modelled")
    if str(r.get("tuner_backend", "peft")) != "peft" or r.bool_("use_swift_lora"):
        raise r.refuse(f"tuner_backend {r.get('tuner_backend')} / use_swift_lora: trainmem models PEFT's LoRA")
    return kind


def _targets(r: Reading) -> None:
    """``target_regex`` (replaces target_modules: tuner_args.py ``__post_init__``) or ``target_modules`` (a list of
    names; a string in the file is one ``--target_modules`` value, a list of one name, never a regex)."""
    regex = r.get("target_regex")
    if regex is not None:
        _regex(r, str(regex), "target_regex")
        r.use("target_modules")
        return
    targets = r.get("target_modules")
    if targets is None:
        r.default("lora_targets", "all-linear", f"{_WHO} tuner_args.py: target_modules=['all-linear']")
        return
    names = [str(t) for t in (targets if isinstance(targets, list) else [targets])]
    if "all-embedding" in names:
        raise r.refuse("target_modules all-embedding (LoRA on the embeddings) is not modelled")
    r.set("lora_targets", "all-linear" if "all-linear" in names else ",".join(names), "target_modules")


def _regex(r: Reading, regex: str, key: str) -> None:
    """LoRA targets as one regex: matched on the run's model when the setup is merged (peft_regex.py)."""
    why = check_regex(regex)
    if why is not None:
        raise r.refuse(f"{key} {regex!r} is not a regular expression (re.compile refuses it)")
    r.out.lora_regex = (key, regex)


def _quant(r: Reading) -> bool:
    """``quant_method`` bnb with ``quant_bits`` 4 (QLoRA, nf4 + double quantization: quant_args.py) or 8 (LLM.int8);
    ``quant_bits`` alone quantizes nothing (get_quantization_config returns None)."""
    method, bits = r.get("quant_method"), r.get("quant_bits")
    if method is None:
        if bits is not None:
            r.out.statements.append(f"quant_bits {bits} without quant_method: ms-swift quantizes nothing (a "
                                    "pre-quantized AWQ/GPTQ checkpoint is not modelled)")
        r.use("quant_bits", "bnb_4bit_quant_type", "bnb_4bit_use_double_quant", "bnb_4bit_compute_dtype")
        return False
    if method != "bnb" or bits not in (4, 8, "4", "8"):
        raise r.refuse(f"quant_method {method} quant_bits {bits}: trainmem models bnb 4-bit (QLoRA) and 8-bit bases")
    if int(bits) == 8:
        r.set("load_in_8bit", True, "quant_method bnb, quant_bits 8")
    else:
        r.set("qlora", True, "quant_method bnb, quant_bits 4")
    r.use("bnb_4bit_quant_type", "bnb_4bit_use_double_quant", "bnb_4bit_compute_dtype", "bnb_4bit_quant_storage")
    return True


def _lengths(r: Reading) -> None:
    n = r.int_("max_length")
    packing = r.bool_("packing")
    plen = r.int_("packing_length") if packing else None
    if plen:
        r.set("seq_len", plen, "packing_length")
    elif n:
        r.set("seq_len", n, "max_length")
    else:
        r.cannot("seq_len", "max_length not set: ms-swift 4.5.2 then caps a sample at the model's max_model_len")
    if packing:
        r.out.statements.append("packing on: every sequence is the full max_length")
    elif r.bool_("padding_free"):
        r.out.statements.append("padding_free on: modelled as micro-batch sequences of the full max_length")
    r.use("packing_length")


def _attention(r: Reading) -> None:
    impl = r.get("attn_impl")
    attn = {"flash_attn": "flash", "flash_attention_2": "flash", "flash_attention_3": "flash", "sdpa": "sdpa",
            "eager": "eager"}
    if impl is None:
        return
    if str(impl) not in attn:
        raise r.refuse(f"attn_impl {impl} is not modelled (sdpa, eager, flash_attn, flash_attention_2/3)")
    r.set("attn", attn[str(impl)], "attn_impl")
    if impl == "flash_attention_3":
        r.set("attn_kernel", "fa3", "attn_impl")


def _refusals(r: Reading) -> None:
    sp = r.get("sequence_parallel_size", 1)
    if sp != 1:
        raise r.refuse(f"sequence_parallel_size {sp} (ms-swift's Ulysses / ring sequence parallelism) is not modelled")
    if r.get("optimizer") is not None or r.bool_("use_galore") or r.get("lisa_activated_layers"):
        raise r.refuse("optimizer plugins (optimizer, use_galore, lisa_activated_layers) are not modelled; use optim")
    if r.get("task_type", "causal_lm") != "causal_lm":
        raise r.refuse(f"task_type {r.get('task_type')}: trainmem models causal_lm")


def _multimodal(r: Reading, kind: str) -> None:
    """freeze_vit / freeze_aligner (default True) and freeze_llm (default False), tuner_args.py."""
    vit, aligner, llm = r.bool_("freeze_vit"), r.bool_("freeze_aligner"), r.bool_("freeze_llm")
    if llm:
        raise r.refuse("freeze_llm true (the language model frozen) is not modelled")
    if kind == "lora" and (vit is False or aligner is False):
        raise r.refuse("freeze_vit / freeze_aligner false under LoRA (adapters in the vision tower or aligner) is not "
                       "modelled")
    if kind == "full" and vit is False:
        if aligner is not False:  # (default True)
            raise r.refuse("freeze_vit false with freeze_aligner true (the tower trained, the aligner frozen) is not "
                           "modelled")
        r.set("train_vision", True, "freeze_vit false")
    elif kind == "full" and aligner is False:
        r.set("train_projector", True, "freeze_aligner false")


def _dtypes(r: Reading, kind: str) -> tuple[str, str | None]:
    """(weights dtype, autocast 'bf16' | 'fp16' | None): torch_dtype and _init_mixed_precision."""
    dtype = r.get("torch_dtype")
    weights = {"bfloat16": "bf16", "bf16": "bf16", "float16": "fp16", "fp16": "fp16", "float32": "fp32",
               "fp32": "fp32", None: "bf16"}.get(dtype)
    if weights is None:
        raise r.refuse(f"torch_dtype {dtype}: one of bfloat16, float16, float32")
    bf16, fp16 = r.bool_("bf16"), r.bool_("fp16")
    bf16 = weights == "bf16" if bf16 is None else bf16
    fp16 = weights != "bf16" if fp16 is None else fp16
    if bf16 and fp16:
        raise r.refuse("bf16 and fp16 are both on (ms-swift sets fp16 for float16/float32 weights unless fp16 is "
                       "false; TrainingArguments refuses both)")
    return weights, "bf16" if bf16 else ("fp16" if fp16 else None)


def _precision(r: Reading, kind: str, weights: str, autocast: str | None, fsdp_zero: int | None) -> None:
    key = "torch_dtype" if r.has("torch_dtype") else None
    said = key or r.has("bf16") or r.has("fp16")
    setter = r.set if said else r.default
    src = (f"torch_dtype {r.get('torch_dtype')}" if key else
           f"{_WHO} model_args.py: torch_dtype=None, the checkpoint's bfloat16") + (
        f", {autocast} autocast" if autocast else ", no autocast")
    if weights == "bf16":
        if autocast == "fp16":
            raise r.refuse("fp16 autocast over bfloat16 weights is not a recipe trainmem models")
        setter("precision", "bf16", src)
    elif weights == "fp16":
        if kind == "full":
            raise r.refuse("torch_dtype float16 with tuner_type full: the HF Trainer's GradScaler refuses fp16 "
                           "gradients; use bfloat16 or float32")
        setter("precision", "fp16", src + ", fp32 adapters")
    elif autocast is None:
        setter("precision", "fp32", src)
    elif fsdp_zero is not None and autocast == "bf16":
        setter("precision", "bf16", src + " under FSDP2 (MixedPrecisionPolicy: bf16 gathers and reduction)")
    else:
        setter("precision", f"amp-{autocast}", src)


def _fsdp(r: Reading, base: Path) -> int | None:
    """``fsdp``: fsdp2 (ms-swift's preset), a JSON path with ``fsdp`` + ``fsdp_config``, or TrainingArguments'
    option string."""
    value = r.get("fsdp")
    if value in (None, "", False):
        return None
    if value == "fsdp2":
        cfg, name = SWIFT_FSDP2, "ms-swift swift/config/fsdp2.json"
    elif isinstance(value, str) and value.endswith(".json"):
        path = Path(value).expanduser()
        path = path if path.is_absolute() or not (base / path).is_file() else base / path
        if not path.is_file():
            raise r.refuse(f"fsdp {value}: no such file (looked beside the config and in the working directory)")
        cfg, name = parse_mapping(load_text(str(path)), str(path), "json"), str(path)
    else:
        return hf_fsdp(r)
    sub = Reading(name, "fsdp", r.out.fields["stack"], {"fsdp": cfg.get("fsdp", "full_shard auto_wrap"),
                                                         "fsdp_config": cfg.get("fsdp_config") or {}})
    zero = hf_fsdp(sub)
    r.absorb(sub.finish())
    return zero


def _deepspeed(r: Reading, base: Path, auto: dict[str, Any]) -> bool:
    """``deepspeed``: one of ms-swift's names (its shipped JSON), a path, or an inline mapping."""
    name = r.get("deepspeed")
    if not isinstance(name, str) or name not in SWIFT_DEEPSPEED:
        return hf_deepspeed(r, base, auto)
    sub = Reading(f"ms-swift swift/config/{name}.json", "deepspeed", r.out.fields["stack"], SWIFT_DEEPSPEED[name])
    read_deepspeed(sub, auto)
    r.out.statements.append(f"deepspeed {name}: the DeepSpeed JSON ms-swift ships, swift/config/{name}.json")
    r.out.fields.pop("optimizer_impl", None)  # DeepSpeed's step (hf.py _deepspeed_optimizer)
    r.out.read = [x for x in r.out.read if not x[0].startswith("optimizer_impl ")]
    r.out.defaults = [x for x in r.out.defaults if not x[0].startswith("optimizer_impl ")]
    r.absorb(sub.finish())
    return True
