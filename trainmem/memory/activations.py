"""What one decoder layer saves for backward, per micro-batch, derived from what the real modules save.

Each term is the bytes autograd keeps alive from a layer's forward until that layer's backward,
for ``T = micro_batch * seq_len / cp`` tokens on this rank. The terms were derived by reading the
``transformers`` modules (5.24) op by op and checked against ``saved_tensors_hooks`` / traces
(tests/memory/test_activations_measured.py). Notation: ``c`` = bytes of the compute dtype (2 for 16-bit
and autocast, 4 for fp32); ``r`` = bytes of the residual stream (4 under autocast and fp32, 2 for pure
16-bit); ``h`` hidden, ``a``/``kv`` heads, ``d``/``dv`` head dims, ``i`` MLP width.

Where the saving differs from Korthikanti et al. 2022 (34·s·b·h + 5·a·s²·b): HF blocks keep an fp32 copy
of the norm input and the normalised value (RMSNorm), gated MLPs keep 4 tensors of width ``i``, and
rotary/q/k/v/out are kept separately; HF Llama with sdpa keeps about 46·s·b·h, not 34.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from trainmem.model.spec import ModelSpec, attention_layer_types

if TYPE_CHECKING:  # (annotations only: no import of trainmem.setup, which validates with this module)
    from trainmem.setup import TrainingSetup

__all__ = ["Term", "LayerSaved", "LayerModel", "LAYER_MODELS", "layer_saved", "sdpa_math_fallback", "compute_bytes", "residual_bytes", "is_amp",
           "head_saved", "embedding_saved", "torch_cp", "plain_mlp_act_saved_per_elem", "relu2_backward_extra_per_elem",
           "plain_mlp_act_forward_extra_per_elem",
           "recomputed_checkpoint_input_bytes", "checkpoint_input_elem_bytes", "opt_post_ln", "opt_proj_adapter_bytes", "opt_embed_proj_dim", "opt_final_layer_norm", "fused_attention_backward_bytes", "model_wide_saved_bytes", "lora_shapes", "adapters_16bit", "lora_dropout_terms", "lora_input_requires_grad", "lora_recompute_frame_bytes",
           "lora_forward_frame_bytes", "lora_head_frame_bytes", "eager_softmax_bytes",
           "sink_attention_backward_bytes", "sink_attention_forward_peak_bytes", "gpt_oss_forward_peak_bytes",
           "gpt_oss_recompute_frame_bytes"]

_GEMMA_NORM_MODELS = ("gemma", "gemma2", "gemma3_text", "gemma3")


@dataclass(frozen=True, slots=True)
class Term:
    """One saved tensor (or group) of a layer: bytes for T tokens on this rank."""

    name: str
    component: str
    """attention | mlp | norm | experts | router | dropout | lora | weight_copies"""
    bytes: int
    tp_split: bool = True
    """Divided by tensor parallelism (inside the column/row-parallel region)."""


@dataclass(frozen=True, slots=True)
class LayerSaved:
    terms: tuple[Term, ...]

    @property
    def total_bytes(self) -> int:
        return sum(t.bytes for t in self.terms)

    def by_component(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for t in self.terms:
            out[t.component] = out.get(t.component, 0) + t.bytes
        return out


def _fsdp2_mixed(setup: TrainingSetup) -> bool:
    """FSDP2's MixedPrecisionPolicy(param_dtype=16-bit) gathers 16-bit parameters and runs the module
    in 16 bits without autocast: activations are those of a pure 16-bit model."""
    return setup.engine == "fsdp2" and setup.fsdp_applied and setup.precision in ("amp-bf16", "amp-fp16")


def tp_only_fp32(setup: TrainingSetup) -> bool:
    """fsdp2 with tensor parallelism alone (no fully_shard): torchtitan disables mixed precision ("Mixed
    precision training with TP or PP is only supported when FSDP/HSDP/CP is enabled", torchtitan
    distributed/utils.py ``maybe_enable_amp``), so an amp recipe computes in fp32 (traced: trace/tp.py)."""
    return setup.engine == "fsdp2" and not setup.fsdp_applied and setup.precision in ("amp-bf16", "amp-fp16")


def torch_cp(setup: TrainingSetup) -> bool:
    """fsdp2 context parallelism: torch's ring attention over SDPA, batches sharded as torchtitan 0.2.2 does
    (trainmem/memory/context_parallel.py; traced: trace/cp.py)."""
    return setup.cp > 1 and setup.engine == "fsdp2"


def is_amp(setup: TrainingSetup) -> bool:
    """torch.autocast over fp32 parameters (casts at every matmul)."""
    return setup.precision in ("amp-bf16", "amp-fp16") and not _fsdp2_mixed(setup) and not tp_only_fp32(setup)


def compute_bytes(setup: TrainingSetup) -> int:
    """Bytes per element of matmul inputs/outputs: 4 for fp32 (and fsdp2 TP-only amp, see tp_only_fp32), else 2."""
    return 4 if setup.precision == "fp32" or tp_only_fp32(setup) else 2


def residual_bytes(setup: TrainingSetup) -> int:
    """Bytes per element of the residual stream: fp32 params under autocast keep it fp32
    (embedding output and residual adds are not autocast ops); pure 16-bit models (and FSDP2 with a
    16-bit param_dtype) keep it 16-bit."""
    if _fsdp2_mixed(setup) or (setup.is_lora and setup.precision != "fp32"):
        return 2  # (LoRA: the frozen base is loaded in 16 bits, autocast recipes included: trace/lora.py)
    return 4 if setup.precision in ("fp32", "amp-bf16", "amp-fp16") else 2


def _norm_saved_per_elem(spec: ModelSpec, setup: TrainingSetup) -> float:
    """Bytes per normalised element a norm keeps for backward.

    - LlamaRMSNorm (modeling_llama.py): ``x.to(fp32)`` kept by ``pow`` (4 B; the input itself when
      already fp32) and ``x*rsqrt`` cast back to the input dtype, kept by ``weight *`` (r B): 4 + r.
    - GemmaRMSNorm: ``x.float()`` (4) and the fp32 normalised value kept by ``* (1 + w)`` (4): 8.
    - GptOssRMSNorm (modeling_gpt_oss.py @ 5.24.0): ``(self.weight * x_normed).to(input_dtype)``, the
      weight multiplying the fp32 normalised value before the cast back: 4 + 4 = 8, as Gemma's
      (:func:`_fp32_normalised_norm`).
    - nn.LayerNorm (native_layer_norm): its input (r B; fp32 under CUDA autocast, where layer_norm
      is an fp32 op, and the residual is fp32 already) plus mean/rstd (8 B per row, negligible).
    - NemotronLayerNorm1P (modeling_nemotron.py ``NemotronLayerNorm1P.forward``): under autocast
      ``_cast_if_autocast_enabled`` casts the input (and ``weight + 1``, bias) to the autocast dtype and
      ``F.layer_norm`` runs with autocast disabled, so native_layer_norm keeps that 16-bit cast (c B), not
      an fp32 input; otherwise its input as nn.LayerNorm (r B). Its weight and bias copies:
      :func:`_layernorm1p_weight_bytes`.
    """
    r = residual_bytes(setup)
    if spec.norm == "layernorm":  # (under autocast its input is cast to fp32 if not fp32 already)
        if is_amp(setup) and _layernorm1p(spec):
            return float(compute_bytes(setup)) + 8.0 / spec.hidden_size
        return float(4 if is_amp(setup) else r) + 8.0 / spec.hidden_size
    rows = 4.0 / spec.hidden_size  # rsqrt(variance + eps): one fp32 value per row, kept by the multiply
    if spec.model_type in _GEMMA_NORM_MODELS or _fp32_normalised_norm(spec):
        return 8.0 + rows
    return 4.0 + r + rows


def _layernorm1p(spec: ModelSpec) -> bool:
    """Nemotron's norms are ``NemotronLayerNorm1P`` (transformers/models/nemotron/modeling_nemotron.py @ 5.24):
    ``F.layer_norm(*_cast_if_autocast_enabled(device, input, shape, self.weight + 1.0, self.bias, eps))``
    inside ``maybe_autocast(enabled=False)``: under autocast the input, ``weight + 1`` and the bias are cast
    to the autocast dtype and the norm runs (and returns) in 16 bits."""
    return spec.model_type == "nemotron"


def _layernorm1p_weight_bytes(spec: ModelSpec, setup: TrainingSetup) -> int:
    """What one ``NemotronLayerNorm1P`` call keeps beyond its input and rows, independent of the tokens:
    native_layer_norm saves the weight and bias it was given (its backward takes both), and ``weight + 1.0``
    is a new h-sized tensor every forward. Without autocast that sum, in the parameters' compute dtype
    (c·h; the bias is the parameter itself); under autocast with fp32 parameters the 16-bit casts of the
    sum and of the bias (the fp32 sum is a temporary): 2·c·h; with LoRA's 16-bit frozen base the casts
    are no-ops and only the sum is new (c·h)."""
    n = 2 if (is_amp(setup) and not setup.is_lora) else 1
    return n * compute_bytes(setup) * spec.hidden_size


def _norm_output_shared(spec: ModelSpec, setup: TrainingSetup) -> bool:
    """Whether the linears reading a norm's output share one 16-bit tensor under autocast: Nemotron's
    LayerNorm1P returns its output in the autocast dtype already (:func:`_layernorm1p`), so autocast's
    linears cast nothing (``cached_cast`` returns a tensor already in the target dtype) and q/k/v_proj all
    keep that one output, where nn.LayerNorm's fp32 output is cast by each linear for itself."""
    return is_amp(setup) and _layernorm1p(spec)


def _fp32_normalised_norm(spec: ModelSpec) -> bool:
    """Whether the RMSNorm multiplies its weight into the fp32 normalised value and casts after it:
    ``GptOssRMSNorm.forward`` (transformers/models/gpt_oss/modeling_gpt_oss.py @ 5.24.0) returns
    ``(self.weight * hidden_states).to(input_dtype)`` with ``hidden_states`` the fp32 ``x * rsqrt(var +
    eps)``, so ``weight *`` keeps that fp32 tensor (4 B per element) besides the fp32 input copy (4 B), where
    Llama's casts first and keeps the normalised value in the input dtype."""
    return spec.model_type == "gpt_oss"


def te_fp8_linears(setup: TrainingSetup, fp8: bool) -> bool:
    """An fp8 run outside Megatron whose linears are Transformer Engine ``te.Linear`` (``--fp8-backend te``).
    Each one quantizes its own input and saves only that fp8 copy for the weight gradient, 1 B per element:
    TE v0.x–1.x ``_Linear.forward`` ``save_for_backward(inputmat_no_fp8 if ... not fp8_wgrad else None,
    inputmat_t if ... fp8_wgrad else None, weight, weight_t_fp8, ...)``; TE 2.x keeps the quantized input
    with its column-wise usage only (transformer_engine/pytorch/module/linear.py)."""
    return fp8 and setup.engine != "megatron" and setup.fp8_backend == "te"


def _linear_inputs_saved(setup: TrainingSetup, n_consumers: int, width: int, te_fp8: bool = False) -> float:
    """Bytes per token kept by the linears that read one norm output of ``width`` features.
    Pure/fp32: the one shared input tensor (r or c B). Autocast: each linear casts its input to
    16 bits itself (no cache for non-leaf tensors, aten/src/ATen/autocast_mode.h cached_cast), so
    every consumer keeps its own 2-byte copy. Transformer Engine linears (``te_fp8``): each its own fp8 copy."""
    if te_fp8:
        return 1.0 * n_consumers * width
    if is_amp(setup):
        return 2.0 * n_consumers * width
    return float(residual_bytes(setup) if setup.precision != "fp32" else 4) * width


