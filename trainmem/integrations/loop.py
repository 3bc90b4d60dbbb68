"""``trainmem.preflight``: the preflight check (:mod:`trainmem.integrations.preflight`) for a plain training loop.

Called once before the first step, with the objects the loop holds::

    check = trainmem.preflight(model, optimizer=opt, batch=next(iter(loader)), log="preflight.jsonl")
    ...
    torch.cuda.reset_peak_memory_stats()          # before the first steady step (the second)
    train_step(batch)
    trainmem.integrations.loop.measure(check, log="preflight.jsonl")   # its measured line (CUDA only)

What is read (keywords given win over all of it; each read value is stated in the estimate's assumptions):

=================================================  =============================================================
object                                             setup
=================================================  =============================================================
``model``                                          exact counts, LoRA, 4-bit base, dtype, gradient checkpointing
                                                   (:mod:`trainmem.live_model`)
``batch``: a ``(B, S)`` tensor of token ids, or a  ``micro_batch`` = B, ``seq_len`` = S
mapping (``BatchEncoding``) with ``input_ids``
``optimizer``: its class (torch.optim, bitsandbytes,  ``optimizer`` and ``optimizer_impl``: ``fused=True`` → fused,
transformers' Adafactor), ``defaults``             else foreach (torch 2.13 ``torch/optim/optimizer.py``
                                                   ``_default_to_fused_or_foreach``: foreach on CUDA tensors)
``autocast="bf16"|"fp16"``                         ``amp-bf16`` / ``amp-fp16`` (the forward runs under
                                                   ``torch.autocast``; not visible on the objects)
the CUDA device                                    ``gpu`` (its catalog name) and ``gpu_memory``
=================================================  =============================================================

An optimizer class trainmem does not model is refused with one line (``UnsupportedError``) rather than estimated
as another: pass ``optimizer`` as a trainmem name instead (``optimizer="adamw"``) to say what it is like.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from trainmem.errors import ConfigError, UnsupportedError
from trainmem.integrations import preflight as _pf

__all__ = ["AUTOCAST", "preflight", "measure", "batch_fields", "optimizer_fields"]

AUTOCAST = ("bf16", "fp16")

#: optimizer class name -> trainmem optimizer (torch.optim 2.13, bitsandbytes 0.45 ``bitsandbytes/optim``,
#: transformers ``optimization.Adafactor``, lion-pytorch ``Lion``).
_OPTIMIZERS = {
    "AdamW": "adamw", "Adam": "adam", "AdamW8bit": "adamw-8bit", "Adam8bit": "adamw-8bit",
    "PagedAdamW": "paged-adamw", "PagedAdamW32bit": "paged-adamw", "PagedAdamW8bit": "paged-adamw-8bit",
    "Adafactor": "adafactor", "Lion": "lion", "Lion8bit": "lion",
}


def optimizer_fields(optimizer: Any) -> dict[str, Any]:
    """The ``optimizer`` / ``optimizer_impl`` setup fields of a live optimizer (the table in the module docstring)."""
    name = type(optimizer).__name__
    if name == "SGD":
        momentum = float(getattr(optimizer, "defaults", {}).get("momentum", 0) or 0)
        return {"optimizer": "sgd-momentum" if momentum else "sgd"}
    if name not in _OPTIMIZERS:
        raise UnsupportedError(f"optimizer: a {type(optimizer).__module__}.{name}, which trainmem does not model; pass "
                               "optimizer= the name of the closest of adamw, adam, sgd, "
                               "sgd-momentum, adamw-8bit, adafactor, lion, paged-adamw, paged-adamw-8bit")
    fields: dict[str, Any] = {"optimizer": _OPTIMIZERS[name]}
    if name in ("AdamW", "Adam") and type(optimizer).__module__.startswith("torch."):
        fused = bool(getattr(optimizer, "defaults", {}).get("fused"))
        fields["optimizer_impl"] = "fused" if fused else "foreach"
    return fields


def batch_fields(batch: Any) -> dict[str, Any]:
    """``micro_batch`` and ``seq_len`` of one batch: a 2-D tensor of token ids, or a mapping with ``input_ids``."""
    ids = batch.get("input_ids") if isinstance(batch, Mapping) or hasattr(batch, "keys") else batch
    shape = getattr(ids, "shape", None)
    if shape is None or len(shape) != 2:
        got = type(batch).__name__ if shape is None else f"a tensor of shape {tuple(shape)}"
        raise ConfigError(f"batch: expected a (batch, seq) tensor of token ids or a mapping with input_ids, got {got}")
    return {"micro_batch": int(shape[0]), "seq_len": int(shape[1])}


def preflight(model: Any, optimizer: Any = None, batch: Any = None, *, autocast: str | None = None,
              log: str | os.PathLike[str] | None = None, on_overflow: str = "warn", **setup: Any) -> _pf.PreflightResult:
    """Estimate this run from its live objects before the first step; warn (``on_overflow="warn"``) or raise
    :class:`~trainmem.integrations.preflight.PreflightOverflowError` (``"raise"``) with the fixes when it will not
    fit; append one JSON line to ``log`` (the format of :mod:`trainmem.integrations.preflight`)."""
    if autocast is not None and autocast not in AUTOCAST:
        raise ConfigError(f"autocast {autocast!r}: not one of {', '.join(AUTOCAST)} (or None)")
    device, where = _pf.device_fields()
    fields: dict[str, Any] = dict(device)
    if batch is not None:
        fields.update(batch_fields(batch))
    if isinstance(optimizer, str):
        fields["optimizer"] = optimizer
    elif optimizer is not None:
        fields.update(optimizer_fields(optimizer))
    if autocast is not None:
        fields["precision"] = f"amp-{autocast}"
    fields.update(setup)
    result = _pf.check(model, fields, on_overflow)
    if log is not None:
        _pf.write_line(log, _pf.record(result, where))
    return result


def measure(result: _pf.PreflightResult, log: str | os.PathLike[str], step: int = 2) -> dict[str, Any] | None:
    """Append the measured line of ``result`` (``torch.cuda.max_memory_allocated/reserved`` since the caller's last
    ``reset_peak_memory_stats``); returns it, or None (nothing written) without CUDA."""
    import torch

    if not torch.cuda.is_available():
        return None
    _, where = _pf.device_fields()
    line = _pf.record(result, where, _pf.cuda_peaks(step))
    _pf.write_line(log, line)
    return line
