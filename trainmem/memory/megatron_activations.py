"""What one Megatron-Core decoder layer saves for backward, from what its Transformer Engine modules save.

The ``megatron`` engine runs Megatron-Core's GPT layer built from the Transformer Engine spec
(``get_gpt_layer_with_transformer_engine_spec``, megatron/core/models/gpt/gpt_layer_specs.py @ core_v0.19.0,
5be9626709): the input norm is fused into ``linear_qkv`` and, in dense layers, the pre-MLP norm into
``linear_fc1`` (TE ``LayerNormLinear``); ``linear_proj`` / ``linear_fc2`` are TE ``Linear``; core attention is
TE ``DotProductAttention``; the gated activation is Megatron's fused SwiGLU; residual adds are
``bias_dropout_add`` (nothing saved at dropout 0). What each keeps, read from the sources (Megatron-LM
core_v0.19.0; TransformerEngine v2.9, 70f536662a):

- ``LayerNormLinear`` (transformer_engine/pytorch/module/layernorm_linear.py L448-458,
  ``prepare_for_saving(inputmat, weightmat, weight, bias, ln_weight, ln_out, mu, rsigma)``): the norm's
  input in the activation dtype (no fp32 copy), the normalised output ``ln_out`` (16-bit; under fp8 the
  quantized Float8Tensor, columnwise data only after the GEMM, L405-415: 1 B), fp32 ``rsigma`` per row
  (and ``mu`` for LayerNorm). With sequence parallelism the local shard of ``ln_out`` is kept and the
  gathered copy freed (L365-367).
- ``Linear`` (module/linear.py L371-390, L423-429): its input, 16-bit, or under fp8 its own quantized copy
  (columnwise only, 1 B) with the 16-bit input left to whoever else holds it.
- ``DotProductAttention``: on Hopper and newer the cuDNN ``FusedAttention`` backend is preferred
  (attention/dot_product_attention/utils.py L1119-1124); ``FusedAttnFunc`` saves q, k, v, out and
  ``softmax_lse`` (+ rng state) (backends.py L1247-1318). q, k, v are contiguous: rotary makes new q and k,
  and the v view of the fused qkv output fails the kv stride check and is copied (utils.py L2001-2003), so
  the fused qkv output is not kept. The ``FlashAttention`` backend (``--attention-backend flash``; ``auto``
  before Hopper) keeps the same plus linear_proj's contiguous (s, b, h) copy of the output
  (backends.py L1070 ``output.contiguous()``). ``UnfusedDotProductAttention`` (``unfused``; fp32, which the
  fused kernels do not take) repeats k/v to every head for GQA (backends.py L350-359) and keeps the
  softmax output (16-bit ``ScaledMaskedSoftmax`` where ``is_kernel_available``, softmax.py L188-221;
  else torch's fp32 softmax and its 16-bit cast), the dropout mask and output, and the contiguous context.
- Megatron's fused SwiGLU ``SwiGLUFunction`` saves only its input, the fc1 output of width 2·i
  (megatron/core/fusions/fused_bias_swiglu.py L166; ``activation_func_fp8_input_store`` defaults to False,
  transformer_config.py L220); ``bias_gelu`` saves its input (fused_bias_gelu.py L40); an unfused GeLU
  under ``jit_fuser`` (torch.compile, megatron/core/jit.py) keeps its input as well.
- fp8 (``--fp8-recipe delayed``, Megatron's default, transformer_config.py L573-575): linear_proj saves its
  own fp8 copy of the attention output beside the one FusedAttention keeps; only non-delayed recipes set
  ``save_original_input`` (attention.py L427-443).
- MoE layers: the pre-MLP norm is a separate TE ``RMSNorm``/``LayerNorm`` (saves its input and rstdevs,
  ops/basic/rmsnorm.py L202); the router keeps the normalised input; the grouped experts' fc1 keeps the
  dispatched tokens (module/grouped_linear.py L198-231), the weighted SwiGLU its input and the per-token
  probs (fused_bias_swiglu.py L195-197, experts.py L827-834: probs are applied in the activation, so the
  unpermute keeps no expert output), fc2 its input. The router / dispatcher buffers are those of
  :func:`trainmem.memory.layers.mlp.moe_terms`.

Korthikanti et al. 2022 §4 (34·s·b·h + 5·a·s²·b) is this with LayerNorm, GeLU MLP (i = 4h), MHA, unfused
attention and dropout in 16 bits; Llama-style layers with flash/fused attention keep far less (no s² term,
no fp32 norm copies, one tensor of width 2i instead of HF's four of width i).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainmem.memory.layers.base import LAYER_MODELS, LayerModel, LayerSaved, Term, compute_bytes, residual_bytes
from trainmem.memory.layers.family import layer_family
from trainmem.memory.layers.mlp import moe_terms
from trainmem.model.spec import ModelSpec

if TYPE_CHECKING:  # (annotations only: no import of trainmem.setup, which validates with this module)
    from trainmem.setup import TrainingSetup

__all__ = ["megatron_te_layer", "megatron_layer_saved", "te_attention_backend",
           "layernorm_linear_norm_saved_bytes_per_token", "te_linear_input_saved_bytes_per_token",
           "attention_heads_saved_bytes_per_token",
           "softmax_lse_saved_bytes_per_token", "linear_proj_input_copy_bytes_per_token",
           "unfused_softmax_saved_bytes_per_token", "attention_dropout_saved_bytes_per_token",
           "fused_activation_input_saved_bytes_per_token",
           "dropout_mask_bytes_per_token", "core_attention_checkpoint_inputs_bytes_per_token"]

#: Kept whole on every tensor-parallel rank: the alltoall dispatcher all-gathers the dispatched tokens over
#: the (expert) tensor-parallel group before the experts (token_dispatcher.py core_v0.19.0 L734-742).
_GATHERED_OVER_TP = ("expert_inputs",)
#: Hopper and newer: TE prefers FusedAttention (utils.py L1119-1124); older GPUs run flash-attn.
_HOPPER_PLUS_PREFIXES = ("H100", "H200", "H800", "H20", "GH200", "B100", "B200", "B300", "GB200", "GB300")


def megatron_te_layer(spec: ModelSpec) -> bool:
    """Whether ``spec``'s decoder layer is a Megatron-Core TE GPT layer (pre-norm, sequential residual,
    standard or GQA attention, dense or routed MLP) that :func:`megatron_layer_saved` describes. Not: MLA, a
    parallel residual, an encoder, soft-capping, a family whose description says so
    (``LayerFamily.hf_terms_under_megatron``: Gemma's norms, Qwen3's q/k norms), a derived family (no described
    layer; its megatron path is refused, trainmem/model/derive.py)."""
    return (spec.q_lora_rank is None and spec.kv_lora_rank is None and not spec.parallel_residual
            and not spec.is_encoder and spec.derived is None and not layer_family(spec).hf_terms_under_megatron
            and not spec.attn_logit_softcapping)


def te_attention_backend(setup: TrainingSetup) -> str:
    """TE's core-attention backend for ``--attention-backend`` (trainmem/export/megatron.py maps sdpa →
    auto, flash → flash, eager → unfused): ``fused`` | ``flash`` | ``unfused``. fp32 has no fused kernel
    (flash and cuDNN take 16-bit only) and runs unfused; ``auto`` is FusedAttention on Hopper+ and
    flash-attn before it (utils.py L1119-1124)."""
    if setup.attn == "eager" or compute_bytes(setup) == 4:
        return "unfused"
    if setup.attn == "flash":
        return "flash"
    return "fused" if setup.gpu.upper().startswith(_HOPPER_PLUS_PREFIXES) else "flash"


def layernorm_linear_norm_saved_bytes_per_token(hidden: int, input_elem_bytes: int, layernorm: bool) -> float:
    """The norm half of a TE ``LayerNormLinear`` (or a TE ``RMSNorm``/``LayerNorm``): its input in the
    activation dtype (``inputmat``, the residual stream, no fp32 copy) plus the fp32 ``rsigma`` row, and
    ``mu`` for LayerNorm (layernorm_linear.py v2.9 L208, L448-458; ops/basic/rmsnorm.py L202)."""
    return float(input_elem_bytes * hidden + (8 if layernorm else 4))


def te_linear_input_saved_bytes_per_token(width: int, elem_bytes: int, fp8: bool) -> float:
    """What a TE linear keeps of its GEMM input (``ln_out`` of LayerNormLinear, ``inputmat`` of Linear and
    GroupedLinear): 16-bit (or fp32) as computed, or under fp8 the Float8Tensor with only one usage's data
    kept (columnwise, or rowwise where it is all-gathered in backward): 1 B per element; its scale-inverse
    is one fp32 per tensor (layernorm_linear.py v2.9 L405-415; linear.py L371-390; grouped_linear.py
    L198-204)."""
    return float((1 if fp8 else elem_bytes) * width)


def attention_heads_saved_bytes_per_token(heads: int, head_dim: int, elem_bytes: int) -> float:
    """One per-head tensor the attention core keeps (q, k, v or the output), contiguous: FusedAttnFunc and
    flash-attn save q, k, v, out as passed (backends.py v2.9 L1247, L1309-1318; rotary makes new q and k,
    and the v view of linear_qkv's output fails the kv stride check and is copied, utils.py L2001-2003);
    the unfused path keeps k and v repeated to every head for GQA (``repeat_interleave``, backends.py
    L350-359). FusedAttention's sbhd output is also linear_proj's input (``output.view``, no copy)."""
    return float(elem_bytes * heads * head_dim)


def softmax_lse_saved_bytes_per_token(heads: int) -> float:
    """The fp32 log-sum-exp (b, a, s, 1) in FusedAttention's ``aux_ctx_tensors`` / flash-attn's
    ``softmax_lse`` (backends.py v2.9 L1411); the rng state is a few bytes per call."""
    return 4.0 * heads


def linear_proj_input_copy_bytes_per_token(heads: int, v_head_dim: int, elem_bytes: int, backend: str,
                                           fp8: bool) -> float:
    """linear_proj's own saved input beyond what the attention core keeps: under fp8 (delayed scaling) its
    1-B quantized copy (linear.py v2.9 L224-228, L371-390; ``save_original_input`` only for other recipes,
    attention.py core_v0.19.0 L427-443); else the flash backend's contiguous output copy (backends.py
    L1070) and the unfused backend's contiguous context (backends.py L530-545), 0 for FusedAttention."""
    if fp8:
        return float(heads * v_head_dim)
    return 0.0 if backend == "fused" else float(elem_bytes * heads * v_head_dim)


