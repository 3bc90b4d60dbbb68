"""The preflight check: will this run fit, estimated from the live model before its first step.

:func:`check` estimates the run (``trainmem.estimate`` on the live model and the setup fields the caller read
from its trainer), and :func:`record` is the JSON line written for it::

    {"setup": {...}, "model": ..., "gpu": ..., "fits": ...,
     "predicted": {"peak_allocated_bytes", "peak_reserved_bytes", "device_total_bytes"},
     "measured": {"max_memory_allocated_bytes", "max_memory_reserved_bytes", "step"} | null,
     "device": "cpu" | "cuda:0 NVIDIA H100 80GB HBM3", "versions": {"trainmem", "torch", "transformers", "peft"}}

``measured`` is null before the first step and on a machine without CUDA; on CUDA a second line is written
after the first steady step (the second optimizer step: optimizer states exist), with
``torch.cuda.max_memory_allocated/reserved`` over that step.

When the device total (reserved + CUDA context + NCCL) is above the GPU's memory, the message names the
fixes from ``trainmem compare`` for this run: those that fit, least slowdown first, else the largest savings.
"""

from __future__ import annotations

import json
import os
import warnings
from dataclasses import dataclass
from typing import Any

from trainmem.errors import TrainmemError

__all__ = ["OVERFLOW_ACTIONS", "PreflightOverflowError", "PreflightResult", "check", "device_fields", "record",
           "write_line", "versions", "first_samples_seq_len", "deepspeed_fields", "cuda_peaks"]

OVERFLOW_ACTIONS = ("warn", "raise")


class PreflightOverflowError(TrainmemError, RuntimeError):
    """The run will not fit on its GPU (``on_overflow="raise"``); the message lists the fixes."""


@dataclass(frozen=True, slots=True)
class PreflightResult:
    estimate: Any
    """The :class:`trainmem.Estimate` of the run."""
    fixes: list[dict[str, Any]]
    """``trainmem compare`` options, the ones that fit first (empty when the run fits)."""
    message: str
    """One paragraph: the prediction, and the fixes when it does not fit."""


def device_fields() -> tuple[dict[str, Any], str]:
    """Setup fields of the current CUDA device (its catalog name, else its memory) and the device's description;
    ``({}, "cpu")`` without CUDA."""
    import torch

    if not torch.cuda.is_available():
        return {}, "cpu"
    from trainmem.hardware import get_gpu

    idx = torch.cuda.current_device()
    name = torch.cuda.get_device_name(idx)
    total = torch.cuda.get_device_properties(idx).total_memory
    try:
        fields: dict[str, Any] = {"gpu": get_gpu(name).name, "gpu_memory": total}
    except TrainmemError:
        fields = {"gpu_memory": total}
    return fields, f"cuda:{idx} {name}"


def check(model: Any, fields: dict[str, Any], on_overflow: str = "warn") -> PreflightResult:
    """Estimate the run of ``model`` with ``fields`` (setup keywords); warn or raise
    :class:`PreflightOverflowError` when it does not fit."""
    from trainmem.errors import ConfigError
    from trainmem.python_api import compare, estimate
    from trainmem.units import fmt_bytes as b

    if on_overflow not in OVERFLOW_ACTIONS:
        raise ConfigError(f"on_overflow {on_overflow!r}: not one of {', '.join(OVERFLOW_ACTIONS)}")
    est = estimate(model, **fields)
    if est.fits:
        msg = (f"trainmem preflight: fits, {b(est.device_total_bytes)} of {b(est.gpu_memory_bytes)} on {est.gpu} "
               f"(peak allocated {b(est.peak_allocated_bytes)})")
        return PreflightResult(estimate=est, fixes=[], message=msg)
    options = compare(model, **fields).options
    fitting = sorted((o for o in options if o["fits"]), key=lambda o: o["slowdown_pct"])
    fixes = fitting or sorted(options, key=lambda o: -o["saves_bytes"])
    shown = "; ".join(f"{o['technique']} (saves {b(o['saves_bytes'])}, step time "
                      f"{o['slowdown_pct']:+.0f} %)" for o in fixes[:4])
    msg = (f"trainmem preflight: this run will not fit: it needs {b(est.device_total_bytes)} on each GPU (peak "
           f"allocated {b(est.peak_allocated_bytes)}, at {est.peak_phase}), {est.gpu} has {b(est.gpu_memory_bytes)}. " + (f"Fixes that fit: {shown}" if fitting else
                                                          f"Nothing alone makes it fit; the largest savings: {shown}"))
    result = PreflightResult(estimate=est, fixes=fixes, message=msg)
    if on_overflow == "raise":
        raise PreflightOverflowError(msg)
    warnings.warn(msg, stacklevel=3)
    return result


