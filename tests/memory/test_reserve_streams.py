"""FSDP2's stream pools in the reserve model (trainmem/memory/overhead.py), hand-computed."""

from __future__ import annotations

from trainmem.api import build
from trainmem.memory import estimate
from trainmem.memory.overhead import (fsdp2_stream_pools_bytes, post_peak_segment_bytes, reserved_bytes,
                                      stream_pool_reserve_bytes)
from trainmem.memory.timeline import Timeline
from trainmem.setup import make_setup
from trainmem.units import MiB


def test_stream_pool_reserve_by_hand():
    # 300 MiB of sharded gradients at their peak, 100 MiB of them alive at the compute peak: 200 MiB held
    # apart in the reduce-scatter pool; a 250 MiB + 1 B root all-gather output in the copy-in pool: rounds up
    assert stream_pool_reserve_bytes(300 * MiB, 100 * MiB, 250 * MiB + 1) == 452 * MiB
    # all gradients alive at the peak (end of backward): only the root buffer
    assert stream_pool_reserve_bytes(300 * MiB, 300 * MiB, 100 * MiB) == 100 * MiB
    assert stream_pool_reserve_bytes(0, 0, 0) == 0
    # reserved_bytes adds it after its own rounding: 968 + 400/8 + 10 = 1028 MiB, + 32 MiB workspace, + 452
    assert reserved_bytes(1000 * MiB, 600 * MiB, 32 * MiB, 452 * MiB) == 1060 * MiB + 452 * MiB


def test_only_fully_shard_over_more_than_one_rank_has_stream_pools():
    cp, br = {"gradients": 300 * MiB}, {"gradients": 100 * MiB}
    root = 100 * MiB // 2  # parameters (elements)
    fsdp2 = make_setup(engine="fsdp2", gpus=8, precision="amp-bf16")
    assert fsdp2_stream_pools_bytes(fsdp2, root, cp, br) == 200 * MiB + 100 * MiB  # bf16 root buffer
    fp32 = make_setup(engine="fsdp2", gpus=8, precision="fp32")
    assert fsdp2_stream_pools_bytes(fp32, root, cp, br) == 200 * MiB + 200 * MiB   # fp32 all-gather
    # FSDP1 allocates on its unshard and post-backward streams the same way (_runtime_utils.py _unshard, _reduce_grad)
    fsdp1 = make_setup(engine="fsdp2", gpus=8, fsdp_version=1, precision="bf16")
    assert fsdp2_stream_pools_bytes(fsdp1, root, cp, br) == 200 * MiB + 100 * MiB
    for s in (make_setup(precision="bf16"), make_setup(engine="fsdp2", gpus=8, tp=8, precision="bf16"),
              make_setup(engine="deepspeed", gpus=8, zero=3, precision="mixed-bf16")):
        assert fsdp2_stream_pools_bytes(s, root, cp, br) == 0, s


def test_post_peak_segments_by_hand():
    """CUDACachingAllocator (torch 2.13): a request ≥ 10 MiB larger than every earlier block gets a new segment
    (its size rounded to 2 MiB) — counted only after the allocated peak; a new peak forgets them."""
    tl = Timeline()
    tl.alloc("w", "parameters", 900 * MiB)             # model states: many tensors, never a candidate
    tl.alloc("a", "activations", 100 * MiB)
    tl.alloc("b", "activations", 300 * MiB)            # the peak: 1300 MiB
    tl.free("b")
    tl.free("a")
    tl.alloc("ag", "communication_buffers", 500 * MiB, side_stream=True)  # another stream's pool
    tl.free("ag")
    tl.spike("tmp", "temporaries", 350 * MiB, aggregate=True)             # foreach temporaries: many tensors
    assert tl.post_peak_segment_bytes == 0
    tl.alloc("rs", "communication_buffers", 301 * MiB + 1)  # > 300 MiB, below the peak: 302 MiB segment
    tl.alloc("c", "temporaries", 20 * MiB)             # smaller than a cached block could be: nothing
    assert (tl.max_block, tl.post_peak_segment_bytes) == (301 * MiB + 512, 302 * MiB)
    tl.alloc("d", "activations", 400 * MiB)            # 900 + 301 + 20 + 400 > 1300: a new peak, counted in it
    assert tl.post_peak_segment_bytes == 0
    fsdp2, fsdp1 = make_setup(engine="fsdp2", gpus=8), make_setup(engine="fsdp2", gpus=8, fsdp_version=1)
    assert post_peak_segment_bytes(fsdp2, 302 * MiB) == 302 * MiB
    for s in (fsdp1, make_setup(), make_setup(engine="fsdp2", gpus=8, tp=8, precision="bf16")):
        assert post_peak_segment_bytes(s, 302 * MiB) == 0, s


def test_issue_case_carries_the_root_buffer():
    """Llama-3.1-8B, FSDP2 over 64 ranks (issue 17): the root unit is the 128256 × 4096 embedding and the
    untied LM head, gathered in bf16: 2 × 525,336,576 × 2 B = 2,101,346,304 B; at the estimator's peak
    (backward) the term is that plus the sharded gradients not yet written."""
    spec, setup = build("llama-3.1-8b", engine="fsdp2", gpus=64)
    e = estimate(spec, setup)
    without = reserved_bytes(e.peak_allocated_bytes, e.static_bytes, e.cuda_only_bytes)
    term = e.peak_reserved_bytes - without
    root = 2 * 2 * 128256 * 4096
    grads_apart = e.category_peak_bytes["gradients"] - e.breakdown_at_peak_bytes["gradients"]
    # + the root's reduce-scatter input (fp32 under amp-bf16: 2 × 525,336,576 × 4 B = 4,202,692,608 B), after the
    # peak and larger than every earlier compute-stream block: its own segment, rounded to 2 MiB = 4010 MiB
    post_peak = 4010 * MiB
    assert term == stream_pool_reserve_bytes(e.category_peak_bytes["gradients"],
                                             e.breakdown_at_peak_bytes["gradients"], root) + post_peak
    assert root + post_peak <= term <= root + post_peak + grads_apart + 2 * MiB


def test_accuracy_doc_carries_the_stream_section():
    """docs/accuracy.md's FSDP2-streams section is what the script prints from the stored replays
    (python benchmarks/reserved_streams.py --rescore benchmarks/reserved_streams_rows.jsonl --doc docs/accuracy.md)."""
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    sys.path.insert(0, str(root / "benchmarks"))
    import reserved_streams

    section = reserved_streams.markdown(reserved_streams.rescore(str(root / "benchmarks" / "reserved_streams_rows.jsonl")))
    doc = (root / "docs" / "accuracy.md").read_text(encoding="utf-8")
    assert section in doc, "docs/accuracy.md's reserved-streams section differs from the script's (rerun it)"
