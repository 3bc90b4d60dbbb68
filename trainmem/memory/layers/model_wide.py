"""What is saved once per model rather than per layer: the embedding stage, the final norm and LM-head input,
the tensors every layer shares (rotary cos/sin, masks), and what a fully recomputed layer's saved tensors share
with its checkpointed input."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainmem.memory.layers.base import (LAYER_MODELS, additive_mask_bytes, compute_bytes, derived_attn, derived_mode,
                                        is_amp, lora_input_requires_grad, opt_embed_proj_dim, opt_final_layer_norm,
                                        opt_post_ln, residual_bytes, sliding_window_mask, torch_cp)
from trainmem.memory.layers.family import layer_family
from trainmem.memory.layers.lora import opt_proj_adapter_bytes
from trainmem.memory.layers.norms import norm_saved_per_elem
from trainmem.model.spec import ModelSpec

if TYPE_CHECKING:  # (annotations only: no import of trainmem.setup, which validates with these modules)
    from trainmem.setup import TrainingSetup

__all__ = ["recomputed_checkpoint_input_bytes", "checkpoint_input_elem_bytes", "embedding_saved",
           "model_wide_saved_bytes", "head_saved"]


def recomputed_checkpoint_input_bytes(spec: ModelSpec, setup: TrainingSetup) -> int:
    """Bytes of a fully recomputed (non-reentrant checkpoint) layer's saved tensors that are its checkpointed
    input itself, which the checkpoint already holds (the walk's ``act`` block): not allocated twice (traced).

    - gpt_oss with an fp32 residual stream: the input RMSNorm's ``x.to(float32)`` is x itself;
    - nemotron: ``NemotronLayerNorm1P`` keeps its input as given without autocast (with autocast, its 16-bit
      cast: a new tensor, :func:`layernorm1p`);
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
    fam, r = layer_family(spec), residual_bytes(setup)
    held = r * spec.hidden_size * (setup.micro_batch * setup.seq_len // setup.cp) // (setup.tp if setup.sp else 1)
    if spec.norm == "rmsnorm":
        # Llama/Qwen/Mistral/Phi-3/gpt_oss (``x.to(float32)``) and Gemma (``x.float()``) RMSNorms on an fp32 stream
        return held if r == 4 and (fam.fp32_norm_input_held_under_lora or not setup.is_lora) else 0
    # LayerNorm families (LayerFamily.norm_keeps_layer_input): pre-LN nn.LayerNorm reads the layer's input as it
    # is (fp32 under autocast: an fp32-list op on the fp32 stream) and keeps it; LayerNorm1P and post-LN OPT's
    # q/k/v_proj keep a 16-bit cast of it under autocast
    keeps = fam.norm_keeps_layer_input
    if setup.is_lora or keeps == "never" or (keeps == "without_autocast" and is_amp(setup)):
        return 0
    return held


def checkpoint_input_elem_bytes(spec: ModelSpec, setup: TrainingSetup, layer: int = 0) -> int:
    """Bytes per element of a checkpointed layer's input: the residual stream's, except post-LN OPT under
    LoRA with autocast, whose layers hand on ``final_layer_norm``'s output: fp32 (layer_norm is an fp32-list
    op under CUDA autocast) although the 16-bit base makes the stream 16-bit elsewhere (traced). ``--kbit-prep
    peft``: fp32 as well — PEFT's ``prepare_model_for_kbit_training`` leaves the embedding fp32 (its output is fp32,
    the residual adds promote) and bitsandbytes' ``Linear4bit`` returns its output in its input's dtype
    (``bnb.matmul_4bit(x.to(compute_dtype), ...).to(inp_dtype)``, bitsandbytes/nn/modules.py 0.42.0, 0.45.0, 0.50),
    so every decoder layer reads an fp32 hidden state (trainmem/memory/kbit_prep.py). ``norms-fp32``: every decoder
    ``layer`` after the first — layer 0 reads the bf16 embedding, its fp32 norm output makes the norm-fed linears'
    outputs fp32 and the residual add promotes (a tiny Qwen2's forward: tests/memory/test_kbit_prep.py)."""
    if opt_post_ln(spec) and setup.is_lora and is_amp(setup):
        return 4
    if setup.is_lora and (setup.kbit_prep == "peft" or (setup.kbit_prep == "norms-fp32" and layer > 0)):
        return 4
    return residual_bytes(setup)


def embedding_saved(spec: ModelSpec, setup: TrainingSetup) -> int:
    """Bytes kept by the embedding stage per micro-batch: token ids are int64 (8 B/token, kept by the
    embedding backward), learned positions similarly, plus an embedding dropout mask."""
    T = setup.micro_batch * setup.seq_len // setup.cp
    b = 8 * T
    if spec.position == "learned":
        b += 8 * T
    fam = layer_family(spec)
    if spec.hidden_dropout > 0 and fam.embedding_dropout:
        b += T * spec.hidden_size
    if fam.embed_projections and setup.is_lora and lora_input_requires_grad(setup):
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


def model_wide_saved_bytes(spec: ModelSpec, setup: TrainingSetup) -> int:
    """Tensors created once per forward and kept by every layer: rotary cos/sin (1, s, d) in the
    residual dtype (2 tensors). (Eager attention's additive causal mask (b, 1, s, s) is added, never
    saved: it lives only during the forward.)"""
    if spec.derived is not None:  # measured: what the layers of a derived family share (trainmem/model/derive.py)
        d = spec.derived.for_target(setup) if hasattr(spec.derived, "for_target") else spec.derived
        return d.wide(derived_mode(setup), derived_attn(setup), setup.seq_len).bytes_for(
            setup.micro_batch, setup.seq_len)
    s = setup.seq_len // setup.cp
    out = 0
    if spec.position == "rope":
        # position_ids default to arange(s)[None]: cos/sin are (1, s, d), broadcast over the batch; with CP
        # the sharded positions are passed, arange(s).expand(b, s) (torchtitan prepare_context_parallel_input)
        rope_dim = spec.rotary_dim or spec.qk_rope_head_dim or spec.head_dim  # (nemotron: partial RoPE)
        if layer_family(spec).rope_half_width:
            # GptOssRotaryEmbedding.forward: ``emb = freqs`` (no cat(freqs, freqs)): (1, s, d/2) cos and sin,
            # each applied to both halves (modeling_gpt_oss.py @ 5.24.0 ``_apply_rotary_emb``)
            rope_dim = spec.head_dim // 2
        out += 2 * s * rope_dim * residual_bytes(setup) * (setup.micro_batch if torch_cp(setup) else 1)
    if sliding_window_mask(spec, setup):
        out += s * setup.seq_len  # the (1, 1, s, s) bool mask, kept by every layer's kernel
    if layer_family(spec).checkpoint_holds_eager_mask and setup.attn == "eager" and setup.recompute == "full":
        # non-reentrant checkpointing holds each layer's inputs, its additive mask among them, until that
        # layer's backward: layer 0's mask lives to the end of the backward (gpt_oss_forward_frame_bytes;
        # nemotron and opt: the one (b, 1, s, s) ``create_causal_mask`` mask in inputs_embeds' dtype, traced)
        out += additive_mask_bytes(setup)
    return out


def head_saved(spec: ModelSpec, setup: TrainingSetup, lm_input: bool = True) -> int:
    """Final norm + LM-head input kept for backward (the logits and loss are in :mod:`loss`);
    ``lm_input=False``: the final norm's only (a fused linear cross-entropy keeps no head input)."""
    T = setup.micro_batch * setup.seq_len // setup.cp
    h = spec.hidden_size
    norm = norm_saved_per_elem(spec, setup) * h
    lm_in = (2.0 if is_amp(setup) else float(residual_bytes(setup))) * h if lm_input else 0.0
    if setup.is_lora:  # frozen LM head: no input kept; frozen final RMSNorm weight (see lora_terms)
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
        return int(T * (lm_in + 2 * c * h + norm_saved_per_elem(spec, setup) * h + lm_in))
    if layer_family(spec).embed_projections:
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
