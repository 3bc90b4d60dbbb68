"""A pure-Python simulation of PyTorch's CUDA caching allocator, for reserved memory on a CPU trace.

``torch.cuda.max_memory_allocated()`` is what a trace counts; what runs out is
``torch.cuda.max_memory_reserved()``: the segments the allocator holds from the driver, including the
cached and the unusable parts of them. This module replays an allocation stream (``malloc``/``free``
in program order) through the allocator's rules and reports reserved memory, segments and
fragmentation.

Source: ``c10/cuda/CUDACachingAllocator.cpp`` (``DeviceCachingAllocator``), read at pytorch/pytorch
commit 001074d2 (a stored snapshot; no release tag of the repository could be fetched here), with the
constants and defaults of ``c10/core/AllocatorConfig.h`` (``AcceleratorAllocatorConfig``) and
``c10/cuda/CUDAAllocatorConfig.h`` as shipped in the torch 2.13.0 wheel (git cf30153c). Newer sources
make two of the 20 MiB figures settings, ``large_segment_size`` and ``max_non_split_rounding_size``,
both with the 20 MiB default used here. The functions mirrored, one here per function there:

* ``round_size``: sizes < 512 B become ``kMinBlockSize`` = 512 B, others are rounded up to 512 B
  (``roundup_power2_divisions`` is off by default and not modelled);
* ``get_pool``: requests ≤ ``kSmallSize`` = 1 MiB come from the small pool, larger ones from the
  large pool; the pools never share blocks;
* ``get_allocation_size``: a new segment (``cudaMalloc``) is ``kSmallBuffer`` = 2 MiB for the small
  pool, ``large_segment_size`` = 20 MiB (``kLargeBuffer``) for requests < ``kMinLargeAlloc`` = 10 MiB,
  else the request rounded up to ``kRoundLarge`` = 2 MiB;
* ``get_free_block``: best fit, the smallest cached block ≥ the request in the pool's size-ordered
  set (ties: lowest address, ``BlockComparatorSize``); with ``max_split_size`` set, an oversize block
  (≥ it) never serves a smaller request and serves a larger one only if it is less than
  ``max_non_split_rounding_size`` (20 MiB) too big; ``max_split_size`` is unlimited by default;
* ``should_split``: the rest of a found block becomes a free block if ≥ 512 B (small pool, or any
  pool with expandable segments), and in the large pool only if the rest is **> 1 MiB** (``remaining >
  kSmallSize``) and the request < ``max_split_size``; otherwise the whole block is handed out and
  *counts as allocated* (``alloc_found_block`` adds ``block->size`` to ``allocated_bytes``);
* ``free_block`` / ``try_merge_blocks``: a freed block merges with its free neighbours of the same
  segment (same mapped state), and stays cached; segments go back to the driver only in
  ``release_cached_blocks`` (here: only when a capacity is given and a ``cudaMalloc`` would exceed it;
  then every fully free segment is released and the allocation retried, as ``malloc`` does);
* ``expandable_segments:True`` (``try_allocate_expandable_block``, ``find_expandable_block``,
  ``map_block``): one segment per pool and stream with a virtual range of 1⅛ × GPU memory; pages of
  2 MiB (small pool) or 20 MiB (large pool) are mapped at the lowest address where free + unmapped
  space fits the request, so reserved = mapped pages; ``get_free_block`` treats the free block before
  the unmapped tail as larger than it is (it can grow) and prefers another fitting block.

Streams: every block belongs to the stream it was allocated on (``Block::stream``). ``get_free_block``
searches the pool's set with a key of the request's stream, and ``BlockComparatorSize`` orders by
stream first, then size, then address, so a free block of another stream never serves a request;
segments are cudaMalloc'ed for one stream and merges stay inside a segment, hence inside a stream;
expandable segments are one per pool *and stream* (``find_expandable_block`` skips segments of other
streams). ``release_cached_blocks`` frees fully free segments of every stream. Here a stream is an
``int`` (0 = the default/compute stream); the FSDP2 trace tags its collective buffers with the stream
FSDP2 allocates them on (``trainmem.trace.fsdp.tag_collectives``). ``recordStream`` (a block used on
another stream waits, after its free, for events recorded on those streams: ``insert_events`` /
``process_events``) is not modelled: FSDP2 in torch 2.13 never calls it (its ``_fully_shard`` sources
keep a Python reference to each cross-stream buffer — ``AllGatherState``, ``reduce_scatter_states``,
``_all_reduce_state`` — until the consuming stream waited on its event, so the free the tracer sees is
already the moment the block returns to its stream's pool), so a free is reusable at once.

Assumptions: no CUDA graphs or private pools, no garbage-collection threshold, no memory fraction. Without a
capacity the device is unlimited (nothing is ever released), which is what ``max_memory_reserved`` of
a run that fits shows. All sizes are ``int`` bytes.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass, field

from trainmem.units import MiB

__all__ = ["AllocatorConfig", "AllocatorStats", "AllocatorOOM", "CachingAllocator", "round_size",
           "allocation_size", "simulate", "simulate_lives", "events_from_lives",
           "K_MIN_BLOCK_SIZE", "K_SMALL_SIZE", "K_SMALL_BUFFER", "K_LARGE_BUFFER", "K_MIN_LARGE_ALLOC",
           "K_ROUND_LARGE"]

#: ``c10/core/AllocatorConfig.h`` (torch 2.13.0) and ``CUDACachingAllocator.cpp``.
K_MIN_BLOCK_SIZE = 512          # kMinBlockSize: every size is rounded to a multiple of 512 B
K_SMALL_SIZE = 1 * MiB          # kSmallSize: largest small-pool request
K_SMALL_BUFFER = 2 * MiB        # kSmallBuffer: small-pool segment (and expandable page)
K_LARGE_BUFFER = 20 * MiB       # kLargeBuffer / large_segment_size_ default 20971520
K_MIN_LARGE_ALLOC = 10 * MiB    # kMinLargeAlloc: requests below it get a 20 MiB segment
K_ROUND_LARGE = 2 * MiB         # kRoundLarge: larger segments are rounded to 2 MiB
_UNLIMITED_VA = 1 << 50         # virtual range of an expandable segment without a stated capacity


class AllocatorOOM(MemoryError):
    """The request does not fit in ``capacity_bytes`` even after releasing the cached segments."""


@dataclass(frozen=True, kw_only=True, slots=True)
class AllocatorConfig:
    """The ``PYTORCH_CUDA_ALLOC_CONF`` settings that change reserved memory (defaults: PyTorch's)."""

    expandable_segments: bool = False
    """``expandable_segments:True``: grow one segment per pool by mapping pages."""
    max_split_size_bytes: int | None = None
    """``max_split_size_mb`` in bytes; None = unlimited (the default)."""
    max_non_split_rounding_bytes: int = K_LARGE_BUFFER
    """``max_non_split_rounding_mb`` (default 20 MiB): how much larger an oversize block may be."""
    capacity_bytes: int | None = None
    """Device memory the allocator may reserve; None = unlimited (nothing is released)."""

    def __post_init__(self) -> None:
        if self.max_split_size_bytes is not None and self.max_split_size_bytes <= K_LARGE_BUFFER:
            raise ValueError(f"max_split_size_bytes: {self.max_split_size_bytes} must be > 20 MiB "
                             "(PyTorch's parser refuses smaller values)")
        if self.capacity_bytes is not None and self.capacity_bytes <= 0:
            raise ValueError(f"capacity_bytes: {self.capacity_bytes} must be positive")


@dataclass(frozen=True, kw_only=True, slots=True)
class AllocatorStats:
    """What ``torch.cuda.memory_stats()`` would say over the measured window."""

    peak_reserved_bytes: int
    """``max_memory_reserved()``: the most bytes of segments (mapped pages) held at once."""
    peak_allocated_bytes: int
    """``max_memory_allocated()``: blocks handed out, unsplit remainders included."""
    reserved_at_peak_bytes: int
    """Reserved at the moment of the allocated peak."""
    n_segments: int
    """Segments held at the reserved peak (expandable: contiguous mapped ranges count as one each)."""
    n_device_allocs: int
    """cudaMalloc / page-map calls over the whole stream."""

    @property
    def fragmentation_at_peak(self) -> float:
        """Share of reserved memory not allocated at the allocated peak: 1 − allocated / reserved."""
        if self.reserved_at_peak_bytes == 0:
            return 0.0
        return 1.0 - self.peak_allocated_bytes / self.reserved_at_peak_bytes


def round_size(nbytes: int) -> int:
    """``round_size``: bytes of the block that serves a request of ``nbytes`` (multiple of 512 B)."""
    if nbytes < K_MIN_BLOCK_SIZE:
        return K_MIN_BLOCK_SIZE
    return -(-nbytes // K_MIN_BLOCK_SIZE) * K_MIN_BLOCK_SIZE


def allocation_size(size: int) -> int:
    """``get_allocation_size``: bytes of the segment cudaMalloc'ed for a (rounded) request ``size``."""
    if size <= K_SMALL_SIZE:
        return K_SMALL_BUFFER
    if size < K_MIN_LARGE_ALLOC:
        return K_LARGE_BUFFER
    return -(-size // K_ROUND_LARGE) * K_ROUND_LARGE


@dataclass(eq=False, slots=True)
class _Block:
    """A ``Block``: a range of one segment, free, allocated or (expandable) unmapped."""

    addr: int
    size: int
    seg: int
    """Index of the segment (non-expandable) or of the expandable segment."""
    prev: "_Block | None" = None
    next: "_Block | None" = None
    allocated: bool = False
    mapped: bool = True
    stream: int = 0
    """The allocation stream (``Block::stream``); blocks of a segment share it."""


@dataclass(slots=True)
class _Pool:
    """A ``BlockPool``: free mapped blocks ordered by (stream, size, address) as ``BlockComparatorSize``
    orders them; unmapped ones by address."""

    is_small: bool
    keys: list[tuple[int, int, int]] = field(default_factory=list)
    by_addr: dict[int, _Block] = field(default_factory=dict)
    unmapped: dict[int, _Block] = field(default_factory=dict)
    page_bytes: int = 0

    def insert(self, b: _Block) -> None:
        bisect.insort(self.keys, (b.stream, b.size, b.addr))
        self.by_addr[b.addr] = b

    def remove(self, b: _Block) -> None:
        i = bisect.bisect_left(self.keys, (b.stream, b.size, b.addr))
        del self.keys[i]
        del self.by_addr[b.addr]


class CachingAllocator:
    """The allocator's state and statistics; ``malloc`` returns a handle for ``free``."""

    def __init__(self, config: AllocatorConfig | None = None) -> None:
        self.config = config or AllocatorConfig()
        self.small = _Pool(is_small=True, page_bytes=K_SMALL_BUFFER)
        self.large = _Pool(is_small=False, page_bytes=K_LARGE_BUFFER)
        self.live: dict[int, _Block] = {}
        self.segments: dict[int, int] = {}
        """Non-expandable segments: index → size."""
        self.allocated_bytes = 0
        self.reserved_bytes = 0
        self.n_device_allocs = 0
        self._next_addr = 0
        self._next_seg = 0
        self._small_segs: set[int] = set()
        self.reset_peak_stats()

    # -- statistics -------------------------------------------------------------------------------
    def reset_peak_stats(self) -> None:
        """``torch.cuda.reset_peak_memory_stats()``: peaks restart from the current values."""
        self.peak_allocated_bytes = self.allocated_bytes
        self.reserved_at_peak_bytes = self.reserved_bytes
        self.peak_reserved_bytes = self.reserved_bytes
        self.segments_at_peak = self.n_segments()

    def n_segments(self) -> int:
        """Segments held: cudaMalloc'ed ones, plus each contiguous mapped range of expandable ones."""
        n = len(self.segments)
        for pool in (self.small, self.large):
            for b in pool.unmapped.values():
                if b.prev is not None and b.prev.mapped:
                    n += 1
        return n

    def stats(self) -> AllocatorStats:
        return AllocatorStats(peak_reserved_bytes=self.peak_reserved_bytes,
                              peak_allocated_bytes=self.peak_allocated_bytes,
                              reserved_at_peak_bytes=self.reserved_at_peak_bytes,
                              n_segments=self.segments_at_peak, n_device_allocs=self.n_device_allocs)

    def _note_reserved(self) -> None:
        if self.reserved_bytes > self.peak_reserved_bytes:
            self.peak_reserved_bytes = self.reserved_bytes
            self.segments_at_peak = self.n_segments()

    # -- malloc / free ----------------------------------------------------------------------------
    def malloc(self, nbytes: int, stream: int = 0) -> int:
        """``malloc``: serve ``nbytes`` on ``stream``; returns the block's address (the handle for ``free``)."""
        size = round_size(nbytes)
        pool = self.small if size <= K_SMALL_SIZE else self.large
        block = self._get_free_block(pool, size, stream)
        if block is None:
            block = self._alloc_block(pool, size, stream)
        if block is None and self.config.capacity_bytes is not None:
            self._release_cached_blocks()
            block = self._alloc_block(pool, size, stream)
        if block is None:
            raise AllocatorOOM(f"cannot allocate {size} B: reserved {self.reserved_bytes} B of "
                               f"capacity {self.config.capacity_bytes} B, allocated {self.allocated_bytes} B")
        block = self._alloc_found_block(pool, block, size)
        self.live[block.addr] = block
        self.allocated_bytes += block.size
        if self.allocated_bytes > self.peak_allocated_bytes:
            self.peak_allocated_bytes = self.allocated_bytes
            self.reserved_at_peak_bytes = self.reserved_bytes
        return block.addr

    def free(self, handle: int) -> None:
        """``free`` → ``free_block``: uncount the block, merge it with free neighbours, cache it."""
        block = self.live.pop(handle)
        block.allocated = False
        self.allocated_bytes -= block.size
        pool = self.small if self._is_small(block) else self.large
        for nb in (block.prev, block.next):
            self._try_merge(block, nb, pool)
        pool.insert(block)

    def _is_small(self, block: _Block) -> bool:
        return block.seg in self._small_segs

    def serves_from_cache(self, nbytes: int, stream: int = 0) -> bool:
        """Whether ``malloc(nbytes, stream)`` would be served by a cached block, without changing anything
        (segments, not expandable). For a malloc followed at once by its free this is the pair's whole effect:
        served, the block is split and merged back into the very block it was (free neighbours are always
        merged, so the block's neighbours are allocated); not served, a new segment that stays cached."""
        if self.config.expandable_segments:
            raise ValueError("serves_from_cache: expandable segments map pages; not modelled here")
        size = round_size(nbytes)
        pool = self.small if size <= K_SMALL_SIZE else self.large
        i = bisect.bisect_left(pool.keys, (stream, size, -1))
        if i == len(pool.keys) or pool.keys[i][0] != stream:
            return False
        mss, found = self.config.max_split_size_bytes, pool.keys[i][1]
        if mss is not None and ((size < mss <= found) or (size >= mss and found >= size + self.config.max_non_split_rounding_bytes)):
            return False
        return True

    # -- block search and split ------------------------------------------------------------------
    def _get_free_block(self, pool: _Pool, size: int, stream: int = 0) -> _Block | None:
        """``get_free_block``: best fit among ``stream``'s free blocks (``lower_bound`` of a search key
        with the request's stream; a hit of another stream is no hit), with the oversize rules."""
        i = bisect.bisect_left(pool.keys, (stream, size, -1))
        if i == len(pool.keys) or pool.keys[i][0] != stream:
            return None
        if self.config.expandable_segments:
            i = self._prefer_non_growing(pool, i)
        block = pool.by_addr[pool.keys[i][2]]
        mss = self.config.max_split_size_bytes
        if mss is not None:
            if size < mss <= block.size:
                return None
            if size >= mss and block.size >= size + self.config.max_non_split_rounding_bytes:
                return None
        pool.remove(block)
        return block

    @staticmethod
    def _prefer_non_growing(pool: _Pool, i: int) -> int:
        """The expandable tweak of ``get_free_block``: a free block followed by unmapped space counts
        as its size plus that space, so walk on while the next block's such size is smaller."""
        def grow(b: _Block) -> int:
            return b.size + (b.next.size if b.next is not None and not b.next.mapped else 0)

        while i + 1 < len(pool.keys) and pool.keys[i + 1][0] == pool.keys[i][0]:
            cur, nxt = pool.by_addr[pool.keys[i][2]], pool.by_addr[pool.keys[i + 1][2]]
            if grow(nxt) >= grow(cur):
                break
            i += 1
        return i

    def _should_split(self, pool: _Pool, block: _Block, size: int) -> bool:
        """``should_split``: small pool or expandable: rest ≥ 512 B; large pool: rest > 1 MiB."""
        remaining = block.size - size
        if pool.is_small or self.config.expandable_segments:
            return remaining >= K_MIN_BLOCK_SIZE
        mss = self.config.max_split_size_bytes
        return (mss is None or size < mss) and remaining > K_SMALL_SIZE

    def _alloc_found_block(self, pool: _Pool, block: _Block, size: int) -> _Block:
        """``alloc_found_block``: split off the rest as a new free block if ``should_split``."""
        if self._should_split(pool, block, size):
            rest = _Block(addr=block.addr + size, size=block.size - size, seg=block.seg,
                          prev=block, next=block.next, stream=block.stream)
            if block.next is not None:
                block.next.prev = rest
            block.next = rest
            block.size = size
            pool.insert(rest)
        block.allocated = True
        return block

    def _try_merge(self, dst: _Block, src: _Block | None, pool: _Pool) -> None:
        """``try_merge_blocks``: ``dst`` absorbs its neighbour ``src`` if free and equally mapped."""
        if src is None or src.allocated or src.mapped != dst.mapped:
            return
        if src.mapped:
            pool.remove(src)
        else:
            del pool.unmapped[src.addr]
        if dst.prev is src:
            dst.addr, dst.prev = src.addr, src.prev
            if dst.prev is not None:
                dst.prev.next = dst
        else:
            dst.next = src.next
            if dst.next is not None:
                dst.next.prev = dst
        dst.size += src.size

    # -- new segments -----------------------------------------------------------------------------
    def _fits(self, nbytes: int) -> bool:
        cap = self.config.capacity_bytes
        return cap is None or self.reserved_bytes + nbytes <= cap

    def _new_segment(self, pool: _Pool, nbytes: int) -> int:
        seg = self._next_seg
        self._next_seg += 1
        self._next_addr += nbytes
        if pool.is_small:
            self._small_segs.add(seg)
        return seg

    def _alloc_block(self, pool: _Pool, size: int, stream: int = 0) -> _Block | None:
        """``alloc_block``: cudaMalloc a segment of ``get_allocation_size`` for ``stream`` (or map pages)."""
        if self.config.expandable_segments:
            return self._try_allocate_expandable_block(pool, size, stream)
        nbytes = allocation_size(size)
        if not self._fits(nbytes):
            return None
        addr = self._next_addr
        seg = self._new_segment(pool, nbytes)
        self.segments[seg] = nbytes
        self.reserved_bytes += nbytes
        self.n_device_allocs += 1
        self._note_reserved()
        return _Block(addr=addr, size=nbytes, seg=seg, stream=stream)

    def _release_cached_blocks(self) -> None:
        """``release_cached_blocks``: cudaFree every fully free segment; unmap free expandable pages."""
        for pool in (self.small, self.large):
            for addr in [a for a, b in pool.by_addr.items()
                         if b.prev is None and b.next is None and b.seg in self.segments]:
                b = pool.by_addr[addr]
                pool.remove(b)
                self.reserved_bytes -= self.segments.pop(b.seg)
            if self.config.expandable_segments:
                for b in list(pool.by_addr.values()):
                    self._unmap_block(pool, b)

    # -- expandable segments ----------------------------------------------------------------------
    def _find_expandable_block(self, pool: _Pool, size: int, stream: int = 0) -> _Block:
        """``find_expandable_block``: lowest-address unmapped range of a ``stream`` segment (with the free
        block before it) that has ``size`` bytes of free + unmapped space; else a new segment's whole
        virtual range."""
        def room(b: _Block | None) -> int:
            n = 0
            while b is not None and not b.allocated and n < size:
                n, b = n + b.size, b.next
            return n

        for addr in sorted(pool.unmapped):
            c = pool.unmapped[addr]
            if c.stream != stream:
                continue
            if c.prev is not None and not c.prev.allocated:
                c = c.prev
            if room(c) >= size:
                return c
        cap = self.config.capacity_bytes
        va = cap + cap // 8 if cap is not None else _UNLIMITED_VA
        va = -(-va // pool.page_bytes) * pool.page_bytes
        addr = -(-self._next_addr // pool.page_bytes) * pool.page_bytes
        seg = self._new_segment(pool, va)
        self._next_addr = addr + va
        block = _Block(addr=addr, size=va, seg=seg, mapped=False, stream=stream)
        pool.unmapped[addr] = block
        return block

    def _map_block(self, pool: _Pool, block: _Block, size: int) -> bool:
        """``map_block``: map whole pages for ``size`` bytes at the start of unmapped ``block``."""
        nbytes = min(-(-size // pool.page_bytes) * pool.page_bytes, block.size)
        if not self._fits(nbytes):
            return False
        del pool.unmapped[block.addr]
        block.mapped = True
        if nbytes < block.size:
            rest = _Block(addr=block.addr + nbytes, size=block.size - nbytes, seg=block.seg,
                          prev=block, next=block.next, mapped=False, stream=block.stream)
            if block.next is not None:
                block.next.prev = rest
            block.next = rest
            block.size = nbytes
            pool.unmapped[rest.addr] = rest
        self._try_merge(block, block.prev, pool)
        self._try_merge(block, block.next, pool)
        pool.insert(block)
        self.reserved_bytes += nbytes
        self.n_device_allocs += 1
        self._note_reserved()
        return True

    def _try_allocate_expandable_block(self, pool: _Pool, size: int, stream: int = 0) -> _Block | None:
        """``try_allocate_expandable_block``: map pages until a free block of ``size`` exists."""
        c = self._find_expandable_block(pool, size, stream)
        if not c.mapped and not self._map_block(pool, c, min(c.size, size)):
            return None
        while c.size < size:
            nxt = c.next
            if nxt is None or not self._map_block(pool, nxt, min(size - c.size, nxt.size)):
                return None
            c = nxt
        pool.remove(c)
        return c

    def _unmap_block(self, pool: _Pool, block: _Block) -> None:
        """``unmap_block``: give back the whole pages inside free ``block`` (on a failed map)."""
        seg_base = min(b.addr for b in self._segment_blocks(block))
        page = pool.page_bytes
        lo = seg_base + -(-(block.addr - seg_base) // page) * page
        hi = seg_base + (block.addr + block.size - seg_base) // page * page
        if hi <= lo:
            return
        pool.remove(block)
        parts = [(block.addr, lo - block.addr, True), (lo, hi - lo, False), (hi, block.addr + block.size - hi, True)]
        prev, nxt = block.prev, block.next
        for addr, n, mapped in parts:
            if n == 0:
                continue
            b = _Block(addr=addr, size=n, seg=block.seg, prev=prev, next=None, mapped=mapped, stream=block.stream)
            if prev is not None:
                prev.next = b
            prev = b
            if mapped:
                pool.insert(b)
            else:
                pool.unmapped[addr] = b
                mid = b
        prev.next = nxt
        if nxt is not None:
            nxt.prev = prev
        self.reserved_bytes -= hi - lo
        for nb in (mid.prev, mid.next):
            self._try_merge(mid, nb, pool)

    @staticmethod
    def _segment_blocks(block: _Block) -> Iterable[_Block]:
        b = block
        while b.prev is not None:
            b = b.prev
        while b is not None:
            yield b
            b = b.next


Event = tuple[bool, int, int] | tuple[bool, int, int, int]
"""(is_alloc, storage id, nbytes[, stream]) in program order; a free names the id of an earlier alloc;
the stream (default 0) matters for allocs only (a block is freed into the pool of its own stream)."""


def simulate(events: Iterable[Event], config: AllocatorConfig | None = None,
             reset_peaks_at: int = 0) -> AllocatorStats:
    """Replay ``events`` through the allocator; peaks are reset before event ``reset_peaks_at``
    (as ``torch.cuda.reset_peak_memory_stats()`` after a warm-up step). Zero-byte allocs are skipped."""
    alloc = CachingAllocator(config)
    handles: dict[int, int] = {}
    for i, ev in enumerate(events):
        if i == reset_peaks_at:
            alloc.reset_peak_stats()
        is_alloc, key, nbytes = ev[0], ev[1], ev[2]
        if is_alloc:
            if nbytes > 0:
                handles[key] = alloc.malloc(nbytes, ev[3] if len(ev) > 3 else 0)
        elif key in handles:
            alloc.free(handles.pop(key))
    return alloc.stats()


def events_from_lives(lives: Iterable, start_event: int = 0, origin_event: int = 0,
                      streams: bool = True) -> tuple[list[Event], int]:
    """The tracker's :class:`~trainmem.trace.tracker.StorageLife` records as an ordered event stream.

    Every birth and death has its own event index in the tracker, so sorting by it gives program
    order. Storages alive at ``origin_event`` (the model as built, before the first step) come first, in
    birth order, as if allocated directly in their final layout; what was born and died before it (the
    tracer's own model build, e.g. FSDP2 sharding a fully built model) is left out: a real run builds
    on the meta device or the CPU. Returns the events and the position of the first event after
    ``start_event`` (where the measured window starts). Lives with 0 bytes (host tensors the tracer
    ``forget``s) are left out. Each event carries its life's ``stream`` (0 when ``streams`` is False:
    everything on one stream, the replay before per-stream pools).
    """
    timed: list[tuple[int, bool, int, int, int]] = []
    for i, lf in enumerate(lives):
        if lf.nbytes <= 0 or (lf.died is not None and lf.died <= origin_event):
            continue
        stream = getattr(lf, "stream", 0) if streams else 0
        timed.append((lf.born, True, i, lf.nbytes, stream))
        if lf.died is not None:
            timed.append((lf.died, False, i, lf.nbytes, stream))
    timed.sort(key=lambda e: e[0])
    start = bisect.bisect_right([e[0] for e in timed], start_event)
    return [(a, k, n, st) for _, a, k, n, st in timed], start


def simulate_lives(lives: Iterable, start_event: int, origin_event: int = 0,
                   streams: bool = True) -> tuple[AllocatorStats, AllocatorStats]:
    """Both allocator modes on a trace: (default segments, ``expandable_segments:True``), peaks over
    the window after ``start_event`` (the steady step), cache state carried over from the warm-up step
    that begins at ``origin_event`` (see :func:`events_from_lives`); per-stream pools unless ``streams``
    is False."""
    events, start = events_from_lives(lives, start_event, origin_event, streams)
    return (simulate(events, AllocatorConfig(), start),
            simulate(events, AllocatorConfig(expandable_segments=True), start))
