"""FSDP1 (``--engine fsdp2 --fsdp-version 1``), computed by hand from torch 2.13's FSDP1 sources
(torch/distributed/fsdp/_flat_param.py, _runtime_utils.py; see trainmem/memory/engines/fsdp1.py).

Sizes: every allocation is rounded up to the caching allocator's 512 B granule."""

from __future__ import annotations

import pytest

from trainmem.api import build
from trainmem.memory import estimate
from trainmem.memory.engines import engine_for
from trainmem.memory.engines.fsdp1 import (
    FSDP1Engine,
    fsdp1_param_dtype_bytes,
    fsdp1_shard_elems,
    fsdp1_storage_elem_bytes,
)
from trainmem.memory.states import rank_params
from trainmem.memory.timeline import Timeline


def _r(n: int) -> int:
    return -(-n // 512) * 512


def _engine(**kw):
    spec, s = build("llama-2-7b", engine="fsdp2", fsdp_version=1, **kw)
    notes: list[str] = []
    eng = engine_for(spec, s, rank_params(spec, s, 0), notes)
    eng.tl = Timeline()
    return spec, s, eng, notes


def test_flat_parameter_padding_to_a_multiple_of_world_size() -> None:
    # _get_unpadded_shard: chunk = ceil(numel / world); the last rank's chunk is padded
    assert fsdp1_shard_elems(1000, 8) == 125
    assert fsdp1_shard_elems(1001, 8) == 126
    assert fsdp1_shard_elems(7, 8) == 1


def test_dtypes_follow_the_load_dtype_and_mixed_precision() -> None:
    _, amp = build("llama-2-7b", engine="fsdp2", fsdp_version=1, gpus=2, precision="amp-bf16")
    _, pure = build("llama-2-7b", engine="fsdp2", fsdp_version=1, gpus=2, precision="bf16")
    assert (fsdp1_storage_elem_bytes(amp), fsdp1_param_dtype_bytes(amp)) == (4, 2)   # fp32 shards, bf16 gather
    assert (fsdp1_storage_elem_bytes(pure), fsdp1_param_dtype_bytes(pure)) == (2, 2)  # bf16, no fp32 master


def test_selection_keeps_fsdp2_as_default() -> None:
    spec, s = build("llama-2-7b", engine="fsdp2", gpus=2)
    assert s.fsdp_version == 2
    assert type(engine_for(spec, s, rank_params(spec, s, 0), [])).__name__ == "FSDP2Engine"
    _, _, eng, _ = _engine(gpus=2)
    assert isinstance(eng, FSDP1Engine)


def test_mixed_precision_unshard_mp_shard_then_full_param_padded() -> None:
    """dp 2, a 1,000-element unit under amp-bf16: _mp_shard 2 B × 500 = 1,000 → 1,024; _full_param_padded
    2 B × 1,000 = 2,000 → 2,048; the peak holds both, then only the unsharded flat parameter stays."""
    _, _, eng, _ = _engine(gpus=2, precision="amp-bf16")
    eng.gather("unitX", 1000)
    assert eng.tl.peak == 1024 + 2048
    assert eng.tl.current == 2048
    eng.gather("unitX", 1000)  # already unsharded (prefetched): no second all-gather
    assert eng.tl.current == 2048


def test_pure_bf16_unshard_gathers_from_the_flat_parameter_itself() -> None:
    _, _, eng, _ = _engine(gpus=2, precision="bf16")
    eng.gather("unitX", 1001)  # padded: 2 × 501 elements × 2 B = 2,004 → 2,048; no _mp_shard
    assert eng.tl.peak == eng.tl.current == 2048


def test_offload_with_mixed_precision_copies_the_fp32_shard_in() -> None:
    """CPUOffload + MixedPrecision: _mp_shard (2 B × 500 → 1,024) and the fp32 temporary
    ``_local_shard.to(device)`` (4 B × 500 = 2,000 → 2,048) before the all-gather."""
    _, _, eng, _ = _engine(gpus=2, precision="amp-bf16", offload="optimizer+params")
    eng.gather("unitX", 1000)
    assert eng.tl.peak == 1024 + 2048
    assert eng.tl.current == 2048


def test_reduce_scatter_then_cast_to_the_shard_dtype_and_accumulate() -> None:
    """amp-bf16, 1,000 trainable elements, dp 2: unsharded grad 2 B × 1,000 → 2,048; new_sharded_grad 2 B × 500
    → 1,024 next to it; the cast copy 4 B × 500 → 2,048 becomes _saved_grad_shard; the next micro-batch adds
    a new fp32 shard in place (a transient of 2,048)."""
    _, _, eng, _ = _engine(gpus=2, precision="amp-bf16")
    tl = eng.tl
    eng.grad("g0", 1000, 0)
    assert tl.current == 2048
    eng.reduce(["g0"], 1000)
    assert tl.peak == 2048 + 1024
    assert tl.live["g0:sharded"] == ("gradients", 2048)
    assert tl.current == 2048
    eng.grad("g0", 1000, 1)
    eng.reduce(["g0"], 1000)
    assert tl.current == 2048 and tl.peak == 2048 + 2048 + 1024


def test_reduce_pads_an_unsharded_gradient_not_divisible_by_world_size() -> None:
    # 1,001 elements on 2 ranks: F.pad makes a 1,002-element copy (2 B → 2,004 → 2,048) beside the 2,048 grad
    _, _, eng, _ = _engine(gpus=2, precision="bf16")
    eng.grad("g0", 1001, 0)
    eng.reduce(["g0"], 1001)
    assert eng.tl.peak == 2048 + 2048
    assert eng.tl.live["g0:sharded"] == ("gradients", _r(2 * 501))  # bf16 shards: rs output kept as is


def test_full_fine_tune_static_bytes_12_per_parameter_over_dp() -> None:
    """amp-bf16, 8 ranks: between steps the fp32 flat shard 4 B + AdamW's two fp32 states 8 B per parameter / 8
    (zero_grad(set_to_none) dropped the gradients); in the step the fp32 sharded gradients, 4 B / 8."""
    spec, s = build("llama-2-7b", engine="fsdp2", fsdp_version=1, gpus=8, precision="amp-bf16")
    est = estimate(spec, s)
    T = spec.n_params
    assert abs(est.static_bytes - est.cuda_only_bytes - 12 * T / 8) <= 512 * 4  # (cuBLAS workspace aside)
    assert est.category_peak_bytes["gradients"] == pytest.approx(4 * T / 8, rel=0.002)


def test_lora_under_mixed_precision_keeps_the_frozen_base_in_fp32() -> None:
    """PEFT's FSDP example (Llama-2-70B, 8 × H100, mixed_precision bf16, model loaded fp32): the frozen base
    is a 4 B flat shard — 70B × 4 / 8 ≈ 32 GiB — where FSDP2's unit (a 16-bit base) holds half."""
    kw = dict(gpus=8, precision="amp-bf16", lora_rank=8, lora_targets="all-linear", seq_len=2048, recompute="full")
    spec, s1 = build("llama-2-70b", engine="fsdp2", fsdp_version=1, **kw)
    _, s2 = build("llama-2-70b", engine="fsdp2", **kw)
    e1, e2 = estimate(spec, s1), estimate(spec, s2)
    frozen = spec.n_params  # adapters are < 0.1 %
    assert e1.static_bytes >= 4 * frozen / 8
    assert e1.static_bytes - e2.static_bytes == pytest.approx(2 * frozen / 8, rel=0.01)


def test_offload_keeps_sharded_gradients_on_the_gpu_until_the_end_of_backward() -> None:
    """FSDP1 CPUOffload: _saved_grad_shard is made on the GPU and deleted only in _finalize_params — the
    gradients are a GPU category (FSDP2's CPUOffloadPolicy has none) but not static; host: fp32 shard, pinned
    _cpu_grad and AdamW states, 16 B per parameter / dp."""
    kw = dict(gpus=2, precision="amp-bf16", offload="optimizer+params", recompute="full")
    spec, s1 = build("qwen2.5-0.5b", engine="fsdp2", fsdp_version=1, **kw)
    _, s2 = build("qwen2.5-0.5b", engine="fsdp2", **kw)
    e1, e2 = estimate(spec, s1), estimate(spec, s2)
    T = spec.n_params
    assert e2.category_peak_bytes.get("gradients", 0) == 0
    assert e1.category_peak_bytes["gradients"] >= 0.9 * 4 * T / 2
    assert abs(e1.host_memory_bytes - 16 * T // 2) <= 16 * 2
    assert e1.static_bytes < 0.05 * 4 * T / 2


def test_forward_holds_one_unsharded_unit_at_a_time() -> None:
    """allocated_bytes drops at free() even with record_stream pending (CUDACachingAllocator::free): FSDP1's
    forward never holds two layers' _full_param_padded — FSDP2 keeps the previous all-gather output."""
    spec, s = build("llama-2-7b", engine="fsdp2", fsdp_version=1, gpus=2, precision="bf16")
    _, _, eng, _ = _engine(gpus=2, precision="bf16")
    eng.tl.alloc("root", "parameters", 0)
    n = spec.params.layers[0].total if hasattr(spec.params.layers[0], "total") else 1000
    for j in range(3):
        eng.gather(f"unit{j}", n)
        eng.tl.free(f"unit{j}")
    assert eng.tl.peak == _r(2 * 2 * fsdp1_shard_elems(n, 2))


@pytest.mark.parametrize("args", [["--engine", "torch", "--fsdp-version", "1"],
                                  ["--engine", "fsdp2", "--fsdp-version", "1", "--gpus", "4", "--tp", "2"],
                                  ["--engine", "fsdp2", "--fsdp-version", "3"]])
def test_bad_fsdp_version_is_one_line_exit_2(args: list[str], capsys) -> None:
    from trainmem.cli import main

    rc = main(["estimate", "llama-2-7b", *args])
    out = capsys.readouterr()
    assert rc == 2 and out.out == ""
    assert len(out.err.strip().splitlines()) == 1 and "Traceback" not in out.err


def test_offload_keeps_the_bitsandbytes_quant_state_on_the_gpu() -> None:
    """QLoRA (bnb) + CPUOffload: only FlatParameters go to the host; each rank keeps the whole quant state
    (fsdp_replicated_quant_state_bytes) on the GPU as its only static bytes, besides nothing else."""
    from trainmem.memory.engines.fsdp2 import fsdp_replicated_quant_state_bytes

    spec, s, eng, _ = _engine(gpus=2, precision="bf16", lora_rank=8, qlora=True, offload="optimizer+params")
    rp = rank_params(spec, s, 0)
    qs = fsdp_replicated_quant_state_bytes(s, rp.frozen_quantized)
    assert qs > 0.015 * rp.frozen_quantized  # 1 B absmax per 64 weights + the nested fp32 scales
    assert eng.st.params == qs and eng.st.states == 0


def test_plan_fix_fsdp_version_1_evaluates_fsdp1(capsys) -> None:
    """``plan --fix fsdp_version=1``: only fsdp2 plans, each the FSDP1 estimate of its configuration (not FSDP2's)."""
    import json

    from trainmem.cli import main
    from trainmem.setup import make_setup

    rc = main(["plan", "llama-2-7b", "--cluster", "8xH100-SXM-80G", "--global-batch", "64", "--fix",
               "fsdp_version=1,recompute=none", "--json"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    plans = json.loads(out.out)["plans"]
    assert plans and {p["engine"] for p in plans} == {"fsdp2"}
    p = plans[0]
    spec, _ = build("llama-2-7b", seq_len=4096)
    kw = dict(engine="fsdp2", gpus=8, zero=p["zero"], micro_batch=p["micro_batch"], grad_accum=p["grad_accum"],
              seq_len=4096, gpu="H100-SXM-80G", precision=p.get("precision", "amp-bf16"))
    e1 = estimate(spec, make_setup(fsdp_version=1, **kw))
    e2 = estimate(spec, make_setup(**kw))
    assert p["device_total_bytes"] == e1.device_total_bytes
    # (the peaks may coincide — both reserve the same collective-stream pools — but the step is FSDP1's: its flat
    # parameters with the 16-bit copy of the local shard at each gather, or — the plan's HF Trainer loop with
    # grad_accum > 1 — no_sync's unsharded gradients kept to the last micro-batch)
    assert e1.breakdown_at_peak_bytes != e2.breakdown_at_peak_bytes
    assert any(a.startswith("FSDP1:") for a in e1.assumptions)


def test_plan_fix_fsdp_version_3_is_one_line(capsys) -> None:
    from trainmem.cli import main

    rc = main(["plan", "llama-2-7b", "--cluster", "8xH100-SXM-80G", "--global-batch", "64", "--fix", "fsdp_version=3"])
    out = capsys.readouterr()
    assert rc == 2 and out.err.strip() == "error: --fix: fsdp_version takes 1 or 2, got '3'"


def test_trace_refuses_fsdp1(capsys) -> None:
    """The tracer runs FSDP2's ``fully_shard``: an FSDP1 setup is refused there, never traced as FSDP2."""
    from trainmem.cli import main

    rc = main(["trace", "tiny-llama", "--engine", "fsdp2", "--fsdp-version", "1", "--gpus", "2"])
    out = capsys.readouterr()
    assert rc == 2 and "--fsdp-version 1" in out.err and len(out.err.strip().splitlines()) == 1
