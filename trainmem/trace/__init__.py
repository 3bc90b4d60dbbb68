"""The tracer: the ground truth the estimator is judged by.

``trace_step(spec, setup)`` builds the real ``transformers`` model on fake tensors, runs a warm-up
and a steady optimizer step as the engine does, and records every device allocation and free of
the steady step (:class:`TraceResult`). Needs the ``trace`` extra (torch, transformers).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from trainmem.model.spec import ModelSpec
    from trainmem.setup import TrainingSetup
    from trainmem.trace.result import TraceResult

__all__ = ["trace_step", "TraceResult", "CATEGORIES"]


def __getattr__(name: str) -> Any:
    """``TraceResult`` and ``CATEGORIES`` on first use (PEP 562): ``trainmem estimate`` imports this package for
    the caching-allocator replay (``trainmem.trace.allocator``) only, not the trace's result type (start-up time)."""
    if name in ("TraceResult", "CATEGORIES"):
        from trainmem.trace import result
        value = getattr(result, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'trainmem.trace' has no attribute {name!r}")


def trace_step(spec: "ModelSpec", setup: "TrainingSetup", *,
               progress: Callable[[int, int, str], None] | None = None) -> "TraceResult":
    """Trace one steady training step; see :func:`trainmem.trace.step.trace_step`."""
    try:
        from trainmem.trace.step import trace_step as _trace
    except ImportError as e:  # torch/transformers missing
        from trainmem.errors import UnsupportedError

        raise UnsupportedError(f"tracing needs torch and transformers ({e.name} missing): "
                               "pip install 'trainmem[trace]'; or use `trainmem estimate`") from None
    return _trace(spec, setup, progress=progress)
