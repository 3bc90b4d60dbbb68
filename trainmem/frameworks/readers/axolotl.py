"""axolotl YAML → setup fields, axolotl v0.18.0 (src/axolotl/utils/schemas/config.py, training.py, peft.py, fsdp.py;
src/axolotl/utils/config/__init__.py ``normalize_config``; src/axolotl/loaders/adapter.py).

Defaults for what the file leaves out (the schema's): ``sequence_len`` 512, ``micro_batch_size`` 1,
``gradient_accumulation_steps`` 1, ``optimizer`` adamw_torch_fused. ``bf16: auto`` is bf16 on any GPU with bf16
(``is_torch_bf16_gpu_available``: Ampere and later, every GPU trainmem's catalog gives bf16 to), and bf16 loads
the model in bfloat16 (``cfg.torch_dtype = torch.bfloat16``) under the Trainer's autocast: the pure bf16 recipe
(16-bit weights, gradients, AdamW states). ``lora_target_linear`` = every linear of the decoder (all-linear).
"""

from __future__ import annotations

from pathlib import Path

from trainmem.frameworks.readers._base import Reading
from trainmem.frameworks.readers.hf import OPTIM, hf_attn, hf_deepspeed

__all__ = ["read_axolotl", "is_axolotl"]

_WHO = "axolotl 0.18"


def is_axolotl(cfg: dict) -> bool:
    return "base_model" in cfg or ("micro_batch_size" in cfg and ("sequence_len" in cfg or "datasets" in cfg))


def read_axolotl(r: Reading, base: Path) -> None:
    if r.has("base_model"):
        r.model(str(r.get("base_model")), "base_model")
    for key, fld, default in (("sequence_len", "seq_len", 512), ("micro_batch_size", "micro_batch", 1),
                              ("gradient_accumulation_steps", "grad_accum", 1)):
        r.int_or_default(fld, key, default, f"{_WHO}: {key}={default}")
    if r.bool_("sample_packing"):
        r.out.statements.append("sample_packing on: every sequence is the full sequence_len")
    precision16 = _precision(r)
    _optimizer(r)
    _attention(r)
    _checkpointing(r)
    _adapter(r)
    _plugins(r)
    _fsdp(r, precision16)
    mb, ga = r.out.fields.get("micro_batch"), r.out.fields.get("grad_accum")
    hf_deepspeed(r, base, {"micro_batch": mb, "grad_accum": ga, "precision16": precision16})
    if r.bool_("torch_compile"):
        r.set("compile", True, "torch_compile")
    if r.get("unfrozen_parameters"):
        raise r.refuse("unfrozen_parameters (training a subset of the weights) is not modelled")
    from trainmem.frameworks.readers.axolotl_vision import read_axolotl_vision
    read_axolotl_vision(r)  # multimodal: processor_type, freeze_mm_modules
    r.use("bf16", "fp16", "bfloat16", "float16", "float32", "load_in_4bit", "load_in_8bit")


def _precision(r: Reading) -> str | None:
    """normalize_config: bf16 auto → True (bf16 GPUs); bf16/bfloat16 → torch_dtype bfloat16."""
    bf16, fp16 = r.get("bf16"), r.get("fp16")
    if bf16 == "auto" and not fp16:
        r.set("precision", "bf16", f"bf16 auto: {_WHO} enables bf16 on bf16 GPUs and loads the model in bfloat16")
        return "bf16"
    if bf16 is True or r.get("bfloat16") is True:
        r.set("precision", "bf16", "bf16 (the model loaded in bfloat16)")
        return "bf16"
    if fp16 is True or r.get("float16") is True:
        r.set("precision", "fp16", "fp16 (the model loaded in float16)")
        return "fp16"
    if bf16 is None and fp16 is None:
        r.default("precision", "fp32", f"{_WHO}: neither bf16 nor fp16 set, float32 weights")
    else:
        r.set("precision", "fp32", "bf16/fp16 false")
    return None


def _optimizer(r: Reading) -> None:
    name = r.get("optimizer")
    if name is None:
        r.default("optimizer", "adamw", f"{_WHO}: optimizer=adamw_torch_fused")
        r.default("optimizer_impl", "fused", f"{_WHO}: optimizer=adamw_torch_fused")
        return
    got = OPTIM.get(str(name).lower())
    if got is None:
        raise r.refuse(f"optimizer {name} is not an optimizer trainmem models (names it takes: {', '.join(OPTIM)})")
    r.set("optimizer", got[0], "optimizer")
    if got[1]:
        r.set("optimizer_impl", got[1], "optimizer")


def _attention(r: Reading) -> None:
    if r.has("attn_implementation"):
        hf_attn(r, "attn_implementation")
    elif r.bool_("flash_attention"):
        r.set("attn", "flash", "flash_attention")
    elif r.bool_("sdp_attention"):
        r.set("attn", "sdpa", "sdp_attention")
    for key in ("flex_attention", "sage_attention", "s2_attention"):
        if r.bool_(key):
            raise r.refuse(f"{key}: that attention kernel is not modelled (flash_attention or sdp_attention)")


