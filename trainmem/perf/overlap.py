"""What a collective costs when it runs under compute: the part it cannot hide, plus the compute it slows.

Two published effects:

- A collective hides under concurrent compute only up to that compute's length; what cannot start early
  (the last bucket, the first chunk) stays exposed.
- The hidden part is not free: NCCL kernels occupy SMs and share L2 and HBM bandwidth with the compute they
  overlap, which runs on average 18.9 % slower meanwhile (Lee et al. 2025, arXiv 2507.03114, abstract;
  calibration.OVERLAP_CONTENTION). The extra compute time is charged to the collective's kind in the
  breakdown (dp_comm, tp_comm, cp_comm), as exposed communication cost.
"""

from __future__ import annotations

from trainmem.perf import calibration as cal

__all__ = ["contention_seconds", "overlapped_seconds", "chunked_overlap_seconds"]


def contention_seconds(hidden_comm_seconds: float, compute_seconds: float) -> float:
    """Extra compute time while ``hidden_comm_seconds`` of communication runs under ``compute_seconds`` of
    compute: OVERLAP_CONTENTION × the concurrent time (the shorter of the two)."""
    if hidden_comm_seconds <= 0 or compute_seconds <= 0:
        return 0.0
    return cal.OVERLAP_CONTENTION * min(hidden_comm_seconds, compute_seconds)


def overlapped_seconds(comm_seconds: float, compute_seconds: float, tail_seconds: float) -> float:
    """Exposed seconds of a collective launched during ``compute_seconds`` of compute: what exceeds the
    compute, plus the part that cannot start early (``tail_seconds``: the last bucket), plus the contention
    of the hidden part."""
    if compute_seconds <= 0 or comm_seconds <= 0:
        return max(0.0, comm_seconds) + tail_seconds
    if comm_seconds <= compute_seconds:  # all hidden: the contention of its whole length
        return tail_seconds + cal.OVERLAP_CONTENTION * comm_seconds
    return comm_seconds - compute_seconds + tail_seconds + cal.OVERLAP_CONTENTION * compute_seconds


def chunked_overlap_seconds(comm_seconds: float, compute_seconds: float, chunks: int) -> float:
    """A collective split into ``chunks`` pipelined with the GEMM that consumes (or produces) it, as
    Transformer Engine's userbuffers overlap does for TP all-gather + GEMM and GEMM + reduce-scatter (one
    chunk per TP rank: the first or the last chunk cannot overlap). Exposed: the larger of one chunk and the
    excess over the compute, plus the contention of the rest."""
    if comm_seconds <= 0:
        return 0.0
    first = comm_seconds / max(chunks, 1)
    exposed = max(first, comm_seconds - compute_seconds)
    return exposed + contention_seconds(comm_seconds - exposed, compute_seconds)
