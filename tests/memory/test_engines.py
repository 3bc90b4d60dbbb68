"""Engine behaviours computed by hand: expert-data-parallel sharding (Megatron, DeepSpeed), torchtitan's
sequence-parallel TP, TP without FSDP at dp = 1, and the loss-parallel buffers."""

from __future__ import annotations

import pytest

from trainmem.api import build
from trainmem.memory import estimate

# Mixtral-8x7B: 32 layers × 8 experts × 3 matrices of 4096 × 14336
EXPERTS = 32 * 8 * 3 * 4096 * 14336
TOTAL = 46_702_792_704


def test_mixtral_megatron_ep_shards_expert_states_over_expert_data_parallel_group() -> None:
    spec, s = build("mixtral-8x7b", engine="megatron", gpus=64, ep=8, zero=1)
    est = estimate(spec, s)
    assert spec.n_params == TOTAL and spec.params.expert_total == EXPERTS
    dense, experts_local = TOTAL - EXPERTS, EXPERTS // 8
    # dense over dp·cp = 64 ranks, experts over the expert-data-parallel group 64 / 8 = 8 ranks
    owned = dense // 64 + experts_local // 8
    b = est.breakdown_at_peak_bytes
    # (each buffer rounded up to the allocator's 512 B)
    assert 0 <= b["master_weights"] - 4 * owned < 512      # fp32 master weights (≈ 2.7 GiB)
    assert 0 <= b["optimizer_states"] - 8 * owned < 512    # Adam exp_avg + exp_avg_sq (≈ 5.4 GiB)
    assert (b["master_weights"] + b["optimizer_states"]) / 2**30 > 7.5   # not 1.27 GiB


def test_deepspeed_ep_shards_expert_states_over_dp_over_ep() -> None:
    spec, s = build("mixtral-8x7b", engine="deepspeed", gpus=64, ep=8, zero=2)
    est = estimate(spec, s)
    owned = (TOTAL - EXPERTS) // 64 + (EXPERTS // 8) // 8
    assert 0 <= est.breakdown_at_peak_bytes["optimizer_states"] - 8 * owned < 512


def test_torchtitan_tp_checkpoints_sequence_sharded_inputs() -> None:
    """Llama-3.1-70B, FSDP 32 × TP 8, full recompute, micro-batch 16, seq 8192: with SequenceParallel
    (torchtitan's default) each of the 80 checkpointed layer inputs is b·s·h/8 bf16 values."""
    kw = dict(engine="fsdp2", gpus=256, tp=8, recompute="full", micro_batch=16, seq_len=8192, precision="bf16")
    spec, s = build("llama-3.1-70b", **kw)
    assert s.sp and s.loss_parallel
    _, s_nosp = build("llama-3.1-70b", no_sp=True, **kw)
    act = estimate(spec, s).breakdown_at_peak_bytes["activations"]
    act_nosp = estimate(spec, s_nosp).breakdown_at_peak_bytes["activations"]
    ckpt_full = 2 * 16 * 8192 * 8192
    assert act_nosp - act >= 80 * ckpt_full * 7 // 8
    assert act < 80 * ckpt_full   # not 8× too many checkpointed inputs


def test_fsdp2_tp_only_applies_no_fsdp() -> None:
    spec, s = build("llama-3.1-8b", engine="fsdp2", gpus=4, tp=4, precision="bf16")
    assert not s.fsdp_applied
    est = estimate(spec, s)
    b = est.breakdown_at_peak_bytes
    assert b["communication_buffers"] == 0
    # every rank: its TP shard of the bf16 parameters (norms replicated)
    assert abs(b["parameters"] - 2 * spec.n_params / 4) / b["parameters"] < 0.01


