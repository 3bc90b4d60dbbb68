"""Parse PyTorch's CUDA out-of-memory message, in every form PyTorch has printed it.

The message is built in ``c10/cuda/CUDACachingAllocator.cpp`` (``DeviceCachingAllocator::malloc``,
``TORCH_CHECK_WITH(OutOfMemoryError, false, ...)``) with ``format_size`` (``bytes`` up to 1 KiB, then
KiB/MiB/GiB with two decimals). Its forms, oldest first (tests/doctor/corpus/oom holds a verbatim sample of
each, with the thread it was pasted in):

* ``cached`` (pytorch/pytorch#13751, 2018): ``Tried to allocate S (GPU 0; S total capacity; S already
  allocated; S free; S cached)``; "cached" is the memory held by the allocator but not used (the PR's
  glossary), i.e. reserved − allocated;
* ``reserved in total`` (torch 1.5–2.0): ``...; S free; [S allowed; ]S reserved in total by PyTorch)`` plus
  "If reserved memory is >> allocated memory try setting max_split_size_mb"; the exception is a
  ``RuntimeError`` before torch 1.13 and ``torch.cuda.OutOfMemoryError`` from 1.13;
* ``unallocated`` (pytorch/pytorch#99699, April 2023, first released in torch 2.1): ``Tried to allocate S.
  GPU 0 has a total capac(i)ty of S of which S is free. [Process N has S memory in use. ]...[Including
  non-PyTorch memory, this process has S memory in use. ][S allowed; ]Of the allocated memory S is allocated
  by PyTorch, [with S allocated in private pools (e.g., CUDA Graphs), ]and S is reserved by PyTorch but
  unallocated.`` — 2.1 spells "capacty"; the private-pool clause followed pytorch/pytorch#121932 (2024); the
  hint names ``max_split_size_mb`` (2.1), then ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``, and in
  some 2.9-era builds ``PYTORCH_ALLOC_CONF`` (pytorch/pytorch#172327 reverted the name).

A message cut after "Tried to allocate S" (pytorch/pytorch#126766) keeps the request size only; a driver-level
``CUDA error: out of memory`` (cuBLAS/NCCL/context creation, no allocator statistics) is recognised with no
numbers, and so is NCCL's own report of a failed CUDA call, in both of its macros' forms: ``CUDACHECK``
(runtime API, src/include/checks.h) prints ``Cuda failure '%s'``, ``CUCHECK`` (driver API through
src/include/cudawrap.h's function pointers) prints ``Cuda failure %d '%s'`` with the ``CUresult`` code
(``CUDA_ERROR_OUT_OF_MEMORY`` = 2, hence ``Cuda failure 2 'out of memory'`` under ``ncclUnhandledCudaError``).
Sizes are parsed back to bytes (two decimals: ±0.005 of the unit).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from trainmem.units import GiB, KiB, MiB

__all__ = ["OOMReport", "parse_oom", "parse_size_bytes_c10", "find_oom_line"]

_UNITS = {"bytes": 1, "b": 1, "kib": KiB, "mib": MiB, "gib": GiB, "tib": 1024 * GiB, "kb": KiB, "mb": MiB,
          "gb": GiB}
_S = r"(\d+(?:\.\d+)?) ?(bytes|B|KiB|MiB|GiB|TiB)"
_OLD = re.compile(
    rf"Tried to allocate {_S} \(GPU (\d+); {_S} total capacity; {_S} already allocated; {_S} free;"
    rf"(?: {_S} allowed;)? {_S} (reserved in total by PyTorch|cached)\)", re.I)
_NEW_SRC = (rf"Tried to allocate {_S}\. GPU ?(\d*) has a total capac(?:i)?ty of {_S} of which {_S} is free\.(.*?)"
            rf"Of the allocated memory {_S} is allocated by PyTorch, (?:with {_S} allocated in private pools "
            rf"\(e\.g\., CUDA Graphs\), )?and {_S} is reserved by PyTorch but unallocated")
# ``GPU ?(\d*)``: some 2.x builds print no device index ("GPU  has a total capacity", two spaces).
_OLD_SRC = _OLD.pattern
_PROC_SRC = rf"Process (\d+) has {_S} memory in use"
_SELF_SRC = rf"Including non-PyTorch memory, this process has {_S} memory in use"
_ALLOWED_SRC = rf"{_S} allowed;"


def _squeezed(src: str) -> re.Pattern:
    """``src`` matched against text with every whitespace removed (a message hard-wrapped inside a word)."""
    return re.compile(src.replace(" ?", "").replace(" ", ""), re.I)


_NEW = re.compile(_NEW_SRC, re.I)
_PROC = re.compile(_PROC_SRC, re.I)
_SELF = re.compile(_SELF_SRC, re.I)
_ALLOWED = re.compile(_ALLOWED_SRC, re.I)
_SQ = {"new": _squeezed(_NEW_SRC), "old": _squeezed(_OLD_SRC), "proc": _squeezed(_PROC_SRC),
       "self": _squeezed(_SELF_SRC), "allowed": _squeezed(_ALLOWED_SRC)}
_TRIED = re.compile(rf"Tried to allocate {_S}(?:\.? ?(?:GPU|\(GPU) (\d+))?", re.I)
_DRIVER = re.compile(r"CUDA error: out of memory|CUBLAS_STATUS_ALLOC_FAILED|CUDNN_STATUS_ALLOC_FAILED|"
                     r"cuda runtime error \(2\) : out of memory|Cuda failure (?:\d+ )?'out of memory'", re.I)
_ANY = re.compile(r"out of memory|OutOfMemoryError|_ALLOC_FAILED", re.I)
_RANK_PREFIX = re.compile(r"^\s*\[(?:rank|default)\d*\]:\s?", re.M)
_BOX = re.compile(r"[│┃|]\s*$|^\s*[│┃]", re.M)


@dataclass(frozen=True, slots=True)
class OOMReport:
    """What one out-of-memory message says (bytes; None where the form does not print it)."""

    form: str
    """``cached``, ``reserved``, ``unallocated``, ``truncated``, ``driver`` or ``unparsed``."""
    era: str
    """The PyTorch releases that print this form (from its wording; see the module docstring)."""
    line: str
    """The text around the message, whitespace collapsed (at most 600 characters)."""
    tried_bytes: int | None = None
    device: int | None = None
    total_bytes: int | None = None
    free_bytes: int | None = None
    allocated_bytes: int | None = None
    """Allocated by PyTorch's caching allocator (private pools included)."""
    unallocated_bytes: int | None = None
    """Reserved by PyTorch but not allocated, after the allocator released its free segments."""
    private_pool_bytes: int | None = None
    allowed_bytes: int | None = None
    """``torch.cuda.set_per_process_memory_fraction``'s limit."""
    process_bytes: int | None = None
    """This process, non-PyTorch memory (CUDA context, NCCL) included."""
    other_processes: tuple[tuple[int, int], ...] = ()
    """(pid, bytes) of the other processes NVML lists on the device (may include this one, in a container)."""

    @property
    def reserved_bytes(self) -> int | None:
        if self.allocated_bytes is None or self.unallocated_bytes is None:
            return None
        return self.allocated_bytes + self.unallocated_bytes


