"""Searches over the estimator: the largest micro-batch that fits."""

from __future__ import annotations

from trainmem.memory.estimate import MemoryEstimate, estimate
from trainmem.model.spec import ModelSpec
from trainmem.setup import TrainingSetup

__all__ = ["max_micro_batch", "MICRO_BATCH_CAP"]

MICRO_BATCH_CAP = 2**20
"""The search stops at 1,048,576 sequences (= ``trainmem.api.STEP_LIMITS["micro_batch"]``); a result
equal to the cap means "at least this many" (reported as ``capped``)."""


def max_micro_batch(spec: ModelSpec, setup: TrainingSetup,
                    limit: int = MICRO_BATCH_CAP) -> tuple[int, MemoryEstimate | None]:
    """Largest micro-batch ≤ ``limit`` whose ``device_total_bytes`` fits the GPU (0 if none; ``limit``
    itself when that fits: larger ones were not tried). Memory grows monotonically with the
    micro-batch, so exponential search then bisection (~2·log2(limit) estimates)."""

    def at(mb: int) -> MemoryEstimate:
        # (the fit does not read the run replay of --sample-lengths: not run for each candidate)
        return estimate(spec, setup.model_copy(update={"micro_batch": mb, "sample_lengths": None, "run_steps": None}))

    first = at(1)
    if not first.fits:
        return 0, None
    lo, lo_est, hi = 1, first, 2
    while True:
        if lo >= limit:
            return lo, lo_est
        hi = min(hi, limit)
        e = at(hi)
        if not e.fits:
            break
        lo, lo_est, hi = hi, e, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        e = at(mid)
        if e.fits:
            lo, lo_est = mid, e
        else:
            hi = mid
    return lo, lo_est
