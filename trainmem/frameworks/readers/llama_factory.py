"""LLaMA-Factory YAML (``llamafactory-cli train FILE.yaml``) → setup fields, LLaMA-Factory v0.9.5
(src/llamafactory/hparams/model_args.py, data_args.py, finetuning_args.py; the training keys are transformers'
``Seq2SeqTrainingArguments``: hf.py).

Defaults for what the file leaves out: ``finetuning_type`` lora, ``lora_rank`` 8, ``lora_target`` all (every
linear: all-linear), ``cutoff_len`` 2048, ``per_device_train_batch_size`` 8 (TrainingArguments), gradient
checkpointing on unless ``disable_gradient_checkpointing`` (model/model_utils/checkpointing.py
``prepare_model_for_training``), ``optim`` adamw_torch_fused.

Precision (model/adapter.py ``init_adapter``, hparams/parser.py ``compute_dtype``): the model is loaded in the
compute dtype (bf16 with ``bf16: true``) and the trainable parameters are upcast to fp32 unless ``pure_bf16`` —
so a full fine-tune is fp32 weights under autocast (amp-bf16), LoRA a bf16 base (bf16) with fp32 adapters, and
``pure_bf16`` the pure bf16 recipe. ``enable_liger_kernel`` at the sft/pt stages applies Liger's fused linear
cross-entropy (model/loader.py ``require_logits=stage not in [pt, sft]``).
"""

from __future__ import annotations

from pathlib import Path

from trainmem.frameworks.readers._base import Reading
from trainmem.frameworks.readers.hf import hf_deepspeed, hf_fsdp, hf_optim
from trainmem.frameworks.readers.llama_factory_vision import read_llama_factory_vision

__all__ = ["read_llama_factory", "is_llama_factory"]

_WHO = "LLaMA-Factory 0.9.5"
_KEYS = ("stage", "finetuning_type", "template", "cutoff_len", "lora_target", "quantization_bit", "dataset_dir",
         "disable_gradient_checkpointing", "pure_bf16", "flash_attn")


def is_llama_factory(cfg: dict) -> bool:
    return any(k in cfg for k in _KEYS)


def read_llama_factory(r: Reading, base: Path) -> None:
    if r.has("model_name_or_path"):
        r.model(str(r.get("model_name_or_path")), "model_name_or_path")
    stage = str(r.get("stage", "sft"))
    if stage not in ("sft", "pt"):
        raise r.refuse(f"stage {stage}: trainmem models the sft and pt stages (one policy model, no reference or "
                       "reward model)")
    kind = str(r.get("finetuning_type", "lora"))
    if kind not in ("lora", "full"):
        raise r.refuse(f"finetuning_type {kind}: trainmem models lora and full")
    if kind == "lora":
        _lora(r)
    else:
        r.use("lora_rank", "lora_target")
    read_llama_factory_vision(r, kind)  # VLMs: freeze_vision_tower, image_max_pixels ...
    n = r.int_("cutoff_len")
    if n:
        r.set("seq_len", n, "cutoff_len")
    else:
        r.default("seq_len", 2048, f"{_WHO}: cutoff_len=2048")
    if r.bool_("packing") or r.bool_("neat_packing") or (r.get("packing") is None and stage == "pt"):
        r.out.statements.append("packing on: every sequence is the full cutoff_len")
    mb = r.int_or_default("micro_batch", "per_device_train_batch_size", 8,
                          f"{_WHO} (TrainingArguments): per_device_train_batch_size=8")
    ga = r.int_or_default("grad_accum", "gradient_accumulation_steps")
    if r.bool_("disable_gradient_checkpointing"):
        r.set("recompute", "none", "disable_gradient_checkpointing")
    else:
        r.default("recompute", "full", f"{_WHO} disable_gradient_checkpointing=False")
    _attention(r)
    hf_optim(r, "optim", _WHO)
    if r.bool_("enable_liger_kernel"):
        r.set("loss", "fused-linear", "enable_liger_kernel (sft/pt: Liger's fused linear cross-entropy)")
    if r.bool_("use_unsloth") or r.bool_("use_galore") or r.bool_("use_badam") or r.bool_("use_apollo"):
        raise r.refuse("use_unsloth / use_galore / use_badam / use_apollo are not modelled")
    precision16 = "bf16" if (r.bool_("bf16") or r.bool_("pure_bf16")) else ("fp16" if r.bool_("fp16") else None)
    zero = hf_fsdp(r)
    auto = {"micro_batch": mb, "grad_accum": ga or 1, "precision16": precision16}
    if not hf_deepspeed(r, base, auto):
        _precision(r, kind, precision16, zero)
    r.use("bf16", "fp16", "pure_bf16", "stage", "finetuning_type", "packing", "neat_packing")


def _lora(r: Reading) -> None:
    rank = r.int_("lora_rank")
    r.lora_dropout("lora_dropout")
    if rank:
        r.set("lora_rank", rank, "lora_rank")
    else:
        r.default("lora_rank", 8, f"{_WHO}: lora_rank=8")
    target = r.get("lora_target")
    if target is None or str(target) == "all":
        (r.set if target is not None else r.default)("lora_targets", "all-linear",
                                                      "lora_target all" if target is not None else f"{_WHO}: lora_target=all")
    else:
        r.set("lora_targets", ",".join(t.strip() for t in str(target).split(",") if t.strip()), "lora_target")
    if r.get("additional_target") or r.get("lora_modules_to_save"):
        raise r.refuse("additional_target (modules trained in full beside LoRA) is not modelled")
    bits = r.get("quantization_bit")
    if bits is not None:
        if bits != 4:
            raise r.refuse(f"quantization_bit {bits}: trainmem models 4-bit (QLoRA) bases only")
        r.set("qlora", True, "quantization_bit 4")
    if r.bool_("upcast_layernorm"):  # model_utils/checkpointing.py prepare_model_for_training: 1-D norms to fp32
        r.set("kbit_prep", "norms-fp32", "upcast_layernorm")
    r.use("use_dora", "use_rslora", "pissa_init", "loraplus_lr_ratio")
    if r.bool_("use_dora"):
        raise r.refuse("use_dora (DoRA's magnitude vectors and weight norms) is not modelled")


def _attention(r: Reading) -> None:
    fa = str(r.get("flash_attn", "auto"))
    attn = {"fa2": "flash", "fa3": "flash", "sdpa": "sdpa", "disabled": "eager", "auto": None}
    if fa not in attn:
        raise r.refuse(f"flash_attn {fa}: one of auto, disabled, sdpa, fa2, fa3")
    if attn[fa]:
        r.set("attn", attn[fa], "flash_attn")
    if fa == "fa3":
        r.set("attn_kernel", "fa3", "flash_attn")


def _precision(r: Reading, kind: str, precision16: str | None, fsdp_zero: int | None) -> None:
    if r.bool_("pure_bf16"):
        r.set("precision", "bf16", "pure_bf16")
    elif precision16 is None:
        r.default("precision", "fp32", f"{_WHO}: neither bf16 nor fp16, float32 weights")
    elif kind == "lora":
        r.set("precision", "bf16" if precision16 == "bf16" else "fp16",
              f"{precision16}: the base loaded in {precision16}, the adapters upcast to fp32")
    elif fsdp_zero is not None and precision16 == "bf16":
        r.set("precision", "bf16", "bf16 under Accelerate's FSDP: MixedPrecisionPolicy gathers and reduces in bf16, "
                                   "as accelerate_config mixed_precision bf16")
    else:
        r.set("precision", f"amp-{precision16}", f"{precision16}: trainable weights upcast to fp32 under autocast")