def derived_mode(setup: TrainingSetup) -> str:
    """The precision class a derived layer description is measured in (trainmem/model/derive.py): ``amp``
    (fp32 parameters under autocast), ``fp32``, or ``16`` (16-bit compute: pure bf16/fp16, FSDP2's param_dtype)."""
    return "amp" if is_amp(setup) else ("fp32" if compute_bytes(setup) == 4 else "16")


def derived_attn(setup: TrainingSetup) -> str:
    """The attention a derived layer is measured with: flash-attn saves what CUDA's flash SDPA kernel saves
    (q, k, v, output, logsumexp), so ``flash`` is measured as ``sdpa``."""
    return "eager" if setup.attn == "eager" else "sdpa"


def _derived_first(fn: Callable[..., LayerSaved]) -> Callable[..., LayerSaved]:
    """``layer_saved`` of a family described from transformers itself (trainmem/model/derive.py): its measured
    parts, each ``constant + b·(α·s + β·s²)`` bytes; the described families go on to the hand-written terms."""
    @functools.wraps(fn)
    def wrapper(spec: ModelSpec, setup: TrainingSetup, layer_idx: int, *, fp8: bool = False) -> LayerSaved:
        if spec.derived is None:
            return fn(spec, setup, layer_idx, fp8=fp8)
        return LayerSaved(tuple(Term(p.name, p.component, p.bytes_for(setup.micro_batch, setup.seq_len), False)
                                for p in spec.derived.parts(derived_mode(setup), derived_attn(setup), setup.seq_len)))
    return wrapper


@dataclass(frozen=True, slots=True)
class LayerModel:
    """A layer formula that replaces the eager one where it applies: each function returns None elsewhere."""

    layer_saved: Callable[[ModelSpec, TrainingSetup, int, bool], LayerSaved | None]
    """(spec, setup, layer index, fp8) -> what the layer keeps, as :func:`layer_saved`."""
    checkpoint_input_bytes: Callable[[ModelSpec, TrainingSetup], int | None]
    """As :func:`recomputed_checkpoint_input_bytes` (recompute full)."""


LAYER_MODELS: list[LayerModel] = []
"""The layer formulas built on this module's terms that :func:`layer_saved` asks first:
torch.compile's (memory/compile.py) and Megatron-Core's TE layers (memory/megatron_activations.py). They register
themselves when imported (``trainmem.memory`` imports both), so this module imports neither (no import circle)."""


