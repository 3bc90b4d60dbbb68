"""A live ``torch.nn.Module`` (a ``transformers.PreTrainedModel``, a PEFT ``PeftModel``) as a model and setup.

What is read from the object (``read_live_model``), each default it sets stated in the assumptions:

- the architecture: its ``config`` (a ``PretrainedConfig``; ``architectures`` set to the object's class, so a
  ``*ForSequenceClassification`` gets its head), exact parameter counts checked against the object's own
  ``sum(p.numel())`` (tied weights once; a bitsandbytes ``Params4bit`` counts 2 per stored byte, as PEFT's
  ``get_nb_trainable_parameters`` does) — a difference is stated, with both figures;
- LoRA: the active adapter's injected ``LoraLayer`` modules (their module names and rank ``r``), so what PEFT
  really adapted, not what ``target_modules`` asked; the trainable count is checked against the parameters
  with ``requires_grad`` (DoRA, ``modules_to_save``, trainable biases are stated when they differ);
- the 4-bit base: ``Params4bit`` parameters or ``config.quantization_config`` ``load_in_4bit`` → ``qlora``;
  8-bit bases are refused (not modelled);
- the precision, from the parameters' dtype (when ``precision`` is not given): a bfloat16 / float16 model trains
  in that dtype (``bf16`` / ``fp16``), an fp32 model keeps the default (AMP); a LoRA base in fp32 is ``fp32``;
- a quantized LoRA base's fp32 weights (``kbit_prep``, trainmem/memory/kbit_prep.py): every floating frozen weight
  fp32 (PEFT's ``prepare_model_for_kbit_training`` ran) → ``peft``, the precision then from
  ``bnb_4bit_compute_dtype``; only the norms fp32 → ``norms-fp32``;
- ``recompute full`` when gradient checkpointing is on; ``attn`` from ``config._attn_implementation``.

Parameters frozen outside a PEFT adapter are stated, and estimated as full fine-tuning (an upper bound).
This module imports torch only through the object it is given (it is imported when one is passed).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from trainmem.errors import UnsupportedError

if TYPE_CHECKING:
    from trainmem.model.spec import ModelSpec
    from trainmem.setup import TrainingSetup

__all__ = ["LiveModel", "ParamTally", "read_live_model", "tally_parameters"]

_ATTN = {"sdpa": "sdpa", "eager": "eager", "flash_attention_2": "flash", "flash_attention_3": "flash"}
_DTYPE = {"torch.bfloat16": "bf16", "torch.float16": "fp16", "torch.float32": "fp32"}


@dataclass(frozen=True, slots=True)
class ParamTally:
    """The object's own parameter counts (``named_parameters()``: tied weights once)."""

    total: int
    trainable: int
    adapter: int
    """Parameters of LoRA adapters (``lora_`` in their names)."""
    dtypes: dict[str, int]
    """Elements per dtype of the parameters outside the adapters (``"torch.bfloat16"``, ``"4bit"``)."""
    quantized_4bit: bool


@dataclass(frozen=True, slots=True)
class LiveModel:
    spec: ModelSpec
    config: dict[str, Any]
    """The config.json dict the spec was built from."""
    fields: dict[str, Any]
    """Setup fields the object implies (used where the caller gives none)."""
    notes: list[str]
    """One assumption line per field in ``fields`` and per thing noticed (the caller drops a field's line when it
    gives that field itself: each line starts with the field's name)."""
    tally: ParamTally
    check: Callable[["ModelSpec", "TrainingSetup"], list[str]] = field(repr=False)
    """Checks of the built setup against the object: warning lines (counts, dtype vs precision)."""


def tally_parameters(module: Any) -> ParamTally:
    """Counts of ``module.named_parameters()``; a ``Params4bit`` (bitsandbytes, 2 values per byte of its
    storage) counts ``numel · 2 · itemsize``, as PEFT 0.21 ``get_nb_trainable_parameters`` does."""
    total = trainable = adapter = 0
    dtypes: Counter[str] = Counter()
    q4 = False
    for name, p in module.named_parameters():
        n = p.numel()
        if type(p).__name__ == "Params4bit":
            q4 = True
            size = p.element_size() if hasattr(p, "element_size") else getattr(p, "quant_storage").itemsize
            n = n * 2 * size
        total += n
        if p.requires_grad:
            trainable += n
        if "lora_" in name:
            adapter += n
        else:
            dtypes["4bit" if type(p).__name__ == "Params4bit" else str(p.dtype)] += n
    return ParamTally(total=total, trainable=trainable, adapter=adapter, dtypes=dict(dtypes), quantized_4bit=q4)


