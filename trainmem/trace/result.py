"""TraceResult: what one traced training step held on the GPU, by category, and when.

All figures are ``int`` bytes of the CUDA caching allocator's *allocated* memory (every block
rounded up to 512 B), for one rank. Categories are the estimator's (``CATEGORIES``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

__all__ = ["CATEGORIES", "TraceResult"]

#: The estimator's memory categories; ``breakdown_at_peak_bytes`` sums to ``peak_allocated_bytes``.
CATEGORIES: tuple[str, ...] = (
    "parameters",
    "master_weights",
    "gradients",
    "optimizer_states",
    "activations",
    "temporaries",
    "communication_buffers",
    "other",
)


@dataclass(frozen=True, kw_only=True, slots=True)
class TraceResult:
    """The steady (second) optimizer step of a traced run."""

    peak_allocated_bytes: int
    """Highest allocated memory during the steady step (static included)."""
    breakdown_at_peak_bytes: dict[str, int]
    """What was alive at the peak, by category (sums to ``peak_allocated_bytes``)."""
    category_peak_bytes: dict[str, int]
    """Each category's own maximum over the steady step (these peaks need not coincide)."""
    peak_phase: str
    """Phase of the peak: ``forward[i]``, ``loss[i]``, ``backward[i]``, ``optimizer.step``, ``zero_grad``."""
    peak_module: str
    """Qualified name of the module running at the peak (forward stack, or the autograd node's module in backward)."""
    timeline: list[tuple[str, int]]
    """(phase, allocated bytes) after each allocation/free, downsampled to at most ~2000 points (peak kept)."""
    static_bytes: int
    """Allocated at the start of the steady step (parameters, optimizer states, buffers)."""
    static_bytes_after: int
    """Allocated at the end of the steady step; equals ``static_bytes`` when nothing leaks across steps."""
    amp_weight_copies_at_peak_bytes: int
    """Sub-figure of activations/temporaries: autocast's 16-bit copies of fp32 weights alive at the peak."""
    phase_peak_bytes: dict[str, int]
    """Highest allocated memory within each phase of the steady step."""
    n_params: int
    """Parameters of the full (unsharded) model."""
    n_trainable_params: int
    peak_reserved_bytes: int = 0
    """``max_memory_reserved()`` over the steady step: the allocation stream replayed through the
    caching allocator's rules (``trainmem.trace.allocator``, default settings, a pool per stream:
    FSDP2's all-gather copy-in and reduce-scatter streams apart from the compute stream)."""
    peak_reserved_expandable_bytes: int = 0
    """The same with ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``."""
    peak_reserved_one_stream_bytes: int = 0
    """``peak_reserved_bytes`` replayed as if every allocation were on one stream (the replay before
    per-stream pools; equal to it without FSDP2)."""
    allocator_peak_allocated_bytes: int = 0
    """``max_memory_allocated()`` as the allocator counts it: blocks handed out whole when the rest is
    too small to split (≤ 1 MiB in the large pool) count in full, so it can exceed ``peak_allocated_bytes``."""
    reserved_segments: int = 0
    """Segments (cudaMalloc'ed blocks) held at the reserved peak, default settings."""
    fragmentation_at_peak: float = 0.0
    """1 − allocated / reserved at the allocated peak, default settings."""
    emulations: list[str] = field(default_factory=list)
    """CUDA behaviours emulated on the fake CPU device."""
    notes: list[str] = field(default_factory=list)
    """Remaining known differences from a CUDA run."""
    wall_seconds: float = 0.0
    torch_version: str = ""
    transformers_version: str = ""

    def to_dict(self) -> dict:
        """A JSON-serialisable dict (tuples become lists)."""
        d = asdict(self)
        d["timeline"] = [list(p) for p in self.timeline]
        return d