def _checkpointing(r: Reading) -> None:
    gc = r.get("gradient_checkpointing")
    if gc is True or gc is False:
        r.set("recompute", "full" if gc else "none", "gradient_checkpointing")
    elif gc in ("unsloth", "offload"):
        raise r.refuse(f"gradient_checkpointing {gc} (checkpoints offloaded to the CPU) is not modelled; use true")
    elif gc not in (None, False):
        raise r.refuse(f"gradient_checkpointing must be true, false, unsloth or offload (got {gc!r})")
    off = r.get("activation_offloading")
    if off in (True, "legacy"):
        r.set("offload_activations", True, "activation_offloading")
    elif off not in (None, False):
        raise r.refuse(f"activation_offloading {off}: trainmem models true (pinned host memory), not disk or "
                       "hidden_states")


def _adapter(r: Reading) -> None:
    adapter = r.get("adapter")
    if r.bool_("load_in_8bit") and adapter != "lora":
        raise r.refuse("load_in_8bit: an 8-bit base is modelled under adapter lora (LoRA over LLM.int8)")
    if adapter is None:
        if r.bool_("load_in_4bit"):
            raise r.refuse("load_in_4bit without an adapter: axolotl refuses a 4-bit full fine-tune")
        r.use("lora_r", "lora_target_modules", "lora_target_linear")
        return
    if adapter not in ("lora", "qlora"):
        raise r.refuse(f"adapter {adapter}: trainmem models lora and qlora")
    rank = r.int_("lora_r")
    if not rank:
        raise r.refuse(f"adapter {adapter} without lora_r: give the LoRA rank")
    r.set("lora_rank", rank, "lora_r")
    r.lora_dropout("lora_dropout")
    targets = r.get("lora_target_modules") or []
    regex = targets if isinstance(targets, str) else None
    targets = [targets] if isinstance(targets, str) else list(targets)
    if r.bool_("lora_target_linear"):
        r.set("lora_targets", "all-linear", "lora_target_linear")
    elif regex is not None:  # loaders/adapter.py load_lora passes a str on: PEFT full-matches it (peft_regex.py)
        from trainmem.frameworks.readers.peft_regex import check_regex
        why = check_regex(regex)
        if why is not None:
            raise r.refuse(f"lora_target_modules {regex!r} is not a regular expression (re.compile refuses it)")
        r.out.lora_regex = ("lora_target_modules", regex)
    elif targets:
        r.set("lora_targets", ",".join(str(t) for t in targets), "lora_target_modules")
    else:
        raise r.refuse(f"adapter {adapter} names no modules: set lora_target_modules or lora_target_linear")
    if r.get("lora_modules_to_save") or r.get("lora_target_parameters"):
        raise r.refuse("lora_modules_to_save / lora_target_parameters (modules trained in full, or parameters "
                       "targeted directly) are not modelled")
    if adapter == "qlora" or r.bool_("load_in_4bit"):
        if not r.bool_("load_in_4bit", adapter == "qlora"):
            raise r.refuse("adapter qlora with load_in_4bit false is not QLoRA")
        r.set("qlora", True, "adapter qlora / load_in_4bit")
    if r.bool_("load_in_8bit"):  # (adapter lora: memory/int8.py)
        r.set("load_in_8bit", True, "load_in_8bit")


def _plugins(r: Reading) -> None:
    plugins = [str(p) for p in (r.get("plugins") or [])]
    if r.bool_("liger_fused_linear_cross_entropy"):
        r.set("loss", "fused-linear", "liger_fused_linear_cross_entropy")
    if r.bool_("cut_cross_entropy") or any("cut_cross_entropy" in p for p in plugins):
        raise r.refuse("cut_cross_entropy is not modelled (liger_fused_linear_cross_entropy is)")
    r.use("plugins", "liger_rope", "liger_rms_norm", "liger_glu_activation", "liger_layer_norm")


def _fsdp(r: Reading, precision16: str | None) -> None:
    """fsdp_config (FSDPConfig: fsdp_version, reshard_after_forward, offload_params, activation_checkpointing;
    the ``fsdp_``-prefixed names too) or the deprecated ``fsdp`` list."""
    cfg = r.get("fsdp_config")
    legacy = r.get("fsdp")
    if not cfg and not legacy:
        return
    cfg = cfg if isinstance(cfg, dict) else {}
    g = lambda k: cfg.get(k, cfg.get("fsdp_" + k))  # noqa: E731
    opts = " ".join(legacy) if isinstance(legacy, list) else str(legacy or "")
    reshard = g("reshard_after_forward")
    strategy = str(g("sharding_strategy") or "").upper()
    zero = 2 if reshard is False or strategy == "SHARD_GRAD_OP" or "shard_grad_op" in opts else 3
    r.set("engine", "fsdp2", "fsdp_config")
    r.set("zero", zero, "fsdp_config.reshard_after_forward")
    if g("offload_params") is True or "offload" in opts:
        r.set("offload", "optimizer+params", "fsdp_config.offload_params")
    if g("activation_checkpointing") is True:
        r.set("recompute", "full", "fsdp_config.activation_checkpointing")
    r.use("fsdp_config", "fsdp")
