"""Units. Bytes are ``int`` everywhere inside trainmem; these helpers convert once, for display.

GiB = 1024**3 bytes (what ``torch.cuda`` and nvidia-smi report as "GB"), GB = 10**9 bytes
(what GPU vendors print on the box). Every figure a user sees is labelled with one of them.
"""

from __future__ import annotations

__all__ = ["KiB", "MiB", "GiB", "GB", "MB", "round_up_bytes", "gib", "gb", "fmt_gib", "fmt_bytes", "parse_size_bytes"]

KiB = 1024
MiB = 1024**2
GiB = 1024**3
MB = 10**6
GB = 10**9

#: The CUDA caching allocator rounds every block up to a multiple of 512 bytes
#: (c10/cuda/CUDACachingAllocator.cpp: ``kMinBlockSize = 512``).
ALLOC_GRANULE_BYTES = 512


def round_up_bytes(n_bytes: int, granule: int = ALLOC_GRANULE_BYTES) -> int:
    """Round ``n_bytes`` up to the allocator granule (512 B), as ``torch.cuda`` does; 0 stays 0."""
    return -(-int(n_bytes) // granule) * granule


def gib(n_bytes: int) -> float:
    """Bytes → GiB (1024³)."""
    return n_bytes / GiB


def gb(n_bytes: int) -> float:
    """Bytes → GB (10⁹)."""
    return n_bytes / GB


def fmt_gib(n_bytes: int, digits: int = 2) -> str:
    """``'12.34 GiB'``."""
    return f"{n_bytes / GiB:.{digits}f} GiB"


def fmt_bytes(n_bytes: int) -> str:
    """Human form with the binary unit that fits: ``'512 B'``, ``'3.0 MiB'``, ``'12.34 GiB'``."""
    n = abs(n_bytes)
    if n >= GiB:
        return f"{n_bytes / GiB:.2f} GiB"
    if n >= MiB:
        return f"{n_bytes / MiB:.1f} MiB"
    if n >= KiB:
        return f"{n_bytes / KiB:.1f} KiB"
    return f"{n_bytes} B"


_SIZE_UNITS = {"b": 1, "kib": KiB, "mib": MiB, "gib": GiB, "tib": 1024**4,
               "kb": 10**3, "mb": MB, "gb": GB, "tb": 10**12, "k": KiB, "m": MiB, "g": GiB, "t": 1024**4}


def parse_size_bytes(text: str) -> int:
    """``'96GiB'`` → bytes, ``'94GB'`` → 94·10⁹, ``'80G'`` → GiB (as nvidia-smi and torch mean it).

    Raises ``ValueError`` naming the accepted units."""
    import re

    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*", text[:64])
    unit = m.group(2).lower() if m else ""
    if not m or unit not in _SIZE_UNITS:
        raise ValueError(f"{text[:64]!r} is not a memory size; write e.g. 96GiB, 94GB or 80G (G = GiB)")
    n = int(float(m.group(1)) * _SIZE_UNITS[unit])
    if n <= 0:
        raise ValueError(f"{text[:64]!r} is not a positive memory size")
    return n
