"""Seconds of one decoder layer (and of the embedding and LM head) on one rank for one micro-batch:
GEMMs, the attention core, memory-bound ops, each for the forward, the backward and what each
recomputation policy re-runs.

Kernels are modelled as eager-mode PyTorch runs them, in two styles:

- ``fused`` — Megatron-LM with Transformer Engine: fused QKV and fc1 GEMMs, fused norm, bias-dropout-add,
  RoPE and SwiGLU kernels (megatron/core/fusions), each reading and writing its tensors once;
- ``hf`` — transformers modules (torch, fsdp2, deepspeed): HF LlamaRMSNorm is six kernels (upcast,
  pow, mean, rsqrt·x, downcast, ·weight), rotary embeddings five, SiLU·up two, plus autocast casts.

No torch.compile (stated in the notes), except under torchao float8 (compiled: its pointwise ops are counted
as fused). Backward memory-bound ops are taken as twice the forward's
traffic (each reads its saved input and the output gradient and writes the input gradient).
"""

from __future__ import annotations

from dataclasses import dataclass

from trainmem.perf.device import Device
from trainmem.perf.flops import Linear, attention_keys_per_query
from trainmem.perf.kernels import (attention_backward_seconds, attention_forward_seconds, gemm_seconds,
                                   pointwise_seconds)
from trainmem.perf.ring import ring_attention_seconds

__all__ = ["Ctx", "Phase", "layer_phase", "head_phase", "embedding_phase", "sac_recomputed",
           "fp8_cast_bytes_per_element"]


@dataclass(frozen=True, slots=True)
class Ctx:
    """Everything a layer's time depends on (hashable: the memoisation key)."""

    dev: Device
    mm: str
    """``16`` | ``fp8`` | ``fp32``."""
    c: int
    """Bytes of an activation (matmul input/output)."""
    r: int
    """Bytes of the residual stream."""
    style: str
    """``fused`` (Megatron/TE) | ``hf``."""
    attn: str
    """Fused attention kernel (``fa3``, ``fa2``, ``fa2-hopper``, ``other``) or ``eager``."""
    b: int
    s: int
    """Full sequence length."""
    tokens: int
    """Tokens of one micro-batch on this rank: b·s/cp."""
    tp: int
    sp: bool
    ep: int
    amp: bool
    """torch.autocast over fp32 weights (casts each forward)."""
    fp8_recipe: str
    """``te`` (tensorwise, Transformer Engine; under Megatron weights cast once per step) | ``torchao``
    (rowwise, compiled, weights cast each micro-batch) | ``''``."""
    lora_targets: frozenset[str]
    """Adapted linears (``all-linear``: every one); empty for full fine-tuning."""
    lora_rank: int
    qlora: bool
    cp: int = 1
    """Context-parallel degree: the attention core runs as ring attention, one kernel per ring step."""


@dataclass(frozen=True, slots=True)
class Phase:
    """Seconds on one rank for one micro-batch."""

    fwd_gemm: float = 0.0
    fwd_attn: float = 0.0
    fwd_point: float = 0.0
    bwd_gemm: float = 0.0
    bwd_attn: float = 0.0
    bwd_point: float = 0.0
    sac: float = 0.0
    """What torchtitan's op-level selective checkpointing re-runs in the backward."""
    core_attn: float = 0.0
    """The attention core's forward (what Megatron's selective recomputation re-runs)."""

    @property
    def fwd(self) -> float:
        return self.fwd_gemm + self.fwd_attn + self.fwd_point

    @property
    def bwd(self) -> float:
        return self.bwd_gemm + self.bwd_attn + self.bwd_point


def _peak(dev: Device, mm: str) -> tuple[float, float, float]:
    """(peak FLOP/s, fraction sustained in training, input bytes) of a weight GEMM in this matmul kind."""
    if mm == "fp8":
        return dev.peak8_flops, dev.gemm_eff("fp8"), 1.0
    if mm == "fp32":
        return dev.peak32_flops, dev.gemm_eff("16"), 4.0
    return dev.peak16_flops, dev.gemm_eff("16"), 2.0


def _gemm(ctx: Ctx, m: int, n: int, k: int, fp8: bool, out_bytes: float | None = None) -> float:
    dev = ctx.dev
    peak, eff, in_b = _peak(dev, "fp8" if fp8 else ("fp32" if ctx.mm == "fp32" else "16"))
    return gemm_seconds(m, n, k, peak, eff, dev.hbm_bytes_per_s, dev.sms, in_b,
                        float(ctx.c) if out_bytes is None else out_bytes)