def parse_size_bytes_c10(number: str, unit: str) -> int:
    """``format_size``'s text (``"12.34"``, ``"GiB"``) → bytes (c10/cuda/CUDACachingAllocator.cpp)."""
    return int(round(float(number) * _UNITS[unit.lower()]))


def _size(m: re.Match, i: int) -> int | None:
    return None if m.group(i) is None else parse_size_bytes_c10(m.group(i), m.group(i + 1))


def _clean(text: str) -> str:
    text = _RANK_PREFIX.sub("", text)
    text = _BOX.sub(" ", text)
    return re.sub(r"\s+", " ", text)


def find_oom_line(text: str) -> str | None:
    """The out-of-memory message of ``text`` (a message or a whole traceback), whitespace collapsed."""
    flat = _clean(text)
    m = _ANY.search(flat)
    if m is None:
        return None
    return flat[max(0, m.start() - 100):m.start() + 2000]


def _era(flat: str, form: str) -> str:
    if form == "cached":
        return "torch ≤ 1.4"
    if form == "reserved":
        return "torch 1.13–2.0" if "OutOfMemoryError" in flat else "torch 1.5–1.12"
    if form == "unallocated":
        if "capacty" in flat:
            return "torch 2.1"
        if "private pools" in flat:
            return "torch ≥ 2.4"
        return "torch ≥ 2.2"
    return "unknown"