def _peft_lora(model: Any) -> tuple[Any, dict[str, Any], list[str]]:
    """(base model, LoRA fields, notes) of a PEFT model; (model, {}, []) for anything else."""
    configs = getattr(model, "peft_config", None)
    if not isinstance(configs, dict) or not configs:
        return model, {}, []
    adapter = getattr(model, "active_adapter", None)
    adapter = adapter[0] if isinstance(adapter, (list, tuple)) and adapter else adapter
    cfg = configs.get(adapter) if adapter in configs else next(iter(configs.values()))
    kind = str(getattr(getattr(cfg, "peft_type", None), "value", getattr(cfg, "peft_type", "?")))
    if kind != "LORA":
        raise UnsupportedError(f"model: a PEFT {kind} adapter; trainmem models LoRA (and QLoRA) only")
    base = model.get_base_model() if callable(getattr(model, "get_base_model", None)) else model
    ranks: dict[str, set[int]] = {}
    for name, mod in model.named_modules():
        r = getattr(mod, "r", None)
        if isinstance(r, dict) and adapter in r and hasattr(mod, "lora_A"):
            ranks.setdefault(name.rsplit(".", 1)[-1].lower(), set()).add(int(r[adapter]))
    if not ranks:
        raise UnsupportedError(f"model: the PEFT adapter {adapter!r} adapts no module trainmem can see (no LoraLayer)")
    all_ranks = set().union(*ranks.values())
    if len(all_ranks) > 1:
        detail = ", ".join(f"{t}: {sorted(r)}" for t, r in sorted(ranks.items()))
        raise UnsupportedError(f"model: LoRA ranks differ between modules ({detail}; rank_pattern); trainmem models one "
                               "rank for every adapted module")
    rank, targets = all_ranks.pop(), tuple(sorted(ranks))
    fields = {"lora_rank": rank, "lora_targets": targets}
    notes = [f"lora_rank {rank}, lora_targets {','.join(targets)}: read from the PEFT model's adapter {adapter!r} "
             "(the modules it adapted)"]
    if getattr(cfg, "use_dora", False):
        notes.append("warning: DoRA (use_dora) adds a magnitude vector per adapted module and a weight-norm in "
                     "forward that trainmem does not model; estimated as LoRA")
    return base, fields, notes


def _quantization(base: Any, tally: ParamTally) -> tuple[dict[str, Any], list[str]]:
    qc = getattr(getattr(base, "config", None), "quantization_config", None)
    q = qc if isinstance(qc, dict) else (qc.to_dict() if callable(getattr(qc, "to_dict", None)) else {})
    if q.get("load_in_8bit"):
        return {"load_in_8bit": True}, ["load_in_8bit: the base weights are LLM.int8 (config.quantization_config "
                                        "load_in_8bit); modelled as bitsandbytes 0.41 runs them"]
    if tally.quantized_4bit or q.get("load_in_4bit"):
        src = "Params4bit parameters" if tally.quantized_4bit else "config.quantization_config load_in_4bit"
        kind = q.get("bnb_4bit_quant_type", "nf4")
        return {"qlora": True}, [f"qlora: the base weights are 4-bit ({src}, {kind}); modelled as NF4 with "
                                 "double quantisation"]
    return {}, []


def _precision(tally: ParamTally, lora: bool) -> tuple[dict[str, Any], list[str]]:
    floats = {k: v for k, v in tally.dtypes.items() if k in _DTYPE}
    if not floats:
        return {}, []
    dtype = max(floats, key=floats.__getitem__)
    p = _DTYPE[dtype]
    if p == "fp32" and not lora:
        return {}, []  # the default recipe (AMP) keeps fp32 weights
    why = ("its LoRA base is fp32 (trainmem's 16-bit recipes load a 16-bit base)" if p == "fp32" else
           f"the model's parameters are {dtype}")
    return {"precision": p}, [f"precision {p}: {why} (give precision='amp-bf16' when the forward runs under "
                              "autocast with 16-bit weights, e.g. HF Trainer bf16=True)"]


