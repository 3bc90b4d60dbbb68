"""gpt_oss's transients beyond its saved tensors: the eager sink attention's forward peak and backward, the
forward frame and peak of a layer, and the frame of a fully recomputed layer (transformers 5.24.0
models/gpt_oss/modeling_gpt_oss.py, integrations/moe.py; traced: tests/trace/test_gpt_oss_trace.py). Built on
:func:`trainmem.memory.activations.layer_saved`, which is why it is not in :mod:`trainmem.memory.layers`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainmem.memory.activations import layer_saved
from trainmem.memory.layers.attention import eager_softmax_bytes, sink_scores_promoted
from trainmem.memory.layers.base import additive_mask_bytes, compute_bytes, expert_dtype_bytes, residual_bytes
from trainmem.memory.layers.family import layer_family
from trainmem.model.spec import ModelSpec, attention_layer_types

if TYPE_CHECKING:  # (annotations only: no import of trainmem.setup, which validates with these modules)
    from trainmem.setup import TrainingSetup

__all__ = ["sink_attention_backward_bytes", "sink_attention_forward_peak_bytes",
           "gpt_oss_expert_tail_bytes_per_pair", "gpt_oss_forward_frame_bytes", "gpt_oss_forward_peak_bytes",
           "gpt_oss_recompute_frame_bytes"]


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
    if layer_family(spec).transients != "gpt_oss" or setup.attn != "eager":
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
      fp32 stream (:func:`sink_scores_promoted`), where the fp32 cos/sin promote the rotary products, the fp32
      rotary q (a·d) and k (kv·d), the fp32 repeated k autocast's matmul cast from (a·d), and the decoder
      layer's fp32 norm output (h), of which each projection kept its own 16-bit cast.
    The tensors alive beside every layer's forward are :func:`gpt_oss_forward_frame_bytes`."""
    if layer_family(spec).transients != "gpt_oss" or setup.attn != "eager":
        return 0
    T = setup.micro_batch * setup.seq_len // setup.cp
    h, a, kv, d = spec.hidden_size, spec.num_attention_heads, spec.num_kv_heads, spec.head_dim
    c, sm, amp = compute_bytes(setup), eager_softmax_bytes(spec, setup), sink_scores_promoted(setup)
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
    if layer_family(spec).transients != "gpt_oss":
        return 0
    T = setup.micro_batch * setup.seq_len // setup.cp
    r = residual_bytes(setup)
    stream = 2 * r * spec.hidden_size * T // (setup.tp if setup.sp else 1) if r != 4 else 0
    n_masks = len(set(attention_layer_types(spec))) - (1 if setup.recompute == "full" else 0)
    return stream + (n_masks * additive_mask_bytes(setup) if setup.attn == "eager" else 0)


def gpt_oss_forward_peak_bytes(spec: ModelSpec, setup: TrainingSetup) -> int:
    """gpt_oss: the peak of one layer's forward above what was alive before the layer (``plan.fwd_tmp``,
    spiked at each layer's start): the forward frame (:func:`gpt_oss_forward_frame_bytes`) plus the larger of
    the eager attention's peak (:func:`sink_attention_forward_peak_bytes`) and the experts' tail, when all the
    layer's saved tensors exist (:func:`gpt_oss_expert_tail_bytes_per_pair`, k pairs per token); 0 for other
    families."""
    if layer_family(spec).transients != "gpt_oss":
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
    if layer_family(spec).transients != "gpt_oss" or setup.recompute != "full":
        return 0
    T = setup.micro_batch * setup.seq_len // setup.cp
    h, r, k = spec.hidden_size, residual_bytes(setup), spec.num_experts_per_tok
    ce = expert_dtype_bytes(setup)
    sp_div = setup.tp if setup.sp else 1
    trigger = ce * h * k * T // setup.tp
    frame = (r * h if r != 4 else 0) + (4 * h if sink_scores_promoted(setup) else 0)
    stop = (2 * ce * h + 8) * k * T // setup.tp + frame * T // sp_div
    saved = layer_saved(spec, setup, spec.moe_layer_indices[0] if spec.moe_layer_indices else 0).total_bytes
    masks = 0
    if setup.attn == "eager":
        masks = (len(set(attention_layer_types(spec)[:layer_idx + 1])) - 1) * additive_mask_bytes(setup)
    return trigger + masks + max(stop, sink_attention_forward_peak_bytes(spec, setup) - saved)