def _parse_old(flat: str, m: re.Match) -> OOMReport:
    form = "cached" if m.group(14).lower() == "cached" else "reserved"
    allocated, last = _size(m, 6), _size(m, 12)
    unalloc = last if form == "cached" else (None if last is None or allocated is None else last - allocated)
    return OOMReport(form=form, era=_era(flat, form), line=flat[:600], tried_bytes=_size(m, 1),
                     device=int(m.group(3)), total_bytes=_size(m, 4), allocated_bytes=allocated,
                     free_bytes=_size(m, 8), allowed_bytes=_size(m, 10), unallocated_bytes=unalloc)


def _parse_new(flat: str, m: re.Match, squeezed: bool = False) -> OOMReport:
    middle = m.group(8) or ""
    proc, me_rx, allowed_rx = (_SQ["proc"], _SQ["self"], _SQ["allowed"]) if squeezed else (_PROC, _SELF, _ALLOWED)
    others = tuple((int(p.group(1)), parse_size_bytes_c10(p.group(2), p.group(3))) for p in proc.finditer(middle))
    me = me_rx.search(middle)
    allowed = allowed_rx.search(middle)
    return OOMReport(
        form="unallocated", era=_era(flat, "unallocated"), line=flat[:600], tried_bytes=_size(m, 1),
        device=int(m.group(3)) if m.group(3) else None, total_bytes=_size(m, 4), free_bytes=_size(m, 6), allocated_bytes=_size(m, 9),
        private_pool_bytes=_size(m, 11), unallocated_bytes=_size(m, 13),
        allowed_bytes=None if allowed is None else parse_size_bytes_c10(allowed.group(1), allowed.group(2)),
        process_bytes=None if me is None else parse_size_bytes_c10(me.group(1), me.group(2)),
        other_processes=others)


_ERR_NAME = re.compile(r"[\w.]*(?:Error|Exception): ")


def _message_start(flat: str) -> str:
    """``flat`` from the exception name that introduces the message (within its first 100 characters)."""
    hit = _ANY.search(flat)
    cut = hit.start() if hit else 0
    names = [m for m in _ERR_NAME.finditer(flat, 0, cut + 20) if m.start() <= cut]
    return flat[names[-1].start():] if names else flat[cut:]


def parse_oom(text: str) -> OOMReport | None:
    """The out-of-memory report in ``text``, or None when it holds no out-of-memory error at all."""
    near = find_oom_line(text)
    if near is None:
        return None
    flat = _message_start(near)
    m = _NEW.search(flat)
    if m:
        return _parse_new(flat, m)
    m = _OLD.search(flat)
    if m:
        return _parse_old(flat, m)
    tight = re.sub(r"\s+", "", flat)  # hard-wrapped inside a word ("total capa\ncity"): match without whitespace
    m = _SQ["new"].search(tight)
    if m:
        return _parse_new(flat, m, squeezed=True)
    m = _SQ["old"].search(tight)
    if m:
        return _parse_old(flat, m)
    m = _TRIED.search(flat)
    if m:
        return OOMReport(form="truncated", era="unknown", line=flat[:600], tried_bytes=_size(m, 1),
                         device=None if m.group(3) is None else int(m.group(3)))
    if re.search(r"Tried to allocate", flat, re.I):  # cut before the size's unit
        return OOMReport(form="truncated", era="unknown", line=flat[:600])
    if _DRIVER.search(near):  # the text before "out of memory" too: NCCL's "Cuda failure 2 '" has no exception name
        return OOMReport(form="driver", era="unknown", line=flat[:600])
    return OOMReport(form="unparsed", era="unknown", line=flat[:600])