def unfused_softmax_saved_bytes_per_token(heads: int, seq_k: int, elem_bytes: int, dropout: float) -> float:
    """UnfusedDotProductAttention's softmax per query token: ``FusedScaleMaskSoftmax`` keeps its 16-bit
    output where the fused kernel is available (16-bit input, 16 < s_k < 16384, s_k % 8 == 0: softmax.py
    v2.9 L188-221; ``ScaledMaskedSoftmax`` saves ``softmax_results``, L79); otherwise torch's softmax keeps
    its fp32 output (L250-270) and, without attention dropout, the bmm keeps its 16-bit cast."""
    if elem_bytes == 2 and 16 < seq_k < 16384 and seq_k % 8 == 0:
        return float(elem_bytes * heads * seq_k)
    return (4.0 + (elem_bytes if elem_bytes == 2 and dropout <= 0 else 0.0)) * heads * seq_k


def attention_dropout_saved_bytes_per_token(heads: int, seq_k: int, elem_bytes: int, p: float) -> tuple[float, float]:
    """(mask, output) of the unfused path's attention dropout per query token: ``native_dropout`` keeps a
    bool mask, the probs·v bmm keeps the dropped probabilities (backends.py v2.9 L498-524); nothing at
    p = 0. With the 16-bit softmax this is Korthikanti's 5·a·s²·b (2 + 1 + 2)."""
    return (1.0 * heads * seq_k, float(elem_bytes * heads * seq_k)) if p > 0 else (0.0, 0.0)


