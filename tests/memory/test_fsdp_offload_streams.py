"""CPU offload's GPU copies of the sharded parameters and the stream pools they live in, computed by hand from
torch 2.13's sources (issue 17):

* FSDP1 (torch/distributed/fsdp/_runtime_utils.py ``_unshard``): ``handle.pre_unshard()`` runs under the
  pre-unshard stream; with ``CPUOffload(offload_params=True)`` it copies the pinned shard to the GPU
  (_flat_param.py ``flat_param_to(self.device, non_blocking=True)``; under MixedPrecision
  ``_local_shard.to(self.device)`` copied into ``_mp_shard``). The caching allocator keeps those blocks for that
  stream (c10/cuda/CUDACachingAllocator.cpp ``get_free_block``: a block serves only its own stream), so the
  largest set of them stays reserved, free at the compute stream's peak.
* FSDP2 (``_fsdp_collectives.py`` ``foreach_all_gather``): with ``CPUOffloadPolicy`` each parameter's
  ``_sharded_param_data.to(device)`` is made on the copy-in stream (no foreach-copy fast path), alive with the
  all-gather output until the copy-in; the root unit's copies stay cached on that stream.
"""

from __future__ import annotations

from trainmem.api import build
from trainmem.memory import estimate
from trainmem.memory.engines import engine_for
from trainmem.memory.engines.fsdp1 import fsdp1_pre_unshard_bytes, fsdp1_pre_unshard_pool_bytes
from trainmem.memory.engines.fsdp2 import fsdp2_offload_allgather_input_bytes, fsdp2_offload_copy_in_pool_bytes
from trainmem.memory.states import rank_params
from trainmem.memory.timeline import Timeline

MiB = 2**20


def _engine(model: str = "llama-2-7b", **kw):
    spec, s = build(model, engine="fsdp2", **kw)
    eng = engine_for(spec, s, rank_params(spec, s, 0), [])
    eng.tl = Timeline()
    return spec, s, eng


def test_fsdp1_pre_unshard_bytes_by_recipe() -> None:
    # a 500-element local shard: bf16 gathered 1,000 B; stored fp32 2,000 B under amp, bf16 1,000 B otherwise
    assert fsdp1_pre_unshard_bytes(1000, 1000, mixed_precision=False, offload=False) == 0  # a no-op
    assert fsdp1_pre_unshard_bytes(1000, 1000, mixed_precision=False, offload=True) == 1000  # flat_param_to
    assert fsdp1_pre_unshard_bytes(1000, 2000, mixed_precision=True, offload=False) == 1000  # _mp_shard
    assert fsdp1_pre_unshard_bytes(1000, 2000, mixed_precision=True, offload=True) == 3000  # + the fp32 H2D copy


def test_fsdp1_pre_unshard_pool_rounds_to_2_mib_and_drops_what_is_live_at_the_peak() -> None:
    assert fsdp1_pre_unshard_pool_bytes(0, 0) == 0
    assert fsdp1_pre_unshard_pool_bytes(1, 0) == 2 * MiB
    assert fsdp1_pre_unshard_pool_bytes(250 * MiB, 0) == 250 * MiB  # already a 2 MiB multiple
    assert fsdp1_pre_unshard_pool_bytes(250 * MiB + 4096, 0) == 252 * MiB
    assert fsdp1_pre_unshard_pool_bytes(250 * MiB + 4096, 250 * MiB + 4096) == 0


def test_fsdp1_offload_h2d_copy_is_a_side_stream_block_of_the_shard() -> None:
    """bf16, dp 2, offload: a 1,000-element unit's shard copy 2 B × 500 = 1,000 -> 1,024 beside the 2,000 -> 2,048
    _full_param_padded; the copy is dropped, and recorded as the pre-unshard stream's largest block."""
    _, _, eng = _engine(gpus=2, fsdp_version=1, precision="bf16", offload="optimizer+params")
    eng.gather("unitX", 1000)
    assert eng.tl.peak == 1024 + 2048 and eng.tl.current == 2048
    assert eng.st.pre_unshard_max == 1000
    assert eng.st.pre_unshard_at_peak == (1024 + 2048, 1000)  # (the copy is live at this timeline's peak)
    assert eng.tl.max_block == 0  # side stream: not a compute-stream segment candidate