def test_loss_parallel_shards_the_logits() -> None:
    kw = dict(engine="fsdp2", gpus=8, tp=8, precision="bf16", seq_len=4096, micro_batch=2)
    spec, s = build("llama-3.1-8b", **kw)
    _, s_full = build("llama-3.1-8b", no_loss_parallel=True, **kw)
    from trainmem.memory.loss import loss_buffers
    n_local = 2 * 4096 * 128256 // 8
    lp, full = loss_buffers(spec, s), loss_buffers(spec, s_full)
    assert lp.logits_bytes == 2 * n_local and full.logits_bytes == 2 * 8 * n_local
    # nll grad, exp(log-softmax), input grad; + the nll handler's per-token targets/mask (33 B a token, traced)
    assert lp.backward_transient_bytes == 12 * n_local + 33 * 2 * 4096
    assert estimate(spec, s_full).peak_allocated_bytes > estimate(spec, s).peak_allocated_bytes


def test_deepspeed_reduce_bucket_is_full_size_at_any_world_size() -> None:
    """stage_1_and_2.py:2476 / stage3.py:702 (DeepSpeed v0.19.5): the 16-bit reduce bucket has
    reduce_bucket_size = 5e8 elements whatever the model and world size (1e9 B, also for a 0.5B model)."""
    bucket = 2 * 500_000_000
    for zero in (1, 2, 3):
        for gpus in (1, 8):
            spec, s = build("qwen2.5-0.5b", engine="deepspeed", zero=zero, gpus=gpus)
            est = estimate(spec, s)
            assert est.category_peak_bytes["communication_buffers"] - bucket in range(0, 512), (zero, gpus)


def test_deepspeed_zero3_static_buffers_and_reuse_distance() -> None:
    """Stage 3 allocates the bucket and the 16-bit gradient partition at init; a model of under 5e8
    parameters stays gathered from forward to backward (stage3_max_reuse_distance = 1e9)."""
    spec, s = build("qwen2.5-0.5b", engine="deepspeed", zero=3, gpus=8)
    est = estimate(spec, s)
    P = spec.n_params
    assert est.static_bytes - est.cuda_only_bytes >= 2 * P // 8 + 4 * P // 8 + 8 * P // 8 + 2 * P // 8 + 10**9
    assert est.category_peak_bytes["parameters"] >= 2 * P // 8 + 2 * P
    spec7, s7 = build("llama-2-7b", engine="deepspeed", zero=3, gpus=8)
    assert estimate(spec7, s7).category_peak_bytes["parameters"] < 2 * spec7.n_params // 2


def test_selective_recompute_is_torchtitans_op_policy() -> None:
    """torchtitan's op-level SAC keeps the layer input, the fused attention output + logsumexp and every
    other aten.mm output (q, v, gate, down of q, k, v, o, gate, up, down): Llama-3.1-8B under FSDP2
    (bf16 residual stream) keeps 2·4096 + 2·(4096 + 1024 + 14336 + 4096) + 2·4096 + 4·32 B per token."""
    from trainmem.memory.plan import _torchtitan_op_sac
    spec, s = build("llama-3.1-8b", engine="fsdp2", gpus=8, recompute="selective", seq_len=8192, micro_batch=2)
    per_token = 2 * 4096 + 2 * (4096 + 1024 + 14336 + 4096) + 2 * 4096 + 4 * 32
    assert _torchtitan_op_sac(spec, s, 0) == 2 * 8192 * per_token
    assert per_token / 4096 == pytest.approx(15.53, abs=0.01)   # B per token·h (vs ≈ 46 without recompute)


@pytest.mark.parametrize("zero", [0, 1, 2])
def test_deepspeed_fp32_gradients_are_fp32(zero: int) -> None:
    """With --precision fp32 DeepSpeed keeps fp32 gradients (the parameters' dtype): 4 B per parameter
    at ZeRO 0; at ZeRO 1 the stage-1 epilogue holds the gradients not yet moved into the 5e8-element
    bucket (4 B × (T − 5e8)) next to the fp32 partition (4 B × T/dp), as measured with DeepSpeed on its
    CPU accelerator (docs/deepspeed_cpu.md); the fp32 partition alone (4 B ÷ dp) at ZeRO 2."""
    from trainmem.api import build
    spec, s = build("llama-3.2-1b", engine="deepspeed", precision="fp32", zero=zero, gpus=2, seq_len=512)
    grads = estimate(spec, s).category_peak_bytes["gradients"]
    T = spec.n_params
    per_param = {0: 4.0, 1: 4 * (T - 500_000_000) / T + 4 / 2, 2: 2.0}[zero]
    assert grads / T == pytest.approx(per_param, rel=1e-3)


