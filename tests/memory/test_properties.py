"""Invariants of the memory model, over many models and setups (hypothesis)."""

from __future__ import annotations

from trainmem.api import build

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainmem.memory import estimate
from trainmem.model.resolve import resolve_model
from trainmem.setup import make_setup

MODELS = ["llama-3.2-1b", "qwen2.5-0.5b", "mistral-7b", "qwen3-8b", "phi-3-mini-4k", "gpt2", "mixtral-8x7b", "7B"]
SPECS = {m: resolve_model(m) for m in MODELS}
model_st = st.sampled_from(MODELS)
seq_st = st.sampled_from([128, 512, 1024, 2048, 4096])
prec_torch = st.sampled_from(["fp32", "bf16", "amp-bf16", "amp-fp16"])
attn_st = st.sampled_from(["sdpa", "eager"])


def peak(model: str, **kw) -> int:
    spec = SPECS[model]
    if spec.position == "learned":
        kw["seq_len"] = min(kw.get("seq_len", 1024), spec.max_position_embeddings)
    return estimate(spec, make_setup(**kw)).peak_allocated_bytes


@settings(max_examples=40, deadline=None)
@given(model_st, seq_st, prec_torch, attn_st, st.integers(1, 8))
def test_memory_grows_with_micro_batch(model, seq, prec, attn, mb) -> None:
    kw = dict(seq_len=seq, precision=prec, attn=attn)
    assert peak(model, micro_batch=mb + 1, **kw) >= peak(model, micro_batch=mb, **kw)


@settings(max_examples=40, deadline=None)
@given(model_st, seq_st, prec_torch, st.sampled_from(["torch", "fsdp2"]), st.integers(1, 4))
def test_recomputation_never_raises_memory(model, seq, prec, engine, mb) -> None:
    if engine == "fsdp2" and prec == "fp16":
        return
    kw = dict(seq_len=seq, precision=prec, engine=engine, micro_batch=mb, gpus=8 if engine == "fsdp2" else 1)
    def run(rc: str):
        spec = SPECS[model]
        kw2 = dict(kw)
        if spec.position == "learned":
            kw2["seq_len"] = min(kw2["seq_len"], spec.max_position_embeddings)
        return estimate(spec, make_setup(recompute=rc, **kw2))

    none, sel, full = run("none"), run("selective"), run("full")
    act = lambda e: e.category_peak_bytes["activations"]  # noqa: E731
    assert act(full) <= act(none) and act(sel) <= act(none)
    # The total peak too, but for one hidden state: in a layer's backward the checkpoint still holds
    # that layer's input beside the recomputed tensors (traced), which can matter only when
    # activations are negligible (tiny sequences).
    one_hidden = 4 * kw["micro_batch"] * kw["seq_len"] * SPECS[model].hidden_size
    assert full.peak_allocated_bytes <= none.peak_allocated_bytes + one_hidden
    assert sel.peak_allocated_bytes <= none.peak_allocated_bytes + one_hidden


@settings(max_examples=30, deadline=None)
@given(model_st, seq_st, prec_torch, st.sampled_from(["torch", "fsdp2", "megatron"]), st.integers(1, 3),
       st.floats(0.0, 1.0))
def test_block_recompute_lies_between_none_and_full(model, seq, prec, engine, mb, share) -> None:
    """--recompute-layers N: the activations' peak never rises with N, is the no-recompute one at N = 0 and the
    full-recompute one at N = all layers (the total within one hidden state, as above)."""
    spec = SPECS[model]
    if engine == "megatron":
        prec = {"fp32": "fp32", "bf16": "mixed-bf16", "amp-bf16": "mixed-bf16", "amp-fp16": "mixed-fp16"}[prec]
    if engine == "fsdp2" and prec == "amp-fp16":
        return
    kw = dict(seq_len=min(seq, spec.max_position_embeddings), precision=prec, engine=engine, micro_batch=mb,
              gpus=8 if engine != "torch" else 1, recompute="full")
    n = int(share * spec.num_layers)
    act = lambda **k: estimate(spec, make_setup(**kw, **k)).category_peak_bytes["activations"]  # noqa: E731
    lo, mid, hi = act(recompute_layers=0), act(recompute_layers=n), act(recompute_layers=min(n + 1, spec.num_layers))
    assert hi <= mid <= lo
    assert act(recompute_layers=spec.num_layers) == act()


@settings(max_examples=40, deadline=None)
@given(model_st, seq_st, st.sampled_from([1, 2, 4, 8, 16, 32]), st.sampled_from(["fsdp2", "deepspeed"]))
def test_more_gpus_never_raise_zero3_memory(model, seq, n, engine) -> None:
    kw = dict(seq_len=seq, engine=engine, zero=3, precision="amp-bf16" if engine == "fsdp2" else "mixed-bf16")
    spec = SPECS[model]
    if engine == "fsdp2" and spec.is_moe and 2 * n > spec.num_experts:
        return  # FSDP2 pads dim 0: past E ranks, stacked experts stop shrinking (test below)
    assert peak(model, gpus=2 * n, **kw) <= peak(model, gpus=n, **kw)