def _kbit_prep(model: Any, base: Any) -> tuple[dict[str, Any], list[str]]:
    """``kbit_prep`` of a quantized LoRA model, from its frozen floating parameters' dtypes (the adapters and the
    quantized weights left out): all fp32 → ``peft`` (PEFT's ``prepare_model_for_kbit_training``: every fp16/bf16
    parameter not a ``Params4bit`` to fp32, peft/utils/other.py), the precision from ``bnb_4bit_compute_dtype``;
    only norms fp32 → ``norms-fp32``."""
    wide = {"norm": 0, "other": 0, "16": 0}
    for name, p in model.named_parameters():
        if "lora_" in name or type(p).__name__ in ("Params4bit", "Int8Params") or not p.is_floating_point():
            continue
        key = "16" if str(p.dtype) != "torch.float32" else ("norm" if "norm" in name.lower() else "other")
        wide[key] += p.numel()
    if wide["other"] and not wide["16"]:
        qc = getattr(getattr(base, "config", None), "quantization_config", None)
        q = qc if isinstance(qc, dict) else (qc.to_dict() if callable(getattr(qc, "to_dict", None)) else {})
        compute = str(q.get("bnb_4bit_compute_dtype") or "bfloat16").replace("torch.", "")
        fields: dict[str, Any] = {"kbit_prep": "peft"}
        if compute == "bfloat16":
            fields["precision"] = "bf16"
        lines = ["kbit_prep peft: the quantized base's other weights are all fp32 (PEFT's "
                 "prepare_model_for_kbit_training)"]
        if compute == "bfloat16":
            lines.append("precision bf16: the 4-bit linears compute in bnb_4bit_compute_dtype bfloat16 (the fp32 "
                         "weights are PEFT's upcast)")
        return fields, lines
    if wide["norm"] and not wide["other"]:
        return {"kbit_prep": "norms-fp32"}, ["kbit_prep norms-fp32: only the norm weights are fp32"]
    return {}, []


def read_live_model(model: Any) -> LiveModel:
    """The spec and the setup fields of a live model (see the module docstring); one line on what cannot be."""
    from trainmem.model.hf import spec_from_hf_config

    base, fields, notes = _peft_lora(model)
    config = getattr(base, "config", None)
    if config is None or not callable(getattr(config, "to_dict", None)):
        raise UnsupportedError(f"model: a {type(model).__name__} without a transformers config; trainmem needs the "
                               "architecture: pass its config.json (path or dict) or a PretrainedConfig")
    cfg = config.to_dict()
    cfg["architectures"] = [type(base).__name__]
    cfg.pop("quantization_config", None)
    name = str(getattr(base, "name_or_path", "") or getattr(config, "_name_or_path", "") or type(base).__name__)
    spec = spec_from_hf_config(cfg, name=name, source=f"a live {type(model).__name__}")
    tally = tally_parameters(model)
    lora = bool(fields)
    more, lines = _quantization(base, tally)
    fields.update(more)
    notes += lines
    kbit, kbit_lines = _kbit_prep(model, base) if lora and more else ({}, [])
    more, lines = _precision(tally, lora) if "precision" not in kbit else ({}, [])
    fields.update(more)
    notes += lines
    fields.update(kbit)
    notes += kbit_lines
    checkpointing = getattr(base, "is_activation_checkpointing", None)
    if checkpointing is None:
        checkpointing = getattr(base, "is_gradient_checkpointing", False)
    if checkpointing is True:
        fields["recompute"] = "full"
        notes.append("recompute full: gradient checkpointing is on in the model")
    attn = _ATTN.get(str(getattr(config, "_attn_implementation", None)))
    if attn is not None:
        fields["attn"] = attn
        notes.append(f"attn {attn}: the model's attn_implementation {config._attn_implementation!r}")

    def check(spec: ModelSpec, ts: TrainingSetup) -> list[str]:
        return _check_counts(spec, ts, tally, lora)

    return LiveModel(spec=spec, config=cfg, fields=fields, notes=notes, tally=tally, check=check)


def _check_counts(spec: ModelSpec, ts: TrainingSetup, tally: ParamTally, lora: bool) -> list[str]:
    """Warning lines where the object's counts differ from what is estimated."""
    from trainmem.memory.states import lora_param_count

    out = []
    base = tally.total - tally.adapter
    if base != spec.n_params:
        out.append(f"warning: the live model has {base:,} parameters outside adapters, its config describes "
                   f"{spec.n_params:,} (estimated from the config)")
    expected = lora_param_count(spec, ts) if ts.is_lora else spec.n_params
    if tally.trainable != expected:
        if ts.is_lora and lora:
            what = "LoRA adapters of this rank and these targets have"
        elif ts.is_lora:
            what = "the LoRA setup given has"
        else:
            what = "full fine-tuning trains"
        out.append(f"warning: the live model has {tally.trainable:,} trainable parameters (requires_grad), "
                   f"{what} {expected:,} (estimated as the setup says: frozen parameters outside a PEFT adapter, "
                   "modules_to_save and trainable biases are not modelled)")
    return out
