"""FLOPs of a transformer, per layer and per token: the matmuls of each layer (GQA, MLA, gated and plain
MLPs, MoE with top-k routed and shared experts, the router), the attention core, the LM head.

Conventions as in ``trainmem.model.spec``. A matmul of an (m×k) by a (k×n) matrix is 2·m·k·n FLOPs;
training runs each weight matmul three times (forward, input gradient, weight gradient) — Megatron-LM
``megatron/training/training.py`` ``num_floating_point_operations`` ("3x: each GEMM … forward, backward
wgrad, backward dgrad"; "2x: a GEMM of m×n by n×k needs 2mnk FLOPs").

Model FLOPs (what MFU divides by) follow PaLM (Chowdhery et al. 2022, Appendix B): 6·N per token for
the N weights that take part in a matmul (the embedding lookup is no matmul; the LM head is) plus
12·L·H·Q·T for attention (here 6·s·a·(d_qk + d_v) per layer, = 12·s·a·d when d_qk = d_v), with no
discount for the causal mask (as torchtitan's ``get_dense_model_nparams_and_flops``). The same
accounting reproduces Narayanan et al. 2021 (eq. 3, without recomputation: 72·B·s·l·h²·(1 + s/(6h) +
V/(12·l·h))) exactly for GPT models; tests/perf/test_flops.py checks both.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainmem.memory.layers.family import layer_family
from trainmem.model.spec import ModelSpec, attention_layer_types

__all__ = ["sliding_layer_share", "attention_keys_model", "Linear", "attention_linears", "mlp_linears", "moe_linears", "layer_linears", "head_linear",
           "matmul_params_per_token", "attention_keys_per_query", "attention_forward_flops_per_token",
           "model_flops_per_token", "narayanan_flops_per_iteration", "linear_flops"]

_FUSED_QKV_UNDESCRIBED = ("bloom",)
"""Fused-qkv families with no layer description (measured from transformers: model/derive.py): BloomAttention's
``query_key_value``. The described ones say so in ``memory/layers/family.py`` (``fused_qkv_linear``)."""


@dataclass(frozen=True, slots=True)
class Linear:
    """One weight matmul of a layer: input width k, output width n (whole model, before TP)."""

    name: str
    """HF module name (PEFT target name): q_proj, k_proj, … ; Megatron's fused ones: qkv, fc1."""
    k: int
    n: int
    split: str
    """``col``: n is split over TP ranks; ``row``: k is; ``rep``: replicated (MLA down-projections, router)."""
    group: str
    """``attn`` | ``mlp`` | ``shared`` | ``expert`` | ``router``."""
    count: int = 1
    """Routed experts: how many experts of this shape the layer has."""

    def local(self, tp: int) -> tuple[int, int]:
        """(k, n) on one TP rank."""
        if self.split == "col":
            return self.k, max(self.n // tp, 1)
        if self.split == "row":
            return max(self.k // tp, 1), self.n
        return self.k, self.n


def linear_flops(tokens: int, k: int, n: int) -> float:
    """Forward FLOPs of a linear over ``tokens`` rows: 2·tokens·k·n."""
    return 2.0 * tokens * k * n


def attention_linears(spec: ModelSpec, fused: bool) -> tuple[Linear, ...]:
    """q/k/v/o projections (GQA: k and v of num_kv_heads), or MLA's low-rank projections (DeepSeek-V2/V3:
    q_a (h→q_lora, replicated), q_b (q_lora→a·d), kv_a (h→kv_lora + rope, replicated), kv_b
    (kv_lora→a·(nope + v)), o). ``fused``: one qkv matmul (Megatron linear_qkv; HF gpt2/neox/falcon/phi3)."""
    h, a, kv, d, dv = spec.hidden_size, spec.num_attention_heads, spec.num_kv_heads, spec.head_dim, spec.v_head_dim
    o = Linear("o_proj", a * dv, h, "row", "attn")
    if spec.kv_lora_rank is not None:
        rope, nope = spec.qk_rope_head_dim or 0, spec.qk_nope_head_dim or 0
        q = (Linear("q_proj", h, a * d, "col", "attn"),) if spec.q_lora_rank is None else (
            Linear("q_a_proj", h, spec.q_lora_rank, "rep", "attn"), Linear("q_b_proj", spec.q_lora_rank, a * d, "col", "attn"))
        return (*q, Linear("kv_a_proj_with_mqa", h, spec.kv_lora_rank + rope, "rep", "attn"),
                Linear("kv_b_proj", spec.kv_lora_rank, a * (nope + dv), "col", "attn"), o)
    if fused or layer_family(spec).fused_qkv_linear or spec.model_type in _FUSED_QKV_UNDESCRIBED:
        return (Linear("qkv", h, a * d + kv * d + kv * dv, "col", "attn"), o)
    return (Linear("q_proj", h, a * d, "col", "attn"), Linear("k_proj", h, kv * d, "col", "attn"),
            Linear("v_proj", h, kv * dv, "col", "attn"), o)


def mlp_linears(spec: ModelSpec, width: int, group: str, fused: bool) -> tuple[Linear, ...]:
    """Dense MLP of ``width``: gated (gate, up, down; fused gate+up = Megatron fc1, phi3 gate_up_proj) or
    plain (up, down)."""
    h = spec.hidden_size
    if width <= 0:
        return ()
    down = Linear("down_proj", width, h, "row", group)
    if not spec.mlp_gated:
        return (Linear("up_proj", h, width, "col", group), down)
    if fused or layer_family(spec).fused_gate_up:
        return (Linear("gate_up_proj", h, 2 * width, "col", group), down)
    return (Linear("gate_proj", h, width, "col", group), Linear("up_proj", h, width, "col", group), down)


def moe_linears(spec: ModelSpec, fused: bool) -> tuple[Linear, ...]:
    """A MoE block: router (h→E, replicated), the routed experts (E of them, gated, moe_intermediate_size),
    the shared expert(s) (one MLP of shared_expert_intermediate_size = DeepSeek's n_shared ·
    moe_intermediate_size)."""
    h, e, w = spec.hidden_size, spec.num_experts, spec.moe_intermediate_size
    experts = tuple(Linear(x.name, x.k, x.n, x.split, "expert", e) for x in mlp_linears(spec, w, "expert", fused))
    return (Linear("router", h, e, "rep", "router"), *experts,
            *mlp_linears(spec, spec.shared_expert_intermediate_size, "shared", fused))


def layer_linears(spec: ModelSpec, moe: bool, fused: bool) -> tuple[Linear, ...]:
    """All weight matmuls of one decoder layer (dense or MoE)."""
    mlp = moe_linears(spec, fused) if moe else mlp_linears(spec, spec.intermediate_size, "mlp", fused)
    return attention_linears(spec, fused) + mlp


def head_linear(spec: ModelSpec) -> Linear:
    """The LM head h → V (vocab-parallel: split over TP), or the classification head."""
    return Linear("lm_head", spec.hidden_size, spec.output_size, "col", "head")


def matmul_params_per_token(spec: ModelSpec) -> float:
    """Weights one token multiplies by in a forward: every layer's matmul weights, routed experts scaled
    by top-k / E, plus the LM head (tied or not): the N of 6·N."""
    total = 0.0
    moe_layers = set(spec.moe_layer_indices)
    dense = sum(x.k * x.n for x in layer_linears(spec, False, True))
    for i in range(spec.num_layers):
        if i not in moe_layers:
            total += dense
            continue
        for x in layer_linears(spec, True, True):
            frac = spec.num_experts_per_tok / spec.num_experts if x.group == "expert" else 1.0
            total += x.k * x.n * x.count * frac
    return total + spec.hidden_size * spec.output_size


def attention_keys_per_query(seq_len: int, causal: bool, window: int | None = None) -> float:
    """Keys each query attends to on average: s (bidirectional or the full square an eager kernel
    computes), (s + 1)/2 causal, and with a sliding window w < s: w − w·(w − 1)/(2s)."""
    if not causal:
        return float(seq_len)
    if window is not None and window < seq_len:
        return window - window * (window - 1) / (2.0 * seq_len)
    return (seq_len + 1) / 2.0


def attention_forward_flops_per_token(spec: ModelSpec, keys_per_query: float) -> float:
    """QKᵀ and P·V of one layer for one query token: 2·keys·a·d_qk + 2·keys·a·d_v."""
    a = spec.num_attention_heads
    return 2.0 * keys_per_query * a * (spec.head_dim + spec.v_head_dim)


def sliding_layer_share(spec: ModelSpec) -> float:
    """Share of the decoder layers whose attention is over the sliding window (the others attend over the whole
    causal range; trainmem.model.spec.attention_layer_types); 0 without a window."""
    types = attention_layer_types(spec)
    if not spec.sliding_window or not types:
        return 0.0
    return types.count("sliding_attention") / len(types)


def attention_keys_model(spec: ModelSpec, seq_len: int) -> float:
    """Keys per query averaged over the layers for the model FLOPs (no causal discount): the window on the
    sliding layers, the sequence on the others."""
    if not spec.sliding_window:
        return float(seq_len)
    share = sliding_layer_share(spec)
    return share * min(seq_len, spec.sliding_window) + (1.0 - share) * seq_len


def model_flops_per_token(spec: ModelSpec, seq_len: int) -> float:
    """PaLM model FLOPs per trained token (forward + backward, no recomputation): 6·N +
    6·L·s·a·(d_qk + d_v) (no causal discount; a sliding layer counts its window: :func:`attention_keys_model`)."""
    keys = attention_keys_model(spec, seq_len)
    return 6.0 * matmul_params_per_token(spec) + 3.0 * spec.num_layers * attention_forward_flops_per_token(spec, keys)


def narayanan_flops_per_iteration(batch: int, seq_len: int, layers: int, hidden: int, vocab: int,
                                  recompute: bool) -> float:
    """Narayanan et al. 2021 (arXiv 2104.04473) eq. 3: F = 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)) with
    activation recomputation (4 passes), 72·B·s·l·h²·(1 + s/(6h) + V/(12·l·h)) without; GPT with a 4h MLP."""
    b, s, l, h, v = batch, seq_len, layers, hidden, vocab
    if recompute:
        return 96.0 * b * s * l * h * h * (1 + s / (6.0 * h) + v / (16.0 * l * h))
    return 72.0 * b * s * l * h * h * (1 + s / (6.0 * h) + v / (12.0 * l * h))
