"""A tiny allocator simulator: named allocations by category, a running total, the peak and what
made it up. Every size is rounded to the CUDA caching allocator's 512-byte granule."""

from __future__ import annotations

from dataclasses import dataclass, field

from trainmem.units import round_up_bytes

__all__ = ["CATEGORIES", "Timeline"]

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

    def alloc(self, key: str, category: str, n_bytes: int, *, count: int = 1) -> None:
        """Allocate ``count`` blocks of ``n_bytes`` (each rounded to 512 B) under one key."""
        if n_bytes <= 0 or count <= 0:
            return
        if key in self.live:
            raise KeyError(f"allocation {key!r} is already live")
        size = -(-n_bytes // 512) * 512 * count  # round_up_bytes, inlined: this is the hot path
        self.live[key] = (category, size)
        self.current += size
        self._by_cat[category] += size
        if self._by_cat[category] > self.category_peak[category]:
            self.category_peak[category] = self._by_cat[category]
        if self.current > self._phase_max:
            self._phase_max = self.current
        if self.current > self.peak:
            self.peak = self.current
            self.peak_phase = self.phase
            self.peak_breakdown = dict(self._by_cat)
            if self.debug:
                self.peak_live = dict(self.live)

    def free(self, key: str) -> None:
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
        if old in self.live:
            self.live[new] = self.live.pop(old)

    def has(self, key: str) -> bool:
        return key in self.live

    def mark(self, phase: str) -> None:
        """Start a phase and record a timeline point."""
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

    def spike(self, key: str, category: str, n_bytes: int) -> None:
        """An allocation that is freed right away (a transient at this point of the step)."""
        self.alloc(key, category, n_bytes)
        self.free(key)

    def by_category(self) -> dict[str, int]:
        return dict(self._by_cat)
