"""``PreflightCallback`` for Lightning (``lightning.pytorch``, 2.6): the preflight check
(:mod:`trainmem.integrations.preflight`) before the first step of ``Trainer.fit``.

At ``on_train_start`` — after the strategy set up the model and optimizers and the fit loop its dataloader
(lightning 2.6 ``loops/fit_loop.py``: ``setup_data()`` runs before ``on_run_start`` calls the hook) — the run is
estimated from the live model and the Trainer:

=========================================  ======================================================================
Lightning                                  setup
=========================================  ======================================================================
the ``LightningModule``                    the transformers model inside it: the module itself when it has a
                                           ``config``, else its first submodule that has one (a
                                           ``PreTrainedModel`` / ``PeftModel``; ``model_attr=`` names it)
``trainer.precision``                      ``bf16-mixed`` / ``16-mixed`` → ``amp-bf16`` / ``amp-fp16``;
                                           ``bf16-true`` / ``16-true`` → ``bf16`` / ``fp16``; ``32-true`` → ``fp32``;
                                           under DeepSpeed ``*-mixed`` → ``mixed-bf16`` / ``mixed-fp16``
``trainer.accumulate_grad_batches``        ``grad_accum``
``trainer.world_size``                     ``gpus``
``trainer.strategy``                       ``DeepSpeedStrategy`` → ``deepspeed`` with its config's ZeRO stage and
                                           offload; ``FSDPStrategy`` (FSDP1) → ``fsdp2`` (trainmem's FSDP engine),
                                           ``FULL_SHARD``/``HYBRID_SHARD`` zero 3, ``SHARD_GRAD_OP`` zero 2;
                                           ``ModelParallelStrategy`` (FSDP2 + TP) → ``fsdp2``
                                           with its ``tensor_parallel_size`` as ``tp``
``trainer.optimizers[0]``                  ``optimizer`` / ``optimizer_impl`` (:func:`trainmem.integrations.loop.optimizer_fields`)
``trainer.train_dataloader``               ``micro_batch`` (its ``batch_size``), ``seq_len`` (the longest
                                           ``input_ids`` of the dataset's first samples, read by index)
the CUDA device                            ``gpu`` and ``gpu_memory``
=========================================  ======================================================================

Keywords given to the callback win. One JSON line per check goes to ``log``; on CUDA a second one after the
second optimizer step (``trainer.global_step`` 2) with ``torch.cuda.max_memory_allocated/reserved`` of that step.
"""

from __future__ import annotations

import os
from typing import Any

from lightning.pytorch import Callback

from trainmem.errors import ConfigError, UnsupportedError
from trainmem.integrations import preflight
from trainmem.integrations.loop import optimizer_fields

__all__ = ["PreflightCallback", "setup_from_trainer", "PRECISIONS"]

#: ``trainer.precision`` (lightning 2.6 ``_PRECISION_INPUT_STR``) -> trainmem precision (DeepSpeed: mixed-*).
PRECISIONS = {"bf16-mixed": "amp-bf16", "16-mixed": "amp-fp16", "bf16-true": "bf16", "16-true": "fp16",
              "32-true": "fp32", "32": "fp32"}
_FSDP_ZERO = {"FULL_SHARD": 3, "HYBRID_SHARD": 3, "SHARD_GRAD_OP": 2, "_HYBRID_SHARD_ZERO2": 2}