def test_fsdp1_without_offload_or_mixed_precision_has_no_pre_unshard_block() -> None:
    _, _, eng = _engine(gpus=2, fsdp_version=1, precision="bf16")
    eng.gather("unitX", 1000)
    assert eng.st.pre_unshard_max == 0


def test_fsdp1_offload_reserves_the_root_shard_copy() -> None:
    """Llama-2-7B LoRA, bf16, 2 ranks, offload: the largest pre-unshard block is the root unit's shard
    (embedding 32,000 × 4,096 + LM head 32,000 × 4,096 + final norm 4,096 elements, 2 B, over 2 ranks:
    262,148,096 B), free at the peak (in backward): reserved gets it rounded to 2 MiB (252 MiB) on top."""
    import importlib

    from trainmem.memory.overhead import fsdp2_stream_pools_bytes, post_peak_segment_bytes, reserved_bytes

    est_mod = importlib.import_module("trainmem.memory.estimate")
    spec, s = build("llama-2-7b", engine="fsdp2", gpus=2, fsdp_version=1, precision="bf16", lora_rank=64,
                    seq_len=2048, micro_batch=2, recompute="full", gpu="RTX-4090-24G", offload="optimizer+params")
    tl, rp, st, _ = est_mod._simulate(spec, s, 0, [])
    assert 2 * (2 * 32000 * 4096 + 4096) // 2 == 262_148_096
    assert st.pre_unshard_max == 262_148_096
    assert st.pre_unshard_at_peak[0] != tl.peak  # the peak is in backward, not at an unshard
    est = estimate(spec, s)
    cuda = est.cuda_only_bytes
    others = (fsdp2_stream_pools_bytes(s, rp.embedding + rp.lm_head, tl.category_peak, tl.peak_breakdown)
              + post_peak_segment_bytes(s, tl.post_peak_segment_bytes))
    assert est.peak_reserved_bytes == reserved_bytes(tl.peak + cuda, tl.current + cuda, cuda, others + 252 * MiB)


def test_fsdp2_offload_allgather_inputs_live_with_the_output() -> None:
    """FSDP2, bf16, dp 2, offload: a 1,000-element unit gathers 2 B × 1,000 = 2,000 B; its shard copies
    2,000 / 2 = 1,000 B are allocated first on the copy-in stream, live with the output (1,024 + 2,048 = 3,072)
    and are dropped before the copy-out into the unsharded parameters (2,048 + 2,048 = 4,096)."""
    assert fsdp2_offload_allgather_input_bytes(2000, 2) == 1000
    _, _, eng = _engine(gpus=2, precision="bf16", offload="optimizer+params")
    eng.tl = Timeline(events=[])
    eng.gather("unitX", 1000)
    allocs = [e for e in eng.tl.events if e[0] in "af" and e[1] != "ag_state"]
    assert allocs[:3] == [("a", "ag_pending:unitX:h2d", 1000, 1, 1), ("a", "ag_pending:unitX", 2000, 1, 1),
                          ("f", "ag_pending:unitX:h2d")]
    assert eng.tl.peak == 4096 and eng.tl.max_block == 0
    _, _, plain = _engine(gpus=2, precision="bf16")
    plain.tl = Timeline(events=[])
    plain.gather("unitX", 1000)
    assert ("a", "ag_pending:unitX:h2d", 0, 1, 1) in plain.tl.events  # (no offload: nothing allocated)
    assert plain.tl.peak == 4096


