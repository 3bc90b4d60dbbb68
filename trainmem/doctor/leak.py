"""Is memory growing across steps? A trend test over the per-step allocated bytes, not one comparison.

The series is the memory allocated at the end of each training step (after ``zero_grad``), when only what
lives across steps is left: a leak — tensors kept in a list, a loss logged without ``.item()``, a graph kept
alive, metrics accumulated on the GPU — is the only thing that makes it grow. The test:

1. drop the warm-up (the first ``max(5, 10 %)`` steps: optimizer states appear at step 1, caches fill);
2. take medians of consecutive blocks of steps (at most 64 blocks): noise that is correlated over fewer steps
   than a block (variable batch shapes, allocator rounding) is averaged out and the block medians are close to
   independent, which the Mann–Kendall test assumes;
3. Mann–Kendall trend test on the block medians (Mann 1945; Kendall 1975; variance with the tie correction,
   continuity-corrected z; one-sided p-value for an increase), slope by Theil–Sen (Sen 1968: the median of the
   pairwise slopes, robust to outliers), in bytes per step;
4. a leak needs p < ``alpha`` (1e-3), a slope of at least ``min_slope_bytes`` per step (256 B: half a block of
   the CUDA caching allocator's 512 B ``kMinBlockSize``, so that the smallest leak a GPU shows — one block a step,
   whose estimated slope scatters around 512 B — passes), growth over the window above three
   robust standard deviations of the residuals, and a rise in each third of the window (each third's median above
   the previous one by at least a quarter of what the slope predicts): a single late allocation (a lazily
   created buffer) is a step, not a trend.

The false-positive rate and the detection rate are measured in tests/doctor/test_leak.py (healthy and leaking
loops recorded by the monitor on CPU, and synthetic series with independent and autocorrelated noise).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from statistics import median

__all__ = ["LeakTest", "mann_kendall", "theil_sen_slope", "leak_test", "ALPHA", "MIN_SLOPE_BYTES"]

ALPHA = 1e-3
MIN_SLOPE_BYTES = 256
_MAX_BLOCKS = 64
_MIN_STEPS = 12


@dataclass(frozen=True, slots=True)
class LeakTest:
    leaking: bool
    slope_bytes_per_step: float
    """Theil–Sen slope of the block medians."""
    z: float
    p_value: float
    """One-sided Mann–Kendall p-value for an increasing trend."""
    n_steps: int
    """Steps after the warm-up."""
    first_step: int
    last_step: int
    growth_bytes: int
    """Slope × the steps of the window."""
    start_bytes: int
    """Median allocated of the first block after the warm-up."""
    end_bytes: int
    reason: str
    """Why it is (not) a leak, one clause."""


def mann_kendall(values: list[float]) -> tuple[float, float]:
    """(z, one-sided p for an increase) of the Mann–Kendall test, ties corrected (Kendall 1975, eq. 4.3)."""
    n = len(values)
    s = 0
    for i in range(n - 1):
        vi = values[i]
        for j in range(i + 1, n):
            d = values[j] - vi
            s += (d > 0) - (d < 0)
    counts: dict[float, int] = {}
    for v in values:
        counts[v] = counts.get(v, 0) + 1
    var = (n * (n - 1) * (2 * n + 5) - sum(t * (t - 1) * (2 * t + 5) for t in counts.values())) / 18
    if var <= 0 or s == 0:
        return 0.0, 0.5
    z = (s - 1) / math.sqrt(var) if s > 0 else (s + 1) / math.sqrt(var)
    return z, 0.5 * math.erfc(z / math.sqrt(2))


def theil_sen_slope(xs: list[float], ys: list[float]) -> float:
    """Median of the pairwise slopes (Sen 1968); 0 for fewer than two distinct x."""
    slopes = [(ys[j] - ys[i]) / (xs[j] - xs[i]) for i in range(len(xs)) for j in range(i + 1, len(xs))
              if xs[j] != xs[i]]
    return median(slopes) if slopes else 0.0


def _blocks(steps: list[int], values: list[int]) -> tuple[list[float], list[float]]:
    size = max(1, math.ceil(len(values) / _MAX_BLOCKS))
    xs, ys = [], []
    for i in range(0, len(values) - size + 1, size):
        xs.append(median(steps[i:i + size]))
        ys.append(median(values[i:i + size]))
    return xs, ys


def _rises_in_thirds(values: list[int], rise: float) -> bool:
    """Each third's median exceeds the previous one by ``rise`` (a quarter of a linear trend's rise)."""
    k = len(values) // 3
    a, b, c = median(values[:k]), median(values[k:2 * k]), median(values[2 * k:])
    return b - a >= rise and c - b >= rise


def leak_test(steps: list[int], values: list[int], alpha: float = ALPHA,
              min_slope_bytes: float = MIN_SLOPE_BYTES) -> LeakTest:
    """The trend test on per-step allocated ``values`` at ``steps`` (same length, steps increasing)."""
    pairs = sorted(zip(steps, values))
    warm = max(5, len(pairs) // 10)
    pairs = pairs[warm:]
    if len(pairs) < _MIN_STEPS:
        first = pairs[0][0] if pairs else 0
        return LeakTest(False, 0.0, 0.0, 1.0, len(pairs), first, pairs[-1][0] if pairs else first, 0,
                        pairs[0][1] if pairs else 0, pairs[-1][1] if pairs else 0, "too few steps after the warm-up")
    st, vs = [p[0] for p in pairs], [p[1] for p in pairs]
    xs, ys = _blocks(st, vs)
    z, p = mann_kendall(ys)
    slope = theil_sen_slope(xs, ys)
    span = st[-1] - st[0]
    growth = int(slope * span)
    resid = [y - slope * x for x, y in zip(xs, ys)]
    mid = median(resid)
    sigma = 1.4826 * median([abs(r - mid) for r in resid])
    checks = ((p < alpha, f"no significant trend (Mann–Kendall p = {p:.2g})"),
              (slope >= min_slope_bytes, f"slope {slope:.0f} B/step is below {min_slope_bytes:.0f} B/step"),
              (growth > 3 * sigma, "growth within the noise"),
              (_rises_in_thirds(vs, max(slope, min_slope_bytes) * span / 12), "a single rise, not a trend"))
    failed = next((why for ok, why in checks if not ok), None)
    return LeakTest(leaking=failed is None, slope_bytes_per_step=slope, z=z, p_value=p, n_steps=len(vs),
                    first_step=st[0], last_step=st[-1], growth_bytes=growth, start_bytes=int(ys[0]),
                    end_bytes=int(ys[-1]), reason=failed or "increasing trend")