class PreflightCallback(Callback):
    """Check before the first step that the run fits its GPU; warn or raise
    :class:`~trainmem.integrations.preflight.PreflightOverflowError` (``on_overflow="raise"``) with the fixes when
    it does not; one JSON line per check to ``log`` (None: no file). ``setup``: ``trainmem.estimate`` keywords
    that win over what is read (``seq_len=4096`` when batches are padded to it)."""

    def __init__(self, log: str | os.PathLike[str] | None = None, on_overflow: str = "warn",
                 model_attr: str | None = None, **setup: Any) -> None:
        if on_overflow not in preflight.OVERFLOW_ACTIONS:
            raise ConfigError(f"on_overflow {on_overflow!r}: not one of {', '.join(preflight.OVERFLOW_ACTIONS)}")
        self.log_path, self.on_overflow, self.model_attr, self.setup = log, on_overflow, model_attr, dict(setup)
        self.result: preflight.PreflightResult | None = None
        self._device = "cpu"
        self._measured = False

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        if self.result is not None:
            return
        device_fields, self._device = preflight.device_fields()
        model = hf_model_of(pl_module, self.model_attr)
        fields = {**device_fields, **setup_from_trainer(trainer), **self.setup}
        self.result = preflight.check(model, fields, self.on_overflow)
        if self.log_path is not None:
            preflight.write_line(self.log_path, preflight.record(self.result, self._device))

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        if trainer.global_step == 1 and not self._measured and self._device.startswith("cuda"):
            import torch
            torch.cuda.reset_peak_memory_stats()

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if trainer.global_step != 2 or self._measured or self.result is None or not self._device.startswith("cuda"):
            return
        self._measured = True
        if self.log_path is not None:
            preflight.write_line(self.log_path, preflight.record(self.result, self._device, preflight.cuda_peaks(2)))


def hf_model_of(pl_module: Any, attr: str | None = None) -> Any:
    """The transformers model a LightningModule trains (see the module docstring); one line when there is none."""
    if attr is not None:
        model = getattr(pl_module, attr, None)
        if model is None:
            raise ConfigError(f"model_attr {attr!r}: the {type(pl_module).__name__} has no such attribute")
        return model
    if callable(getattr(getattr(pl_module, "config", None), "to_dict", None)):
        return pl_module
    for _, module in pl_module.named_children():
        if callable(getattr(getattr(module, "config", None), "to_dict", None)):
            return module
    raise UnsupportedError(f"the {type(pl_module).__name__} holds no transformers model (no submodule with a "
                           "config); give PreflightCallback(model_attr=...) or estimate it with trainmem.estimate")


def setup_from_trainer(trainer: Any) -> dict[str, Any]:
    """The setup keywords a Lightning Trainer implies (the table in the module docstring)."""
    fields: dict[str, Any] = {"grad_accum": int(trainer.accumulate_grad_batches),
                              "gpus": max(1, int(trainer.world_size or 1))}
    fields.update(_strategy(trainer.strategy))
    precision = str(trainer.precision)
    if precision not in PRECISIONS:
        raise UnsupportedError(f"trainer.precision {precision!r}: trainmem models {', '.join(PRECISIONS)}")
    fields["precision"] = PRECISIONS[precision]
    if fields.get("engine") == "deepspeed" and precision.endswith("-mixed"):
        fields["precision"] = "mixed-" + ("bf16" if precision.startswith("bf16") else "fp16")
    if trainer.optimizers:
        fields.update(optimizer_fields(trainer.optimizers[0]))
    loader = trainer.train_dataloader
    batch_size = getattr(loader, "batch_size", None)
    if isinstance(batch_size, int) and batch_size > 0:
        fields["micro_batch"] = batch_size
        seq = preflight.first_samples_seq_len(loader, batch_size)
        if seq:
            fields["seq_len"] = seq
    return fields


def _strategy(strategy: Any) -> dict[str, Any]:
    kind = type(strategy).__name__
    if kind == "DeepSpeedStrategy":
        return preflight.deepspeed_fields(getattr(strategy, "config", None))
    if kind == "FSDPStrategy":
        name = getattr(getattr(strategy, "sharding_strategy", None), "name", "FULL_SHARD")
        if name not in _FSDP_ZERO:
            raise UnsupportedError(f"FSDPStrategy sharding_strategy {name}: trainmem models FULL_SHARD, HYBRID_SHARD, "
                                   "SHARD_GRAD_OP")
        return {"engine": "fsdp2", "zero": _FSDP_ZERO[name]}
    if kind == "ModelParallelStrategy":
        tp = getattr(strategy, "_tensor_parallel_size", 1)
        return {"engine": "fsdp2", **({"tp": tp} if isinstance(tp, int) and tp > 1 else {})}
    return {}
