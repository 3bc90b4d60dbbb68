"""What a GPU needs beyond the tensors of the step: allocator reserve, cuBLAS workspace, CUDA context, NCCL.

These figures are assumptions until checked on hardware (benchmarks/gpu_validate.py):
- cuBLAS workspace: allocated through the caching allocator, so it counts as *allocated*. PyTorch
  (aten/src/ATen/cuda/CublasHandlePool.cpp ``getChosenWorkspaceSize``) uses 32 MiB on Hopper (sm90+) and
  4096 KiB·2 + 16 KiB·8 = 8.125 MiB on older GPUs, per handle/stream; one stream is assumed.
- Reserve: fitted to the caching allocator's own rules replayed on traced steps (``reserved_bytes``;
  ``trainmem/trace/allocator.py``), plus FSDP2's stream pools (``stream_pool_reserve_bytes``: derived from
  torch 2.13's sources, no fitted constant; checked on the published dev-split points).
- CUDA context: about 500 MiB (CUDA 12 with lazy module loading), outside the allocator.
- NCCL: about 300 MiB of buffers per communicator with more than one rank (NCCL_BUFFSIZE 4 MiB × channels).
"""

from __future__ import annotations

from trainmem.hardware import GPU
from trainmem.setup import TrainingSetup
from trainmem.units import MiB

__all__ = ["cuda_only_allocated_bytes", "reserved_bytes", "stream_pool_reserve_bytes", "fsdp2_stream_pools_bytes",
           "post_peak_segment_bytes",
           "device_total_bytes", "CUDA_CONTEXT_BYTES", "NCCL_PER_GROUP_BYTES"]

CUDA_CONTEXT_BYTES = 500 * MiB
NCCL_PER_GROUP_BYTES = 300 * MiB
_HOPPER_OR_NEWER = ("H100", "H200", "H800", "B200")


def cuda_only_allocated_bytes(gpu: GPU) -> int:
    """cuBLAS workspace bytes (allocated through the caching allocator, invisible to a CPU trace)."""
    if gpu.name.startswith(_HOPPER_OR_NEWER):
        return 32 * MiB
    return 4096 * 1024 * 2 + 16 * 1024 * 8


#: Calibration of ``reserved_bytes`` (see its docstring): reserved − allocated ≈ 1/8 of the step's
#: dynamic memory + 10 MiB. Least squares on relative error over 46 tuning + 27 toy traces gave
#: 0.1265 and 10.4 MiB; rounded to 1/8 and 10 MiB.
RESERVE_DYNAMIC_FRACTION_NUM, RESERVE_DYNAMIC_FRACTION_DEN = 1, 8
RESERVE_CONSTANT_BYTES = 10 * MiB
_ROUND_LARGE_BYTES = 2 * MiB  # kRoundLarge: reserved memory comes in 2 MiB multiples (segments, pages)