def versions() -> dict[str, str | None]:
    from importlib.metadata import PackageNotFoundError, version

    from trainmem._version import __version__

    out: dict[str, str | None] = {"trainmem": __version__}
    for pkg in ("torch", "transformers", "peft", "accelerate"):
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = None
    return out


def record(result: PreflightResult, device: str, measured: dict[str, Any] | None = None) -> dict[str, Any]:
    """The JSON line of one check (see the module docstring)."""
    est = result.estimate
    return {"setup": est.setup, "model": est.model, "gpu": est.gpu, "fits": est.fits,
            "predicted": {"peak_allocated_bytes": est.peak_allocated_bytes,
                          "peak_reserved_bytes": est.peak_reserved_bytes,
                          "device_total_bytes": est.device_total_bytes},
            "measured": measured, "device": device, "versions": versions()}


def write_line(path: str | os.PathLike[str], line: dict[str, Any]) -> None:
    """Append one JSON line (the folder is created)."""
    path = os.fspath(path)
    if os.path.dirname(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(line) + "\n")


def first_samples_seq_len(dataloader: Any, micro_batch: int) -> int | None:
    """Longest ``input_ids`` of the dataset's first ``micro_batch`` samples (a map-style dataset), or None."""
    dataset = getattr(dataloader, "dataset", None)
    if dataset is None or not hasattr(dataset, "__getitem__") or not hasattr(dataset, "__len__"):
        return None
    try:
        lengths = []
        for i in range(min(micro_batch, len(dataset))):
            item = dataset[i]
            ids = item.get("input_ids") if isinstance(item, dict) else None
            if ids is None:
                return None
            lengths.append(len(ids))
    except Exception:  # noqa: BLE001 - a dataset that cannot be read by index: the sequence length is not read
        return None
    return max(lengths) if lengths else None


def deepspeed_fields(config: dict[str, Any] | None) -> dict[str, Any]:
    """``engine``, ``zero`` and ``offload`` of a DeepSpeed config dict (its ``zero_optimization``: ``stage``,
    ``offload_param`` / ``offload_optimizer`` to cpu or nvme)."""
    zero = (config or {}).get("zero_optimization", {}) or {}
    out: dict[str, Any] = {"engine": "deepspeed", "zero": int(zero.get("stage", 0))}
    if (zero.get("offload_param") or {}).get("device") in ("cpu", "nvme"):
        out["offload"] = "optimizer+params"
    elif (zero.get("offload_optimizer") or {}).get("device") in ("cpu", "nvme"):
        out["offload"] = "optimizer"
    return out


def cuda_peaks(step: int) -> dict[str, Any]:
    """The ``measured`` member of a line: ``torch.cuda.max_memory_allocated/reserved`` since the last
    ``reset_peak_memory_stats``, and the step they cover."""
    import torch

    return {"max_memory_allocated_bytes": torch.cuda.max_memory_allocated(),
            "max_memory_reserved_bytes": torch.cuda.max_memory_reserved(), "step": int(step)}
