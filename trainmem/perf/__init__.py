"""Performance model: the time of one training step from FLOPs, achievable kernel efficiency, alpha-beta
collectives and what each engine overlaps (issue 8, item 2). Pure arithmetic; every constant is in
:mod:`trainmem.perf.calibration` with what it was measured on (two are calibrated on held-in published runs;
docs/performance.md).

Public API: :func:`step_time` → :class:`StepTime`; :func:`microbatch_seconds`, :func:`grad_sync_seconds`,
:func:`optimizer_seconds`.
"""

from trainmem.perf.step import (BREAKDOWN_KEYS, StepTime, grad_sync_seconds, microbatch_seconds, optimizer_seconds,
                                step_time)

__all__ = ["StepTime", "step_time", "microbatch_seconds", "grad_sync_seconds", "optimizer_seconds", "BREAKDOWN_KEYS"]
