"""``PreflightCallback``: the preflight check (:mod:`trainmem.integrations.preflight`) in an HF ``Trainer``
(and TRL's trainers, which are Trainers).

At ``on_train_begin`` — after the Trainer built its model, optimizer and dataloader, before the first step —
the run is estimated from the live model (``trainmem.estimate(model)``: exact counts, LoRA, 4-bit base, dtype)
and the ``TrainingArguments``:

==============================================  ===================================================================
``TrainingArguments``                           setup
==============================================  ===================================================================
``per_device_train_batch_size``                 ``micro_batch``
``gradient_accumulation_steps``                 ``grad_accum``
``activation_checkpointing`` (``gradient_...``)  ``recompute="full"``
``bf16`` / ``fp16``                             ``amp-bf16`` / ``amp-fp16`` (fp32 weights, or a 16-bit LoRA base), ``bf16`` /
                                                ``fp16`` (16-bit weights, full fine-tuning); neither: ``fp32`` for fp32
                                                weights; DeepSpeed: ``mixed-bf16`` / ``mixed-fp16``
``optim``                                       ``adamw_torch_fused`` → adamw fused, ``adamw_torch`` → adamw foreach,
                                                ``*8bit`` adamw → adamw-8bit, ``adafactor``, ``sgd``, ``lion*``
``world_size``                                  ``gpus``
``deepspeed`` (its ``zero_optimization``)       ``engine="deepspeed"``, ``zero``, ``offload``
``fsdp`` (``full_shard`` / ``shard_grad_op``)   ``engine="fsdp2"``, ``zero`` 3 / 2
the first micro-batch's samples                 ``seq_len``: the longest ``input_ids`` of ``dataset[0:micro_batch]``
                                                (read without the collator, so no random state is touched); else
                                                ``max_seq_length`` / ``max_length`` (TRL) when set
the CUDA device                                 ``gpu`` (its catalog name) and ``gpu_memory``
==============================================  ===================================================================

Keywords given to the callback (any ``trainmem.estimate`` setup keyword) win over what is read. One JSON line is
appended to ``log`` per check; on CUDA a second one after the first steady step (step 2) with the measured
``torch.cuda.max_memory_allocated/reserved`` of that step.
"""

from __future__ import annotations

import os
from typing import Any

from transformers import TrainerCallback

from trainmem.integrations import preflight

__all__ = ["PreflightCallback", "setup_from_training_args"]

_OPTIM = {"adamw_torch_fused": ("adamw", "fused"), "adamw_torch": ("adamw", "foreach"), "adafactor": ("hf-adafactor", None),
          "sgd": ("sgd", None)}


class PreflightCallback(TrainerCallback):
    """Check before the first step that the run fits its GPU; warn (``on_overflow="warn"``) or raise
    :class:`~trainmem.integrations.preflight.PreflightOverflowError` (``"raise"``) with the fixes when it does
    not; log one JSON line per check to ``log`` (None: no file).

    ``setup``: ``trainmem.estimate`` keywords that override what is read from the Trainer (``gpu="A100-SXM-80G"``
    to check for another GPU than this one, ``seq_len=4096`` when the dataset's samples are shorter than the
    padded batches)."""

    def __init__(self, log: str | os.PathLike[str] | None = None, on_overflow: str = "warn", **setup: Any) -> None:
        if on_overflow not in preflight.OVERFLOW_ACTIONS:
            from trainmem.errors import ConfigError
            raise ConfigError(f"on_overflow {on_overflow!r}: not one of {', '.join(preflight.OVERFLOW_ACTIONS)}")
        self.log = log
        self.on_overflow = on_overflow
        self.setup = dict(setup)
        self.result: preflight.PreflightResult | None = None
        """The check's result once the training began (its ``estimate``, ``fixes``, ``message``)."""
        self._device = "cpu"

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, train_dataloader: Any = None,
                       **kwargs: Any) -> None:
        if model is None or self.result is not None:
            return
        device_fields, self._device = preflight.device_fields()
        fields = {**device_fields, **setup_from_training_args(args, model, train_dataloader), **self.setup}
        self.result = preflight.check(model, fields, self.on_overflow)
        if self.log is not None:
            preflight.write_line(self.log, preflight.record(self.result, self._device))

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step == 1 and self._cuda():  # the first steady step begins: measure it alone
            import torch
            torch.cuda.reset_peak_memory_stats()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if state.global_step != 2 or not self._cuda() or self.result is None:
            return
        if self.log is not None:
            preflight.write_line(self.log, preflight.record(self.result, self._device, preflight.cuda_peaks(2)))

    def _cuda(self) -> bool:
        return self._device.startswith("cuda")