def test_fsdp2_offload_copy_in_pool_is_the_root_shard() -> None:
    """Qwen2.5-0.5B (vocabulary 151,936 × hidden 896, tied: the root's all-gather is the embedding and the final
    norm's 896) on 2 ranks, bf16, offload: 2 B × 136,135,552 / 2 = 136,135,552 B (129.8 MiB) -> 130 MiB; 0 without
    offload, on FSDP1 and on 1 rank."""
    spec, s = build("qwen2.5-0.5b", engine="fsdp2", gpus=2, precision="bf16", offload="optimizer+params")
    rp = rank_params(spec, s, 0)
    root = rp.embedding + rp.lm_head
    assert root == 151936 * 896 + 896
    assert fsdp2_offload_copy_in_pool_bytes(s, root) == 65 * 2 * MiB
    for kw in (dict(gpus=2), dict(gpus=2, fsdp_version=1, offload="optimizer+params"),
               dict(gpus=1, offload="optimizer+params")):
        _, other = build("qwen2.5-0.5b", engine="fsdp2", precision="bf16", **kw)
        assert fsdp2_offload_copy_in_pool_bytes(other, root) == 0


# -- FSDP1 no_sync (gradient accumulation) ------------------------------------------------------------------------
def test_fsdp1_no_sync_when_hf_trainer_or_offload_accumulates() -> None:
    from trainmem.memory.engines.fsdp1 import fsdp1_no_sync

    def s(**kw):
        return build("llama-2-7b", engine="fsdp2", fsdp_version=1, gpus=2, **kw)[1]

    assert fsdp1_no_sync(s(grad_accum=2, loop="trainer"))
    assert fsdp1_no_sync(s(grad_accum=2, loop="script", offload="optimizer+params"))  # (fsdp_qlora train.py)
    assert not fsdp1_no_sync(s(grad_accum=2, loop="script"))  # a script accumulating sharded gradients
    assert not fsdp1_no_sync(s(grad_accum=1, loop="trainer"))


def test_fsdp1_no_sync_keeps_the_unsharded_gradient_to_the_last_micro_batch() -> None:
    """bf16, dp 2, grad_accum 2, HF Trainer: micro-batch 0's unsharded gradient of a 1,000-element unit
    (2 B × 1,000 = 2,000 -> 2,048) is not reduce-scattered; micro-batch 1 adds its own (a 2,048 transient) and the
    reduce-scatter then leaves only the bf16 sharded gradient (2 B × 500 = 1,000 -> 1,024)."""
    _, _, eng = _engine(gpus=2, fsdp_version=1, precision="bf16", grad_accum=2, loop="trainer")
    tl = eng.tl
    eng._mb = 0
    eng.grad("g0", 1000, 0)
    eng.reduce(["g0"], 1000)
    assert tl.live == {"g0:unsharded": ("temporaries", 2048)}
    eng._mb = 1
    eng.grad("g0", 1000, 1)
    assert tl.peak == 2048 + 2048
    eng.reduce(["g0"], 1000)
    assert tl.live == {"g0:sharded": ("gradients", 1024)}


def test_fsdp1_no_sync_step_holds_the_unsharded_gradients() -> None:
    """Llama-2-7B full fine-tune, amp-bf16, 8 ranks, grad_accum 2, HF Trainer: in micro-batch 1 the 16-bit
    unsharded gradients of every decoder layer (2 B × 32 × 202,383,360 = 12.06 GiB, the root's too) are on the
    GPU; a script (sharded accumulation) holds the fp32 shards instead (4 B × 6.74e9 / 8 = 3.14 GiB)."""
    kw = dict(engine="fsdp2", fsdp_version=1, gpus=8, precision="amp-bf16", grad_accum=2, recompute="full")
    spec, trainer = build("llama-2-7b", loop="trainer", **kw)
    _, script = build("llama-2-7b", loop="script", **kw)
    e_t, e_s = estimate(spec, trainer), estimate(spec, script)
    layers = 2 * 32 * 202_383_360
    assert e_t.peak_phase == "backward mb1"
    held = e_t.breakdown_at_peak_bytes["gradients"] + e_t.breakdown_at_peak_bytes["temporaries"]
    assert held >= 0.95 * layers
    assert e_s.category_peak_bytes["gradients"] <= 1.01 * 4 * spec.n_params / 8
    assert e_t.peak_allocated_bytes - e_s.peak_allocated_bytes >= layers - 4 * spec.n_params / 8 - 2**30