def test_fsdp2_pads_stacked_experts_past_E_ranks() -> None:
    """fully_shard chunks dim 0 and pads every chunk to ceil(E / dp) experts: with 32 ranks and 8 experts
    each rank still holds a whole expert of each layer (1/8, not 1/32), and the all-gather outputs are
    dp × that padded shard. So from 8 to 32 ranks Mixtral's per-rank memory does not fall by 4×; it rises."""
    spec = SPECS["mixtral-8x7b"]
    e8 = estimate(spec, make_setup(engine="fsdp2", gpus=8, precision="bf16", seq_len=1024))
    e32 = estimate(spec, make_setup(engine="fsdp2", gpus=32, precision="bf16", seq_len=1024))
    experts = spec.params.expert_total
    dense = spec.n_params - experts
    # sharded bf16 params: experts / 8 on both; dense / dp
    assert e8.static_bytes - e8.cuda_only_bytes >= 3 * (2 * experts // 8)  # params + Adam states, 2+4 B
    assert e32.static_bytes - e32.cuda_only_bytes == pytest.approx(6 * (experts // 8 + dense / 32), rel=0.01)
    assert e32.peak_allocated_bytes > e8.peak_allocated_bytes


@settings(max_examples=30, deadline=None)
@given(model_st, seq_st, st.integers(1, 6))
def test_grad_accumulation_never_lowers_the_peak(model, seq, ga) -> None:
    assert peak(model, seq_len=seq, grad_accum=ga + 1) >= peak(model, seq_len=seq, grad_accum=ga)


@settings(max_examples=30, deadline=None)
@given(model_st, st.sampled_from([1, 2, 4, 8]), st.sampled_from([1, 2]))
def test_zero_stages_are_ordered(model, n, mb) -> None:
    """Each ZeRO stage shards more: per-GPU peak is non-increasing from stage 0 to 2 (deepspeed, ≥ 2 GPUs);
    stage 3 adds at most its persistent reduce bucket (2 B × 5e8) and, for models under 5e8 parameters
    (stage3_max_reuse_distance), the whole gathered 16-bit model kept from forward to backward."""  # noqa: D301
    gpus = 2 * n
    peaks = [peak(model, engine="deepspeed", zero=z, gpus=gpus, micro_batch=mb, seq_len=512) for z in (0, 1, 2, 3)]
    spec, _ = build(model)
    P = spec.n_params
    # (+ its 16-bit partitions of parameters and gradients, both alive through the step)
    kept = 2 * P + 4 * P // gpus if 2 * P < 1_000_000_000 else 0
    assert peaks[1] <= peaks[0] and peaks[2] <= peaks[1] and peaks[3] <= peaks[2] + 2 * 500_000_000 + kept


def test_breakdown_sums_to_peak() -> None:
    for m in MODELS:
        for eng, kw in (("torch", {}), ("fsdp2", dict(gpus=8)), ("deepspeed", dict(gpus=8, zero=2)),
                        ("megatron", dict(gpus=8, tp=2, pp=2, zero=1, grad_accum=4))):
            spec = SPECS[m]
            if eng == "megatron" and spec.num_attention_heads % 2:
                continue
            e = estimate(spec, make_setup(engine=eng, seq_len=512, **kw))
            assert sum(e.breakdown_at_peak_bytes.values()) == e.peak_allocated_bytes, (m, eng)


_ENGINE_OPTS = st.fixed_dictionaries({
    "engine": st.sampled_from(["torch", "fsdp2", "deepspeed", "megatron"]),
    "optimizer": st.sampled_from(["adamw", "adam", "sgd", "sgd-momentum", "adamw-8bit", "adafactor", "lion"]),
    "recompute": st.sampled_from(["none", "selective", "full"]),
    "attn": st.sampled_from(["sdpa", "flash", "eager"]),
    "gpus": st.sampled_from([1, 2, 8, 16, 64]),
    "tp": st.sampled_from([1, 2, 4]), "pp": st.sampled_from([1, 2, 4]), "cp": st.sampled_from([1, 2]),
    "ep": st.sampled_from([1, 2]), "vpp": st.sampled_from([1, 2]), "sp": st.booleans(),
    "zero": st.sampled_from([None, 0, 1, 2, 3]), "offload": st.sampled_from(["none", "optimizer", "optimizer+params"]),
    "lora_rank": st.sampled_from([0, 16]), "grad_accum": st.sampled_from([1, 3, 8]),
    "micro_batch": st.sampled_from([1, 4]), "seq_len": st.sampled_from([512, 4096]),
})


@settings(max_examples=150, deadline=None)
@given(model_st, _ENGINE_OPTS)
def test_any_valid_setup_estimates_consistently(model, kw) -> None:
    """Every setup either is refused with one TrainmemError line, or gives a breakdown that sums to the
    peak, with no negative category and the between-steps memory not above the peak."""
    from trainmem.errors import TrainmemError
    from trainmem.setup import validate_for_model

    spec = SPECS[model]
    try:
        setup = make_setup(**kw)
        validate_for_model(setup, spec)
        e = estimate(spec, setup)
    except TrainmemError as err:
        assert "\n" not in str(err)
        return
    assert sum(e.breakdown_at_peak_bytes.values()) == e.peak_allocated_bytes
    assert min(e.breakdown_at_peak_bytes.values()) >= 0
    assert e.static_bytes <= e.peak_allocated_bytes <= e.peak_reserved_bytes <= e.device_total_bytes
