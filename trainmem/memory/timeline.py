"""A tiny allocator simulator: named allocations by category, a running total, the peak and what
made it up. Every size is rounded to the CUDA caching allocator's 512-byte granule."""

from __future__ import annotations

from dataclasses import dataclass, field

from trainmem.units import round_up_bytes

__all__ = ["CATEGORIES", "Timeline"]

_MIN_LARGE_ALLOC = 10 * 1024 * 1024  # kMinLargeAlloc (c10/cuda/CUDACachingAllocator.cpp, torch 2.13)
_ROUND_LARGE = 2 * 1024 * 1024  # kRoundLarge: a segment for a request >= kMinLargeAlloc is it rounded to 2 MiB
#: Categories whose timeline blocks stand for one tensor each (``*bulk*`` keys excepted: several layers' blocks in
#: one); the model states are allocated before the step as many per-parameter tensors summed in one block.
_ONE_TENSOR = ("activations", "temporaries", "communication_buffers")

#: The categories of every breakdown trainmem reports (estimate and trace alike).
CATEGORIES = ("parameters", "master_weights", "gradients", "optimizer_states", "activations",
              "temporaries", "communication_buffers", "other")


@dataclass
class Timeline:
    live: dict[str, tuple[str, int]] = field(default_factory=dict)
    current: int = 0
    peak: int = 0
    peak_phase: str = ""
    peak_breakdown: dict[str, int] = field(default_factory=dict)
    points: list[tuple[str, int]] = field(default_factory=list)
    phase: str = "start"
    _by_cat: dict[str, int] = field(default_factory=lambda: {c: 0 for c in CATEGORIES})
    category_peak: dict[str, int] = field(default_factory=lambda: {c: 0 for c in CATEGORIES})
    debug: bool = False
    """Keep a copy of the live blocks at the peak (``peak_live``), for developers."""
    peak_live: dict[str, tuple[str, int]] = field(default_factory=dict)
    point_categories: list[dict[str, int]] = field(default_factory=list)
    """Allocated bytes per category at each timeline point (the phase's start), for charts."""
    phase_max: list[int] = field(default_factory=list)
    """The largest allocated total inside each point's phase (its transients included)."""
    _phase_max: int = 0
    max_block: int = 0
    """The largest single block allocated so far on the compute stream (a ``count`` allocation's blocks each;
    only the categories of ``_ONE_TENSOR``, and no ``*bulk*`` key)."""
    post_peak_segment_bytes: int = 0
    """Segments the caching allocator must add after the allocated peak: compute-stream blocks ≥ 10 MiB
    larger than every earlier one (see :func:`trainmem.memory.overhead.post_peak_segment_bytes`)."""
    events: list[tuple] | None = None
    """When a list: every call in program order, for an allocator replay (:mod:`trainmem.memory.run_reserve`):
    ``("a", key, n_bytes, count, stream)`` (n_bytes as asked, before rounding; stream 1 = a collective stream),
    ``("f", key)``, ``("r", old, new)``, ``("m", phase)``. None (the default): nothing recorded."""

    def alloc(self, key: str, category: str, n_bytes: int, *, count: int = 1, side_stream: bool = False,
              aggregate: bool = False, pieces: int = 1) -> None:
        """Allocate ``count`` blocks of ``n_bytes`` (each rounded to 512 B) under one key; ``side_stream``:
        on a collective stream (its own pool: it neither serves nor is served by compute-stream blocks);
        ``aggregate``: many tensors summed in one block (never one cudaMalloc: not a segment candidate);
        ``pieces``: the block is that many equal tensors (recorded so in ``events``, one block here)."""
        if self.events is not None:
            self.events.append(("a", key, n_bytes // pieces, count * pieces, 1 if side_stream else 0)
                               if pieces > 1 and n_bytes % pieces == 0 else ("a", key, n_bytes, count, 1 if side_stream else 0))
        if n_bytes <= 0 or count <= 0:
            return
        if key in self.live:
            raise KeyError(f"allocation {key!r} is already live")
        block = -(-n_bytes // 512) * 512  # round_up_bytes, inlined: this is the hot path
        size = block * count
        if (block > self.max_block and not side_stream and not aggregate and category in _ONE_TENSOR
                and "bulk" not in key):
            if block >= _MIN_LARGE_ALLOC and self.current + size <= self.peak:
                self.post_peak_segment_bytes += -(-block // _ROUND_LARGE) * _ROUND_LARGE
            self.max_block = block
        self.live[key] = (category, size)
        self.current += size
        self._by_cat[category] += size
        if self._by_cat[category] > self.category_peak[category]:
            self.category_peak[category] = self._by_cat[category]
        if self.current > self._phase_max:
            self._phase_max = self.current
        if self.current > self.peak:
            self.peak = self.current
            self.post_peak_segment_bytes = 0
            self.peak_phase = self.phase
            self.peak_breakdown = dict(self._by_cat)
            if self.debug:
                self.peak_live = dict(self.live)

    def free(self, key: str) -> None:
        if self.events is not None:
            self.events.append(("f", key))
        item = self.live.pop(key, None)
        if item is None:
            return
        cat, size = item
        self.current -= size
        self._by_cat[cat] -= size

    def free_prefix(self, prefix: str) -> None:
        for k in [k for k in self.live if k.startswith(prefix)]:
            self.free(k)

    def rename(self, old: str, new: str) -> None:
        """The same block under a new name (no allocation, no free)."""
        if self.events is not None:
            self.events.append(("r", old, new))
        if old in self.live:
            self.live[new] = self.live.pop(old)

    def has(self, key: str) -> bool:
        return key in self.live

    def mark(self, phase: str) -> None:
        """Start a phase and record a timeline point."""
        if self.events is not None:
            self.events.append(("m", phase))
        if self.points:
            self.phase_max[-1] = max(self.phase_max[-1], self._phase_max)
        self.phase = phase
        self.points.append((phase, self.current))
        self.point_categories.append(dict(self._by_cat))
        self.phase_max.append(self.current)
        self._phase_max = self.current

    def finish(self) -> None:
        """Close the last phase (its maximum)."""
        if self.phase_max:
            self.phase_max[-1] = max(self.phase_max[-1], self._phase_max)

    def spike(self, key: str, category: str, n_bytes: int, *, side_stream: bool = False,
              aggregate: bool = False, pieces: int = 1) -> None:
        """An allocation that is freed right away (a transient at this point of the step)."""
        self.alloc(key, category, n_bytes, side_stream=side_stream, aggregate=aggregate, pieces=pieces)
        self.free(key)

    def by_category(self) -> dict[str, int]:
        return dict(self._by_cat)