def fp8_cast_bytes_per_element(recipe: str, role: str) -> float:
    """HBM bytes of casting one GEMM operand element to fp8 over forward + backward (torchao
    ``roofline_utils.get_tensor_memory_traffic_ovhd_s``, casts fused with the producing op, as
    Transformer Engine's fused norm/activation casts and torch.compile do). ``te`` = tensorwise: input
    and grad_output 2 + 2·1 (row- and column-major fp8), weight 2 + 3 + 3 (amax, two casts); ``torchao``
    = rowwise: input and grad_output (1 + 2) + (2 + 1), weight 3 + 4 + 3."""
    if recipe == "te":
        return 8.0 if role == "weight" else 4.0
    return 10.0 if role == "weight" else 6.0


def _is_lora_target(ctx: Ctx, x: Linear) -> bool:
    return bool(ctx.lora_targets) and ("all-linear" in ctx.lora_targets or x.name in ctx.lora_targets)


def _linear_seconds(ctx: Ctx, x: Linear, tokens: int) -> tuple[float, float, float]:
    """(forward, backward, fp8-cast pointwise) seconds of one linear (all its experts) over ``tokens``
    rows per expert; LoRA-frozen weights skip the weight-gradient GEMM (only the input gradient)."""
    k, n = x.local(ctx.tp)
    # torchao's Float8LinearConverter swaps nn.Linear only: routed experts (grouped weights) stay 16-bit
    # unless torchtitan's Float8GroupedExpertsConverter is added; Transformer Engine's GroupedLinear runs fp8
    fp8 = ctx.mm == "fp8" and (x.group in ("attn", "mlp", "shared") or (x.group == "expert" and ctx.fp8_recipe == "te"))
    frozen = bool(ctx.lora_targets) or ctx.lora_rank > 0
    fwd = _gemm(ctx, tokens, n, k, fp8)
    bwd = _gemm(ctx, tokens, k, n, fp8) + (0.0 if frozen else _gemm(ctx, k, n, tokens, fp8))
    cast = 0.0
    if fp8:
        # Megatron has TE cache the fp8 weights over a step's micro-batches (is_first_microbatch); torchao, and TE
        # called without is_first_microbatch (Accelerate, llm-foundry), cast them in every micro-batch
        per_step_weight = 0.0 if (ctx.fp8_recipe == "te" and ctx.style == "fused") else 1.0
        cast = (fp8_cast_bytes_per_element(ctx.fp8_recipe, "input") * tokens * k
                + fp8_cast_bytes_per_element(ctx.fp8_recipe, "grad_output") * tokens * n
                + per_step_weight * fp8_cast_bytes_per_element(ctx.fp8_recipe, "weight") * k * n)
    if _is_lora_target(ctx, x):
        r = ctx.lora_rank
        fwd += _gemm(ctx, tokens, r, k, False) + _gemm(ctx, tokens, n, r, False)
        bwd += 2 * (_gemm(ctx, tokens, k, r, False) + _gemm(ctx, k, r, tokens, False))
    if ctx.qlora:  # bitsandbytes dequantises NF4 → 16-bit for the forward and the input-gradient GEMM
        cast += 2 * (0.5 + ctx.c) * k * n
    count = x.count // ctx.ep if x.group == "expert" else 1
    return count * fwd, count * bwd, count * cast


