"""The caching-allocator simulation against hand arithmetic on c10/cuda/CUDACachingAllocator.cpp's rules,
invariants under random streams, and a traced toy step (reserved vs allocated, estimate vs simulation)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainmem.trace.allocator import (
    AllocatorConfig,
    AllocatorOOM,
    CachingAllocator,
    allocation_size,
    events_from_lives,
    round_size,
    simulate,
)
from trainmem.units import KiB, MiB

EXP = AllocatorConfig(expandable_segments=True)


def test_round_size_and_segment_sizes():
    assert round_size(1) == 512 and round_size(512) == 512 and round_size(513) == 1024
    assert allocation_size(1 * MiB) == 2 * MiB                      # small pool: 2 MiB segments
    assert allocation_size(1 * MiB + 512) == 20 * MiB               # 1 MiB < size < 10 MiB: kLargeBuffer
    assert allocation_size(10 * MiB - 512) == 20 * MiB
    assert allocation_size(10 * MiB) == 10 * MiB                    # >= kMinLargeAlloc: rounded to 2 MiB
    assert allocation_size(12 * MiB + 512) == 14 * MiB


def test_small_request_reserves_a_2mib_segment():
    a = CachingAllocator()
    a.malloc(1 * KiB)
    assert (a.allocated_bytes, a.reserved_bytes, a.n_segments()) == (1 * KiB, 2 * MiB, 1)
    a.malloc(1 * MiB)  # 1 KiB + 1 MiB fit in the same 2 MiB segment: split, rest >= 512 B
    assert (a.reserved_bytes, a.n_segments()) == (2 * MiB, 1)


def test_5mib_requests_share_one_20mib_segment():
    a = CachingAllocator()
    a.malloc(5 * MiB)
    assert a.reserved_bytes == 20 * MiB and a.allocated_bytes == 5 * MiB
    a.malloc(5 * MiB)  # best fit: the 15 MiB rest of the segment, split again (10 MiB rest > 1 MiB)
    assert (a.reserved_bytes, a.allocated_bytes, a.n_segments()) == (20 * MiB, 10 * MiB, 1)


def test_12mib_request_gets_its_own_12mib_segment():
    a = CachingAllocator()
    a.malloc(12 * MiB)
    assert (a.reserved_bytes, a.allocated_bytes) == (12 * MiB, 12 * MiB)
    a.malloc(12 * MiB + 1)  # rounds to 12 MiB + 512 B, segment 14 MiB; the rest 2 MiB - 512 B > 1 MiB is split
    assert a.reserved_bytes == 26 * MiB and a.allocated_bytes == 24 * MiB + 512
    assert a.large.keys == [(0, 2 * MiB - 512, 12 * MiB + 12 * MiB + 512)]  # (stream, size, address)


def test_unsplit_rest_counts_as_allocated():
    """should_split in the large pool needs a rest > 1 MiB: a 19.5 MiB request on a free 20 MiB block takes
    all of it, and max_memory_allocated counts the 20 MiB (alloc_found_block adds block->size)."""
    a = CachingAllocator()
    a.free(a.malloc(5 * MiB))            # a free 20 MiB segment (split blocks merged back)
    a.malloc(19 * MiB + 512 * KiB)
    assert (a.reserved_bytes, a.allocated_bytes) == (20 * MiB, 20 * MiB)


def test_free_merges_neighbours_for_reuse():
    a = CachingAllocator()
    x, y = a.malloc(5 * MiB), a.malloc(5 * MiB)
    a.free(x)
    a.free(y)                            # [x][y][10 MiB rest] merge into one free 20 MiB block
    assert a.large.keys == [(0, 20 * MiB, 0)]
    a.malloc(15 * MiB)                   # fits: no new segment
    assert (a.reserved_bytes, a.n_segments()) == (20 * MiB, 1)


def test_pools_do_not_share_blocks():
    a = CachingAllocator()
    a.free(a.malloc(1 * MiB))            # a free 2 MiB small-pool segment
    a.malloc(1 * MiB + 512)              # large pool: cannot use it, cudaMallocs 20 MiB
    assert (a.reserved_bytes, a.n_segments()) == (22 * MiB, 2)
    a.malloc(1 * MiB)                    # small pool again: reuses the cached 2 MiB segment
    assert a.reserved_bytes == 22 * MiB


def test_best_fit_picks_the_smallest_block_that_fits():
    a = CachingAllocator()
    p, q = a.malloc(12 * MiB), a.malloc(14 * MiB)
    a.free(p)
    a.free(q)
    a.malloc(11 * MiB)                   # into the 12 MiB block (rest 1 MiB: not split)
    assert a.allocated_bytes == 12 * MiB
    a.malloc(13 * MiB)                   # the 14 MiB block is still there
    assert a.reserved_bytes == 26 * MiB


def test_oversize_blocks_with_max_split_size():
    a = CachingAllocator(AllocatorConfig(max_split_size_bytes=40 * MiB))
    a.free(a.malloc(60 * MiB))
    a.malloc(30 * MiB)                   # 30 < 40 <= 60: an oversize block never serves a smaller request
    assert a.reserved_bytes == 90 * MiB
    a.malloc(50 * MiB)                   # 50 >= 40 and 60 < 50 + 20: served whole, not split
    assert (a.reserved_bytes, a.allocated_bytes) == (90 * MiB, 90 * MiB)


def test_capacity_releases_cached_segments_then_ooms():
    a = CachingAllocator(AllocatorConfig(capacity_bytes=30 * MiB))
    a.free(a.malloc(12 * MiB))
    h = a.malloc(24 * MiB)               # 12 + 24 > 30: the free 12 MiB segment is cudaFree'd, then retried
    assert (a.reserved_bytes, a.peak_reserved_bytes) == (24 * MiB, 24 * MiB)
    with pytest.raises(AllocatorOOM):
        a.malloc(12 * MiB)
    a.free(h)


def test_expandable_segments_unmap_free_pages_under_pressure():
    """capacity 40 MiB: a freed 30 MiB block leaves two mapped 20 MiB pages; the small pool's first 2 MiB
    page does not fit, so the free pages are unmapped (release_cached_blocks → unmap_block) and the map retried."""
    a = CachingAllocator(AllocatorConfig(expandable_segments=True, capacity_bytes=40 * MiB))
    a.free(a.malloc(30 * MiB))
    assert a.reserved_bytes == 40 * MiB
    a.malloc(1 * KiB)
    assert (a.reserved_bytes, a.peak_reserved_bytes, a.n_segments()) == (2 * MiB, 40 * MiB, 1)
    with pytest.raises(AllocatorOOM):  # 38 MiB needs two 20 MiB pages: 2 + 40 > 40
        a.malloc(38 * MiB)


def test_expandable_segments_map_20mib_pages():
    a = CachingAllocator(EXP)
    a.malloc(5 * MiB)
    assert (a.reserved_bytes, a.n_segments()) == (20 * MiB, 1)
    a.malloc(30 * MiB)                   # 15 MiB free at the end + one more 20 MiB page
    assert (a.reserved_bytes, a.allocated_bytes, a.n_segments()) == (40 * MiB, 35 * MiB, 1)
    a.malloc(1 * KiB)                    # small pool: its own segment of 2 MiB pages
    assert (a.reserved_bytes, a.n_segments()) == (42 * MiB, 2)


def test_expandable_segments_reuse_freed_neighbours():
    """Two freed 12 MiB blocks then a 24 MiB request: default segments cannot merge across cudaMallocs
    (12 + 12 + 24 = 48 MiB); one expandable segment merges them (two 20 MiB pages = 40 MiB)."""
    stream = [(True, 1, 12 * MiB), (True, 2, 12 * MiB), (False, 1, 0), (False, 2, 0), (True, 3, 24 * MiB)]
    assert simulate(stream).peak_reserved_bytes == 48 * MiB
    assert simulate(stream, EXP).peak_reserved_bytes == 40 * MiB


def test_reset_peaks_and_fragmentation():
    stream = [(True, 1, 30 * MiB), (False, 1, 0), (True, 2, 5 * MiB)]
    s = simulate(stream, reset_peaks_at=1)
    assert s.peak_reserved_bytes == 30 * MiB       # the cached segment is still held after the reset
    assert s.peak_allocated_bytes == 30 * MiB      # the peak is the current value at the reset
    s = simulate(stream, reset_peaks_at=2)
    assert s.peak_allocated_bytes == 5 * MiB and s.reserved_at_peak_bytes == 30 * MiB
    assert s.fragmentation_at_peak == pytest.approx(1 - 5 / 30)


def test_events_from_lives_orders_births_and_deaths():
    class L:
        def __init__(self, nbytes, born, died):
            self.nbytes, self.born, self.died = nbytes, born, died

    lives = [L(1024, 1, 4), L(2048, 2, None), L(0, 3, 3), L(512, 5, 6)]
    ev, start = events_from_lives(lives, start_event=4)
    assert ev == [(True, 0, 1024, 0), (True, 1, 2048, 0), (False, 0, 1024, 0), (True, 3, 512, 0), (False, 3, 512, 0)]
    assert start == 3


def _check(a: CachingAllocator, live: dict[int, int]) -> None:
    """Reserved is tiled exactly by the free and allocated blocks; allocated is the sum of live blocks,
    each at least its rounded request and at most an unsplittable rest above it."""
    blocks = list(a.live.values())
    free_mapped = [b for p in (a.small, a.large) for b in p.by_addr.values()]
    assert sum(b.size for b in blocks) + sum(b.size for b in free_mapped) == a.reserved_bytes
    assert a.allocated_bytes == sum(b.size for b in blocks) <= a.reserved_bytes
    assert a.peak_reserved_bytes >= a.reserved_bytes and a.peak_allocated_bytes >= a.allocated_bytes
    for h, nbytes in live.items():
        size = round_size(nbytes)
        slack = a.live[h].size - size
        small_rule = size <= MiB or a.config.expandable_segments
        assert 0 <= slack < 512 if small_rule else 0 <= slack <= MiB, (nbytes, a.live[h].size)


_SIZES = st.one_of(st.integers(1, 2 * MiB), st.integers(1, 64 * MiB))


@settings(max_examples=60, deadline=None)
@given(ops=st.lists(st.tuples(st.booleans(), _SIZES, st.integers(0, 10**6)), min_size=1, max_size=60),
       expandable=st.booleans())
def test_random_streams_keep_the_invariants(ops, expandable):
    a = CachingAllocator(AllocatorConfig(expandable_segments=expandable))
    live: dict[int, int] = {}
    for do_alloc, nbytes, pick in ops:
        if do_alloc or not live:
            live[a.malloc(nbytes)] = nbytes
        else:
            h = sorted(live)[pick % len(live)]
            a.free(h)
            del live[h]
        _check(a, live)
    for h in list(live):
        a.free(h)
        del live[h]
    _check(a, live)
    assert a.allocated_bytes == 0


# Toy residual of the estimator's reserve model (trainmem/memory/overhead.py::reserved_bytes) on this
# trace: +2.9 %; over 27 toy traces the median is 3.6 % and the maximum 18 %, so 10 % here.
RESERVE_TOL = 0.10


def test_traced_toy_step_reserved_and_estimate():
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from tests.memory.tiny_configs import TINY
    from trainmem.model.hf import spec_from_hf_config
    from trainmem.setup import make_setup
    from trainmem.trace.compare import compare

    cmp = compare(spec_from_hf_config(TINY["gpt2"], name="gpt2"), make_setup(precision="bf16", seq_len=256, micro_batch=8))
    tr = cmp.trace
    # the allocator counts unsplit rests (<= 1 MiB per large block) as allocated: >= the 512-B-rounded sum
    assert tr.peak_allocated_bytes <= tr.allocator_peak_allocated_bytes <= tr.peak_reserved_bytes
    assert tr.allocator_peak_allocated_bytes <= tr.peak_reserved_expandable_bytes
    assert tr.peak_reserved_bytes % (2 * MiB) == 0 and tr.reserved_segments > 0
    assert 0.0 < tr.fragmentation_at_peak < 1.0
    assert abs(cmp.reserved_error) < RESERVE_TOL, cmp.to_dict()
    assert cmp.to_dict()["trace_peak_reserved_bytes"] == tr.peak_reserved_bytes


def test_estimator_reserve_model_by_hand():
    from trainmem.memory.overhead import reserved_bytes

    # peak 1000 MiB incl. a 32 MiB cuBLAS workspace, static 600 MiB: 968 + 400/8 + 10 = 1028 MiB (a 2 MiB
    # multiple), + the workspace's own 32 MiB segment
    assert reserved_bytes(1000 * MiB, 600 * MiB, 32 * MiB) == 1060 * MiB
    # the pre-Hopper 8.125 MiB workspace is < 10 MiB: it gets a 20 MiB segment; 1 B over rounds up to 2 MiB
    ws = 8 * MiB + 128 * KiB
    assert reserved_bytes(1000 * MiB + ws + 1, 1000 * MiB + ws, ws) == 1012 * MiB + 20 * MiB


# -- streams (CUDACachingAllocator.cpp: Block::stream, BlockComparatorSize orders by stream first,
#    get_free_block's search key carries the request's stream; expandable segments: one per stream) ------

def test_a_free_block_serves_only_its_own_stream():
    a = CachingAllocator()
    a.free(a.malloc(5 * MiB, stream=0))     # stream 0 caches a free 20 MiB segment
    h1 = a.malloc(5 * MiB, stream=1)        # stream 1 may not take it: its own 20 MiB segment
    assert a.reserved_bytes == 40 * MiB and a.n_device_allocs == 2
    a.malloc(5 * MiB, stream=0)             # stream 0 reuses its cached segment
    assert a.reserved_bytes == 40 * MiB and a.n_device_allocs == 2
    a.free(h1)
    a.malloc(15 * MiB, stream=1)            # best fit within stream 1: its merged 20 MiB block
    assert a.reserved_bytes == 40 * MiB
    a.malloc(15 * MiB, stream=0)            # stream 0 has only its 15 MiB rest: exactly fits
    assert a.reserved_bytes == 40 * MiB
    a.malloc(1 * KiB, stream=2)             # small pool: a 2 MiB segment for stream 2
    assert a.reserved_bytes == 42 * MiB


def test_best_fit_is_searched_within_the_stream():
    a = CachingAllocator()
    big0 = a.malloc(40 * MiB, stream=0)
    small1 = a.malloc(12 * MiB, stream=1)
    a.free(big0)
    a.free(small1)
    # one stream would hand the 12 MiB block of stream 1 to a 12 MiB request; stream 0 splits its 40 MiB
    h = a.malloc(12 * MiB, stream=0)
    assert a.live[h].stream == 0 and a.live[h].size == 12 * MiB and a.reserved_bytes == 52 * MiB
    assert sorted((k[0], k[1]) for k in a.large.keys) == [(0, 28 * MiB), (1, 12 * MiB)]


def test_expandable_segments_are_one_per_stream():
    a = CachingAllocator(EXP)
    a.free(a.malloc(5 * MiB, stream=0))     # stream 0 maps one 20 MiB page
    a.malloc(5 * MiB, stream=1)             # stream 1 gets its own segment and page
    assert a.reserved_bytes == 40 * MiB
    a.malloc(30 * MiB, stream=0)            # stream 0 grows its segment: 20 free + one more page
    assert a.reserved_bytes == 60 * MiB
    assert {b.stream for p in (a.small, a.large) for b in p.unmapped.values()} == {0, 1}


def test_simulate_reads_the_stream_of_each_alloc():
    ev = [(True, 0, 5 * MiB, 0), (False, 0, 5 * MiB, 0), (True, 1, 5 * MiB, 1), (True, 2, 5 * MiB)]
    assert simulate(ev).peak_reserved_bytes == 40 * MiB
    assert simulate([e[:3] for e in ev]).peak_reserved_bytes == 20 * MiB  # one stream: reused


@settings(max_examples=60, deadline=None)
@given(ops=st.lists(st.tuples(st.booleans(), _SIZES, st.integers(0, 10**6), st.integers(0, 2)),
                    min_size=1, max_size=60),
       expandable=st.booleans())
def test_streams_partition_the_cache(ops, expandable):
    """Streams share nothing: without a capacity (reserved never shrinks) the interleaved replay
    reserves exactly the sum of each stream's replay alone, and every block keeps its stream."""
    cfg = AllocatorConfig(expandable_segments=expandable)
    a = CachingAllocator(cfg)
    live: dict[int, tuple[int, int]] = {}
    events: list = []
    for key, (do_alloc, nbytes, pick, stream) in enumerate(ops):
        if do_alloc or not live:
            h = a.malloc(nbytes, stream)
            assert a.live[h].stream == stream
            live[h] = (key, stream)
            events.append((True, key, nbytes, stream))
        else:
            h = sorted(live)[pick % len(live)]
            k, s = live.pop(h)
            a.free(h)
            events.append((False, k, 0, s))
        assert all(b.stream == (b.prev or b).stream for p in (a.small, a.large) for b in p.by_addr.values())
    alone = sum(simulate([e[:3] for e in events if e[3] == s], cfg).peak_reserved_bytes for s in range(3))
    assert a.peak_reserved_bytes == a.reserved_bytes == alone == simulate(events, cfg).peak_reserved_bytes
