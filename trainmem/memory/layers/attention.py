"""The attention block's saved tensors: the core (q/k/v, the kernel's output and logsumexp, eager attention's
probabilities), DeepSeek's latent attention, gpt_oss's sink softmax, Transformer Engine's output projection, and
the fused SDPA kernel's backward transient. Notation as :mod:`trainmem.memory.activations`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainmem.memory.layers.base import (Term, compute_bytes, linear_inputs_saved, residual_bytes, sdpa_math_fallback,
                                        sliding_window_mask, torch_cp)
from trainmem.memory.layers.family import layer_family
from trainmem.model.spec import ModelSpec

if TYPE_CHECKING:  # (annotations only: no import of trainmem.setup, which validates with these modules)
    from trainmem.setup import TrainingSetup

__all__ = ["core_attention_terms", "mla_terms", "te_output_projection", "sink_softmax_bytes_per_token",
           "sink_scores_promoted", "eager_softmax_bytes", "sink_softmax_terms", "fused_attention_backward_bytes"]


# Qwen1 without flash-attn (modeling_qwen.py ``QWenAttention.forward``, torch-2 branch): each layer expands the
# (b, 1, 1, s) padding mask to (b, 1, s, s) and ``masked_fill``s the causal part (compute dtype); SDPA takes it as
# ``attn_mask`` (the memory-efficient kernel), which keeps it for backward: c·s bytes a token per layer (measured
# against the block's ops: tests/memory/test_qwen1_bnb_legacy.py).
def core_attention_terms(spec: ModelSpec, setup: TrainingSetup, add, *, s: int, b: int) -> None:
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
    fam = layer_family(spec)
    # Fused CUDA kernels allocate their output as (b, s, a, d): HF's transpose(1, 2).contiguous() is
    # free for every family under sdpa (a CPU run differs: its kernel follows q's strides). Eager
    # attention's matmul output is (b, a, s, d), so the transpose makes a real copy.
    if setup.attn in ("sdpa", "flash"):
        # transformers passes enable_gqa when there is no mask (causal, no padding) and head dims are
        # equal and <= 256 (integrations/sdpa_attention.py use_gqa_in_sdpa); otherwise repeat_kv expands k/v.
        gqa_native = setup.attn == "flash" or (d == dv and d <= 256 and not spec.is_encoder
                                               and not sliding_window_mask(spec, setup))
        kv_eff = kv if gqa_native else a
        if fam.kv_broadcast_copies:
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
        if fam.sdpa_saves == "fused_output":
            # q, k and v are all views of c_attn's output: sdpa keeps the fused (b, s, 3h) tensor
            add("qkv_fused_out", "attention", c * (a * d + 2 * kv * d))
        elif fam.sdpa_saves == "rotary_qk_fused_output":
            # rotary makes new q and k; v stays a view of the fused output, which stays alive whole
            add("q", "attention", c * a * d)
            add("k", "attention", c * kv * d)
            add("qkv_fused_out", "attention", c * (a * d + 2 * kv * d))
            if fam.sdpa_padding_mask and setup.attn == "sdpa":  # Qwen1 without flash-attn: its per-layer mask (note above)
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
    if fam.eager_softmax == "sink":
        sink_softmax_terms(spec, setup, add, s=s)
        add("o_input", "attention", c * a * dv)
        return
    fp32_softmax = fam.eager_softmax == "fp32_cast"
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


def mla_terms(spec: ModelSpec, setup: TrainingSetup, add) -> None:
    """DeepSeek-V2/V3 multi-head latent attention (modeling_deepseek_v3.py)."""
    h, a = spec.hidden_size, spec.num_attention_heads
    c = compute_bytes(setup)
    r = residual_bytes(setup)
    qr, kvr = spec.q_lora_rank, spec.kv_lora_rank or 0
    rope, nope, dv = spec.qk_rope_head_dim or 0, spec.qk_nope_head_dim or 0, spec.v_head_dim
    n_in = 2 if qr else 2
    add("qkv_input", "attention", linear_inputs_saved(setup, n_in, h), tp_split=False)
    if qr:
        add("q_a", "attention", (4.0 + r) * qr + c * qr, tp_split=False)
    add("kv_a", "attention", c * (kvr + rope) + (4.0 + r) * kvr + c * kvr, tp_split=False)
    add("q_k_v", "attention", c * a * (2 * (nope + rope) + dv))
    add("attn_out", "attention", c * a * dv + 4.0 * a)


def te_output_projection(terms: list[Term], add, c: int, width: int) -> None:
    """A ``te.Linear`` output projection saves its own fp8 copy of the attention output (1 B), not the 16-bit
    tensor: the copy o_proj alone kept (``o_input``) goes; the attention kernel's own saved output stays."""
    for i, t in enumerate(terms):
        if t.name == "o_input":
            terms[i] = Term(t.name, t.component, t.bytes // c, t.tp_split)
            return
    add("o_input_fp8", "attention", 1.0 * width)


def sink_softmax_bytes_per_token(spec: ModelSpec, setup: TrainingSetup, s: int) -> dict[str, float]:
    """What gpt_oss's eager attention keeps between its scores and P·V, in bytes per query token (all heads),
    keys ``s`` (transformers/models/gpt_oss/modeling_gpt_oss.py @ 5.24.0, ``eager_attention_forward``):

    - ``torch.cat([attn_weights, sinks], dim=-1)`` appends each head's learned sink logit as one more key
      column: the scores become (b, a, s, s + 1); ``cat`` keeps nothing;
    - ``combined_logits - combined_logits.max(dim=-1, keepdim=True).values``: ``max`` keeps its int64
      argmax, one per row of each head (8·a);
    - ``F.softmax(..., dtype=combined_logits.dtype)`` keeps its (b, a, s, s + 1) output in the scores' dtype
      (:func:`eager_softmax_bytes`): fp32 where adding the additive mask of an fp32 residual stream promotes
      the 16-bit autocast ``matmul`` scores (:func:`sink_scores_promoted`), else the compute dtype;
    - ``probs[..., :-1]`` (the sink column dropped) is a view: without promotion ``.to(value dtype)`` is a
      no-op and the P·V ``matmul`` keeps that view (bmm takes the row stride s + 1; no copy, traced); promoted,
      ``.to`` makes the 16-bit (b, a, s, s) copy the matmul keeps (2·a·s).
    With attention dropout (p > 0) the dropout keeps its bool mask (a·s) and P·V the dropout output instead
    of the view (not promoted: c·a·s; promoted: still the 16-bit cast).

    Sliding-window layers (``sliding_window``) keep the same: the window is an additive mask over the full
    (s, s) scores, not a slice of them."""
    a = spec.num_attention_heads
    c = compute_bytes(setup)
    promoted = sink_scores_promoted(setup)
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


def sink_scores_promoted(setup: TrainingSetup) -> bool:
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
    (:func:`sink_scores_promoted`), else 16-bit (traced: its 16-bit backward holds two (b, a, s, s + 1) 16-bit
    gradients beyond what it saved)."""
    kind = layer_family(spec).eager_softmax
    if kind == "sink":
        return max(compute_bytes(setup), residual_bytes(setup))
    return compute_bytes(setup) if kind == "compute" else 4


def sink_softmax_terms(spec: ModelSpec, setup: TrainingSetup, add, *, s: int) -> None:
    """gpt_oss's eager scores → probabilities (:func:`sink_softmax_bytes_per_token`)."""
    for name, per_token in sink_softmax_bytes_per_token(spec, setup, s).items():
        add(name, "attention", per_token)


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
