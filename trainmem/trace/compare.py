"""Estimate and trace side by side: per category and total, with the relative error.

The estimate's cuBLAS workspace (``cuda_only_bytes``) is allocated on a GPU but invisible to a CPU trace,
so it is taken out of the estimate before comparing.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainmem.memory import MemoryEstimate, estimate
from trainmem.model.spec import ModelSpec
from trainmem.setup import TrainingSetup
from trainmem.trace.result import CATEGORIES, TraceResult

__all__ = ["Comparison", "compare", "rel_error"]


def rel_error(est: int, ref: int) -> float:
    """(estimate − trace) / trace; 0 when both are 0."""
    if ref == 0:
        return 0.0 if est == 0 else float("inf")
    return (est - ref) / ref


@dataclass(frozen=True, slots=True)
class Comparison:
    estimate: MemoryEstimate
    trace: TraceResult
    estimate_peak_bytes: int
    """The estimate's peak allocated without what a CPU trace cannot see (cuBLAS workspace)."""

    @property
    def peak_error(self) -> float:
        return rel_error(self.estimate_peak_bytes, self.trace.peak_allocated_bytes)

    @property
    def estimate_reserved_bytes(self) -> int:
        """The estimate's peak reserved without the cuBLAS workspace's own segment (a CPU trace has none)."""
        from trainmem.trace.allocator import allocation_size

        ws = self.estimate.cuda_only_bytes
        return self.estimate.peak_reserved_bytes - (allocation_size(ws) if ws else 0)

    @property
    def reserved_error(self) -> float:
        """(estimated − simulated) / simulated peak reserved (the trace replayed through the allocator)."""
        return rel_error(self.estimate_reserved_bytes, self.trace.peak_reserved_bytes)

    def rows(self) -> list[tuple[str, int, int, float]]:
        """(category, estimate bytes at its peak, trace bytes at its peak, relative error)."""
        est = dict(self.estimate.breakdown_at_peak_bytes)
        est["other"] -= self.estimate.cuda_only_bytes
        return [(c, est[c], self.trace.breakdown_at_peak_bytes.get(c, 0),
                 rel_error(est[c], self.trace.breakdown_at_peak_bytes.get(c, 0))) for c in CATEGORIES]

    def to_dict(self) -> dict:
        return {
            "estimate_peak_allocated_bytes": self.estimate_peak_bytes,
            "trace_peak_allocated_bytes": self.trace.peak_allocated_bytes,
            "peak_relative_error": self.peak_error,
            "estimate_peak_reserved_bytes": self.estimate_reserved_bytes,
            "trace_peak_reserved_bytes": self.trace.peak_reserved_bytes,
            "reserved_relative_error": self.reserved_error,
            "estimate_peak_phase": self.estimate.peak_phase,
            "trace_peak_phase": self.trace.peak_phase,
            "categories": [{"category": c, "estimate_bytes": e, "trace_bytes": t, "relative_error": r}
                           for c, e, t, r in self.rows()],
        }


def compare(spec: ModelSpec, setup: TrainingSetup, trace: TraceResult | None = None) -> Comparison:
    from trainmem.trace import trace_step

    est = estimate(spec, setup)
    tr = trace if trace is not None else trace_step(spec, setup)
    return Comparison(estimate=est, trace=tr, estimate_peak_bytes=est.peak_allocated_bytes - est.cuda_only_bytes)