def test_fp8_megatron_adds_the_te_weight_cache() -> None:
    """fp8 under Megatron = mixed-bf16 + an fp8 weight and its transpose per transformer-layer weight
    (2 B per local matmul parameter), less what TE's fp8 linears no longer save in bf16 (their inputs
    kept as 1-B fp8, trainmem/memory/megatron_activations.py) in every layer alive at the peak;
    torchtitan's float8 caches nothing."""
    from trainmem.api import build
    from trainmem.memory.activations import layer_saved
    from trainmem.memory.states import rank_params
    spec, s8 = build("llama-3.1-8b", engine="megatron", precision="fp8", gpus=8, tp=2)
    _, s16 = build("llama-3.1-8b", engine="megatron", precision="mixed-bf16", gpus=8, tp=2)
    layer_mm = sum(rank_params(spec, s16, 0).layer_matmul)
    e8, e16 = estimate(spec, s8), estimate(spec, s16)
    assert e8.breakdown_at_peak_bytes["parameters"] - e16.breakdown_at_peak_bytes["parameters"] == 2 * layer_mm
    fewer = layer_saved(spec, s16, 0).total_bytes - layer_saved(spec, s8, 0).total_bytes
    assert fewer > 0 and e8.peak_phase == e16.peak_phase == "backward mb0"
    d = e8.peak_allocated_bytes - e16.peak_allocated_bytes
    assert d == 2 * layer_mm - spec.num_layers * fewer
    _, f8 = build("llama-3.1-8b", engine="fsdp2", precision="fp8", gpus=8)
    _, f16 = build("llama-3.1-8b", engine="fsdp2", precision="amp-bf16", gpus=8)
    assert estimate(spec, f8).peak_allocated_bytes == estimate(spec, f16).peak_allocated_bytes


def test_fp8_te_linears_under_fsdp2_save_fp8_inputs_and_weights() -> None:
    """fsdp2 + ``--fp8-backend te`` (te.Linear for nn.Linear, Accelerate's TE backend / llm-foundry): each linear
    saves a 1-B fp8 copy of its own input instead of the shared bf16 tensor, and an fp8 weight + transpose
    (2 B per unsharded layer weight) is alive through the step. Hand count for Llama-3.1-8B, per token and
    layer: bf16 (FSDP2 param_dtype) q/k/v share the norm output (2h) → three fp8 copies (3h); o_proj keeps
    its own fp8 copy of the attention output (+h; SDPA still keeps its bf16 output); gate/up share the
    post-norm output (2h) → 2h; down_proj's input (2i) → i."""
    from trainmem.api import build
    from trainmem.memory.activations import layer_saved
    spec, te = build("llama-3.1-8b", engine="fsdp2", precision="fp8", fp8_backend="te", gpus=8, seq_len=4096)
    _, ao = build("llama-3.1-8b", engine="fsdp2", precision="fp8", gpus=8, seq_len=4096)
    assert ao.fp8_backend == "torchao"
    h, i, T = spec.hidden_size, spec.intermediate_size, 4096
    base = ao.model_copy(update={"precision": "amp-bf16"})
    te_base = te.model_copy(update={"precision": "amp-bf16"})
    d = layer_saved(spec, base, 0, fp8=True).total_bytes - layer_saved(spec, te_base, 0, fp8=True).total_bytes
    assert d == T * ((2 * h - 3 * h) + (0 - h) + (2 * h - 2 * h) + (2 * i - i))
    e_te, e_ao = estimate(spec, te), estimate(spec, ao)
    # every layer's q, k, v, o (GQA: 2·h² + 2·h·kv·d) and gate, up, down (3·h·i) weights, unsharded
    kvd = spec.num_kv_heads * spec.head_dim
    mm = spec.num_layers * (2 * h * h + 2 * h * kvd + 3 * h * i)
    assert e_te.breakdown_at_peak_bytes["parameters"] - e_ao.breakdown_at_peak_bytes["parameters"] == 2 * mm
    assert any("te.Linear" in a for a in e_te.assumptions)
