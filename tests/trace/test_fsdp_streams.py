"""FSDP2's collective buffers carry the stream FSDP2 allocates them on, and the replay keeps a pool per stream.

torch 2.13 ``_fully_shard/_fsdp_collectives.py``: ``foreach_all_gather`` casts the shards and allocates the
flat all-gather output under ``device_handle.stream(all_gather_copy_in_stream)`` (stream 1 here, the first
non-default stream used); ``foreach_reduce`` allocates the reduce-scatter input on the current stream (0) and
its output — the sharded gradients — under ``device_handle.stream(reduce_scatter_stream)`` (stream 3: the
all-gather stream, 2, allocates nothing). Sizes are hand-computed for the tiny Llama below.
"""

from __future__ import annotations

import collections

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from tests.trace._specs import LLAMA_TINY, make_spec  # noqa: E402
from trainmem.setup import make_setup  # noqa: E402
from trainmem.units import round_up_bytes  # noqa: E402

SPEC = make_spec(LLAMA_TINY)
LAYER_PARAMS = 4 * 128 * 128 + 3 * 128 * 256 + 2 * 128  # q, k, v, o + gate, up, down + two norms
WORLD = 4


def _traced_lives(monkeypatch, **kw):
    import trainmem.trace.step as step

    seen: list = []
    orig = step.simulate_lives

    def spy(lives, *a, **k):
        seen.append(lives)
        return orig(lives, *a, **k)

    monkeypatch.setattr(step, "simulate_lives", spy)
    result = step.trace_step(SPEC, make_setup(**kw))
    return result, seen[0]


def test_fsdp2_buffers_are_tagged_with_their_stream(monkeypatch):
    r, lives = _traced_lives(monkeypatch, engine="fsdp2", gpus=WORLD, precision="amp-bf16", seq_len=64)
    by_stream = collections.defaultdict(collections.Counter)
    for lf in lives:
        if lf.tag == "comm" and lf.born > 0:
            by_stream[lf.stream][lf.nbytes] += 1
    shard = LAYER_PARAMS // WORLD
    # copy-in stream: each layer's bf16 shard cast (2 B) and its flat all-gather output (world × shard × 2 B)
    assert by_stream[1][round_up_bytes(shard * 2, 512)] >= 2 and by_stream[1][LAYER_PARAMS * 2] >= 2
    # reduce-scatter stream: each layer's fp32 reduce-scatter output (the sharded gradient)
    assert by_stream[3][round_up_bytes(shard * 4, 512)] >= 2
    # compute stream: the fp32 reduce-scatter input (the unsharded gradients copied in)
    assert by_stream[0][LAYER_PARAMS * 4] >= 2
    assert set(by_stream) == {0, 1, 3}
    # no parameter, activation or gradient outside FSDP2's collectives lands on another stream
    assert all(lf.stream == 0 for lf in lives if lf.tag != "comm")
    # pools apart: here every stream needs its own small-pool segment, so reserved grows
    assert r.peak_reserved_bytes > r.peak_reserved_one_stream_bytes


def test_without_fsdp2_everything_is_on_one_stream():
    from trainmem.trace import trace_step

    r = trace_step(SPEC, make_setup(precision="bf16", seq_len=64))
    assert r.peak_reserved_one_stream_bytes == r.peak_reserved_bytes > 0



def test_root_reduce_scatter_input_gets_its_own_segment_after_the_peak(monkeypatch):
    """The tiny Llama with a 32,000-token vocabulary, 3 × 64 tokens: the root unit's fp32 reduce-scatter input
    (embedding + untied LM head + final norm, 2 × 32,000 × 128 + 128 elements × 4 B = 32,768,512 B, a multiple of
    4 ranks) comes after every layer's backward, below the allocated peak (the loss) and larger than any earlier
    compute-stream block (the fp32 logits: 192 × 32,000 × 4 B = 24,576,000 B), so the replay cudaMallocs a
    segment of it rounded to 2 MiB (32 MiB) there (CUDACachingAllocator: no cached block serves it) — the rule
    ``trainmem.memory.overhead.post_peak_segment_bytes`` follows (checked on the issue-17 case in
    tests/memory/test_reserve_streams.py)."""
    import trainmem.trace.step as step
    from trainmem.trace.allocator import CachingAllocator, events_from_lives

    spec = make_spec({**LLAMA_TINY, "vocab_size": 32000})
    setup = make_setup(engine="fsdp2", gpus=WORLD, precision="amp-bf16", seq_len=64, micro_batch=3)
    seen: list = []
    orig = step.simulate_lives
    monkeypatch.setattr(step, "simulate_lives", lambda lives, *a, **k: seen.append((lives, a)) or orig(lives, *a, **k))
    step.trace_step(spec, setup)
    lives, (start, origin) = seen[0][0], seen[0][1][:2]
    events, first = events_from_lives(lives, start, origin)
    alloc, handles, peak, post_peak = CachingAllocator(), {}, 0, []
    for i, (is_alloc, key, nbytes, stream) in enumerate(events):
        if i == first:
            alloc.reset_peak_stats()
        if not is_alloc:
            alloc.free(handles.pop(key))
            continue
        before = alloc.reserved_bytes
        handles[key] = alloc.malloc(nbytes, stream)
        if i >= first and alloc.allocated_bytes > peak:
            peak, post_peak = alloc.allocated_bytes, []
        elif i >= first and alloc.reserved_bytes > before and stream == 0 and nbytes >= 10 * 2**20:
            post_peak.append((nbytes, alloc.reserved_bytes - before))
    assert post_peak == [(32_768_512, 32 * 2**20)]
