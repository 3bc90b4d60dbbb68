"""One optimizer step on the slowest rank: micro-batches × (forward + backward + recomputation + exposed
TP/CP/EP communication) + pipeline bubble + pipeline sends + exposed data-parallel sync + offload +
optimizer step (with the calibrated per-step host overhead).

Exposed communication includes what hidden communication costs the compute it overlaps
(trainmem.perf.overlap); Megatron with sequence parallelism overlaps its TP collectives
(:func:`tp_comm_overlapped`). Tensor-core kernels run at the fraction of their isolated-kernel throughput
sustained in training (calibration.SUSTAINED_FRACTION).

Per-model and per-shape work (layer GEMM lists, per-layer seconds, rank parameter counts) is memoised,
so a call with a known model and micro-batch shape is arithmetic on a few dozen numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import lru_cache

from trainmem.hardware.cluster import GPUGroup, Link
from trainmem.memory.layers.base import compute_bytes, is_amp, residual_bytes, sdpa_math_fallback, tp_only_fp32
from trainmem.memory.states import layers_of_stage, rank_params
from trainmem.model.spec import ModelSpec
from trainmem.perf import calibration as cal
from trainmem.perf.collectives import allgather_seconds, allreduce_seconds, alltoall_seconds, p2p_seconds, span
from trainmem.perf import deepspeed_pipe as dsp
from trainmem.perf import ring
from trainmem.perf.device import Device, check_precision, device_of, matmul_kind, mfu_peak_flops_per_s
from trainmem.perf.flops import (Linear, attention_forward_flops_per_token, attention_keys_model, head_linear,
                                 layer_linears, sliding_layer_share,
                                 matmul_params_per_token)
from trainmem.perf.kernels import (attention_backward_seconds, attention_forward_seconds, attention_kernel,
                                   pointwise_seconds)
from trainmem.perf.layer import Ctx, Phase, embedding_phase, fp8_cast_bytes_per_element, head_phase, layer_phase
from trainmem.perf.notes import _NOTE, borrowed_mamf_note
from trainmem.perf.optimizer import gpu_optimizer_bytes_per_param, gpu_optimizer_seconds, offload_seconds
from trainmem.perf.overlap import chunked_overlap_seconds, contention_seconds
from trainmem.perf.sync import SyncInputs, dp_sync_seconds
from trainmem.setup import TrainingSetup

__all__ = ["StepTime", "step_time", "microbatch_seconds", "grad_sync_seconds", "optimizer_seconds", "BREAKDOWN_KEYS"]

BREAKDOWN_KEYS = ("compute", "recompute", "tp_comm", "cp_comm", "ep_comm", "pp_comm", "dp_comm", "bubble",
                  "offload", "optimizer")
#: Loss kernels' HBM bytes per logit element, forward + backward: HF ForCausalLMLoss upcasts to fp32
#: (upcast 2+4, log_softmax with its max/sum passes 16, backward 22); Megatron's vocab-parallel
#: cross-entropy 36 (fp32 max, exp, sum, softmax-grad passes); Liger's fused linear loss 16; flash-attn's
#: cross-entropy 6 (the forward kernel reads the 16-bit logits once, the backward reads them and writes the
#: 16-bit gradient: flash_attn/ops/triton/cross_entropy.py ``cross_entropy_fwd_kernel`` / ``_bwd_kernel``).
#: Cut Cross-Entropy keeps the logits in on-chip memory (apple/ml-cross-entropy cce_lse_forward.py / cce_backward.py):
#: no HBM traffic per logit element is counted (its recomputed head matmul is not timed).
_LOSS_BYTES = {"hf": 44.0, "chunked": 44.0, "fused-linear": 16.0, "fused-ce": 6.0, "cce": 0.0, "megatron": 36.0}


@dataclass(frozen=True, slots=True)
class StepTime:
    step_seconds: float
    """One optimizer step (all micro-batches) on the slowest rank."""
    tokens_per_step: int
    """Global: micro_batch · grad_accum · dp · seq_len."""
    tokens_per_second: float
    tokens_per_second_per_gpu: float
    mfu: float
    """Model FLOPs (PaLM, no recomputation: trainmem.perf.flops.model_flops_per_token) / (step_seconds · gpus ·
    dense peak of the recipe's precision, :func:`trainmem.perf.device.mfu_peak_flops_per_s`): the MFU that
    ``tokens_per_second_per_gpu`` implies."""
    model_flops_per_step: float
    """Global."""
    microbatch_seconds: float
    """Forward + backward of one micro-batch on one rank incl. recomputation and exposed TP/CP/EP
    communication (no pipeline bubble, no DP sync)."""
    breakdown: dict[str, float]
    """Exposed seconds per part (BREAKDOWN_KEYS); sums to step_seconds."""
    notes: tuple[str, ...] = ()
    """Assumptions, one sentence each."""


@dataclass(frozen=True, slots=True)
class _Model:
    """What the time model reads of an architecture, computed once per ModelSpec."""

    dense: dict[bool, tuple[Linear, ...]]
    """Decoder-layer linears, keyed by ``fused`` (Megatron's fused QKV/fc1 or HF's modules)."""
    moe: dict[bool, tuple[Linear, ...]]
    moe_layers: frozenset[int]
    shape_dense: tuple
    shape_moe: tuple
    head: Linear
    matmul_per_token: float
    attn_per_token_per_key: float
    dense_weights: int
    moe_weights: int
    stage_cache: dict = field(default_factory=dict)


_MODELS: dict[int, tuple[ModelSpec, _Model]] = {}
_PHASES: dict[tuple, tuple[Phase, Phase, Phase, Phase]] = {}
_RANKS: dict[tuple, tuple[int, int, int, int, int]] = {}


def _shape(spec: ModelSpec, linears: tuple[Linear, ...], moe: bool) -> tuple:
    width = spec.moe_intermediate_size if moe else spec.intermediate_size
    return (spec.hidden_size, spec.num_attention_heads, spec.num_kv_heads, spec.head_dim, spec.v_head_dim,
            spec.sliding_window, width, spec.num_experts_per_tok if moe else 0, spec.num_experts,
            spec.norm == "rmsnorm", spec.position == "rope", spec.mlp_gated, spec.hidden_dropout > 0,
            sum(x.k * x.n * x.count for x in linears), not spec.is_encoder, spec.attention_dropout > 0,
            sliding_layer_share(spec))


def _model(spec: ModelSpec) -> _Model:
    hit = _MODELS.get(id(spec))
    if hit is not None and hit[0] is spec:
        return hit[1]
    moe_layers = frozenset(spec.moe_layer_indices)
    dense = {f: layer_linears(spec, False, f) for f in (False, True)}
    moe = {f: layer_linears(spec, True, f) for f in (False, True)} if moe_layers else dense
    m = _Model(dense=dense, moe=moe, moe_layers=moe_layers, shape_dense=_shape(spec, dense[True], False),
               shape_moe=_shape(spec, moe[True], True), head=head_linear(spec),
               matmul_per_token=matmul_params_per_token(spec),
               attn_per_token_per_key=attention_forward_flops_per_token(spec, 1.0),
               dense_weights=sum(x.k * x.n * x.count for x in dense[True]),
               moe_weights=sum(x.k * x.n * x.count for x in moe[True]))
    if len(_MODELS) > 256:
        _MODELS.clear()
    _MODELS[id(spec)] = (spec, m)
    return m


def _stage_counts(spec: ModelSpec, m: _Model, s: TrainingSetup, stage: int) -> tuple[int, int]:
    """(dense layers, MoE layers) of a pipeline stage (the setup's split: Megatron/torchtitan even by default)."""
    key = (s.pp, s.stage_layers, stage)
    hit = m.stage_cache.get(key)
    if hit is None:
        rng = layers_of_stage(spec, s, stage)
        n_moe = sum(1 for i in rng if i in m.moe_layers)
        hit = (len(rng) - n_moe, n_moe)
        m.stage_cache[key] = hit
    return hit


def _ctx(spec: ModelSpec, s: TrainingSetup, dev: Device) -> Ctx:
    c = compute_bytes(s)
    mm = matmul_kind(s.precision, c)
    check_precision(dev, mm)
    eager = s.attn == "eager" or sdpa_math_fallback(spec, s)
    targets = frozenset(s.lora_targets) if s.is_lora else frozenset()
    return Ctx(dev=dev, mm=mm, c=c, r=residual_bytes(s), style="fused" if s.engine == "megatron" else "hf",
               attn="eager" if eager else attention_kernel(dev, s.engine, s.attn_kernel), b=s.micro_batch, s=s.seq_len,
               tokens=s.micro_batch * s.seq_len // s.cp, tp=s.tp, sp=bool(s.sp), ep=s.ep, amp=is_amp(s),
               fp8_recipe=(s.fp8_backend or ("te" if s.engine == "megatron" else "torchao")) if mm == "fp8" else "",
               lora_targets=targets, lora_rank=s.lora_rank, qlora=s.qlora, cp=s.cp)


def _phases(spec: ModelSpec, m: _Model, ctx: Ctx, s: TrainingSetup) -> tuple[Phase, Phase, Phase, Phase]:
    """(dense layer, MoE layer, head, embedding) phases, memoised on everything they depend on."""
    key = (id(spec), ctx, s.loss, s.engine, spec.is_encoder)
    hit = _PHASES.get(key)
    if hit is not None:
        return hit
    fused = ctx.style == "fused"
    dense = layer_phase(ctx, m.dense[fused], m.shape_dense)
    moe = layer_phase(ctx, m.moe[fused], m.shape_moe) if m.moe_layers else dense
    loss = _LOSS_BYTES["megatron" if s.engine == "megatron" else s.loss]
    head = head_phase(ctx, m.head, loss, spec.norm == "rmsnorm")
    grad_b = 4 if (s.engine == "megatron" or ctx.amp or ctx.c == 4) else 2
    emb = embedding_phase(ctx, spec.vocab_size // s.tp, spec.hidden_size, grad_b, spec.position == "learned",
                          not s.is_lora)
    hit = (dense, moe, head, emb)
    if len(_PHASES) > 65536:
        _PHASES.clear()
    _PHASES[key] = hit
    return hit


def _rank_counts(spec: ModelSpec, s: TrainingSetup, stage: int) -> tuple[int, int, int, int, int]:
    """(dense trainable in layers, expert trainable, edge trainable (embedding/head/norm), layers, all
    trainable) of one rank of ``stage`` before ZeRO/FSDP sharding (trainmem.memory.states.rank_params)."""
    key = (id(spec), s.tp, s.pp, s.stage_layers, s.ep, stage, s.lora_rank, s.lora_targets, s.qlora)
    hit = _RANKS.get(key)
    if hit is not None and hit[0] is spec:
        return hit[1]
    rp = rank_params(spec, s, stage)
    layers = layers_of_stage(spec, s, stage)
    experts = 0 if s.is_lora else sum(spec.params.layers[i].experts for i in layers) // s.ep // s.tp
    in_layers = rp.trainable if s.is_lora else sum(rp.layers)
    edge = 0 if s.is_lora else rp.trainable - sum(rp.layers)
    out = (max(in_layers - experts, 0), experts, max(edge, 0), len(layers), rp.trainable)
    if len(_RANKS) > 65536:
        _RANKS.clear()
    _RANKS[key] = (spec, out)
    return out


@dataclass(frozen=True, slots=True)
class _Stage:
    fwd: float
    bwd: float
    recompute: float
    tp: float
    cp: float
    ep: float
    fwd_comm: float
    """Exposed TP/CP/EP seconds of the forward (for the overlap of DP traffic)."""
    layers: int

    @property
    def total(self) -> float:
        return self.fwd + self.bwd + self.recompute + self.tp + self.cp + self.ep


def _recompute_seconds(s: TrainingSetup, ph: Phase) -> float:
    if s.recompute == "full":
        return ph.fwd
    if s.recompute == "selective":
        return ph.sac if s.engine in ("torch", "fsdp2") else ph.core_attn
    return 0.0


def _tp_factor(s: TrainingSetup) -> float:
    """Tensor-parallel collectives per layer per micro-batch, in all-reduces of b·s/cp·h: 2 in the forward,
    2 in the backward (Megatron: Korthikanti et al. 2022 §4.2; with SP each all-reduce is a
    reduce-scatter + all-gather of the same volume), +2 when full recomputation re-runs the forward,
    +1 under torchtitan's op-level SAC (it saves reduce-scatter outputs, re-runs the all-gathers)."""
    extra = 2.0 if s.recompute == "full" else (1.0 if (s.recompute == "selective" and s.engine == "fsdp2") else 0.0)
    return 4.0 + extra


def tp_comm_overlapped(s: TrainingSetup) -> bool:
    """Megatron with sequence parallelism is taken to run ``--tp-comm-overlap`` (Transformer Engine
    userbuffers), as the published Megatron-Core recipes do (Megatron-LM README "Communication
    optimizations"; NeMo / Megatron-Bridge performance configs); Megatron refuses the flag without SP
    (megatron/training/arguments.py: "Tensor parallel communication/GEMM overlap can happen only when
    sequence parallelism is enabled"). torchtitan's async TP (``async_tp``: inductor's micro-pipelined
    all-gather-matmul and matmul-reduce-scatter, torch/_inductor/fx_passes/micro_pipeline_tp.py) pipelines
    the same collectives with the same GEMMs in tp chunks. Every other TP setup exposes its collectives."""
    if s.tp == 1 or not s.sp:
        return False
    return s.engine == "megatron" or (s.engine == "fsdp2" and s.async_tp)


def _tp_seconds(s: TrainingSetup, one: float, ph: Phase) -> tuple[float, float]:
    """(all, forward) exposed TP seconds of one layer per micro-batch; ``one`` = one all-reduce-sized
    collective. Under --tp-comm-overlap each direction's collectives pipeline with that direction's GEMMs
    in tp chunks (trainmem.perf.overlap.chunked_overlap_seconds)."""
    n = _tp_factor(s)
    if not tp_comm_overlapped(s):
        return n * one, 2 * one
    rec = ph.fwd_gemm if s.recompute == "full" else 0.0
    fwd = chunked_overlap_seconds(2 * one, ph.fwd_gemm, s.tp)
    bwd = chunked_overlap_seconds((n - 2) * one, ph.bwd_gemm + rec, s.tp)
    if s.engine == "fsdp2":  # async TP hides a calibrated share of what the chunked pipeline would
        h = cal.ASYNC_TP_HIDDEN_SHARE
        fwd, bwd = 2 * one - h * (2 * one - fwd), (n - 2) * one - h * ((n - 2) * one - bwd)
    return fwd + bwd, fwd


def _comm_per_layer(spec: ModelSpec, s: TrainingSetup, ctx: Ctx, grp: GPUGroup, ph: Phase,
                    moe: bool) -> tuple[float, float, float, float]:
    """(tp, cp, ep, forward share) exposed seconds of one layer per micro-batch."""
    gpn, h, c = grp.gpus_per_node, spec.hidden_size, ctx.c
    tp_t = cp_t = ep_t = fwd = 0.0
    if s.tp > 1:
        one = allreduce_seconds(ctx.tokens * h * c, span(s.tp, 1, gpn), grp.intra, grp.inter)
        tp_t, fwd = _tp_seconds(s, one, ph)
    if s.cp > 1 and s.engine == "fsdp2" and ctx.attn != "eager":  # torch ring attention needs a fused SDPA kernel
        cp_f, cp_b = _torch_cp_seconds(spec, s, ctx, grp)
        cp_t = cp_f * (2 if s.recompute == "full" else 1) + cp_b
        fwd += cp_f
    elif s.cp > 1:
        kv_local = max(spec.num_kv_heads // s.tp, 1) * (spec.head_dim + spec.v_head_dim) * ctx.tokens * c
        sp_cp = span(s.cp, s.tp, gpn)
        link = grp.inter if sp_cp[2] > 1 else grp.intra
        step = p2p_seconds(kv_local, link)
        chunk_f, chunk_b = ph.core_attn / s.cp, (ph.bwd_attn) / s.cp
        cp_f = (s.cp - 1) * (max(0.0, step - chunk_f) + contention_seconds(step, chunk_f)) + link.latency_s
        cp_b = (s.cp - 1) * (max(0.0, 2 * step - chunk_b) + contention_seconds(2 * step, chunk_b)) + link.latency_s
        cp_t = cp_f * (2 if s.recompute == "full" else 1) + cp_b
        fwd += cp_f
    if moe and s.ep > 1:
        sent = ctx.tokens * spec.num_experts_per_tok * h * c / (s.tp if s.sp else 1)
        one = alltoall_seconds(sent, span(s.ep, s.tp, gpn), grp.intra, grp.inter)
        ep_t = (4 + (2 if s.recompute == "full" else 0)) * one
        fwd += 2 * one
    return tp_t, cp_t, ep_t, fwd


def _torch_cp_seconds(spec: ModelSpec, s: TrainingSetup, ctx: Ctx, grp: GPUGroup) -> tuple[float, float]:
    """(forward, backward) seconds torch's ring attention adds to one layer's kernels (torchtitan: trainmem.perf.ring):
    the fp32 merges and gradient accumulations, and the exposed part of the K/V all-gathers (forward and
    backward) and of the fp32 dK/dV exchanges (backward), with the contention of what they overlap."""
    cp, gpn, c, hbm = s.cp, grp.gpus_per_node, ctx.c, ctx.dev.hbm_bytes_per_s
    heads, kv_heads = max(spec.num_attention_heads // s.tp, 1), max(spec.num_kv_heads // s.tp, 1)
    d, dv = spec.head_dim, spec.v_head_dim
    kv_el = ctx.tokens * kv_heads * (d + dv)
    sp_cp = span(cp, s.tp, gpn)
    ag = allgather_seconds(cp * kv_el * c, sp_cp, grp.intra, grp.inter)
    exchange = p2p_seconds(4.0 * kv_el, grp.inter if sp_cp[2] > 1 else grp.intra)  # fp32 dK/dV to the next rank
    peak = (ctx.dev.peak16_flops if ctx.mm != "fp32" else ctx.dev.peak32_flops) * ctx.dev.sustained
    k0, k1 = ring.ring_step_keys(s.seq_len, cp)
    per_key = 2.0 * ctx.tokens * heads * (d + dv)
    f0 = attention_forward_seconds(per_key * k0, ctx.attn, k0, peak)
    b0, b1 = (attention_backward_seconds(per_key * k, ctx.attn, k, peak) for k in (k0, k1))
    merge_f = pointwise_seconds(ring.sdpa_merge_hbm_bytes(ctx.tokens * heads * dv, kv_el, cp, c),
                                ring.MERGE_KERNELS_PER_STEP * cp, hbm)
    merge_b = pointwise_seconds(ring.ring_backward_hbm_bytes(ctx.tokens * heads * d, kv_el, cp, c),
                                ring.BACKWARD_KERNELS_PER_STEP * cp, hbm)
    fwd = merge_f + ring.torch_cp_forward_exposed_seconds(ag, f0, contention_seconds(ag, f0))
    hidden = contention_seconds(ag, b0) + (cp - 1) * contention_seconds(exchange, b1)
    bwd = merge_b + ring.torch_cp_backward_exposed_seconds(ag, b0, exchange, b1, cp, hidden)
    return fwd, bwd


def _stage(spec: ModelSpec, m: _Model, s: TrainingSetup, ctx: Ctx, grp: GPUGroup, stage: int,
           counts: tuple[int, int] | None = None) -> _Stage:
    """One pipeline stage's seconds per micro-batch. Block recompute (``recompute_layers`` N, Megatron-Core
    ``recompute_method="block"``): N of the stage's n layers re-run their forward (and its TP/CP/EP
    collectives), the others not, so every term is the layer-weighted mix N/n · full + (1 − N/n) · none;
    layers are taken as alike (dense and MoE layers in proportion)."""
    if s.recompute_layers is None:
        return _stage_uniform(spec, m, s, ctx, grp, stage, counts)
    full = _stage_uniform(spec, m, _with(s, recompute_layers=None), ctx, grp, stage, counts)
    none = _stage_uniform(spec, m, _with(s, recompute="none", recompute_layers=None), ctx, grp, stage, counts)
    f = min(s.recompute_layers, full.layers) / full.layers if full.layers else 0.0
    mix = {k: f * getattr(full, k) + (1.0 - f) * getattr(none, k)
           for k in ("fwd", "bwd", "recompute", "tp", "cp", "ep", "fwd_comm")}
    return _Stage(**mix, layers=full.layers)


def _with(s: TrainingSetup, **fields: object) -> TrainingSetup:
    """``s`` with ``fields`` changed: a validated setup or the planner's unvalidated view of one."""
    return s.model_copy(update=fields) if isinstance(s, TrainingSetup) else s.replace(**fields)  # type: ignore[attr-defined]


def _stage_uniform(spec: ModelSpec, m: _Model, s: TrainingSetup, ctx: Ctx, grp: GPUGroup, stage: int,
                   counts: tuple[int, int] | None = None) -> _Stage:
    dense, moe, head, emb = _phases(spec, m, ctx, s)
    n_dense, n_moe = counts if counts is not None else _stage_counts(spec, m, s, stage)
    fwd = n_dense * dense.fwd + n_moe * moe.fwd
    bwd = n_dense * dense.bwd + n_moe * moe.bwd
    rec = n_dense * _recompute_seconds(s, dense) + n_moe * _recompute_seconds(s, moe)
    tp_d, cp_d, ep_d, f_d = _comm_per_layer(spec, s, ctx, grp, dense, False)
    tp_m, cp_m, ep_m, f_m = _comm_per_layer(spec, s, ctx, grp, moe, True) if n_moe else (0.0, 0.0, 0.0, 0.0)
    tp_t = n_dense * tp_d + n_moe * tp_m
    edge_ar = allreduce_seconds(ctx.tokens * spec.hidden_size * ctx.c, span(s.tp, 1, grp.gpus_per_node),
                                grp.intra, grp.inter) if s.tp > 1 else 0.0
    if stage == 0:
        fwd, bwd, tp_t = fwd + emb.fwd, bwd + emb.bwd, tp_t + edge_ar
    if stage == s.pp - 1:
        fwd, bwd, tp_t = fwd + head.fwd, bwd + head.bwd, tp_t + 2 * edge_ar
    return _Stage(fwd=fwd, bwd=bwd, recompute=rec, tp=tp_t, cp=n_dense * cp_d + n_moe * cp_m,
                  ep=n_dense * ep_d + n_moe * ep_m, fwd_comm=n_dense * f_d + n_moe * f_m, layers=n_dense + n_moe)


class _Entry:
    """Everything of a step that does not depend on dp, zero, grad_accum, vpp, offload or the optimizer,
    computed once per (model, group, stage knobs)."""

    __slots__ = ("spec", "grp", "st", "ctx", "m", "counts", "flops_per_token", "peak", "cast", "pb", "gb",
                 "state", "notes", "hops")

    def __init__(self, spec: ModelSpec, s: TrainingSetup, grp: GPUGroup, stage: int | None = None) -> None:
        self.spec, self.grp = spec, grp
        self.st, self.ctx, self.m = _stages_uncached(spec, s, grp)
        ctx, m = self.ctx, self.m
        self.counts = _sync_counts(spec, s, stage)
        keys = attention_keys_model(spec, s.seq_len)
        self.flops_per_token = 6.0 * m.matmul_per_token + 3.0 * spec.num_layers * m.attn_per_token_per_key * keys
        self.peak = mfu_peak_flops_per_s(ctx.dev, s.precision)
        self.cast = _te_weight_cast_seconds(s, ctx, m, self.st)
        self.pb, self.gb = _comm_bytes(s, ctx)
        self.state = 4 if (ctx.amp or ctx.c == 4 or s.engine in ("megatron", "deepspeed")
                           or s.precision.startswith("amp") or s.precision == "fp8") else 2
        self.notes: dict[tuple, tuple[str, ...]] = {}
        self.hops: dict[int, float] = {}


_ENTRIES: dict[tuple, _Entry] = {}


def _sync_counts(spec: ModelSpec, s: TrainingSetup, stage: int | None) -> tuple[int, int, int, int, int]:
    """The rank whose data-parallel sync and optimizer step the step waits for: ``stage``'s, else stage 0's
    (the even split's most parameters: the embedding) or, of an explicit ``stage_layers`` split, the stage
    with the most trainable parameters."""
    if stage is not None:
        return _rank_counts(spec, s, stage)
    if not s.stage_layers:
        return _rank_counts(spec, s, 0)
    return max((_rank_counts(spec, s, j) for j in range(s.pp)), key=lambda c: c[4])


def _entry(spec: ModelSpec, s: TrainingSetup, grp: GPUGroup, stage: int | None = None) -> _Entry:
    """The memoised stage entry of a setup (keyed on the knobs a stage's time depends on); ``stage``: whose
    parameters the sync and optimizer figures count (default :func:`_sync_counts`)."""
    key = (id(spec), id(grp), s.engine, s.precision, s.fp8_backend, s.attn, s.attn_kernel, s.micro_batch, s.seq_len, s.cp, s.tp,
           s.sp, s.async_tp, s.ep, s.pp, s.stage_layers, s.recompute, s.recompute_layers, s.loss, s.lora_rank, s.lora_targets, s.qlora, stage)
    e = _ENTRIES.get(key)
    if e is not None and e.spec is spec and e.grp is grp:
        return e
    e = _Entry(spec, s, grp, stage)
    if len(_ENTRIES) > 65536:
        _ENTRIES.clear()
    _ENTRIES[key] = e
    return e


def _stages(spec: ModelSpec, s: TrainingSetup, grp: GPUGroup) -> tuple[_Stage, Ctx, _Model]:
    """The slowest pipeline stage, its context and the model (memoised)."""
    e = _entry(spec, s, grp)
    return e.st, e.ctx, e.m


def _stages_uncached(spec: ModelSpec, s: TrainingSetup, grp: GPUGroup) -> tuple[_Stage, Ctx, _Model]:
    """The slowest pipeline stage (of the even split the first or the last: stages differ by the embedding,
    the head and at most one layer; of an explicit ``stage_layers`` split any stage), its context and the model."""
    dev = device_of(grp.gpu)
    ctx = _ctx(spec, s, dev)
    m = _model(spec)
    first = _stage(spec, m, s, ctx, grp, 0)
    if s.pp == 1:
        return first, ctx, m
    others = range(1, s.pp) if s.stage_layers else (s.pp - 1,)
    return max([first, *(_stage(spec, m, s, ctx, grp, j) for j in others)], key=lambda st: st.total), ctx, m


def _comm_bytes(s: TrainingSetup, ctx: Ctx) -> tuple[int, int]:
    """(bytes of an all-gathered parameter, bytes of a reduced gradient): fp32 recipes 4/4; Megatron
    16-bit params, fp32 gradients for bf16 (``accumulate_allreduce_grads_in_fp32``), fp16 gradients for
    fp16; FSDP2 16-bit param_dtype, fp32 reduce_dtype (torchtitan's mixed_precision_reduce); DDP the
    parameters' dtype (fp32 under autocast); DeepSpeed 16-bit (communication_data_type = model dtype)."""
    if s.precision == "fp32" or ctx.c == 4:
        return 4, 4
    if s.engine == "megatron":
        return 2, (2 if s.precision == "mixed-fp16" else 4)
    if s.engine == "fsdp2":
        return 2, (2 if s.precision == "bf16" else 4)
    if s.engine == "torch":
        return (4, 4) if ctx.amp else (2, 2)
    return 2, 2


def _sync_inputs(s: TrainingSetup, e: _Entry) -> SyncInputs:
    dense, experts, edge, layers, _ = e.counts
    st = e.st
    fsdp_off = s.engine == "fsdp2" and not s.fsdp_applied
    return SyncInputs("none" if fsdp_off else s.engine, s.zero or 0, 1 if fsdp_off else s.dp, s.cp, s.tp, s.ep,
                      s.pp, e.grp.gpus_per_node, dense, experts, layers, edge, st.fwd + st.fwd_comm,
                      st.bwd + st.recompute + (st.tp + st.cp + st.ep - st.fwd_comm), s.grad_accum, e.pb, e.gb,
                      s.backward_prefetch)


def _owned_params(s: TrainingSetup, e: _Entry) -> float:
    """Trainable parameters whose optimizer state this rank updates (sharded by ZeRO ≥ 1, the distributed
    optimizer and FSDP over dp·cp; experts over the expert-data-parallel group)."""
    dense, experts, edge, _, total = e.counts
    if not (s.zero >= 1 or (s.engine == "fsdp2" and s.fsdp_applied)):
        return float(total)
    dp = s.dp * s.cp
    return (dense + edge) / dp + experts / max(dp // max(s.ep, 1), 1)


def step_overhead_seconds() -> float:
    """Host-side seconds per optimizer step outside the micro-batches (data loading, the loss and
    gradient-norm host syncs, logging, the optimizer's kernel launches): calibration.STEP_OVERHEAD_SECONDS,
    calibrated on the held-in published points; charged to ``breakdown["optimizer"]``."""
    return cal.STEP_OVERHEAD_SECONDS


def _optimizer_and_offload(s: TrainingSetup, e: _Entry, dp_exposed: float) -> tuple[float, float]:
    """(GPU optimizer seconds, exposed offload seconds) per step; host copies hide under each micro-batch's
    compute and exposed DP communication (``dp_exposed`` per step)."""
    owned = _owned_params(s, e)
    st = e.st
    if s.offload != "none":
        grp = e.grp
        window = st.total + dp_exposed / s.grad_accum
        off = offload_seconds(s.engine, s.offload, owned, grp.host.effective_gbps * 1e9,
                              min(grp.gpus_per_node, s.gpus), s.grad_accum, window, s.zero or 0)
        return step_overhead_seconds(), off
    per = gpu_optimizer_bytes_per_param(s.engine, s.optimizer, e.state, s.zero or 0)
    return step_overhead_seconds() + gpu_optimizer_seconds(owned, per, e.ctx.dev.hbm_bytes_per_s), 0.0


def _activation_offload_seconds(spec: ModelSpec, s: TrainingSetup, e: _Entry) -> float:
    """Exposed seconds per micro-batch of ``--offload-activations``: the layers' kept bytes to the host in the
    forward and back in the backward over the node's host link (memory/act_offload.py)."""
    from trainmem.memory.act_offload import exposed_transfer_seconds

    if s.engine not in ("torch", "fsdp2") or s.pp > 1:
        return 0.0  # (refused by the setup: a planner candidate that never reaches a plan)
    grp = e.grp
    return exposed_transfer_seconds(_kept_bytes(spec, s), grp.host.effective_gbps * 1e9,
                                    min(grp.gpus_per_node, s.gpus), e.st.fwd, e.st.bwd)


_KEPT: dict[tuple, int] = {}


def _kept_bytes(spec: ModelSpec, s: TrainingSetup) -> int:
    """The layers' kept bytes of one micro-batch (memory/plan.py ``kept_per_layer``), for a setup or the planner's
    unvalidated view of one (read as a TrainingSetup without validation), cached per configuration."""
    from trainmem.memory.plan import kept_per_layer
    from trainmem.setup import TrainingSetup

    fields = s.model_dump() if isinstance(s, TrainingSetup) else dict(vars(s))
    key = (spec.name, id(spec), tuple(sorted((k, v) for k, v in fields.items() if k != "notes")))
    got = _KEPT.get(key)
    if got is None:
        ts = s if isinstance(s, TrainingSetup) else TrainingSetup.model_construct(**fields)
        got = _KEPT[key] = sum(kept_per_layer(spec, ts))
    return got


def _hop_seconds(s: TrainingSetup, e: _Entry) -> float:
    """One pipeline send of a micro-batch's b·s/cp·h activations ÷ tp (Megatron scatters them over the TP
    ranks, DeepSpeed partitions them) between adjacent stages (PP ranks stride tp·cp·dp)."""
    one = e.hops.get(s.dp)
    if one is None:
        grp, ctx = e.grp, e.ctx
        nbytes = dsp.ds_pipe_partition_bytes(ctx.tokens, e.spec.hidden_size, ctx.c, s.tp)
        sp_pp = span(s.pp, s.tp * s.cp * s.dp, grp.gpus_per_node)
        one = e.hops[s.dp] = p2p_seconds(nbytes, grp.inter if sp_pp[2] > 1 else grp.intra)
    return one


def _pp_comm(s: TrainingSetup, e: _Entry) -> float:
    """Exposed pipeline sends/receives per step: each micro-batch (per virtual chunk) sends its b·s/cp·h
    activations forward and their gradient backward across each stage boundary (÷tp: Megatron scatters
    them over the TP ranks); Megatron's interleaved schedule overlaps them (``overlap_p2p_comm``) except
    the warm-up and cool-down chain."""
    if s.pp <= 1:
        return 0.0
    one = _hop_seconds(s, e)
    if s.engine == "megatron" and s.vpp > 1:
        return 2 * (s.pp - 1) * one
    return 2 * s.grad_accum * s.vpp * one


@dataclass(frozen=True, slots=True)
class _DSPipe:
    """Megatron-DeepSpeed's step parts (trainmem.perf.deepspeed_pipe), seconds per optimizer step."""

    pp_comm: float
    """Blocking transfers on the critical path and the partition restores of the m + p − 1 schedule slots."""
    accumulate: float
    """BF16_Optimizer.update_hp_grads after each backward, in each slot (charged to the optimizer)."""
    dp_comm: float
    """After the flush: tied-embedding all-reduce, gradient all-reduce with its copies, parameter all-gather."""


def _ds_pipe(s: TrainingSetup, e: _Entry) -> _DSPipe:
    """DeepSpeed's PipelineEngine under Megatron's model code (module docstring of
    trainmem.perf.deepspeed_pipe, DeepSpeed v0.6.4–v0.7.0): everything it does is serialised with the
    compute of its schedule slot or runs after the flush, nothing overlaps. bf16 runs BF16_Optimizer (fp32
    gradient accumulation per micro-batch, bf16 all-reduce); fp16 reduces its 16-bit gradients the same way
    without the accumulation."""
    grp, ctx, spec = e.grp, e.ctx, e.spec
    gpn, h, hbm = grp.gpus_per_node, spec.hidden_size, ctx.dev.hbm_bytes_per_s
    restore = 0.0
    if s.tp > 1:
        full = ctx.tokens * h * ctx.c
        restore = (allgather_seconds(full, span(s.tp, 1, gpn), grp.intra, grp.inter)
                   + pointwise_seconds(dsp.ds_pipe_restore_hbm_bytes(ctx.tokens, h, ctx.c), 2, hbm))
    slots = dsp.ds_pipe_schedule_slots(s.grad_accum, s.pp)
    pp_comm = dsp.ds_pipe_comm_seconds(dsp.ds_pipe_critical_transfers(s.grad_accum, s.pp), _hop_seconds(s, e), slots,
                                       dsp.ds_pipe_restores_per_microbatch(s.pp, s.tp), restore)
    params = float(e.counts[4])
    bf16 = s.precision == "mixed-bf16"
    accumulate = dsp.bf16_accumulate_seconds(params, hbm) if bf16 else 0.0
    dp_sp = span(s.dp * s.cp, s.tp, gpn)
    grads = allreduce_seconds(2.0 * params, dp_sp, grp.intra, grp.inter)
    grads += pointwise_seconds(dsp.bf16_grad_reduce_hbm_bytes(params), 4, hbm) if bf16 else 0.0
    gather = allgather_seconds(2.0 * params, dp_sp, grp.intra, grp.inter)
    tied = 0.0
    if spec.tie_word_embeddings:
        ends = span(2, (s.pp - 1) * s.tp * s.cp * s.dp, gpn)
        tied = allreduce_seconds(dsp.tied_embedding_grad_bytes(spec.vocab_size, h, s.tp), ends, grp.intra, grp.inter)
    return _DSPipe(pp_comm=pp_comm, accumulate=slots * accumulate, dp_comm=grads + gather + tied)


def _notes(s: TrainingSetup, e: _Entry) -> tuple[str, ...]:
    key = (s.offload != "none", s.fsdp_applied, s.gpus > 1, s.megatron_deepspeed, tp_only_fp32(s))
    hit = e.notes.get(key)
    if hit is None:
        ctx, m = e.ctx, e.m
        hit = e.notes[key] = _notes_cached(
            s.engine, s.recompute, s.tp > 1, s.cp > 1, s.ep > 1, bool(m.moe_layers), s.pp > 1, ctx.attn, ctx.style,
            ctx.fp8_recipe, ctx.amp, key[0], s.is_lora, s.qlora, ctx.dev.name, ctx.dev.mamf_measured, key[1],
            tp_comm_overlapped(s), key[2], key[3], key[4])
    return hit


@lru_cache(maxsize=4096)
def _notes_cached(engine: str, recompute: str, tp: bool, cp: bool, ep: bool, moe: bool, pp: bool, attn: str,
                  style: str, fp8: str, amp: bool, offload: bool, lora: bool, qlora: bool, gpu: str,
                  measured: bool, fsdp: bool, tp_overlap: bool = False, multi: bool = True,
                  ds_pipe: bool = False, fp32_tp: bool = False) -> tuple[str, ...]:
    keys = ["kernels", style, {"fa2-hopper": "fa2", "triton-fa2-hopper": "triton", "triton-fa2": "triton"}.get(attn, attn),
            "placement", "step"]
    if multi:
        keys.append("contention")
    overlap_note = "tp-async" if engine == "fsdp2" else "tp-overlap"
    keys += [k for k, on in ((overlap_note if tp_overlap else "tp", tp), ("cp", cp), ("ep", ep), ("moe", moe),
                             ("bubble", pp), ("pp", pp),
                             ("fp32-tp", fp32_tp), ("amp", amp), ("lora", lora), ("qlora", qlora), ("offload", offload)) if on]
    if recompute == "full":
        keys.append("full")
    elif recompute == "selective":
        keys.append("selective-sac" if engine in ("torch", "fsdp2") else "selective-megatron")
    if fp8:
        keys.append("fp8-te" if fp8 == "te" else "fp8-torchao")
    sync = {"torch": "ddp", "megatron": "megatron", "deepspeed": "deepspeed"}.get(engine)
    if engine == "fsdp2" and fsdp:
        sync = "fsdp2-pp" if pp else "fsdp2"
    if ds_pipe:  # DeepSpeed's PipelineEngine replaces Megatron's sends and gradient sync
        keys = [k for k in keys if k != "pp"]
        sync = "ds-pipe"
    if sync:
        keys.append(sync)
    keys.append("optimizer")
    out = [_NOTE[k] for k in keys]
    if not measured:
        out.append(borrowed_mamf_note(gpu))
    return tuple(out)


def _te_weight_cast_seconds(s: TrainingSetup, ctx: Ctx, m: _Model, st: _Stage) -> float:
    """Transformer Engine casts each layer weight to fp8 (and its transpose) once per step."""
    if ctx.fp8_recipe != "te":
        return 0.0
    weights = st.layers * m.dense_weights / s.tp
    return pointwise_seconds(fp8_cast_bytes_per_element("te", "weight") * weights, 2 * st.layers, ctx.dev.hbm_bytes_per_s)


def _assemble(spec: ModelSpec, s: TrainingSetup, grp: GPUGroup) -> StepTime:
    e = _entry(spec, s, grp)
    st = e.st
    mb = st.total
    ga = s.grad_accum
    pp = s.pp
    ds = _ds_pipe(s, e) if s.megatron_deepspeed else None
    dp = ds.dp_comm if ds else dp_sync_seconds(_sync_inputs(s, e), grp.intra, grp.inter)
    opt, off = _optimizer_and_offload(s, e, dp)
    if s.offload_activations:  # (the saved activations' copies to the host and back: memory/act_offload.py)
        off += ga * _activation_offload_seconds(spec, s, e)
    parts = {"compute": ga * (st.fwd + st.bwd) + e.cast, "recompute": ga * st.recompute, "tp_comm": ga * st.tp,
             "cp_comm": ga * st.cp, "ep_comm": ga * st.ep, "pp_comm": ds.pp_comm if ds else _pp_comm(s, e),
             "dp_comm": dp, "bubble": (pp - 1) / s.vpp * mb if pp > 1 else 0.0, "offload": off,
             "optimizer": opt + (ds.accumulate if ds else 0.0)}
    total = sum(parts.values())
    tokens = s.micro_batch * ga * s.dp * s.seq_len
    flops = tokens * e.flops_per_token
    tps = tokens / total
    gpus = s.gpus
    return StepTime(total, tokens, tps, tps / gpus, flops / (total * gpus * e.peak), flops, mb, parts, _notes(s, e))


def reset_caches() -> None:
    """Forget every memoised model, phase, stage and device (after changing a calibration constant)."""
    from trainmem.perf.kernels import gemm_seconds
    for cache in (_MODELS, _PHASES, _RANKS, _ENTRIES):
        cache.clear()
    device_of.cache_clear()
    gemm_seconds.cache_clear()
    _notes_cached.cache_clear()


def step_time(spec: ModelSpec, setup: TrainingSetup, group: GPUGroup) -> StepTime:
    """Predicted time of one optimizer step of ``setup`` on ``group`` (see the module docstring)."""
    return _assemble(spec, setup, group)


def microbatch_seconds(spec: ModelSpec, setup: TrainingSetup, group: GPUGroup) -> float:
    """Forward + backward of one micro-batch on the slowest rank, with recomputation and exposed
    TP/CP/EP communication (no bubble, no data-parallel sync)."""
    return _stages(spec, setup, group)[0].total


def grad_sync_seconds(spec: ModelSpec, setup: TrainingSetup, group: GPUGroup, link: Link | None = None,
                      stage: int | None = None) -> float:
    """Exposed DP/ZeRO/FSDP gradient and parameter sync per step (``breakdown["dp_comm"]``); ``link``
    replaces both of the group's links (a slower link between the GPU groups of a mixed pool); ``stage``: the
    sync of that pipeline stage's parameters (default: the one the step waits for)."""
    if setup.megatron_deepspeed:  # DeepSpeed's sync runs after the flush over the group's own links
        grp = group if link is None else replace(group, intra=link, inter=link)
        return _ds_pipe(setup, _entry(spec, setup, grp, stage)).dp_comm
    e = _entry(spec, setup, group, stage)
    if link is None:
        return dp_sync_seconds(_sync_inputs(setup, e), group.intra, group.inter)
    return dp_sync_seconds(_sync_inputs(setup, e), link, link)


def optimizer_seconds(spec: ModelSpec, setup: TrainingSetup, group: GPUGroup, stage: int | None = None) -> float:
    """The optimizer step: on the GPU (memory-bound), or, offloaded, its PCIe traffic and CPU time (of
    ``stage``'s parameters, default: the stage the step waits for)."""
    e = _entry(spec, setup, group, stage)
    if setup.megatron_deepspeed:
        ds = _ds_pipe(setup, e)
        gpu, off = _optimizer_and_offload(setup, e, ds.dp_comm)
        return gpu + off + ds.accumulate
    gpu, off = _optimizer_and_offload(setup, e, dp_sync_seconds(_sync_inputs(setup, e), group.intra, group.inter))
    return gpu + off


def stage_seconds(spec: ModelSpec, setup: TrainingSetup, group: GPUGroup, stage: int, n_dense: int,
                  n_moe: int = 0) -> dict[str, float]:
    """One micro-batch's forward + backward on pipeline ``stage`` of ``setup.pp`` holding ``n_dense`` dense
    and ``n_moe`` MoE decoder layers (an uneven split: the planner's stages on mixed GPU types), by
    breakdown key (compute, recompute, tp_comm, cp_comm, ep_comm); stage 0 adds the embedding, the last
    stage the final norm, LM head and loss, as in :func:`microbatch_seconds` (which takes the even split)."""
    st = _stage(spec, _model(spec), setup, _ctx(spec, setup, device_of(group.gpu)), group, stage, (n_dense, n_moe))
    return {"compute": st.fwd + st.bwd, "recompute": st.recompute, "tp_comm": st.tp, "cp_comm": st.cp, "ep_comm": st.ep}