def setup_from_training_args(args: Any, model: Any, train_dataloader: Any = None) -> dict[str, Any]:
    """The setup keywords a Trainer run implies (the table in the module docstring); None where not read."""
    from trainmem.live_model import tally_parameters

    fields: dict[str, Any] = {"micro_batch": int(args.per_device_train_batch_size),
                              "grad_accum": int(args.gradient_accumulation_steps),
                              "gpus": max(1, int(getattr(args, "world_size", 1) or 1))}
    if getattr(args, "activation_checkpointing", False) or getattr(args, "gradient_checkpointing", False):
        fields["recompute"] = "full"
    fields.update(_engine(args))
    fields.update(_optimizer(str(getattr(getattr(args, "optim", ""), "value", getattr(args, "optim", "")))))
    tally = tally_parameters(model)
    lora = bool(getattr(model, "peft_config", None))
    half = "bf16" if getattr(args, "bf16", False) else "fp16" if getattr(args, "fp16", False) else None
    floats = {k: v for k, v in tally.dtypes.items() if k in ("torch.bfloat16", "torch.float16", "torch.float32")}
    weights16 = bool(floats) and max(floats, key=floats.__getitem__) != "torch.float32"
    if fields.get("engine") == "deepspeed":
        fields["precision"] = f"mixed-{half}" if half else "fp32"
    elif half:
        fields["precision"] = half if weights16 and not lora else f"amp-{half}"
    elif not weights16:
        fields["precision"] = "fp32"  # no mixed precision asked: the Trainer trains the fp32 weights as they are
    seq = preflight.first_samples_seq_len(train_dataloader, fields["micro_batch"])
    if seq is None:
        seq = getattr(args, "max_seq_length", None) or getattr(args, "max_length", None)
    if isinstance(seq, int) and seq > 0:
        fields["seq_len"] = seq
    return fields


def _engine(args: Any) -> dict[str, Any]:
    ds = getattr(args, "deepspeed", None)
    if ds:
        cfg = getattr(getattr(args, "hf_deepspeed_config", None), "config", None)
        if cfg is None and isinstance(ds, dict):
            cfg = ds
        if cfg is None and isinstance(ds, (str, os.PathLike)) and os.path.isfile(ds):
            import json
            with open(ds, encoding="utf-8") as fh:
                cfg = json.load(fh)
        return preflight.deepspeed_fields(cfg)
    fsdp = getattr(args, "fsdp", None)
    options = [str(getattr(o, "value", o)) for o in fsdp] if isinstance(fsdp, (list, tuple)) else str(fsdp or "").split()
    if "full_shard" in options or "hybrid_shard" in options:
        return {"engine": "fsdp2", "zero": 3}
    if "shard_grad_op" in options or "hybrid_shard_zero2" in options:
        return {"engine": "fsdp2", "zero": 2}
    return {}


def _optimizer(optim: str) -> dict[str, Any]:
    if optim in _OPTIM:
        name, impl = _OPTIM[optim]
        return {"optimizer": name, **({"optimizer_impl": impl} if impl else {})}
    if "8bit" in optim and "adam" in optim:
        return {"optimizer": "adamw-8bit"}
    if optim.startswith(("lion", "paged_lion")):
        return {"optimizer": "lion"}
    return {}