def fused_activation_input_saved_bytes_per_token(width: int, gated: bool, elem_bytes: int) -> float:
    """Megatron's fused activation keeps only its input, the fc1 output: 2·i for SwiGLU/GeGLU
    (fused_bias_swiglu.py core_v0.19.0 L166 ``ctx.save_for_backward(input_for_backward)``), i for GeLU
    (fused_bias_gelu.py L40). The product (fc2's input) is counted by fc2."""
    return float(elem_bytes * (2 * width if gated else width))


def dropout_mask_bytes_per_token(hidden: int, p: float, sites: int = 2) -> float:
    """``bias_dropout_add`` after linear_proj and fc2: a bool mask per site when p > 0; at p = 0
    ``F.dropout`` returns its input and keeps nothing (fused_bias_dropout.py)."""
    return float(sites * hidden) if p > 0 else 0.0


def core_attention_checkpoint_inputs_bytes_per_token(spec: ModelSpec, elem_bytes: int) -> float:
    """Selective recompute (``--recompute-granularity selective``, core_attn): ``tensor_parallel.checkpoint``
    saves the core's inputs as Megatron passes them (attention.py core_v0.19.0 L445-496): rotary's new q and
    k, and v, a view of linear_qkv's fused output that keeps the whole (a + 2·kv)·d buffer alive
    (``SplitAlongDim``, attention.py L1899-1903); without rotary q and k are views of it too."""
    a, kv, d, dv = spec.num_attention_heads, spec.num_kv_heads, spec.head_dim, spec.v_head_dim
    fused_out = a * d + kv * d + kv * dv
    rotary = (a * d + kv * d) if spec.position == "rope" else 0
    return float(elem_bytes * (fused_out + rotary))


