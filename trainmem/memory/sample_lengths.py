"""The run's sample lengths (``--sample-lengths``): ``MEAN:STD[:MIN:MAX]`` as a log-normal of that mean and
standard deviation, truncated to [MIN, MAX] (trainmem/memory/run_reserve.py samples it). No trainmem imports:
:mod:`trainmem.setup` validates the flag with it."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

__all__ = ["LengthDistribution", "parse_sample_lengths", "lognormal_parameters", "kept_fraction"]

_SPEC = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*:\s*(\d+(?:\.\d+)?)\s*(?::\s*(\d+)\s*:\s*(\d+)\s*)?$")


@dataclass(frozen=True, slots=True)
class LengthDistribution:
    """Sample lengths in tokens: a log-normal of this mean and standard deviation, truncated to [lo, hi]."""

    mean: float
    std: float
    lo: int = 1
    hi: int | None = None


def parse_sample_lengths(value: str) -> LengthDistribution | None:
    """``MEAN:STD`` or ``MEAN:STD:MIN:MAX`` (tokens) → a distribution; anything else → None (a file path).
    Raises ``ValueError`` (one line) on a distribution that cannot be sampled."""
    m = _SPEC.match(value)
    if m is None:
        if re.match(r"^\s*[\d.:\s]+$", value):
            raise ValueError(f"--sample-lengths {value!r}: give MEAN:STD or MEAN:STD:MIN:MAX tokens, or a file of "
                             "lengths one per line")
        return None
    mean, std = float(m[1]), float(m[2])
    lo, hi = (int(m[3]), int(m[4])) if m[3] is not None else (1, None)
    if mean <= 0:
        raise ValueError(f"--sample-lengths {value!r}: the mean must be > 0 tokens")
    if lo < 1 or (hi is not None and hi < lo):
        raise ValueError(f"--sample-lengths {value!r}: MIN must be >= 1 and MAX >= MIN")
    if hi is not None and not lo <= mean <= hi:
        raise ValueError(f"--sample-lengths {value!r}: the mean is outside [MIN, MAX]")
    return LengthDistribution(mean, std, lo, hi)


def lognormal_parameters(mean: float, std: float) -> tuple[float, float]:
    """(mu, sigma) of the log-normal with this mean and standard deviation: sigma² = ln(1 + std²/mean²),
    mu = ln(mean) − sigma²/2 (the moments of exp(N(mu, sigma²)))."""
    s2 = math.log1p((std / mean) ** 2)
    return math.log(mean) - s2 / 2, math.sqrt(s2)


def kept_fraction(dist: LengthDistribution, seq_len: int) -> float:
    """The share of samples of at most ``seq_len`` tokens (those ms-swift's 'delete' keeps) under
    :func:`micro_batch_lengths`'s sampling: P(round(X) ≤ seq_len | MIN ≤ round(X) ≤ MAX), X log-normal."""
    mu, sigma = lognormal_parameters(dist.mean, dist.std)

    def cdf(x: float) -> float:
        return 0.5 * math.erfc(-(math.log(x) - mu) / (sigma * math.sqrt(2))) if x > 0 else 0.0

    lo = cdf(dist.lo - 0.5)
    hi = cdf(dist.hi + 0.5) if dist.hi is not None else 1.0
    return max(0.0, cdf(min(seq_len, dist.hi or seq_len) + 0.5) - lo) / (hi - lo)
