"""HF ``TrainingArguments`` / TRL ``SFTConfig`` files (JSON or YAML: what ``HfArgumentParser.parse_json_file`` /
``parse_yaml_file`` and TRL's ``TrlParser`` read, model keys included) → setup fields.

Sources: transformers 5.24.0 training_args.py (``TrainingArguments``: ``per_device_train_batch_size`` 8,
``gradient_accumulation_steps`` 1, ``bf16``/``fp16`` False, ``gradient_checkpointing`` False, ``optim``
``adamw_torch_fused``), trainer.py ``get_optimizer_cls_and_kwargs`` (the ``optim`` names), TRL 1.16.0
trl/trainer/sft_config.py (``SFTConfig``: ``max_length`` 1024, ``gradient_checkpointing`` True, ``bf16`` None →
True unless ``fp16``) and trl/trainer/model_config.py (``ModelConfig``: ``dtype`` float32, ``use_peft``,
``lora_r`` 16, ``lora_target_modules``, ``load_in_4bit``/``load_in_8bit``).

Precision: ``bf16: true`` is torch.autocast over the loaded weights: amp-bf16 with fp32 weights, the pure bf16
recipe (16-bit parameters, gradients and AdamW states) when the model keys load it in bfloat16
(``dtype``/``torch_dtype: bfloat16``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainmem.frameworks.readers._base import Reading
from trainmem.frameworks.readers.deepspeed import read_deepspeed

__all__ = ["read_hf", "is_hf", "is_trl", "OPTIM", "hf_optim", "hf_fsdp", "hf_deepspeed", "hf_attn"]

#: HF ``optim`` names (transformers 5.24 training_args.py ``OptimizerNames``) → (optimizer, optimizer_impl).
OPTIM: dict[str, tuple[str, str | None]] = {
    "adamw_torch": ("adamw", "foreach"), "adamw_torch_fused": ("adamw", "fused"), "adamw_hf": ("adamw", "foreach"),
    "adamw_apex_fused": ("adamw", "fused"), "adamw_8bit": ("adamw-8bit", None), "adamw_bnb_8bit": ("adamw-8bit", None),
    "paged_adamw_32bit": ("paged-adamw", None), "paged_adamw": ("paged-adamw", None),
    "paged_adamw_8bit": ("paged-adamw-8bit", None), "adafactor": ("hf-adafactor", None), "sgd": ("sgd", None),
    "lion_32bit": ("lion", None), "adamw_torch_xla": ("adamw", "foreach"),
}
_TRL_KEYS = ("max_length", "max_seq_length", "packing", "dataset_text_field", "dataset_name", "use_peft", "lora_r",
             "completion_only_loss", "assistant_only_loss", "padding_free", "dataset_mixture", "dataset_num_proc",
             "chat_template_path")


def is_trl(cfg: dict) -> bool:
    return any(k in cfg for k in _TRL_KEYS)


def is_hf(cfg: dict) -> bool:
    return any(k in cfg for k in ("per_device_train_batch_size", "output_dir", "model_name_or_path",
                                  "gradient_accumulation_steps", "optim"))


def read_hf(r: Reading, base: Path) -> None:
    """TrainingArguments (or SFTConfig, when TRL's keys are present) and their model keys."""
    trl = is_trl(r.data)
    who = "TRL 1.16 SFTConfig" if trl else "transformers 5.24 TrainingArguments"
    if r.has("model_name_or_path"):
        r.model(str(r.get("model_name_or_path")), "model_name_or_path")
    mb = r.int_or_default("micro_batch", "per_device_train_batch_size", 8, f"{who}: per_device_train_batch_size=8")
    ga = r.int_or_default("grad_accum", "gradient_accumulation_steps")
    for key in ("max_length", "max_seq_length"):
        n = r.int_(key)
        if n:
            r.set("seq_len", n, key)
    if trl:
        r.default("seq_len", 1024, "TRL 1.16 SFTConfig: max_length=1024")
        if r.bool_("packing"):
            r.out.statements.append("packing on: every sequence is the full max_length")
    # transformers 5.24: activation_checkpointing, with gradient_checkpointing its deprecated alias (used when the
    # new name is not set; training_args.py __post_init__)
    key = "activation_checkpointing" if r.get("activation_checkpointing") is not None else "gradient_checkpointing"
    gc = r.bool_(key)
    if gc is None and trl:
        r.default("recompute", "full", "TRL 1.16 SFTConfig: gradient_checkpointing=True")
    elif gc is not None:
        r.set("recompute", "full" if gc else "none", key)
    precision16 = _precision16(r, trl)
    dtype = str(r.get("dtype", r.get("torch_dtype", "")) or "").lower()
    hf_optim(r, "optim", who)
    if r.bool_("use_liger_kernel"):
        r.set("loss", "fused-linear", "use_liger_kernel")
    hf_attn(r, "attn_implementation")
    if r.bool_("torch_compile"):
        r.set("compile", True, "torch_compile")
    if r.bool_("activation_offloading"):
        r.set("offload_activations", True, "activation_offloading")
    _peft(r, trl)
    zero = hf_fsdp(r)
    deepspeed = hf_deepspeed(r, base, {"micro_batch": mb, "grad_accum": ga or 1, "precision16": precision16})
    if not deepspeed:
        _set_precision(r, precision16, dtype, zero)
    r.use("dtype", "torch_dtype", "bf16", "fp16", "gradient_checkpointing", "activation_checkpointing", "packing")


def _precision16(r: Reading, trl: bool) -> str | None:
    bf16, fp16 = r.bool_("bf16"), r.bool_("fp16")
    if bf16 and fp16:
        raise r.refuse("bf16 and fp16 are both true (TrainingArguments refuses it)")
    if bf16 is None and trl and not fp16:
        bf16 = True
        r.out.statements.append("bf16 on (TRL 1.16 SFTConfig: bf16=None means True unless fp16)")
    return "bf16" if bf16 else ("fp16" if fp16 else None)


def _set_precision(r: Reading, precision16: str | None, dtype: str, fsdp_zero: int | None) -> None:
    """autocast (amp-*) over fp32 weights; over bf16-loaded weights the pure bf16 recipe."""
    if precision16 is None:
        if dtype in ("bfloat16", "bf16"):
            r.set("precision", "bf16", "dtype bfloat16 without autocast")
        elif dtype in ("float16", "fp16"):
            raise r.refuse("dtype float16 without fp16 autocast (pure fp16 training) is not a recipe trainmem models "
                           "under the HF Trainer; set fp16: true")
        elif r.has("bf16") or r.has("fp16"):
            r.set("precision", "fp32", "bf16/fp16 false")
        return
    if precision16 == "bf16" and dtype in ("bfloat16", "bf16"):
        r.set("precision", "bf16", "bf16 + dtype bfloat16 (16-bit weights)")
    elif fsdp_zero is not None and precision16 == "bf16":
        r.set("precision", "bf16", "bf16 under Accelerate's FSDP: MixedPrecisionPolicy gathers and reduces in bf16, "
                                   "as accelerate_config mixed_precision bf16")
    else:
        r.set("precision", f"amp-{precision16}", precision16)


def hf_optim(r: Reading, key: str, who: str) -> None:
    """The HF Trainer's ``optim`` name at ``key`` (its default ``adamw_torch_fused`` when absent)."""
    name = r.get(key)
    if name is None:
        r.default("optimizer", "adamw", f"{who}: optim=adamw_torch_fused")
        r.default("optimizer_impl", "fused", f"{who}: optim=adamw_torch_fused")
        return
    got = OPTIM.get(str(name).lower())
    if got is None:
        raise r.refuse(f"{key} {name} is not an optimizer trainmem models (HF names it takes: {', '.join(OPTIM)})")
    r.set("optimizer", got[0], key)
    if got[1]:
        r.set("optimizer_impl", got[1], key)


def hf_attn(r: Reading, key: str) -> None:
    """``attn_implementation`` → attn."""
    impl = r.get(key)
    if impl is None:
        return
    attn = {"flash_attention_2": "flash", "flash_attention_3": "flash", "sdpa": "sdpa", "eager": "eager"}.get(str(impl))
    if attn is None:
        raise r.refuse(f"{key} {impl} is not modelled (sdpa, eager, flash_attention_2/3)")
    r.set("attn", attn, key)
    if impl == "flash_attention_3":
        r.set("attn_kernel", "fa3", key)


def hf_fsdp(r: Reading) -> int | None:
    """TrainingArguments ``fsdp`` ("full_shard auto_wrap", "shard_grad_op", "offload") and ``fsdp_config`` →
    fsdp2 fields; the ZeRO stage set, or None without FSDP."""
    fsdp = r.get("fsdp")
    opts = " ".join(fsdp) if isinstance(fsdp, list) else (str(fsdp) if fsdp not in (None, False) else "")
    cfg = r.get("fsdp_config") if isinstance(r.get("fsdp_config"), dict) else {}
    if not opts.strip():
        return None
    if "hybrid_shard" in opts:
        raise r.refuse("fsdp hybrid_shard is not modelled (use full_shard or shard_grad_op)")
    if "full_shard" not in opts and "shard_grad_op" not in opts:
        raise r.refuse(f"fsdp {opts!r}: trainmem models full_shard and shard_grad_op")
    zero = 3 if "full_shard" in opts else 2
    r.set("engine", "fsdp2", "fsdp")
    r.set("zero", zero, "fsdp")
    if "offload" in opts:
        r.set("offload", "optimizer+params", "fsdp offload")
    if cfg.get("activation_checkpointing") is True or cfg.get("fsdp_activation_checkpointing") is True:
        r.set("recompute", "full", "fsdp_config.activation_checkpointing")
    r.use("fsdp_config")
    return zero


def hf_deepspeed(r: Reading, base: Path, auto: dict[str, Any], key: str = "deepspeed") -> bool:
    """``deepspeed``: a path (relative to the config file's folder) or an inline dict; its ``"auto"`` values
    resolved from ``auto`` as the HF integration does. True when one was read."""
    ds = r.get(key)
    if ds in (None, "", False):
        return False
    if isinstance(ds, dict):
        read_deepspeed(r, auto, prefix=key + ".")
        _deepspeed_optimizer(r)
        return True
    if not isinstance(ds, str):
        raise r.refuse(f"{key} must be a path to a DeepSpeed JSON or an inline mapping (got {ds!r})")
    from trainmem.frameworks.readers._base import load_text, parse_mapping
    path = Path(ds).expanduser()
    if not path.is_absolute():  # beside the config first, then the working directory the framework runs in
        path = base / path if (base / path).is_file() or not path.is_file() else path.resolve()
    if not path.is_file():
        raise r.refuse(f"{key} {ds}: no such file (looked beside the config, in {base}, and in the working directory)")
    sub = Reading(str(path), "deepspeed", r.out.fields["stack"], parse_mapping(load_text(str(path)), str(path), "json"))
    read_deepspeed(sub, auto)
    _deepspeed_optimizer(r)
    r.absorb(sub.finish())
    return True


def _deepspeed_optimizer(r: Reading) -> None:
    """Under DeepSpeed the step is DeepSpeed's (its FusedAdam, or the client optimizer wrapped by ZeRO): the HF
    ``optim`` implementation (fused/foreach) no longer applies."""
    if r.out.fields.pop("optimizer_impl", None) is not None:
        r.out.read = [x for x in r.out.read if not x[0].startswith("optimizer_impl ")]
        r.out.defaults = [x for x in r.out.defaults if not x[0].startswith("optimizer_impl ")]


def _peft(r: Reading, trl: bool) -> None:
    """TRL ModelConfig's PEFT keys (``use_peft``, ``lora_r``, ``lora_target_modules``, ``load_in_4bit``)."""
    if r.bool_("load_in_8bit"):
        raise r.refuse("load_in_8bit: an 8-bit base model is not modelled (use load_in_4bit for QLoRA)")
    if not r.bool_("use_peft"):
        if r.bool_("load_in_4bit"):
            raise r.refuse("load_in_4bit without use_peft: a 4-bit base needs LoRA adapters to train")
        r.use("lora_r", "lora_target_modules", "lora_modules_to_save")
        return
    rank = r.int_("lora_r")
    r.lora_dropout("lora_dropout")
    if rank:
        r.set("lora_rank", rank, "lora_r")
    else:
        r.default("lora_rank", 16, "TRL 1.16 ModelConfig: lora_r=16")
    targets = r.get("lora_target_modules")
    if isinstance(targets, str):
        targets = [targets]
    if targets:
        r.set("lora_targets", ",".join(targets), "lora_target_modules")
    else:
        r.default("lora_targets", "q_proj,v_proj", "PEFT 0.21 constants.py: the Llama/Mistral/Qwen2 default targets")
    if r.get("lora_modules_to_save"):
        raise r.refuse("lora_modules_to_save (fully trained extra modules) is not modelled")
    if r.bool_("load_in_4bit"):
        r.set("qlora", True, "load_in_4bit")