def _expert_tokens(ctx: Ctx, top_k: int, experts: int) -> int:
    """Token-expert pairs one local expert processes: tokens·top_k spread evenly over the E experts,
    each rank holding E/ep of them and receiving its ep group's tokens (balanced routing assumed)."""
    return max(1, -(-ctx.tokens * top_k * ctx.ep // experts))


def _attention_core(ctx: Ctx, dims: tuple[int, int, int, int, int | None, bool, bool]) -> tuple[float, float]:
    """(forward, backward) seconds of the attention core of one layer: a fused kernel on the causal share
    (FlashAttention computes only the blocks under the diagonal), or eager batched matmuls on the full
    square (``baddbmm``/``matmul``; a batched GEMM counted as one GEMM of batch·s_q rows) with a softmax
    between them: Megatron's FusedScaleMaskSoftmax (``fused`` style) reads and writes the 16-bit scores once
    (4 B per score forward, 6 B backward), HF's eager path upcasts to fp32 (5·c + 8 B forward, twice that
    backward); attention dropout adds 5 B (read, write, 1-byte mask) each way."""
    a, kv, d, dv, window, causal, dropout = dims
    heads = max(a // ctx.tp, 1)
    s, tokens = ctx.s, ctx.tokens
    peak = (ctx.dev.peak16_flops if ctx.mm != "fp32" else ctx.dev.peak32_flops) * ctx.dev.sustained
    if ctx.attn != "eager" and ctx.cp > 1 and causal and (window is None or window >= s):
        # context parallelism: one kernel per ring step on that step's key range (trainmem.perf.ring)
        return ring_attention_seconds(tokens, heads, d, dv, s, ctx.cp, ctx.attn, peak)
    if ctx.attn != "eager":
        keys = attention_keys_per_query(s, causal, window)
        flops = 2.0 * tokens * keys * heads * (d + dv)
        return (attention_forward_seconds(flops, ctx.attn, keys, peak),
                attention_backward_seconds(flops, ctx.attn, keys, peak))
    sq = tokens // ctx.b
    rows = ctx.b * heads * sq
    fwd = _gemm(ctx, rows, s, d, False) + _gemm(ctx, rows, dv, s, False)
    bwd = (_gemm(ctx, rows, d, s, False) + _gemm(ctx, ctx.b * heads * s, d, sq, False)
           + _gemm(ctx, rows, s, dv, False) + _gemm(ctx, ctx.b * heads * s, dv, sq, False))
    scores = float(rows) * s
    c = ctx.c
    drop = 5.0 if dropout else 0.0
    if ctx.style == "fused":
        fwd_b, bwd_b = 4.0 + drop, 6.0 + drop
    else:
        fwd_b = 5.0 * c + 8.0 + drop
        bwd_b = 2 * fwd_b
    hbm = ctx.dev.hbm_bytes_per_s
    return (fwd + pointwise_seconds(scores * fwd_b, 4, hbm), bwd + pointwise_seconds(scores * bwd_b, 8, hbm))


def _pointwise_bytes_per_token(ctx: Ctx, h: int, qk_width: int, o_width: int, mlp_width: int, moe_top_k: int,
                               rmsnorm: bool, rope: bool, gated: bool, dropout: bool) -> tuple[float, int]:
    """(bytes, kernels) of a layer's memory-bound forward ops per token on this rank: two norms, two
    residual adds, rotary embeddings on q and k, the activation, dropout, MoE permutation."""
    c, r, tp = ctx.c, ctx.r, ctx.tp
    hn = h / tp if ctx.sp else float(h)
    if ctx.style == "fused" or ctx.fp8_recipe == "torchao":
        # torchao float8 runs under torch.compile ("required for competitive performance", torchtitan
        # components/quantization/float8.md), which fuses the norm, rotary and activation kernels like TE
        nbytes = 2 * 2 * c * hn + 2 * 3 * c * hn + (2 * c * qk_width / tp if rope else 0.0)
        nbytes += (3 if gated else 2) * c * mlp_width / tp
        kernels = 6 + (1 if rope else 0)
    else:
        norm = ((c + 4 if r == c else 0) + 24 + 3 * c) if rmsnorm else (r + c)
        nbytes = 2 * norm * hn + 2 * 3 * r * hn + (9 * c * qk_width / tp if rope else 0.0)
        nbytes += (5 if gated else 2) * c * mlp_width / tp + 2 * c * o_width / tp
        kernels = (12 if rmsnorm else 2) + 2 + (8 if rope else 0) + (2 if gated else 1) + 1
        if ctx.amp:  # autocast casts the fp32 norm outputs before q/k/v and gate/up
            nbytes += 5 * (4 + c) * hn
            kernels += 5
    if dropout:
        nbytes += 2 * (2 * c + 1) * hn
        kernels += 2
    if moe_top_k:
        nbytes += 6 * c * h * moe_top_k / (tp if ctx.sp else 1)
        kernels += 6
    return nbytes, kernels


def sac_recomputed(linears: tuple[Linear, ...]) -> tuple[bool, ...]:
    """torchtitan op-level SAC (``_apply_ac_to_transformer_block``, torchtitan v0.2.2
    distributed/activation_checkpoint.py): it saves the attention kernel's outputs and every odd-numbered
    ``aten.mm`` of the block (the counter restarts each layer) and recomputes the even-numbered ones and
    every other op. Routed experts run as grouped mm (not in the save list): recomputed."""
    out, count = [], 0
    for x in linears:
        if x.group == "expert":
            out.append(True)
            continue
        count += 1
        out.append(count % 2 == 0)
    return tuple(out)


def layer_phase(ctx: Ctx, linears: tuple[Linear, ...], shape: tuple) -> Phase:
    """Seconds of one decoder layer for one micro-batch on this rank (the average layer of the model).
    ``shape`` = (h, a, kv, d, dv, window, mlp_width, top_k, experts, rmsnorm, rope, gated, dropout, weight_params,
    causal, attention_dropout, window_share): the attention core over the window on ``window_share`` of the
    layers (trainmem.perf.flops.sliding_layer_share), over the whole sequence on the others."""
    (h, a, kv, d, dv, window, width, top_k, experts, rmsnorm, rope, gated, dropout, weights, causal, adrop,
     share) = shape
    fg = bg = cast = 0.0
    sac = 0.0
    recomp = sac_recomputed(linears)
    for x, again in zip(linears, recomp):
        rows = _expert_tokens(ctx, top_k, experts) if x.group == "expert" else ctx.tokens
        f, bw, cs = _linear_seconds(ctx, x, rows)
        fg, bg, cast = fg + f, bg + bw, cast + cs
        if again:
            sac += f
    attn_f, attn_b = _attention_core(ctx, (a, kv, d, dv, window, causal, adrop))
    if window is not None and share < 1.0:  # the full-attention layers of an alternating model
        full_f, full_b = _attention_core(ctx, (a, kv, d, dv, None, causal, adrop))
        attn_f, attn_b = share * attn_f + (1 - share) * full_f, share * attn_b + (1 - share) * full_b
    hbm = ctx.dev.hbm_bytes_per_s
    pb, kernels = _pointwise_bytes_per_token(ctx, h, (a + kv) * d, a * dv, width * max(top_k, 1), top_k,
                                             rmsnorm, rope, gated, dropout)
    fwd_bytes = pb * ctx.tokens + cast / 2
    if ctx.amp:  # autocast casts each fp32 weight to 16 bits once per forward (cached for backward)
        fwd_bytes += (4 + ctx.c) * weights
    fp = pointwise_seconds(fwd_bytes, kernels, hbm)
    bp = pointwise_seconds(2 * pb * ctx.tokens + cast / 2, 2 * kernels, hbm)
    return Phase(fwd_gemm=fg, fwd_attn=attn_f, fwd_point=fp, bwd_gemm=bg, bwd_attn=attn_b, bwd_point=bp,
                 sac=sac + fp, core_attn=attn_f)


def head_phase(ctx: Ctx, head: Linear, loss_bytes_per_logit: float, rmsnorm: bool) -> Phase:
    """The final norm, the LM head GEMMs and the loss (memory-bound over the b·s·V/tp logits)."""
    f, bw, _ = _linear_seconds(ctx, Linear(head.name, head.k, head.n, head.split, "head"), ctx.tokens)
    k, n = head.local(ctx.tp)
    if ctx.lora_targets or ctx.lora_rank:
        bw = _gemm(ctx, ctx.tokens, k, n, False)  # frozen head: input gradient only
    logits = float(ctx.tokens) * n
    hbm = ctx.dev.hbm_bytes_per_s
    norm = (2 * ctx.c + (30 if (rmsnorm and ctx.style == "hf") else 0)) * ctx.tokens * k
    fp = pointwise_seconds(logits * loss_bytes_per_logit / 2 + norm, 8, hbm)
    bp = pointwise_seconds(logits * loss_bytes_per_logit / 2 + 2 * norm, 8, hbm)
    return Phase(fwd_gemm=f, fwd_point=fp, bwd_gemm=bw, bwd_point=bp)


def embedding_phase(ctx: Ctx, vocab_local: int, hidden: int, grad_bytes: int, learned_positions: bool,
                    trainable: bool) -> Phase:
    """Embedding lookup (forward: a gather, 2·c bytes per element; learned positions add an add) and its
    backward (embedding_dense_backward: a zeroed V_local×h gradient plus a scatter-add of the tokens)."""
    hbm = ctx.dev.hbm_bytes_per_s
    per_token = (2 * ctx.c + (3 * ctx.c if learned_positions else 0)) * hidden
    fwd = pointwise_seconds(per_token * ctx.tokens, 2, hbm)
    bwd = pointwise_seconds(grad_bytes * vocab_local * hidden + 3 * 4 * ctx.tokens * hidden, 2, hbm) if trainable else 0.0
    return Phase(fwd_point=fwd, bwd_point=bwd)