def stream_pool_reserve_bytes(sharded_grad_peak_bytes: int, sharded_grad_at_peak_bytes: int,
                              root_allgather_bytes: int) -> int:
    """Bytes FSDP2 (``fully_shard``, shard degree > 1) leaves cached in its collective streams' pools and
    free at the compute stream's peak, where the compute stream cannot use them (rounded up to 2 MiB).

    The caching allocator keeps free blocks per stream (``c10/cuda/CUDACachingAllocator.cpp``:
    ``get_free_block`` only takes a block whose ``stream`` is the request's; ``BlockComparatorSize`` orders
    by stream first). torch 2.13 ``distributed/fsdp/_fully_shard/_fsdp_collectives.py``:

    * ``foreach_reduce`` allocates the reduce-scatter output under
      ``device_handle.stream(reduce_scatter_stream)`` and the sharded gradients are views of it (cast to
      the parameter dtype on the same stream): after ``zero_grad`` frees them their blocks stay in that
      stream's pool, so the part of them not alive at the peak (``sharded_grad_peak_bytes −
      sharded_grad_at_peak_bytes``; 0 when the peak is at the end of backward) is held apart;
    * ``foreach_all_gather`` allocates each unit's flat all-gather output under
      ``device_handle.stream(all_gather_copy_in_stream)``; the largest is usually the root unit's
      (embedding, final norm, untied LM head: ``root_allgather_bytes`` in the parameter dtype), freed after
      the first layer's copy-out and then cached on that stream (the layers' outputs reuse it there, and
      are counted in the allocated peak while alive).

    Checked, not fitted: per-stream replays of the traced FSDP2 cases (``benchmarks/reserved_streams.py``)
    and the published dev points (torchtitan Llama-3.1-8B, 8 and 128 GPUs: −7.9 % → −1.0 %, −2.5 % → +0.8 %).
    """
    raw = max(0, sharded_grad_peak_bytes - sharded_grad_at_peak_bytes) + max(0, root_allgather_bytes)
    return -(-raw // _ROUND_LARGE_BYTES) * _ROUND_LARGE_BYTES


def fsdp2_stream_pools_bytes(setup: TrainingSetup, root_params: int, category_peak: dict[str, int],
                             breakdown_at_peak: dict[str, int]) -> int:
    """:func:`stream_pool_reserve_bytes` for a setup: 0 unless FSDP shards over > 1 rank (a shard degree of 1
    runs no separate collective streams that allocate); the root unit's all-gather output is ``root_params``
    (rank-local embedding + LM head) in the parameter dtype. FSDP1 allocates the same way on its own streams
    (torch 2.13 fsdp/_runtime_utils.py: ``_unshard`` all-gathers ``_full_param_padded`` under the unshard stream,
    ``_reduce_grad`` makes ``new_sharded_grad`` under the post-backward stream and keeps it as
    ``_saved_grad_shard``; the root unit is not resharded after forward): the same two pools."""
    if setup.engine != "fsdp2" or setup.fsdp_shard_degree <= 1:
        return 0
    elem = 4 if setup.precision == "fp32" else 2
    return stream_pool_reserve_bytes(category_peak.get("gradients", 0), breakdown_at_peak.get("gradients", 0),
                                     elem * root_params)


def post_peak_segment_bytes(setup: TrainingSetup, timeline_post_peak_bytes: int) -> int:
    """Segments the caching allocator must cudaMalloc after the allocated peak (bytes; FSDP2 only).

    ``c10/cuda/CUDACachingAllocator.cpp`` (torch 2.13): a request ≥ ``kMinLargeAlloc`` (10 MiB) that no cached
    block of its stream's pool serves gets a segment of exactly its size rounded to ``kRoundLarge`` (2 MiB)
    (``get_allocation_size``); blocks never merge across segments (``try_merge_blocks`` within a segment) and a
    segment is never larger than the request that created it (or 20 MiB), so a request larger than every earlier
    compute-stream request finds no cached block, whatever is free; without memory pressure nothing is released
    (``release_cached_blocks`` only on a failed cudaMalloc), so that segment adds to ``max_memory_reserved``
    even when the allocated total is below its peak. ``timeline_post_peak_bytes`` is
    :attr:`~trainmem.memory.timeline.Timeline.post_peak_segment_bytes`: the estimator's own step, its
    collective-stream blocks excluded. The case that moves the figures: FSDP2's root unit (embedding, LM
    head) reduce-scatter input in ``reduce_dtype`` (fp32 under the mixed policy), allocated on the compute
    stream after every layer's backward (torch 2.13 ``_fsdp_collectives.py`` ``foreach_reduce``, line 597:
    ``reduce_scatter_comm.allocate`` before ``reduce_scatter_stream.wait_stream(current_stream)``): under
    amp-bf16 twice the gathered root, and often larger than the loss's logits blocks. Taken for FSDP2
    (``fully_shard``) only, the engine whose collective-stream blocks the timeline marks and whose per-stream
    replays (``benchmarks/reserved_streams.py``) check it; the other engines keep the fitted reserve alone."""
    if setup.engine != "fsdp2" or setup.fsdp_version != 2 or setup.fsdp_shard_degree <= 1:
        return 0
    return timeline_post_peak_bytes


def reserved_bytes(peak_allocated: int, static_bytes: int, workspace_bytes: int = 0,
                   stream_pool_bytes: int = 0) -> int:
    """Prediction of ``torch.cuda.max_memory_reserved()`` (bytes), default allocator settings.

    ``reserved = peak + (peak − static) / 8 + 10 MiB``, rounded up to 2 MiB, plus the cuBLAS workspace's
    own segment. All three inputs include ``workspace_bytes`` (the cuBLAS workspace, allocated once; its
    segment is ``get_allocation_size`` of it: 32 MiB on Hopper, 20 MiB for the 8.125 MiB one). FSDP2's
    collective-stream pools (:func:`stream_pool_reserve_bytes`) come on top as ``stream_pool_bytes``.

    Why this shape: static memory (parameters, gradients kept across steps, optimizer states) is
    allocated once and packs into segments with little waste; the step's dynamic memory (activations,
    the loss buffers, temporaries, FSDP's unsharded copies) is freed and re-allocated in changing
    sizes, and the caching allocator keeps every freed block in its segment, so at the peak part of
    the reserve is holes left by earlier, differently sized blocks (c10/cuda/CUDACachingAllocator.cpp:
    best fit, large-pool blocks split only if the rest is > 1 MiB, segments never returned without
    memory pressure). The 10 MiB is about half a 20 MiB segment plus small-pool slack.

    Calibrated on ``benchmarks/accuracy.py``'s traced steps replayed through the allocator
    (``trainmem.trace.allocator``, replay from the warm-up step; FSDP2 from the steady step), torch
    2.13 / transformers 5.24, on this model's own input (the trace's peak and static bytes), error =
    (model − replay) / replay:

    * tuning set, 46 cases: median |error| 4.7 %, 90th percentile 12.6 %, max 25.3 %, median error
      +0.4 % (the old "+3 % + 20 MiB" guess: median |error| 4.1 %, p90 15.7 %, max 26.7 %, biased −4.1 %);
    * hold-out set, 15 cases (not fitted): median |error| 4.1 %, p90 13.0 %, max 24.9 %, median −2.0 %
      (old: 3.9 %, 16.9 %, 28.6 %, −3.9 %);
    * 27 three-layer toy traces (38–245 MiB allocated): median 3.6 %, max 18.2 % (old: 3.4 %, max 36.4 %).

    The largest misses are under-predictions where few very large transient blocks of different sizes
    fragment the cache: Gemma-3-1B (262k vocabulary) with full recompute −25 %, Qwen2.5-7B FSDP2 at 16
    ranks (2.2 GB unsharded embedding) −25 %, Llama-3.2-1B full recompute −16 %. No simple input the
    estimator has (loss-buffer sizes, per-layer activations, layer count) removed them: the replayed
    reserve itself moves by a median 1.8 % (max 19 %) between replaying from the warm-up or from the
    steady step, which bounds what any closed form can do. With ``expandable_segments:True`` the
    reserve is smaller (see ``TraceResult.peak_reserved_expandable_bytes``).

    Those replays put every allocation on one stream. Since the replay keeps a pool per stream, FSDP2's
    cases reserve a median 11–15 % more (``benchmarks/reserved_streams.py``); the part of that the stream
    pools themselves explain is ``stream_pool_bytes`` (:func:`stream_pool_reserve_bytes`) plus the segments
    made after the peak (:func:`post_peak_segment_bytes`), with which the estimate is within a median
    +1.2 % / −1.5 % (|·| 2.5 % / 2.8 %; tuning / hold-out FSDP2 cases; largest −15.4 %, Llama-3.2-1B TP 4
    at seq 512) of the per-stream replay. The 1/8 was not refitted: the dev-split GPU points are the
    check, and the two FSDP2 ones (torchtitan) are within ±1 % with the stream term.

    Sanity check on GPUs: on the 20 expressible ``max_memory_reserved`` points of
    ``benchmarks/published_points.json`` (torchtitan, fsdp_qlora, PEFT) the estimate is off by a median
    11.9 %, median error −7.6 % (with the old guess: 13.1 %, −10.8 %); most of that is the allocated part
    on paths the tracer cannot judge yet (LoRA/QLoRA, offload, torch.compile).
    """
    tensors_peak = peak_allocated - workspace_bytes
    dynamic = max(0, peak_allocated - static_bytes)
    raw = tensors_peak + dynamic * RESERVE_DYNAMIC_FRACTION_NUM // RESERVE_DYNAMIC_FRACTION_DEN + RESERVE_CONSTANT_BYTES
    reserved = -(-raw // _ROUND_LARGE_BYTES) * _ROUND_LARGE_BYTES
    if workspace_bytes:
        from trainmem.trace.allocator import allocation_size

        reserved += allocation_size(workspace_bytes)
    return reserved + stream_pool_bytes


def device_total_bytes(reserved: int, setup: TrainingSetup) -> int:
    """What nvidia-smi shows for the process: reserved + CUDA context + NCCL buffers per process group."""
    groups = sum(1 for d in (setup.dp, setup.tp, setup.pp, setup.cp, setup.ep) if d > 1)
    return reserved + CUDA_CONTEXT_BYTES + groups * NCCL_PER_GROUP_BYTES