@_derived_first
def layer_saved(spec: ModelSpec, setup: TrainingSetup, layer_idx: int, *, fp8: bool = False) -> LayerSaved:
    """Bytes one layer keeps for backward for one micro-batch on this rank, by term (no recompute).

    Tensor/sequence/context parallelism are applied here: tp-split terms ÷ tp; with sp every term ÷ tp;
    tokens ÷ cp. ``fp8`` (or ``setup.precision == "fp8"``): the megatron engine's Transformer Engine
    linears save fp8 inputs. The megatron engine's layers are Megatron-Core + Transformer Engine's
    (:mod:`trainmem.memory.megatron_activations`) where that module describes the family.
    """
    for model in LAYER_MODELS:  # torch.compile's partitioner, Megatron-Core's TE layers (see LAYER_MODELS)
        got = model.layer_saved(spec, setup, layer_idx, fp8)
        if got is not None:
            return got
    T = setup.micro_batch * setup.seq_len // setup.cp
    s = setup.seq_len // setup.cp
    b = setup.micro_batch
    h, a, kv = spec.hidden_size, spec.num_attention_heads, spec.num_kv_heads
    d, dv = spec.head_dim, spec.v_head_dim
    c = compute_bytes(setup)
    r = residual_bytes(setup)
    amp = is_amp(setup)
    mt = spec.model_type
    terms: list[Term] = []

    def add(name: str, component: str, per_token: float, tp_split: bool = True) -> None:
        terms.append(Term(name, component, int(round(per_token * T)), tp_split))

    te = te_fp8_linears(setup, fp8)
    norm_elem = _norm_saved_per_elem(spec, setup)
    fused_qkv = mt in ("phi3", "gpt2", "gpt_neox", "falcon", "qwen")
    # --- attention block -----------------------------------------------------------------------
    add("input_norm", "norm", norm_elem * h, tp_split=False)
    if _layernorm1p(spec):  # input and post-attention LayerNorm1P: their weight + 1 (and bias) copies
        terms.append(Term("norm_weight_plus_one", "norm", 2 * _layernorm1p_weight_bytes(spec, setup), False))
    if spec.q_lora_rank is not None or spec.kv_lora_rank is not None:
        _mla_terms(spec, setup, add)
    else:
        one_input = fused_qkv or _norm_output_shared(spec, setup)
        add("qkv_input", "attention", _linear_inputs_saved(setup, 1 if one_input else 3, h, te), tp_split=False)
        if mt == "qwen3" or mt == "gemma3_text" or mt == "gemma3" or mt == "qwen3_moe":
            # q_norm/k_norm (RMSNorm over head_dim) on q and k: each keeps 4 + r B per element
            # the q/k projections' outputs are in the compute dtype (16-bit under autocast too): the
            # RMSNorm keeps an fp32 copy (4) and the normalised value cast back to it (c) per element
            add("qk_norm", "attention", ((4.0 + c if mt.startswith("qwen3") else 8.0) * d + 4.0) * (a + kv))
        _core_attention_terms(spec, setup, add, s=s, b=b)
        if te:
            _te_output_projection(terms, add, c, a * dv)
    # --- mlp block ----------------------------------------------------------------------------
    if spec.parallel_residual and mt == "gpt_neox":
        # both norms read the same residual tensor: the second keeps only its mean/rstd rows
        add("post_attention_norm", "norm", 8.0, tp_split=False)
    elif not spec.parallel_residual:
        add("post_attention_norm", "norm", norm_elem * h, tp_split=False)
    if mt in ("gemma2", "gemma3_text", "gemma3"):
        # post_attention_layernorm + post_feedforward_layernorm outputs feed residual adds: each keeps
        # its fp32 input copy and normalised value (8 B) on the attention and MLP outputs.
        add("post_sublayer_norms", "norm", 2 * 8.0 * h, tp_split=False)
    moe = layer_idx in spec.moe_layer_indices
    if moe:
        _moe_terms(spec, setup, add)
    else:
        _mlp_terms(spec, setup, add, spec.intermediate_size, te)
    _dropout_terms(spec, setup, add, s=s)
    if setup.is_lora:
        terms = _lora_terms(spec, setup, layer_idx, terms)
    if setup.qlora and setup.qlora_impl == "bnb-legacy":  # bitsandbytes < 0.43.2 keeps each 4-bit linear's input
        terms.append(_bnb_legacy_term(spec, setup, layer_idx, T))
    if setup.load_in_8bit:  # LLM.int8: MatMul8bitLt keeps A and CAt (memory/int8.py)
        from trainmem.memory.int8 import int8_saved_bytes_per_token
        keeps, frozen = setup.attn in ("sdpa", "flash") and not sdpa_math_fallback(spec, setup), layer_idx == 0 and not lora_input_requires_grad(setup)
        terms.append(Term("int8_matmul_saved", "mlp", int8_saved_bytes_per_token(spec, setup, layer_idx, keeps, frozen) * T, False))
    out: list[Term] = []
    for t in terms:
        # torch TP (fsdp2): PrepareModuleInput all-gathers the sequence-parallel norm output and the
        # ColwiseParallel linears save that gathered (Replicate) input, full sequence; Megatron's SP keeps
        # the shard and all-gathers it again in backward (traced: tests/trace/test_tp_trace.py)
        gathered = setup.engine == "fsdp2" and t.name in ("qkv_input", "mlp_input", "moe_input")
        div = setup.tp if ((setup.sp and not gathered) or t.tp_split) else 1
        out.append(Term(t.name, t.component, t.bytes // div, t.tp_split))
    return LayerSaved(tuple(out))


def _bnb_legacy_term(spec: ModelSpec, setup: TrainingSetup, layer_idx: int, tokens: int) -> Term:
    """``--qlora-impl bnb-legacy``: the 16-bit inputs bitsandbytes < 0.43.2's MatMul4Bit keeps
    (trainmem/memory/bnb_legacy.py); the attention output is already kept where the fused kernel saves it."""
    from trainmem.memory.bnb_legacy import legacy_matmul4bit_input_bytes_per_token
    keeps_out = setup.attn in ("sdpa", "flash") and not sdpa_math_fallback(spec, setup)
    frozen_input = layer_idx == 0 and not lora_input_requires_grad(setup)
    per_token = legacy_matmul4bit_input_bytes_per_token(spec, setup, layer_idx, keeps_out, frozen_input)
    return Term("bnb_legacy_matmul4bit_input", "mlp", per_token * tokens, False)


# Qwen1 without flash-attn (modeling_qwen.py ``QWenAttention.forward``, torch-2 branch): each layer expands the
# (b, 1, 1, s) padding mask to (b, 1, s, s) and ``masked_fill``s the causal part (compute dtype); SDPA takes it as
# ``attn_mask`` (the memory-efficient kernel), which keeps it for backward: c·s bytes a token per layer (measured
# against the block's ops: tests/memory/test_qwen1_bnb_legacy.py).
def _core_attention_terms(spec: ModelSpec, setup: TrainingSetup, add, *, s: int, b: int) -> None:
    """q/k/v/output of the attention core, by how each family's module builds them.

    - llama-style (separate q/k/v projections, full rotary): rotary makes new q and k; v is a view of
      v_proj's output; the kernel keeps q, k, v, out (+ fp32 logsumexp); o_proj reads the kernel output,
      which flash/efficient kernels already lay out as (b, s, a, d): no extra copy.
    - gpt2 (fused c_attn; training loop with use_cache=False): q, k, v are views of the fused output, so
      sdpa keeps the whole fused (b, s, 3h) tensor alive; eager reshapes them for bmm (copies) instead.
    - gpt_neox, phi3, qwen (Qwen1's c_attn; fused qkv, rotary): q and k are new (rotary cat), v a view of
      the fused output, which stays alive; dense reads a fresh contiguous copy of the attention output.
    Eager attention keeps the softmax output: fp32 (4 B per b·a·s² element) plus its 16-bit cast (2 B) in
    the llama-style ``softmax(..., dtype=float32).to(dtype)``; gpt2 and bert take softmax in the compute
    dtype (c B only).
    """
    h, a, kv, d, dv = spec.hidden_size, spec.num_attention_heads, spec.num_kv_heads, spec.head_dim, spec.v_head_dim
    c = compute_bytes(setup)
    mt = spec.model_type
    # Fused CUDA kernels allocate their output as (b, s, a, d): HF's transpose(1, 2).contiguous() is
    # free for every family under sdpa (a CPU run differs: its kernel follows q's strides). Eager
    # attention's matmul output is (b, a, s, d), so the transpose makes a real copy.
    if setup.attn in ("sdpa", "flash"):
        # transformers passes enable_gqa when there is no mask (causal, no padding) and head dims are
        # equal and <= 256 (integrations/sdpa_attention.py use_gqa_in_sdpa); otherwise repeat_kv expands k/v.
        gqa_native = setup.attn == "flash" or (d == dv and d <= 256 and not spec.is_encoder
                                               and not sliding_window_mask(spec, setup))
        kv_eff = kv if gqa_native else a
        if mt == "falcon" and spec.hf_config.get("new_decoder_architecture"):
            kv_eff = a  # _split_heads: torch.broadcast_to(key, query.shape).flatten() copies k/v per head
        if sdpa_math_fallback(spec, setup):
            # fp32 with enable_gqa: CUDA has no fused kernel for it and runs the math composite
            # (_scaled_dot_product_attention_math): it keeps q, k and v expanded to every head, the
            # fp32 probabilities (4 B per b·a·s² element) and the output.
            add("q", "attention", c * a * d)
            add("k_repeated", "attention", c * a * d)
            add("v_repeated", "attention", c * a * dv)
            add("softmax_fp32", "attention", 4.0 * a * s)
            add("attn_out", "attention", c * a * dv)
            return
        if mt == "gpt2":
            # q, k and v are all views of c_attn's output: sdpa keeps the fused (b, s, 3h) tensor
            add("qkv_fused_out", "attention", c * (a * d + 2 * kv * d))
        elif mt in ("gpt_neox", "phi3", "qwen"):
            # rotary makes new q and k; v stays a view of the fused output, which stays alive whole
            add("q", "attention", c * a * d)
            add("k", "attention", c * kv * d)
            add("qkv_fused_out", "attention", c * (a * d + 2 * kv * d))
            if mt == "qwen" and setup.attn == "sdpa":  # Qwen1 without flash-attn: its per-layer mask (note above)
                add("attn_mask", "attention", float(c) * s)
        else:
            add("q", "attention", c * a * d)
            add("k", "attention", c * kv_eff * d)
            add("v", "attention", c * kv_eff * dv)
        add("attn_out", "attention", c * a * dv)
        add("logsumexp", "attention", 4.0 * a)  # (b, a, s) fp32
        if torch_cp(setup) and setup.attn == "sdpa":
            # the ring's merged output is a new contiguous (b, a, s, d) tensor (_SDPAMerger.results after
            # _partial_update's torch.cat): HF's transpose(1, 2).contiguous() copies it, o_proj keeps the copy
            add("o_input", "attention", c * a * dv)
        return
    add("q", "attention", c * a * d)
    add("k_repeated", "attention", c * a * d)
    add("v_repeated", "attention", c * a * dv)
    if mt == "gpt_oss":
        _sink_softmax_terms(spec, setup, add, s=s)
        add("o_input", "attention", c * a * dv)
        return
    fp32_softmax = mt not in ("gpt2", "bert", "roberta", "falcon")
    if fp32_softmax:
        add("softmax_fp32", "attention", 4.0 * a * s)
        if c == 2:
            add("probs_16bit", "attention", 2.0 * a * s)
    else:
        add("probs", "attention", float(c) * a * s)
    if spec.attn_logit_softcapping:
        add("softcap_tanh", "attention", float(c) * a * s)
    if spec.attention_dropout > 0:
        add("attn_dropout_mask", "attention", 1.0 * a * s)
        add("attn_dropout_out", "attention", float(c) * a * s)
    add("o_input", "attention", c * a * dv)


def sink_softmax_bytes_per_token(spec: ModelSpec, setup: TrainingSetup, s: int) -> dict[str, float]:
    """What gpt_oss's eager attention keeps between its scores and P·V, in bytes per query token (all heads),
    keys ``s`` (transformers/models/gpt_oss/modeling_gpt_oss.py @ 5.24.0, ``eager_attention_forward``):

    - ``torch.cat([attn_weights, sinks], dim=-1)`` appends each head's learned sink logit as one more key
      column: the scores become (b, a, s, s + 1); ``cat`` keeps nothing;
    - ``combined_logits - combined_logits.max(dim=-1, keepdim=True).values``: ``max`` keeps its int64
      argmax, one per row of each head (8·a);
    - ``F.softmax(..., dtype=combined_logits.dtype)`` keeps its (b, a, s, s + 1) output in the scores' dtype
      (:func:`eager_softmax_bytes`): fp32 where adding the additive mask of an fp32 residual stream promotes
      the 16-bit autocast ``matmul`` scores (:func:`_sink_scores_promoted`), else the compute dtype;
    - ``probs[..., :-1]`` (the sink column dropped) is a view: without promotion ``.to(value dtype)`` is a
      no-op and the P·V ``matmul`` keeps that view (bmm takes the row stride s + 1; no copy, traced); promoted,
      ``.to`` makes the 16-bit (b, a, s, s) copy the matmul keeps (2·a·s).
    With attention dropout (p > 0) the dropout keeps its bool mask (a·s) and P·V the dropout output instead
    of the view (not promoted: c·a·s; promoted: still the 16-bit cast).

    Sliding-window layers (``sliding_window``) keep the same: the window is an additive mask over the full
    (s, s) scores, not a slice of them."""
    a = spec.num_attention_heads
    c = compute_bytes(setup)
    promoted = _sink_scores_promoted(setup)
    out = {"sink_max_indices": 8.0 * a}
    if eager_softmax_bytes(spec, setup) == 4:
        out["softmax_fp32"] = 4.0 * a * (s + 1)
        if promoted:
            out["probs_16bit"] = float(c) * a * s
    else:
        out["probs"] = float(c) * a * (s + 1)
    if spec.attention_dropout > 0:
        out["attn_dropout_mask"] = 1.0 * a * s
        if not promoted:
            out["attn_dropout_out"] = float(c) * a * s
    return out


def _sink_scores_promoted(setup: TrainingSetup) -> bool:
    """gpt_oss's eager scores become fp32 before its softmax: autocast's ``matmul`` gives 16-bit scores and
    the additive mask is in the residual stream's dtype (masking_utils.py ``eager_mask``, built in
    ``inputs_embeds.dtype``), fp32 with fp32 parameters: the sum is fp32. A 16-bit stream (pure 16-bit, FSDP2's
    16-bit param_dtype, LoRA's 16-bit base under autocast) keeps them 16-bit; fp32 runs compute in fp32."""
    return residual_bytes(setup) > compute_bytes(setup)


def eager_softmax_bytes(spec: ModelSpec, setup: TrainingSetup) -> int:
    """Bytes per element of eager attention's softmax output, which the s² gradients of its backward share
    (the probabilities' gradient and softmax's input gradient, ``plan.py`` ``attn_transient``): fp32 in the
    llama-style ``softmax(..., dtype=torch.float32)``; the compute dtype for gpt2/bert/roberta/falcon; gpt_oss
    softmaxes in the scores' own dtype, fp32 in fp32 runs and where the mask promotes them
    (:func:`_sink_scores_promoted`), else 16-bit (traced: its 16-bit backward holds two (b, a, s, s + 1) 16-bit
    gradients beyond what it saved)."""
    if spec.model_type == "gpt_oss":
        return max(compute_bytes(setup), residual_bytes(setup))
    return compute_bytes(setup) if spec.model_type in ("gpt2", "bert", "roberta", "falcon") else 4


def sink_attention_backward_bytes(spec: ModelSpec, setup: TrainingSetup) -> int:
    """gpt_oss under eager attention: the transient of the attention's backward beyond its saved tensors
    (``plan.py`` ``attn_transient``, spiked once o_proj's input, the 16-bit probabilities and v are released);
    0 for other families and attention implementations. Traced: the P·V backward's probabilities gradient,
    the ``probs[..., :-1]`` slice's backward (a zero-padded (b, a, s, s + 1) gradient), softmax's input
    gradient and the row maxima's backward (another zero-filled (b, a, s, s + 1) one, scattered into) are
    alive two at a time beyond the softmax output, which softmax's backward releases: 2·sm·b·a·s·(s + 1),
    sm the scores' dtype (:func:`eager_softmax_bytes`); later the q/k/v gradients, c·(a·d + 2·kv·d) per token,
    once the s² ones are gone. The gradient flowing into the attention block (c·h per token) is alive beside
    the gradient stream throughout."""
    if spec.model_type != "gpt_oss" or setup.attn != "eager":
        return 0
    T = setup.micro_batch * setup.seq_len // setup.cp
    h, a, kv, d = spec.hidden_size, spec.num_attention_heads, spec.num_kv_heads, spec.head_dim
    c = compute_bytes(setup)
    s_q, keys = setup.seq_len // setup.cp, setup.seq_len
    scores = 2 * eager_softmax_bytes(spec, setup) * setup.micro_batch * a * s_q * (keys + 1)
    return (c * T * h + max(c * T * (a * d + 2 * kv * d), scores)) // setup.tp


def sink_attention_forward_peak_bytes(spec: ModelSpec, setup: TrainingSetup) -> int:
    """gpt_oss under eager attention: the bytes a layer's own tensors reach at its attention's forward peak
    (the scores' subtraction and softmax); 0 for other families and attention implementations. Read from
    ``GptOssAttention.forward`` / ``eager_attention_forward`` (transformers/models/gpt_oss/modeling_gpt_oss.py
    @ 5.24.0), traced:

    - what the layer has saved by then: the input norm, q/k/v's inputs, q, the repeated k and v, the row
      maxima's indices and the softmax output (16-bit: ``probs``; autocast: ``softmax_fp32`` and the 16-bit
      copy ``probs_16bit``) (:func:`layer_saved`);
    - the masked scores ``attn_weights`` (a·s) and ``combined_logits`` minus its maxima (a·(s + 1)), both
      referenced until the function returns, in the scores' dtype (:func:`eager_softmax_bytes`);
    - locals nothing saves: the rotary k and v_proj's output (kv·d each, compute dtype); under autocast with an
      fp32 stream (:func:`_sink_scores_promoted`), where the fp32 cos/sin promote the rotary products, the fp32
      rotary q (a·d) and k (kv·d), the fp32 repeated k autocast's matmul cast from (a·d), and the decoder
      layer's fp32 norm output (h), of which each projection kept its own 16-bit cast.
    The tensors alive beside every layer's forward are :func:`gpt_oss_forward_frame_bytes`."""
    if spec.model_type != "gpt_oss" or setup.attn != "eager":
        return 0
    T = setup.micro_batch * setup.seq_len // setup.cp
    h, a, kv, d = spec.hidden_size, spec.num_attention_heads, spec.num_kv_heads, spec.head_dim
    c, sm, amp = compute_bytes(setup), eager_softmax_bytes(spec, setup), _sink_scores_promoted(setup)
    before_softmax = ("input_norm", "qkv_input", "q", "k_repeated", "v_repeated", "sink_max_indices",
                      "softmax_fp32", "probs_16bit", "probs")
    saved = sum(t.bytes for t in layer_saved(spec, setup, 0).terms if t.name in before_softmax)
    heads = sm * a * (2 * setup.seq_len + 1) + 2 * c * kv * d + (4 * (2 * a * d + kv * d) if amp else 0)
    norm_out = 4 * h * T // (setup.tp if setup.sp else 1) if amp else 0
    return saved + heads * T // setup.tp + norm_out


def gpt_oss_expert_tail_bytes_per_pair(h: int, ce: int) -> float:
    """What one (token, expert) pair holds at the end of gpt_oss's experts forward beyond what it saved
    (integrations/moe.py ``grouped_mm_experts_forward``, transformers 5.24.0), ``ce`` bytes per element: the
    down projection's gathered bias rows (``selected_biases``, a local until the function returns), the
    weighted output ``weighted_out`` and its un-permuted copy ``weighted_out[inv_perm]``: 3·ce·h."""
    return 3.0 * ce * h


def gpt_oss_forward_frame_bytes(spec: ModelSpec, setup: TrainingSetup) -> int:
    """gpt_oss: tensors alive beside a layer's own during the model's forward that no saved term counts:

    - with a 16-bit residual stream, where the input norm keeps its own fp32 copy, the decoder layer's input
      (its ``residual``) and the model's ``inputs_embeds``, r·h each (with an fp32 stream the norms keep those
      very tensors);
    - eager attention: the additive masks of ``GptOssModel.forward``'s ``causal_mask_mapping``, one
      (b, 1, s, s) tensor in the residual dtype per layer type of ``layer_types`` (``create_causal_mask`` /
      ``create_sliding_window_causal_mask`` → masking_utils.py ``eager_mask``), alive until the model's
      forward returns; under full recompute the checkpoint of layer 0 holds its own one to the end of the
      backward (:func:`model_wide_saved_bytes`), so only the others are forward-only here."""
    if spec.model_type != "gpt_oss":
        return 0
    T = setup.micro_batch * setup.seq_len // setup.cp
    r = residual_bytes(setup)
    stream = 2 * r * spec.hidden_size * T // (setup.tp if setup.sp else 1) if r != 4 else 0
    n_masks = len(set(attention_layer_types(spec))) - (1 if setup.recompute == "full" else 0)
    return stream + (n_masks * _gpt_oss_mask_bytes(setup) if setup.attn == "eager" else 0)


def gpt_oss_forward_peak_bytes(spec: ModelSpec, setup: TrainingSetup) -> int:
    """gpt_oss: the peak of one layer's forward above what was alive before the layer (``plan.fwd_tmp``,
    spiked at each layer's start): the forward frame (:func:`gpt_oss_forward_frame_bytes`) plus the larger of
    the eager attention's peak (:func:`sink_attention_forward_peak_bytes`) and the experts' tail, when all the
    layer's saved tensors exist (:func:`gpt_oss_expert_tail_bytes_per_pair`, k pairs per token); 0 for other
    families."""
    if spec.model_type != "gpt_oss":
        return 0
    T = setup.micro_batch * setup.seq_len // setup.cp
    moe_layer = spec.moe_layer_indices[0] if spec.moe_layer_indices else 0
    tail = gpt_oss_expert_tail_bytes_per_pair(spec.hidden_size, expert_dtype_bytes(setup))
    end = layer_saved(spec, setup, moe_layer).total_bytes + int(tail * spec.num_experts_per_tok * T) // setup.tp
    return gpt_oss_forward_frame_bytes(spec, setup) + max(sink_attention_forward_peak_bytes(spec, setup), end)


def gpt_oss_recompute_frame_bytes(spec: ModelSpec, setup: TrainingSetup, layer_idx: int) -> int:
    """gpt_oss under full (non-reentrant) recompute: the peak bytes beyond layer ``layer_idx``'s recomputed
    saved tensors while ``torch.utils.checkpoint`` recomputes it (traced); 0 for other families.

    The recomputation starts at the first backward node of the layer that unpacks a saved tensor: the
    un-permutation ``weighted_out[inv_perm]``, whose incoming gradient the sum over the k slots expanded to
    (T, k, h) and the ``.view(T·k, h)``'s backward made contiguous (ce·h per pair, alive throughout). Then the
    larger of:

    - the stop (the early stop once the last saved tensor, ``inv_perm``, is packed): the experts' down bias
      rows and ``weighted_out`` (ce·h each per pair) and the ``arange`` the inverse permutation was written
      from (8 B per pair), with the decoder layer's locals that no saved tensor is: with a 16-bit residual
      stream its ``residual`` (the attention's residual sum, r·h; an fp32 one is the post-attention norm's
      kept input), under autocast with an fp32 stream the fp32 post-attention norm output (4·h; the router
      keeps its own cast);
    - the recomputed attention's peak (:func:`sink_attention_forward_peak_bytes`, eager), reached before any
      of the MLP block's saved tensors exist.

    Eager attention: the checkpoints of layers 0..``layer_idx`` still hold their additive masks, one per layer
    type among them; layer 0's is in :func:`model_wide_saved_bytes`, the others are counted here."""
    if spec.model_type != "gpt_oss" or setup.recompute != "full":
        return 0
    T = setup.micro_batch * setup.seq_len // setup.cp
    h, r, k = spec.hidden_size, residual_bytes(setup), spec.num_experts_per_tok
    ce = expert_dtype_bytes(setup)
    sp_div = setup.tp if setup.sp else 1
    trigger = ce * h * k * T // setup.tp
    frame = (r * h if r != 4 else 0) + (4 * h if _sink_scores_promoted(setup) else 0)
    stop = (2 * ce * h + 8) * k * T // setup.tp + frame * T // sp_div
    saved = layer_saved(spec, setup, spec.moe_layer_indices[0] if spec.moe_layer_indices else 0).total_bytes
    masks = 0
    if setup.attn == "eager":
        masks = (len(set(attention_layer_types(spec)[:layer_idx + 1])) - 1) * _gpt_oss_mask_bytes(setup)
    return trigger + masks + max(stop, sink_attention_forward_peak_bytes(spec, setup) - saved)


def _gpt_oss_mask_bytes(setup: TrainingSetup) -> int:
    """One (b, 1, s, s) additive mask in the residual dtype (masking_utils.py ``eager_mask``)."""
    return setup.micro_batch * (setup.seq_len // setup.cp) * setup.seq_len * residual_bytes(setup)


def _sink_softmax_terms(spec: ModelSpec, setup: TrainingSetup, add, *, s: int) -> None:
    """gpt_oss's eager scores → probabilities (:func:`sink_softmax_bytes_per_token`)."""
    for name, per_token in sink_softmax_bytes_per_token(spec, setup, s).items():
        add(name, "attention", per_token)


def _te_output_projection(terms: list[Term], add, c: int, width: int) -> None:
    """A ``te.Linear`` output projection saves its own fp8 copy of the attention output (1 B), not the 16-bit
    tensor: the copy o_proj alone kept (``o_input``) goes; the attention kernel's own saved output stays."""
    for i, t in enumerate(terms):
        if t.name == "o_input":
            terms[i] = Term(t.name, t.component, t.bytes // c, t.tp_split)
            return
    add("o_input_fp8", "attention", 1.0 * width)


def sliding_window_mask(spec: ModelSpec, setup: TrainingSetup) -> bool:
    """Mistral-style sliding-window attention (mistral, mixtral, phi3; qwen2 with use_sliding_window):
    once the window does not cover the sequence, transformers builds an explicit (1, 1, s, s) boolean
    mask, so sdpa cannot use is_causal/enable_gqa: k and v are expanded to every head (repeat_kv) and
    CUDA runs the memory-efficient kernel, which keeps the mask."""
    sw = spec.sliding_window
    return (sw is not None and sw <= setup.seq_len // setup.cp and setup.attn == "sdpa"
            and spec.model_type in ("mistral", "mixtral", "phi3", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe"))


def fused_attention_backward_bytes(spec: ModelSpec, setup: TrainingSetup) -> int:
    """The fused SDPA kernel's backward beyond what the layer saved, at its peak (the walk's attention
    transient, spiked once o_proj's weight gradient exists and its saved input is gone), for T tokens:
    the attention output's gradient (c·a·dv, the kernel's ``grad_out``) and what the kernel allocates.

    - flash (16-bit, no mask, equal head dims ≤ 256; aten/src/ATen/native/transformers/cuda/flash_attn/
      flash_api.cpp ``mha_bwd``, torch 2.13, as emulated in trace/sdpa.py): ``dq`` (c·a·d), ``dk_expanded`` and
      ``dv_expanded`` at the full head count a (with GQA; dk/dv themselves without), the fp32
      ``dq_accum`` (b, s rounded up to 128, a, d rounded up to 8) and ``softmax_d`` (b, a, s₁₂₈), then, with
      GQA, ``sum_out`` into dk and dv (c·kv·d each) while the expanded ones are alive;
    - memory-efficient (fp32, or a mask, without GQA): dq, dk, dv and the fp32 ``delta`` (b, a, s).
    Used for nemotron and opt (traced: tests/trace/test_nemotron_opt_trace.py)."""
    b, s = setup.micro_batch, setup.seq_len // setup.cp
    T = b * s
    a, kv, d, dv = spec.num_attention_heads, spec.num_kv_heads, spec.head_dim, spec.v_head_dim
    c = compute_bytes(setup)
    grad_out = c * T * a * dv
    flash = c == 2 and d == dv <= 256 and not spec.is_encoder and not sliding_window_mask(spec, setup)
    if flash:
        s128 = -(-s // 128) * 128
        accum = 4 * b * s128 * a * (-(-d // 8) * 8) + 4 * b * a * s128
        grads = c * T * (a * d + 2 * a * d) + (2 * c * T * kv * d if kv != a else 0)
        return (grad_out + accum + grads) // setup.tp
    return (grad_out + c * T * (a * d + kv * d + kv * dv) + 4 * b * a * s) // setup.tp


def sdpa_math_fallback(spec: ModelSpec, setup: TrainingSetup) -> bool:
    """CUDA SDPA falls back to the math kernel for fp32 inputs with native GQA (flash needs 16-bit,
    the memory-efficient kernel has no enable_gqa): trace/sdpa.py ``cuda_backend``."""
    return (setup.attn == "sdpa" and compute_bytes(setup) == 4 and spec.num_kv_heads < spec.num_attention_heads
            and spec.head_dim == spec.v_head_dim <= 256 and not spec.is_encoder
            and spec.q_lora_rank is None and spec.kv_lora_rank is None)


def _mlp_terms(spec: ModelSpec, setup: TrainingSetup, add, width: int, te: bool = False) -> None:
    """``te``: Transformer Engine linears (``te_fp8_linears``): the down projection keeps a 1-B fp8 copy of its
    input in place of the 16-bit tensor it alone kept."""
    h = spec.hidden_size
    c = compute_bytes(setup)
    mt = spec.model_type
    down_in = 1.0 if te else float(c)
    if spec.mlp_gated:
        n_in = 1 if mt == "phi3" else 2
        add("mlp_input", "mlp", _linear_inputs_saved(setup, n_in, h, te), tp_split=False)
        # gate output (kept by the activation), act output and up output (kept by the product),
        # product (kept by down_proj): 4 tensors of width i.
        add("mlp_intermediate", "mlp", (3.0 * c + down_in) * width)
        return
    falcon_two_ln = mt == "falcon" and spec.hf_config.get("new_decoder_architecture") and \
        (spec.hf_config.get("num_ln_in_parallel_attn") or 2) == 2
    if falcon_two_ln:
        # ln_mlp reads the same residual as ln_attn (only its mean/rstd rows are new); its output feeds the MLP
        add("ln_mlp_stats", "norm", 8.0, tp_split=False)
    if not (spec.parallel_residual and mt == "falcon") or falcon_two_ln:
        add("mlp_input", "mlp", _linear_inputs_saved(setup, 1, h, te), tp_split=False)
    elif te:
        add("mlp_input", "mlp", 1.0 * h, tp_split=False)
    elif is_amp(setup):
        # one LayerNorm feeds attention and MLP: shared in 16-bit, but under autocast the MLP's first
        # linear casts its own 16-bit copy of the fp32 norm output
        add("mlp_input", "mlp", 2.0 * h, tp_split=False)
    if spec.hidden_act in ("relu", "relu2"):
        add("mlp_intermediate", "mlp", plain_mlp_act_saved_per_elem(spec, setup, te)[0] * width)
        return
    if spec.hidden_act in ("gelu_new",):
        if is_amp(setup):
            # Under CUDA autocast ``pow`` is an fp32 op: it keeps an fp32 copy of x (4), the rest of the
            # formula runs in fp32 (tanh output 4, 1+tanh 4), 0.5*x stays 16-bit (2), and fc2 keeps its
            # own 16-bit cast of the fp32 result (2): 16 B per element of width i.
            add("mlp_intermediate", "mlp", (14.0 + down_in) * width if te else 16.0 * width)
        else:
            # NewGELUActivation (activations.py): 0.5*x*(1+tanh(√(2/π)(x+0.044715x³))) keeps x, tanh(.),
            # 0.5*x and 1+tanh(.), then fc2 keeps the result: 5 tensors of width i.
            add("mlp_intermediate", "mlp", (4.0 * c + down_in) * width)
    else:
        # native gelu/relu keeps its input; fc2 keeps the activation output: 2 tensors.
        add("mlp_intermediate", "mlp", (c + down_in) * width)


def plain_mlp_act_saved_per_elem(spec: ModelSpec, setup: TrainingSetup, te: bool = False) -> tuple[float, float]:
    """A non-gated MLP with ``relu`` or ``relu2``: (bytes per element of its width i kept between fc1/up_proj
    and fc2/down_proj, of which only the output projection keeps: released by its backward, dropped when it is
    frozen), ``c`` the compute dtype.

    - ``relu`` (``ACT2FN["relu"]`` = nn.ReLU; OPT's ``OPTDecoderLayer.activation_fn``, modeling_opt.py):
      ``relu`` saves its *output* (derivatives.yaml: ``threshold_backward(grad, result, 0)``), and fc2 reads
      that very tensor (under autocast the 16-bit fc1 output stays 16-bit: no cast): one tensor, c·i, none of
      it fc2's alone. (Transformer Engine linears, ``te``: fc2 keeps its own fp8 copy, 1·i, beside it.)
    - ``relu2`` (``ReLUSquaredActivation.forward``, transformers/activations.py; Nemotron's ``NemotronMLP``):
      ``relu_applied = relu(x)`` kept by relu (its output) and by ``torch.square`` (``pow(self, 2)``'s backward
      takes ``self``), then ``squared`` kept by down_proj: 2·c·i, of which down_proj's alone c·i. Under CUDA
      autocast ``square`` is ``at::pow`` (CompositeImplicitAutograd), an fp32-list op: pow keeps an fp32 copy of
      relu's 16-bit output (4·i) and returns fp32; down_proj keeps its own 16-bit cast of it (2·i; the fp32
      square is a temporary): 2 + 4 + 2 = 8 B per element, 2 of them down_proj's alone. ``te``: down_proj's
      copy is 1 B."""
    c = compute_bytes(setup)
    down = 1.0 if te else float(c)
    if spec.hidden_act == "relu":
        return (c + (1.0 if te else 0.0)), (1.0 if te else 0.0)
    if is_amp(setup):
        return 2.0 + 4.0 + down, down
    return float(c) + down, down


def plain_mlp_act_forward_extra_per_elem(setup: TrainingSetup, spec: ModelSpec) -> int:
    """The forward peak of a non-gated ``relu`` / ``relu2`` MLP beyond all the layer's saved tensors, in bytes per
    element of its width (a checkpointed layer's forward spike, and a floor of every layer's): fc1/up_proj's
    output, which no saved tensor is, stays alive while the activation runs (nn.ReLU's ``input``; in
    ``ReLUSquaredActivation.forward`` the ``input`` argument until it returns; OPT's ``hidden_states`` until it is
    rebound to the activation's output): c beyond the relu output (and relu2's square) being made. Under autocast
    relu2 holds more: inside ``torch.square`` the 16-bit up_proj output (2), relu's output (2), pow's fp32 copy
    of it (4) and the fp32 square (4) are alive, 12 of which the layer saves 6 so far and down_proj's 16-bit
    cast (2) comes later: 12 − 8 = 4; at down_proj's cast the up_proj output is gone and the fp32 square is still
    there: again 4 (traced)."""
    if spec.hidden_act == "relu2" and is_amp(setup):
        return 4
    return compute_bytes(setup)


def relu2_backward_extra_per_elem(setup: TrainingSetup) -> int:
    """``relu2``'s backward peak beyond the gradient of down_proj's input (c·i, held by the walk), in bytes per
    element of the MLP width: ``pow(self, 2)``'s backward is ``pow_backward(grad, self, exponent)``
    (torch/csrc/autograd/FunctionsManual.cpp), ``grad * (exponent * self.pow(exponent - 1))``, whose two
    temporaries live to the end of that full expression: with the result, three tensors of the pow's dtype
    beside its incoming gradient. Without autocast all in the compute dtype: 3·c. Under autocast the pow ran
    in fp32 (:func:`plain_mlp_act_saved_per_elem`): down_proj's 16-bit input gradient (2) becomes an fp32 one
    (4, ``ToCopyBackward`` of the cast) and the three are fp32: 4 + 3·4 = 16 B in all, 16 − 2 beyond the
    held 16-bit gradient. (Afterwards the cast back to 16 bits and relu's ``threshold_backward`` make
    smaller ones.)"""
    return 16 - 2 if is_amp(setup) else 3 * compute_bytes(setup)


def _moe_terms(spec: ModelSpec, setup: TrainingSetup, add) -> None:
    """Router, top-k dispatch and experts (transformers 5.24 grouped_mm experts).

    Expert MLPs see T·k tokens in total on this rank (÷ ep does not change the tokens this rank
    processes: all-to-all brings as many in as it sends out). The experts run in the dtype of their
    weights (transformers casts the gathered tokens to it): fp32 under autocast with fp32 parameters.
    gpt_oss's biased router and experts and clamped SwiGLU: :func:`_gpt_oss_moe_terms`."""
    if spec.model_type == "gpt_oss":
        _gpt_oss_moe_terms(spec, setup, add)
        return
    h = spec.hidden_size
    c = compute_bytes(setup)
    ce = 4 if is_amp(setup) and not setup.is_lora else c  # (LoRA: 16-bit frozen experts)
    k = spec.num_experts_per_tok
    E = spec.num_experts
    mi = spec.moe_intermediate_size
    add("moe_input", "experts", _linear_inputs_saved(setup, 1, h), tp_split=False)
    # router: fp32 softmax (4E), top-k indices (int64, 8k), the renormalising sum and its result
    # (4 + 4k), and the int64 permutations that sort tokens by expert and back, plus the per-slot
    # weights (3·8k + 4k).
    add("router", "router", 4.0 * E + 8.0 * k + 4.0 + 4.0 * k + 24.0 * k + 4.0 * k, tp_split=False)
    add("expert_inputs", "experts", ce * k * h)                  # tokens gathered per expert
    add("expert_intermediate", "experts", 4.0 * ce * k * mi)     # gate_up (2·mi), act, product
    add("expert_outputs_weighted", "experts", ce * k * h)        # down output kept by the weighting
    if spec.num_shared_experts and spec.shared_expert_intermediate_size:
        si = spec.shared_expert_intermediate_size
        gated = spec.model_type == "qwen2_moe"  # sigmoid(shared_expert_gate(x)) * shared_expert(x)
        n_in = 3 if gated else 2
        inputs = 2.0 * n_in * h if is_amp(setup) else 0.0   # pure: the MoE input tensor is shared
        add("shared_expert", "experts", 4.0 * c * si + inputs + (c * h + 4.0 if gated else 0.0))


def expert_dtype_bytes(setup: TrainingSetup) -> int:
    """Bytes per element of what routed experts compute: the dtype of their weights, since
    ``integrations/moe.py`` ``_grouped_mm`` casts the gathered tokens to it (``input.to(weight.dtype)``;
    grouped_mm is not an autocast op): fp32 under autocast with fp32 parameters; LoRA's frozen 16-bit base."""
    return 4 if is_amp(setup) and not setup.is_lora else compute_bytes(setup)


def gpt_oss_router_bytes_per_token(k: int, c: int) -> float:
    """Routing state gpt_oss keeps per token for backward, top-k = ``k``, ``c`` bytes of the router's output
    (transformers/models/gpt_oss/modeling_gpt_oss.py @ 5.24.0 ``GptOssTopKRouter.forward`` and
    integrations/moe.py ``grouped_mm_experts_forward``, the experts' default implementation):

    - ``torch.topk(router_logits, k)`` keeps its int64 indices (8k); ``softmax`` over the k top logits (in their
      dtype) keeps its output (c·k); the (T, E) logits themselves are not kept;
    - the dispatch keeps four more int64 (T·k) index tensors: ``perm // num_top_k`` (the token gather),
      ``perm`` (the routing weights' gather), the sorted expert ids (the two expert-bias gathers) and
      ``inv_perm`` (the un-permutation): 32k;
    - the weighting ``proj_out * sample_weights_g`` keeps the gathered routing weights (c·k).
    Total 40k + 2·c·k."""
    return 8.0 * k + c * k + 32.0 * k + c * k


def gpt_oss_expert_bytes_per_pair(h: int, i: int, ce: int) -> dict[str, float]:
    """Bytes one (token, expert) pair keeps in gpt_oss's experts, ``ce`` bytes per element (the experts'
    dtype, :func:`expert_dtype_bytes`), hidden ``h``, expert width ``i`` (transformers/integrations/moe.py
    ``grouped_mm_experts_forward`` with ``GptOssExperts._apply_gate``, models/gpt_oss/modeling_gpt_oss.py
    @ 5.24.0; transformers 5.24 runs ``experts_implementation="grouped_mm"`` by default, also in training):

    - ``expert_inputs``: the gathered token ``hidden_states[perm // k]``, kept by the gate_up grouped GEMM (h);
    - ``expert_gate_up``: the gate_up output (2i; the gathered bias rows are added in place and freed), kept
      whole because ``gate = gate_up[..., ::2].clamp(max=limit)`` and ``up = gate_up[..., 1::2].clamp(-limit,
      limit)`` keep their strided views of it; then the clamped gate (kept by ``gate * sigmoid``), the sigmoid
      output, ``up + 1`` and ``glu`` (kept by ``(up + 1) * glu``): 2i + 4i;
    - ``expert_down_input``: the gated product, kept by the down grouped GEMM (i);
    - ``expert_outputs_weighted``: the down output (its bias added in place), kept by the routing weights'
      multiply (h).
    The clamped ``up`` and ``gate * alpha`` are temporaries; ``weighted_out[inv_perm]`` and its sum over the k
    slots keep nothing. (The ``experts_implementation="eager"`` loop of ``GptOssExperts.forward`` gathers and
    computes the same per-pair tensors expert by expert, plus an ``index_add_`` into a zero (T, h) buffer.)"""
    return {"expert_inputs": float(ce * h), "expert_gate_up": 6.0 * ce * i,
            "expert_down_input": float(ce * i), "expert_outputs_weighted": float(ce * h)}


def _gpt_oss_moe_terms(spec: ModelSpec, setup: TrainingSetup, add) -> None:
    """gpt_oss's MoE block (``GptOssMLP``): the router ``F.linear(x, weight, bias)`` keeps its input (the
    post-attention norm's output; autocast: its 16-bit cast), the routing state
    (:func:`gpt_oss_router_bytes_per_token`) and k pairs per token of expert tensors
    (:func:`gpt_oss_expert_bytes_per_pair`). Under LoRA the experts and router are frozen (PEFT cannot adapt
    them, model/lora_targets.py): the down grouped GEMM keeps no input for its weight, and the expert-bias
    gathers no sorted expert ids (8 B per pair); the inputs of frozen linears go in :func:`_lora_frozen`."""
    h, k, i = spec.hidden_size, spec.num_experts_per_tok, spec.moe_intermediate_size
    add("moe_input", "experts", _linear_inputs_saved(setup, 1, h), tp_split=False)
    frozen = setup.is_lora
    router = gpt_oss_router_bytes_per_token(k, compute_bytes(setup)) - (8.0 * k if frozen else 0.0)
    add("router", "router", router, tp_split=False)
    for name, per_pair in gpt_oss_expert_bytes_per_pair(h, i, expert_dtype_bytes(setup)).items():
        if not (frozen and name == "expert_down_input"):
            add(name, "experts", k * per_pair)


def _mla_terms(spec: ModelSpec, setup: TrainingSetup, add) -> None:
    """DeepSeek-V2/V3 multi-head latent attention (modeling_deepseek_v3.py)."""
    h, a = spec.hidden_size, spec.num_attention_heads
    c = compute_bytes(setup)
    r = residual_bytes(setup)
    qr, kvr = spec.q_lora_rank, spec.kv_lora_rank or 0
    rope, nope, dv = spec.qk_rope_head_dim or 0, spec.qk_nope_head_dim or 0, spec.v_head_dim
    n_in = 2 if qr else 2
    add("qkv_input", "attention", _linear_inputs_saved(setup, n_in, h), tp_split=False)
    if qr:
        add("q_a", "attention", (4.0 + r) * qr + c * qr, tp_split=False)
    add("kv_a", "attention", c * (kvr + rope) + (4.0 + r) * kvr + c * kvr, tp_split=False)
    add("q_k_v", "attention", c * a * (2 * (nope + rope) + dv))
    add("attn_out", "attention", c * a * dv + 4.0 * a)


def _dropout_terms(spec: ModelSpec, setup: TrainingSetup, add, *, s: int) -> None:
    """nn.Dropout in training keeps a bool mask (1 B per element) per site (native_dropout)."""
    p = spec.hidden_dropout
    if p <= 0:
        return
    h = spec.hidden_size
    n_sites = 2  # after attention output projection and after the MLP
    add("dropout_masks", "dropout", 1.0 * n_sites * h, tp_split=False)


def lora_shapes(spec: ModelSpec, targets: tuple[str, ...], layer_idx: int = 0) -> list[tuple[int, int]]:
    """(in_features, out_features) of each adapted linear of layer ``layer_idx`` (model/lora_targets.py)."""
    from trainmem.model.lora_targets import targeted_layer_linears
    return [(lin.fin, lin.fout) for lin in targeted_layer_linears(spec, targets, layer_idx)]


def adapters_16bit(setup: TrainingSetup) -> bool:
    """LoRA adapters in the base's 16-bit dtype (``adapter_dtype`` bf16: torchtune, PEFT
    ``autocast_adapter_dtype=False``): ``x.to(lora_A.weight.dtype)`` is x itself, autocast casts nothing."""
    return setup.adapter_dtype == "bf16"


def lora_input_requires_grad(setup: TrainingSetup) -> bool:
    """Whether the first layer's input requires grad under LoRA: only with gradient checkpointing, where
    PEFT users call ``enable_input_require_grads()`` (HF Trainer does); otherwise the frozen embedding's
    output has no grad and autograd records nothing before the first adapter (trace/lora.py)."""
    return setup.recompute != "none"


#: Terms that only a frozen linear's weight gradient needed (its input), dropped under LoRA.
_FROZEN_LINEAR_INPUTS = ("qkv_input", "mlp_input", "moe_input", "expert_inputs", "o_input")


def _lora_terms(spec: ModelSpec, setup: TrainingSetup, layer_idx: int, terms: list[Term]) -> list[Term]:
    """A LoRA layer's saved tensors: full fine-tuning's terms without what only frozen weights' gradients
    needed (:func:`_lora_frozen`, :func:`_lora_first_layer`), plus the adapters' own
    (:func:`_lora_adapter_terms`); traced in tests/trace/test_lora_trace.py."""
    from trainmem.model.lora_targets import targeted_layer_linears
    adapted = targeted_layer_linears(spec, setup.lora_targets, layer_idx)
    out = _lora_frozen(spec, setup, terms)
    if layer_idx == 0 and not lora_input_requires_grad(setup) and not opt_proj_adapter_bytes(spec, setup, "emb_out"):
        out = _lora_first_layer(spec, setup, adapted, out)
    first_no_grad = layer_idx == 0 and not lora_input_requires_grad(setup)
    return out + _lora_adapter_terms(spec, setup, adapted) + lora_dropout_terms(spec, setup, adapted,
                                                                                 input_grad=not first_no_grad)


def opt_proj_adapter_bytes(spec: ModelSpec, setup: TrainingSetup, reads: str) -> int:
    """OPT with word_embed_proj_dim ≠ hidden (opt-350m) under LoRA targeting ``project_in`` (``reads`` =
    ``emb_out``) or ``project_out`` (``head_in``; e.g. all-linear): what that adapter keeps, for T tokens, as
    :func:`_lora_adapter_terms` counts a layer's (16-bit base: lora_A's fp32 copy of its input, 4·fin, and the
    fp32 rank activation, 4·r; under autocast the 16-bit casts, 2·fin and 2·r, and the adapter weights' 16-bit
    copies; fp32: the input itself is the embedding output / last hidden state, already kept: 4·r). An adapted
    project_in also makes the first layer's input require grad (its output is the adapter's sum), so layer 0
    keeps what a middle layer keeps. 0 for other families and targets."""
    if not (setup.is_lora and opt_embed_proj_dim(spec)):
        return 0
    from trainmem.model.lora_targets import targeted_model_linears
    lins = [lin for lin in targeted_model_linears(spec, setup.lora_targets) if lin.reads == reads]
    if not lins:
        return 0
    T = setup.micro_batch * setup.seq_len // setup.cp
    rank, amp, fp32 = setup.lora_rank, is_amp(setup), setup.precision == "fp32"
    out = 0
    for lin in lins:
        if fp32:
            out += 4 * rank * T
        elif amp:
            out += 2 * (lin.fin + rank) * T + 2 * rank * (lin.fin + lin.fout)
        else:
            out += 4 * (lin.fin + rank) * T
    return out


def _opt_norm_input_is_new(spec: ModelSpec, amp: bool) -> bool:
    """OPT under LoRA: the input LayerNorm's saved input is not the checkpointed (16-bit) layer input when
    autocast casts it to fp32 (layer_norm is an fp32-list op; traced) or, post-LN, when the norm reads the
    attention's residual sum instead."""
    return spec.model_type == "opt" and (amp or opt_post_ln(spec))


def _lora_frozen(spec: ModelSpec, setup: TrainingSetup, terms: list[Term]) -> list[Term]:
    """Full fine-tuning's terms with a frozen base (autograd saves an operand only for an input that
    requires grad):

    - base linears keep no input (``qkv_input``, ``mlp_input``, eager ``o_input``, MoE inputs dropped);
      the MLP's output projection no longer keeps the product (gated: 3 of 4 tensors of width i remain;
      plain: the activation's input; gelu_new: its 4 formula tensors); the shared expert likewise;
    - RMSNorm's ``weight * x_normed`` keeps nothing for the frozen weight: the fp32 copy kept by
      ``pow``/``mul`` (4 B) and the rsqrt row remain, not 4 + r (q/k norms, Gemma's norms alike);
      nn.LayerNorm still keeps its input; under autocast GPT-NeoX/Falcon's second LayerNorm on the same
      16-bit residual keeps its own fp32 cast;
    - under checkpointing, a norm's saved input that is the checkpointed input itself (LayerNorm; RMSNorm
      in fp32, where ``x.to(float32)`` is x) is not counted twice.
    """
    amp = is_amp(setup)
    h, c = spec.hidden_size, compute_bytes(setup)
    T = setup.micro_batch * setup.seq_len // setup.cp
    kernel_keeps_out = setup.attn in ("sdpa", "flash") and not sdpa_math_fallback(spec, setup)
    rows = 4.0 / h
    full = setup.recompute == "full"

    def scaled(t: Term, factor: float) -> Term:
        return Term(t.name, t.component, int(round(t.bytes * factor)), t.tp_split)

    out: list[Term] = []
    for t in terms:
        if t.name in _FROZEN_LINEAR_INPUTS or (t.name == "attn_out" and not kernel_keeps_out):
            continue  # (the math composite's output is o_proj's input only)
        per_elem = _norm_saved_per_elem(spec, setup)
        if t.name == "input_norm" and spec.norm == "layernorm" and full and not _opt_norm_input_is_new(spec, amp):
            t = scaled(t, (8.0 / h) / per_elem)
        elif t.name in ("input_norm", "post_attention_norm") and spec.norm == "rmsnorm" and t.bytes:
            fp32_ckpt_input = t.name == "input_norm" and setup.precision == "fp32" and full
            t = scaled(t, (rows if fp32_ckpt_input else 4.0 + rows) / per_elem)
        elif amp and (t.name == "ln_mlp_stats" or (t.name == "post_attention_norm" and spec.parallel_residual
                                                   and spec.model_type == "gpt_neox")):
            t = Term(t.name, t.component, t.bytes + 4 * h * T, t.tp_split)
        elif t.name == "qk_norm":
            d = spec.head_dim
            per_head = (4.0 + c if spec.model_type.startswith("qwen3") else 8.0) * d + 4.0
            t = scaled(t, (4.0 * d + 4.0) / per_head)
        elif t.name == "post_sublayer_norms":  # Gemma-2/3: x.float() kept, not the fp32 normalised value
            t = scaled(t, 0.5)
        elif t.name == "mlp_intermediate" and not spec.mlp_gated and spec.hidden_act in ("relu", "relu2"):
            total, down_only = plain_mlp_act_saved_per_elem(spec, setup)
            t = scaled(t, (total - down_only) / total)
        elif t.name == "mlp_intermediate":
            n = 4 if spec.mlp_gated else (5 if spec.hidden_act == "gelu_new" else 2)
            gelu_amp = spec.hidden_act == "gelu_new" and amp and not spec.mlp_gated
            t = scaled(t, 14.0 / 16.0 if gelu_amp else (n - 1) / n)
        elif t.name == "expert_intermediate":
            t = scaled(t, 0.75)
        elif t.name == "shared_expert":
            n_in = (3 if spec.model_type == "qwen2_moe" else 2) if amp else 0
            dropped = (c * spec.shared_expert_intermediate_size + 2.0 * n_in * h) * T
            t = Term(t.name, t.component, t.bytes - int(round(dropped)), t.tp_split)
        out.append(t)
    return out


def _lora_first_layer(spec: ModelSpec, setup: TrainingSetup, adapted, out: list[Term]) -> list[Term]:
    """Layer 0 without ``enable_input_require_grads``: nothing is recorded before its first adapter: no
    input norm; no attention core without a q/k/v adapter; no MLP side without an adapter feeding it
    (parallel-residual families: an MLP adapter). q_norm / k_norm keep their input only when q_proj /
    k_proj is adapted; eager attention's matmuls keep an operand only for the other operand's grad
    (q·kᵀ: q iff k has grad; probs·v: probs iff v has grad)."""
    reads = {lin.reads for lin in adapted}
    core = bool(reads & {"attn_in", "q_a", "kv_a", "cross_in", "cross_q"})
    post = "mlp_in" in reads if spec.parallel_residual else (core or "attn_out" in reads)
    mlp = post or "mlp_in" in reads
    # (post-LN OPT: "input_norm" is self_attn_layer_norm after the attention, kept once anything before it is)
    out = [t for t in out if (t.name != "input_norm" or (post and opt_post_ln(spec)))
           and (core or t.component != "attention")
           and (post or t.component not in ("norm", "dropout"))
           and (mlp or t.name != "mlp_intermediate")]
    q_grad, k_grad, v_grad = (any(lin.path.endswith(n) or lin.path == "qkv." + n[0] for lin in adapted)
                              for n in ("q_proj", "k_proj", "v_proj"))
    if setup.attn == "eager" and (q_grad or k_grad or v_grad):
        keep = {"q": k_grad, "k_repeated": q_grad, "v_repeated": q_grad or k_grad,
                "softmax_fp32": q_grad or k_grad, "probs_16bit": v_grad, "probs": v_grad}
        out = [t for t in out if keep.get(t.name, True)]
    a, kv = spec.num_attention_heads, spec.num_kv_heads
    kept = a * q_grad + kv * k_grad
    return [Term(t.name, t.component, t.bytes * kept // (a + kv), t.tp_split) if t.name == "qk_norm" else t
            for t in out]


def _lora_adapter_terms(spec: ModelSpec, setup: TrainingSetup, adapted) -> list[Term]:
    """What the adapters keep. PEFT ``tuners/lora/layer.py`` ``Linear.forward``:
    ``x = x.to(lora_A.weight.dtype)`` (fp32 adapters), then
    ``result + lora_B(lora_A(dropout(x))) * scaling`` (dropout 0: identity). Per adapted linear reading
    ``fin`` features, adapter rank r, per token:

    - 16-bit base, no autocast: lora_A keeps its own fp32 copy of x (4·fin, one per adapter) and lora_B
      the fp32 rank activation (4·r);
    - 16-bit base under autocast: the fp32 copy is a temporary; lora_A keeps the 16-bit cast autocast
      makes of it (2·fin per adapter) and lora_B the 16-bit rank activation (2·r); autocast's cache keeps
      16-bit copies of the adapter weights, saved by their matmuls (2·r·(fin + fout) per layer);
    - fp32: lora_A keeps x itself, shared by the adapters that read the same tensor (4·fin once; the
      attention output is kept by the sdpa kernel already), and 4·r.

    Names place each in the estimator's backward order: o_proj's adapter is released early in the
    attention's backward (``o_input``, estimate.py ``_ATTN_EARLY``), the MLP output projection's first
    (``lora_down_input``, its ``prod`` part)."""
    amp, fp32 = is_amp(setup), setup.precision == "fp32"
    a16 = adapters_16bit(setup)
    rank = setup.lora_rank
    T = setup.micro_batch * setup.seq_len // setup.cp
    kernel_keeps_out = setup.attn in ("sdpa", "flash") and not sdpa_math_fallback(spec, setup)
    out: list[Term] = []
    shared: set[str] = set()
    for lin in adapted:
        name_in, name_a, comp = _adapter_slots(lin)
        if fp32 or a16:  # (adapters in the base's dtype: x is not cast, lora_A keeps x itself)
            e = 2 if a16 else 4
            if lin.reads not in shared and not (lin.reads == "attn_out" and kernel_keeps_out):
                out.append(Term(name_in, comp, e * lin.fin * T, False))
            shared.add(lin.reads)
            out.append(Term(name_a, comp, e * rank * T, False))
        elif amp:
            out.append(Term(name_in, comp, 2 * lin.fin * T, False))
            out.append(Term(name_a, comp, 2 * rank * T, False))
            out.append(Term("lora_weight_copies", "weight_copies", 2 * rank * (lin.fin + lin.fout), False))
        else:
            out.append(Term(name_in, comp, 4 * lin.fin * T, False))
            out.append(Term(name_a, comp, 4 * rank * T, False))
    slices = [lin for lin in adapted if lin.path.startswith("qkv.")]  # (litgpt's LoRAQKVLinear, lora_targets.py)
    if 0 < len(slices) < 3:  # its zero_pad's index_copy_ keeps its source, the Σ-widths lora_B output
        out.append(Term("lora_input", "lora", compute_bytes(setup) * sum(lin.fout for lin in slices) * T, False))
    return out


def _adapter_slots(lin) -> tuple[str, str, str]:  # noqa: ANN001 - a model.lora_targets linear
    """(name of the adapter's saved input, of its rank activation, component): the names place each term in the
    estimator's backward order (see :func:`_lora_adapter_terms`)."""
    if lin.reads == "attn_out":
        return "o_input", "lora_a_out", "attention"
    if lin.reads == "mlp_act":
        return "lora_down_input", "lora_down_input", "mlp"
    return "lora_input", "lora_a_out", "lora"


def lora_dropout_terms(spec: ModelSpec, setup: TrainingSetup, adapted, input_grad: bool = True) -> list[Term]:
    """What ``lora_dropout`` > 0 adds to :func:`_lora_adapter_terms` (PEFT 0.21 ``Linear.forward``:
    ``lora_B(lora_A(dropout(x)))``; ``nn.Dropout`` → ``native_dropout``, whose backward needs only its bool mask,
    1 B per element; torch 2.13 ``derivatives.yaml`` ``native_dropout``). Per adapted linear reading ``fin``
    features, per token:

    - every adapter keeps its own mask (1·fin), except where its input needs no gradient (``input_grad`` False:
      layer 0's attention input without ``enable_input_require_grads``), where autograd records no dropout;
    - fp32 and 16-bit adapters on a same-dtype input (x not cast): lora_A now saves the dropout output, a new
      tensor per adapter (e·fin), where without dropout it kept x itself, once per input shared by the adapters
      reading it (and not at all for o_proj's input the attention kernel keeps): those adapters add e·fin each,
      less the shared copy :func:`_lora_adapter_terms` counted;
    - a cast input (fp32 adapters on a 16-bit base, autocast or not): lora_A saved a new tensor already (the fp32
      copy, or autocast's 16-bit cast of it), which is now made from the dropout output: the same bytes.

    Names follow :func:`_lora_adapter_terms`'s, so each is released with the adapter's input in backward."""
    p = setup.lora_dropout
    if not (setup.is_lora and p):
        return []
    T = setup.micro_batch * setup.seq_len // setup.cp
    same_dtype = setup.precision == "fp32" or adapters_16bit(setup)
    e = 2 if adapters_16bit(setup) else 4
    kernel_keeps_out = setup.attn in ("sdpa", "flash") and not sdpa_math_fallback(spec, setup)
    out: list[Term] = []
    shared: set[str] = set()
    for lin in adapted:
        if lin.path.startswith("qkv.") and "qkv" in shared:
            continue  # (litgpt's LoRAQKVLinear: one dropout of x for its slices)
        if lin.path.startswith("qkv."):
            shared.add("qkv")
        name, _, comp = _adapter_slots(lin)
        extra = lin.fin if (input_grad or lin.reads != "attn_in") else 0  # the bool mask
        if same_dtype:
            extra += e * lin.fin  # the adapter's own dropout output
            if lin.reads not in shared and not (lin.reads == "attn_out" and kernel_keeps_out):
                extra -= e * lin.fin  # (x itself was counted once for the adapters sharing it)
            shared.add(lin.reads)
        out.append(Term(name, comp, extra * T, False))
    return out


def _lora_mlp_frame_per_token(spec: ModelSpec, setup: TrainingSetup, adapted) -> int:
    """Bytes per token the decoder layer's frame holds while its MLP runs and no saved tensor is them:
    the post-attention residual (kept by LayerNorm, and by RMSNorm in fp32 where its fp32 copy is the
    tensor itself) and the MLP input (the norm output; in fp32 lora_A of gate/up keeps it itself)."""
    h, c, r = spec.hidden_size, compute_bytes(setup), residual_bytes(setup)
    fp32 = setup.precision == "fp32"
    norm_out = 4 if (is_amp(setup) and spec.norm == "layernorm") else c
    residual = 0 if (spec.norm == "layernorm" or fp32) else r * h
    mlp_in_kept = fp32 and any(lin.reads == "mlp_in" for lin in adapted)
    held = c * h if spec.model_type == "gpt2" else 0  # GPT2Block keeps ``attn_output`` in a local
    return residual + (0 if mlp_in_kept else norm_out * h) + held


def _lora_inside_mlp_in(spec: ModelSpec, setup: TrainingSetup, adapted) -> int:
    """Bytes per token beyond the layer's saved tensors inside its widest adapted MLP input projection
    (out width ``o``): the base output and the adapter's output and scaled copy being added (16-bit
    without autocast and fp32: 4·o each, under autocast 2·o each, plus the temporary fp32 copy of x, 4·h),
    less the saved tensors not made yet: the projection's own result, the output projection's adapter
    input, and what the activation keeps after it (Phi-3's fused gate_up: act(gate); gelu_new: 3 of its
    formula tensors)."""
    wide = max((lin.fout for lin in adapted if lin.reads == "mlp_in"), default=0)
    if not wide:
        return 0
    h, c, i = spec.hidden_size, compute_bytes(setup), spec.intermediate_size
    amp, a16 = is_amp(setup), adapters_16bit(setup)
    down = [lin for lin in adapted if lin.reads == "mlp_act"]
    later = (2 if amp or a16 else 4) * down[0].fin if down else 0
    if spec.model_type == "phi3":
        later += c * i
    elif spec.hidden_act == "gelu_new" and not spec.mlp_gated:
        later += 3 * c * i
    if a16:  # 16-bit adapters: no fp32 copy of x, the adapter's output and its scaled copy 2·o each
        return 4 * wide - later
    return (4 * h + 4 * wide if amp else 8 * wide) - later


def _relu_keeps_product(spec: ModelSpec) -> bool:
    """A non-gated ``relu`` MLP (OPT): the output projection's input is relu's own saved output
    (:func:`plain_mlp_act_saved_per_elem`), a saved tensor already, not a frame local of the LoRA frames below."""
    return spec.hidden_act == "relu" and not spec.mlp_gated


def lora_recompute_frame_bytes(spec: ModelSpec, setup: TrainingSetup, layer_idx: int) -> int:
    """Peak bytes beyond a LoRA layer's saved tensors while non-reentrant checkpointing recomputes it
    (traced, tests/trace/test_lora_trace.py), for T tokens: the frames of the MLP
    (:func:`_lora_mlp_frame_per_token`); when the MLP output projection is adapted, its lora_B backward
    is what starts the recomputation, with the gradient of the adapted output alive ((4 + c)·h in 16 bits
    without autocast: the fp32 sum ``result + lora_B(...) * scaling`` and its 16-bit input; c·h under
    autocast; 4·h in fp32); then the larger of the stop at that lora_B (its frame holds the product c·i,
    in fp32 kept anyway, the base output c·h and, under autocast, the product's fp32 copy 4·i of which
    lora_A keeps a 16-bit cast) and the inside of the widest adapted MLP input projection
    (:func:`_lora_inside_mlp_in`).
    """
    from trainmem.model.lora_targets import targeted_layer_linears
    T = setup.micro_batch * setup.seq_len // setup.cp
    h, c = spec.hidden_size, compute_bytes(setup)
    amp, fp32 = is_amp(setup), setup.precision == "fp32"
    a16 = adapters_16bit(setup)
    adapted = targeted_layer_linears(spec, setup.lora_targets, layer_idx)
    per_token = _lora_mlp_frame_per_token(spec, setup, adapted)
    down = [lin for lin in adapted if lin.reads == "mlp_act"]
    if down:
        i = down[0].fin
        per_token += 4 * h if fp32 else (c * h if amp or a16 else (4 + c) * h)
        stop = (0 if fp32 or _relu_keeps_product(spec) else c * i) + c * h + (4 * i if amp and not a16 else 0)
    else:
        stop = 0
    per_token += max(stop, _lora_inside_mlp_in(spec, setup, adapted), 0)
    div = setup.tp if setup.sp else 1
    return per_token * T // div


def lora_forward_frame_bytes(spec: ModelSpec, setup: TrainingSetup, layer_idx: int) -> int:
    """Peak bytes beyond a LoRA layer's saved tensors during its forward (traced): inside the adapted MLP
    output projection (the layer's last op), the frames hold the layer's input (the model's loop variable,
    r·h) and, without input grads, the embedding output (``inputs_embeds``, r·h; frozen layers do not keep
    either), the post-attention residual (RMSNorm families), the norm output (c·h) and the product (c·i;
    fp32: kept by lora_A anyway); the adapted linear its input's fp32 copy (autocast: a temporary, 4·i),
    the base output (c·h) and the adapter's output and its scaled copy (2·e·h, e = 2 under autocast,
    else 4)."""
    from trainmem.model.lora_targets import targeted_layer_linears
    adapted = targeted_layer_linears(spec, setup.lora_targets, layer_idx)
    down = [lin for lin in adapted if lin.reads == "mlp_act"]
    if not down and not any(lin.reads == "mlp_in" for lin in adapted):
        return 0
    T = setup.micro_batch * setup.seq_len // setup.cp
    h, c, r = spec.hidden_size, compute_bytes(setup), residual_bytes(setup)
    amp, fp32 = is_amp(setup), setup.precision == "fp32"
    a16 = adapters_16bit(setup)
    per_token = _lora_mlp_frame_per_token(spec, setup, adapted)
    stop = 0
    if down:
        i = down[0].fin
        product = 0 if fp32 or _relu_keeps_product(spec) else c * i
        stop = product + (4 * i if amp and not a16 else 0) + c * h + 2 * (2 if amp or a16 else 4) * h
    per_token += max(stop, _lora_inside_mlp_in(spec, setup, adapted))
    per_token += r * h * (1 if lora_input_requires_grad(setup) else 2)
    return per_token * T // (setup.tp if setup.sp else 1)


def lora_head_frame_bytes(spec: ModelSpec, setup: TrainingSetup) -> int:
    """LoRA: the final norm's output, which the frozen LM head does not keep, is still held by the model's
    forward while the loss is computed (c·h per token; LayerNorm under autocast: fp32)."""
    if not setup.is_lora or spec.is_encoder:
        return 0
    T = setup.micro_batch * setup.seq_len // setup.cp
    elem = 4 if (is_amp(setup) and spec.norm == "layernorm") else compute_bytes(setup)
    return elem * spec.hidden_size * T // (setup.tp if setup.sp else 1)


def recomputed_checkpoint_input_bytes(spec: ModelSpec, setup: TrainingSetup) -> int:
    """Bytes of a fully recomputed (non-reentrant checkpoint) layer's saved tensors that are its checkpointed
    input itself, which the checkpoint already holds (the walk's ``act`` block): not allocated twice (traced).

    - gpt_oss with an fp32 residual stream: the input RMSNorm's ``x.to(float32)`` is x itself;
    - nemotron: ``NemotronLayerNorm1P`` keeps its input as given without autocast (with autocast, its 16-bit
      cast: a new tensor, :func:`_layernorm1p`);
    - opt, pre-LN: ``self_attn_layer_norm`` (nn.LayerNorm; an fp32-list op under CUDA autocast, whose input is
      fp32 already) keeps the layer's input; post-LN (opt-350m, ``do_layer_norm_before`` false) q/k/v_proj read
      the layer's input directly and keep it without autocast (under autocast each keeps its own 16-bit cast).
    - RMSNorm families (Llama, Qwen, Mistral, Phi-3: ``x.to(float32)``; Gemma: ``x.float()``) on an fp32 residual
      stream (autocast): the fp32 input the norm keeps is x itself;
    - gpt2, gpt_neox, falcon (pre-LN ``nn.LayerNorm``, an fp32-list op under CUDA autocast, reading the fp32
      stream as it is): the norm keeps the layer's input (toys traced: +1.2…1.8 % → 0.0…0.3 % in bf16);
    - the megatron engine's TE layers: LayerNormLinear's ``inputmat`` (see the code).
    LoRA: :func:`_lora_frozen` drops it from the terms. Other families: 0."""
    if setup.recompute != "full":
        return 0
    for model in LAYER_MODELS:  # (memory/compile.py; memory/megatron_activations.py: TE's ``inputmat``)
        kept = model.checkpoint_input_bytes(spec, setup)
        if kept is not None:
            return kept
    if spec.derived is not None:  # measured (trainmem/model/derive.py)
        return spec.derived.input_kept(derived_mode(setup), derived_attn(setup), setup.seq_len).bytes_for(
            setup.micro_batch, setup.seq_len)
    mt, r = spec.model_type, residual_bytes(setup)
    held = r * spec.hidden_size * (setup.micro_batch * setup.seq_len // setup.cp) // (setup.tp if setup.sp else 1)
    if spec.norm == "rmsnorm" and r == 4 and (mt == "gpt_oss" or not setup.is_lora):
        # Llama/Qwen/Mistral/Phi-3/gpt_oss (``x.to(float32)``) and Gemma (``x.float()``) RMSNorms on an fp32 stream
        return held
    if mt in ("gpt2", "gpt_neox", "falcon") and not setup.is_lora:
        # pre-LN nn.LayerNorm reads the layer's input as it is (fp32 under autocast: an fp32-list op on the fp32
        # stream) and keeps it
        return held
    if mt not in ("nemotron", "opt") or setup.is_lora:
        return 0
    if (mt == "nemotron" or opt_post_ln(spec)) and is_amp(setup):
        return 0
    return held


def checkpoint_input_elem_bytes(spec: ModelSpec, setup: TrainingSetup) -> int:
    """Bytes per element of a checkpointed layer's input: the residual stream's, except post-LN OPT under
    LoRA with autocast, whose layers hand on ``final_layer_norm``'s output: fp32 (layer_norm is an fp32-list
    op under CUDA autocast) although the 16-bit base makes the stream 16-bit elsewhere (traced)."""
    if opt_post_ln(spec) and setup.is_lora and is_amp(setup):
        return 4
    return residual_bytes(setup)


def opt_post_ln(spec: ModelSpec) -> bool:
    """OPT with ``do_layer_norm_before`` false (opt-350m): ``OPTDecoderLayer.forward`` normalises after each
    residual add, so q/k/v_proj read the layer's input itself and the decoder has no final layer norm."""
    return spec.model_type == "opt" and spec.hf_config.get("do_layer_norm_before", True) is False


def embedding_saved(spec: ModelSpec, setup: TrainingSetup) -> int:
    """Bytes kept by the embedding stage per micro-batch: token ids are int64 (8 B/token, kept by the
    embedding backward), learned positions similarly, plus an embedding dropout mask."""
    T = setup.micro_batch * setup.seq_len // setup.cp
    b = 8 * T
    if spec.position == "learned":
        b += 8 * T
    if spec.hidden_dropout > 0 and spec.model_type in ("gpt2", "bert", "roberta"):
        b += T * spec.hidden_size
    if spec.model_type == "opt" and setup.is_lora and lora_input_requires_grad(setup):
        # ``enable_input_require_grads`` makes the frozen embedding's output a leaf that requires grad; its
        # AccumulateGrad node keeps it alive to the end of the backward, and OPT's first layer reads a new
        # tensor (``inputs_embeds + pos_embeds``, or project_in's output), not that leaf (traced)
        b += residual_bytes(setup) * (opt_embed_proj_dim(spec) or spec.hidden_size) * T
    b += opt_proj_adapter_bytes(spec, setup, "emb_out")
    w = opt_embed_proj_dim(spec)
    if w and not setup.is_lora:
        # OPTDecoder.forward: ``project_in(inputs_embeds)`` keeps the embedding output (the parameters' dtype;
        # under autocast its 16-bit cast) and, under autocast, the cached 16-bit copy of its weight (w·h)
        b += (2 if is_amp(setup) else compute_bytes(setup)) * w * T + (2 * w * spec.hidden_size if is_amp(setup) else 0)
    return b


def opt_embed_proj_dim(spec: ModelSpec) -> int:
    """OPT's ``word_embed_proj_dim`` where it differs from hidden_size (opt-350m: 512 of 1024), i.e. where
    ``OPTDecoder`` builds project_in / project_out; 0 otherwise (and for other families)."""
    if spec.model_type != "opt":
        return 0
    w = spec.hf_config.get("word_embed_proj_dim") or spec.hidden_size
    return w if w != spec.hidden_size else 0


def opt_final_layer_norm(spec: ModelSpec) -> bool:
    """Whether ``OPTDecoder`` has its ``final_layer_norm``: pre-LN (``do_layer_norm_before``) and not
    ``_remove_final_layer_norm``."""
    return not opt_post_ln(spec) and spec.hf_config.get("_remove_final_layer_norm", False) is not True


def model_wide_saved_bytes(spec: ModelSpec, setup: TrainingSetup) -> int:
    """Tensors created once per forward and kept by every layer: rotary cos/sin (1, s, d) in the
    residual dtype (2 tensors). (Eager attention's additive causal mask (b, 1, s, s) is added, never
    saved: it lives only during the forward.)"""
    if spec.derived is not None:  # measured: what the layers of a derived family share (trainmem/model/derive.py)
        return spec.derived.wide(derived_mode(setup), derived_attn(setup), setup.seq_len).bytes_for(
            setup.micro_batch, setup.seq_len)
    s = setup.seq_len // setup.cp
    out = 0
    if spec.position == "rope":
        # position_ids default to arange(s)[None]: cos/sin are (1, s, d), broadcast over the batch; with CP
        # the sharded positions are passed, arange(s).expand(b, s) (torchtitan prepare_context_parallel_input)
        rope_dim = spec.rotary_dim or spec.qk_rope_head_dim or spec.head_dim  # (nemotron: partial RoPE)
        if spec.model_type == "gpt_oss":
            # GptOssRotaryEmbedding.forward: ``emb = freqs`` (no cat(freqs, freqs)): (1, s, d/2) cos and sin,
            # each applied to both halves (modeling_gpt_oss.py @ 5.24.0 ``_apply_rotary_emb``)
            rope_dim = spec.head_dim // 2
        out += 2 * s * rope_dim * residual_bytes(setup) * (setup.micro_batch if torch_cp(setup) else 1)
    if sliding_window_mask(spec, setup):
        out += s * setup.seq_len  # the (1, 1, s, s) bool mask, kept by every layer's kernel
    if spec.model_type in ("gpt_oss", "nemotron", "opt") and setup.attn == "eager" and setup.recompute == "full":
        # non-reentrant checkpointing holds each layer's inputs, its additive mask among them, until that
        # layer's backward: layer 0's mask lives to the end of the backward (gpt_oss_forward_frame_bytes;
        # nemotron and opt: the one (b, 1, s, s) ``create_causal_mask`` mask in inputs_embeds' dtype, traced)
        out += _gpt_oss_mask_bytes(setup)
    return out


def head_saved(spec: ModelSpec, setup: TrainingSetup, lm_input: bool = True) -> int:
    """Final norm + LM-head input kept for backward (the logits and loss are in :mod:`loss`);
    ``lm_input=False``: the final norm's only (a fused linear cross-entropy keeps no head input)."""
    T = setup.micro_batch * setup.seq_len // setup.cp
    h = spec.hidden_size
    norm = _norm_saved_per_elem(spec, setup) * h
    lm_in = (2.0 if is_amp(setup) else float(residual_bytes(setup))) * h if lm_input else 0.0
    if setup.is_lora:  # frozen LM head: no input kept; frozen final RMSNorm weight (see _lora_terms)
        lm_in = 0.0
        if spec.norm == "rmsnorm":
            norm = (4.0 + 4.0 / h) * h
    if spec.is_encoder and spec.head != "lm":
        # BERT/RoBERTa classification: sequence heads read the first token only (pooler / dense: b·h);
        # the token head's classifier keeps its (dropout) input
        return int(T * lm_in) if spec.head == "tok_cls" else int(setup.micro_batch * 2 * lm_in)
    if spec.is_encoder:
        # MLM head: transform dense (input kept), gelu (input kept), LayerNorm (input kept), decoder input
        c = compute_bytes(setup)
        return int(T * (lm_in + 2 * c * h + _norm_saved_per_elem(spec, setup) * h + lm_in))
    if spec.model_type == "opt":
        # OPTDecoder.forward: the final_layer_norm exists only pre-LN (opt_final_layer_norm); with
        # word_embed_proj_dim ≠ hidden (opt-350m) ``project_out`` keeps its input (the final norm's output, or
        # post-LN the last layer's output: lm_in's bytes) and lm_head keeps project_out's output (c·w)
        norm = norm if opt_final_layer_norm(spec) else 0.0
        if setup.is_lora and opt_embed_proj_dim(spec):  # (an adapted project_out's own tensors)
            return int(T * norm) + opt_proj_adapter_bytes(spec, setup, "head_in")
        w = opt_embed_proj_dim(spec)
        if w and not setup.is_lora:
            proj_in = (2.0 if is_amp(setup) else float(residual_bytes(setup))) * h
            return int(T * (norm + proj_in + (compute_bytes(setup) * w if lm_input else 0.0)))
    if setup.sp and setup.engine == "fsdp2":
        # SequenceParallel final norm: its kept tensors are sequence shards; the LM head (ColwiseParallel,
        # input Shard(1)) saves the all-gathered, full-sequence input (trace/tp.py)
        norm /= setup.tp
    return int(T * (norm + lm_in))