def megatron_layer_saved(spec: ModelSpec, setup: TrainingSetup, layer_idx: int, *, fp8: bool = False,
                         core_attention_recomputed: bool = False) -> LayerSaved:
    """Bytes one Megatron-Core TE layer keeps for backward for one micro-batch on this rank, by term;
    ``fp8``: TE linears under fp8_autocast; ``core_attention_recomputed``: selective recompute. Terms that
    are sequence-local (norms, their GEMM inputs, dropout masks) are ÷ tp under sequence parallelism, the
    rest ÷ tp by tensor-parallel sharding; tokens ÷ cp."""
    T = setup.micro_batch * setup.seq_len // setup.cp
    s = setup.seq_len // setup.cp
    h, a, kv = spec.hidden_size, spec.num_attention_heads, spec.num_kv_heads
    d, dv = spec.head_dim, spec.v_head_dim
    c, r = compute_bytes(setup), residual_bytes(setup)
    ln = spec.norm == "layernorm"
    backend = te_attention_backend(setup)
    terms: list[Term] = []

    def add(name: str, component: str, per_token: float, tp_split: bool = True) -> None:
        terms.append(Term(name, component, int(round(per_token * T)), tp_split))

    # --- attention: linear_qkv (LayerNormLinear), core attention, linear_proj -----------------------
    add("input_norm", "norm", layernorm_linear_norm_saved_bytes_per_token(h, r, ln), tp_split=False)
    add("qkv_input", "attention", te_linear_input_saved_bytes_per_token(h, c, fp8), tp_split=False)
    o_copy = linear_proj_input_copy_bytes_per_token(a, dv, c, backend, fp8)
    if core_attention_recomputed:
        add("core_attention_inputs", "attention", core_attention_checkpoint_inputs_bytes_per_token(spec, c))
        if not o_copy:  # linear_proj's input is the (recomputed) core's output itself
            add("attn_out", "attention", attention_heads_saved_bytes_per_token(a, dv, c))
    elif backend == "unfused":
        # q and k kept by the scores' baddbmm, v (repeated to every head for GQA) by probs·v
        add("q", "attention", attention_heads_saved_bytes_per_token(a, d, c))
        add("k_repeated", "attention", attention_heads_saved_bytes_per_token(a, d, c))
        add("v_repeated", "attention", attention_heads_saved_bytes_per_token(a, dv, c))
        p_attn = spec.attention_dropout
        add("probs", "attention", unfused_softmax_saved_bytes_per_token(a, s, c, p_attn))
        mask, dropped = attention_dropout_saved_bytes_per_token(a, s, c, p_attn)
        if p_attn > 0:
            add("attn_dropout_mask", "attention", mask)
            add("attn_dropout_out", "attention", dropped)
    else:
        add("q", "attention", attention_heads_saved_bytes_per_token(a, d, c))
        add("k", "attention", attention_heads_saved_bytes_per_token(kv, d, c))
        add("v", "attention", attention_heads_saved_bytes_per_token(kv, dv, c))
        add("attn_out", "attention", attention_heads_saved_bytes_per_token(a, dv, c))
        add("logsumexp", "attention", softmax_lse_saved_bytes_per_token(a))
    if o_copy:
        add("o_input", "attention", o_copy)
    # --- MLP: linear_fc1 (LayerNormLinear), fused activation, linear_fc2 (Linear); or the MoE block ----
    if layer_idx in spec.moe_layer_indices:
        _moe_megatron_terms(spec, setup, add, fp8=fp8)
    else:
        i = spec.intermediate_size
        add("post_attention_norm", "norm", layernorm_linear_norm_saved_bytes_per_token(h, r, ln), tp_split=False)
        add("mlp_input", "mlp", te_linear_input_saved_bytes_per_token(h, c, fp8), tp_split=False)
        add("mlp_act_input", "mlp", fused_activation_input_saved_bytes_per_token(i, spec.mlp_gated, c))
        add("mlp_down_input", "mlp", te_linear_input_saved_bytes_per_token(i, c, fp8))
    if spec.hidden_dropout > 0:
        add("dropout_masks", "dropout", dropout_mask_bytes_per_token(h, spec.hidden_dropout), tp_split=False)
    def tp_div(t: Term) -> int:
        if t.name in _GATHERED_OVER_TP:
            return 1
        return setup.tp if (setup.sp or t.tp_split) else 1

    return LayerSaved(tuple(Term(t.name, t.component, t.bytes // tp_div(t), t.tp_split) for t in terms))


def _moe_megatron_terms(spec: ModelSpec, setup: TrainingSetup, add, *, fp8: bool) -> None:
    """MoE block: separate pre-MLP TE norm, router on its output, TEGroupedMLP experts (k slots per token;
    ÷ ep does not change the tokens this rank processes), optional shared expert (a dense MLP of TE linears
    reading the same normalised input)."""
    h, c, r = spec.hidden_size, compute_bytes(setup), residual_bytes(setup)
    k, mi = spec.num_experts_per_tok, spec.moe_intermediate_size
    add("post_attention_norm", "norm", layernorm_linear_norm_saved_bytes_per_token(h, r, spec.norm == "layernorm"),
        tp_split=False)
    # the router's gating linear keeps the normalised input (16-bit; not a TE fp8 linear) and the router /
    # dispatcher buffers as the transformers-derived model has them (layers.mlp.moe_terms)
    hf_terms: dict[str, float] = {}
    moe_terms(spec, setup, lambda name, comp, per_token, tp_split=True: hf_terms.__setitem__(name, per_token))
    add("moe_input", "experts", float(c * h), tp_split=False)
    add("router", "router", hf_terms["router"], tp_split=False)
    add("expert_inputs", "experts", te_linear_input_saved_bytes_per_token(k * h, c, fp8))
    # weighted SwiGLU: its input (2·mi per slot) and the fp32 per-slot probs
    add("expert_act_input", "experts", fused_activation_input_saved_bytes_per_token(k * mi, spec.mlp_gated, c) + 4.0 * k)
    add("expert_down_input", "experts", te_linear_input_saved_bytes_per_token(k * mi, c, fp8))
    if spec.num_shared_experts and spec.shared_expert_intermediate_size:
        si = spec.shared_expert_intermediate_size
        gate = (c * h + 4.0) if layer_family(spec).shared_expert_gate else 0.0  # sigmoid(gate(x)) * shared(x)
        fc1_copy = float(h) if fp8 else 0.0  # its fp8 copy of the shared normalised input
        add("shared_expert", "experts", fc1_copy + fused_activation_input_saved_bytes_per_token(si, spec.mlp_gated, c)
            + te_linear_input_saved_bytes_per_token(si, c, fp8) + gate)


def _layer(spec: ModelSpec, setup: TrainingSetup, layer_idx: int, fp8: bool) -> LayerSaved | None:
    if setup.engine != "megatron" or not megatron_te_layer(spec):
        return None
    return megatron_layer_saved(spec, setup, layer_idx, fp8=fp8 or setup.precision == "fp8")


def _checkpoint_input(spec: ModelSpec, setup: TrainingSetup) -> int | None:
    """TE LayerNormLinear keeps ``inputmat``, the layer's input; Megatron's CheckpointFunction recomputes from
    ``detach_variable`` of its saved inputs, which share their storage (megatron/core/tensor_parallel/random.py
    core_v0.19.0 ``CheckpointFunction.backward``): the checkpointed input, not allocated twice."""
    if setup.engine != "megatron" or not megatron_te_layer(spec):
        return None
    tokens = setup.micro_batch * setup.seq_len // setup.cp
    return residual_bytes(setup) * spec.hidden_size * tokens // (setup.tp if setup.sp else 1)


LAYER_MODELS.append(LayerModel(layer_saved=_layer, checkpoint_input_bytes=_checkpoint_input))
