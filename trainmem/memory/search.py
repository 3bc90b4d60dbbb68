"""Searches over the estimator: the largest micro-batch that fits."""

from __future__ import annotations

from trainmem.memory.estimate import MemoryEstimate, estimate
from trainmem.model.spec import ModelSpec
from trainmem.setup import TrainingSetup

__all__ = ["max_micro_batch"]


def max_micro_batch(spec: ModelSpec, setup: TrainingSetup, limit: int = 4096) -> tuple[int, MemoryEstimate | None]:
    """Largest micro-batch whose ``device_total_bytes`` fits the GPU (0 if none). Memory grows
    monotonically with the micro-batch, so exponential search then bisection."""

    def at(mb: int) -> MemoryEstimate:
        return estimate(spec, setup.model_copy(update={"micro_batch": mb}))

    first = at(1)
    if not first.fits:
        return 0, None
    lo, lo_est, hi = 1, first, 2
    while hi <= limit:
        e = at(hi)
        if not e.fits:
            break
        lo, lo_est, hi = hi, e, hi * 2
    else:
        return lo, lo_est
    while hi - lo > 1:
        mid = (lo + hi) // 2
        e = at(mid)
        if e.fits:
            lo, lo_est = mid, e
        else:
            hi = mid
    return lo, lo_est
