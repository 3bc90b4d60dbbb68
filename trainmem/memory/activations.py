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

This module assembles a layer (:func:`layer_saved`: the norms, the attention block, the MLP block, dropout,
LoRA, then tensor/sequence parallelism); the terms live by concern in :mod:`trainmem.memory.layers`:

- ``layers/base.py``: :class:`Term`, :class:`LayerSaved`, :data:`LAYER_MODELS`, the precision class and kernel
  choice of a setup;
- ``layers/norms.py``, ``layers/attention.py``, ``layers/mlp.py``: each block's saved tensors;
- ``layers/lora.py``: a frozen base, the adapters, LoRA's frames;
- ``layers/model_wide.py``: embedding, head, what every layer shares, the checkpointed input;
- ``memory/gpt_oss_frames.py``: gpt_oss's transients (built on :func:`layer_saved`).
Import a term from the module that defines it; this module exports :func:`layer_saved` only.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

from trainmem.memory.layers.attention import core_attention_terms, mla_terms, te_output_projection
from trainmem.memory.layers.base import (LAYER_MODELS, LayerSaved, Term, compute_bytes, derived_attn, derived_mode,
                                         linear_inputs_saved, te_fp8_linears)
from trainmem.memory.layers.family import LayerFamily, layer_family
from trainmem.memory.layers.lora import lora_terms
from trainmem.memory.layers.mlp import mlp_terms, moe_terms
from trainmem.memory.layers.norms import (layernorm1p_weight_bytes, norm_output_shared, norm_saved_per_elem,
                                          qk_norm_saved_per_elem)
from trainmem.model.spec import ModelSpec

if TYPE_CHECKING:  # (annotations only: no import of trainmem.setup, which validates with this module)
    from trainmem.setup import TrainingSetup

__all__ = ["layer_saved"]


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
    terms: list[Term] = []

    def add(name: str, component: str, per_token: float, tp_split: bool = True) -> None:
        terms.append(Term(name, component, int(round(per_token * T)), tp_split))

    te = te_fp8_linears(setup, fp8)
    fam = layer_family(spec)
    _attention_block_terms(spec, setup, fam, terms, add, te)
    _mlp_block_terms(spec, setup, fam, add, layer_idx, te)
    _dropout_terms(spec, setup, add, s=s)
    if setup.kernels == "unsloth":  # unsloth's fused LoRA, RMSNorm and RoPE kernels (memory/unsloth.py)
        from trainmem.memory.unsloth import unsloth_layer_terms
        terms = unsloth_layer_terms(spec, setup, layer_idx, terms, lora_terms)
    elif setup.is_lora:
        terms = lora_terms(spec, setup, layer_idx, terms)
    if setup.qlora and setup.qlora_impl == "bnb-legacy":  # bitsandbytes < 0.43.2 keeps each 4-bit linear's input
        terms.append(_bnb_legacy_term(spec, setup, layer_idx, T))
    if setup.load_in_8bit:  # LLM.int8: MatMul8bitLt keeps A and CAt (memory/int8.py)
        from trainmem.memory.int8 import int8_saved_bytes_per_token
        from trainmem.memory.bnb_legacy import legacy_input_conditions
        keeps, frozen = legacy_input_conditions(spec, setup, layer_idx)
        terms.append(Term("int8_matmul_saved", "mlp", int8_saved_bytes_per_token(spec, setup, layer_idx, keeps, frozen) * T, False))
    return _sharded(terms, setup)


def _attention_block_terms(spec: ModelSpec, setup: TrainingSetup, fam: LayerFamily, terms: list[Term], add,
                           te: bool) -> None:
    """The input norm and the attention (MLA, or q/k/v's inputs, q/k norms, the core, TE's output projection)."""
    h, a, kv, d, dv = spec.hidden_size, spec.num_attention_heads, spec.num_kv_heads, spec.head_dim, spec.v_head_dim
    c = compute_bytes(setup)
    add("input_norm", "norm", norm_saved_per_elem(spec, setup) * h, tp_split=False)
    if fam.layernorm_1p:  # input and post-attention LayerNorm1P: their weight + 1 (and bias) copies
        terms.append(Term("norm_weight_plus_one", "norm", 2 * layernorm1p_weight_bytes(spec, setup), False))
    if spec.q_lora_rank is not None or spec.kv_lora_rank is not None:
        mla_terms(spec, setup, add)
        return
    one_input = fam.fused_qkv_linear or norm_output_shared(spec, setup)
    add("qkv_input", "attention", linear_inputs_saved(setup, 1 if one_input else 3, h, te), tp_split=False)
    if fam.qk_norm != "none":  # q_norm/k_norm (RMSNorm over head_dim) on q and k, plus one fp32 rsqrt per head row
        add("qk_norm", "attention", (qk_norm_saved_per_elem(spec, setup) * d + 4.0) * (a + kv))
    core_attention_terms(spec, setup, add, s=setup.seq_len // setup.cp, b=setup.micro_batch)
    if te:
        te_output_projection(terms, add, c, a * dv)


def _mlp_block_terms(spec: ModelSpec, setup: TrainingSetup, fam: LayerFamily, add, layer_idx: int, te: bool) -> None:
    """The post-attention norm(s) and the MLP: dense, or the MoE block on ``spec.moe_layer_indices``."""
    h = spec.hidden_size
    if spec.parallel_residual and fam.parallel_norms_share_input:
        # both norms read the same residual tensor: the second keeps only its mean/rstd rows
        add("post_attention_norm", "norm", 8.0, tp_split=False)
    elif not spec.parallel_residual:
        add("post_attention_norm", "norm", norm_saved_per_elem(spec, setup) * h, tp_split=False)
    if fam.sandwich_norms:
        # post_attention_layernorm + post_feedforward_layernorm outputs feed residual adds: each keeps
        # its fp32 input copy and normalised value (8 B) on the attention and MLP outputs.
        add("post_sublayer_norms", "norm", 2 * 8.0 * h, tp_split=False)
    if layer_idx in spec.moe_layer_indices:
        moe_terms(spec, setup, add)
    else:
        mlp_terms(spec, setup, add, spec.intermediate_size, te)


def _sharded(terms: list[Term], setup: TrainingSetup) -> LayerSaved:
    """Tensor / sequence parallelism over the terms (the same for every family, ``layers/family.py``)."""
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
    from trainmem.memory.bnb_legacy import legacy_input_conditions, legacy_matmul4bit_input_bytes_per_token
    keeps_out, frozen_input = legacy_input_conditions(spec, setup, layer_idx)
    per_token = legacy_matmul4bit_input_bytes_per_token(spec, setup, layer_idx, keeps_out, frozen_input)
    return Term("bnb_legacy_matmul4bit_input", "mlp", per_token * tokens, False)


def _dropout_terms(spec: ModelSpec, setup: TrainingSetup, add, *, s: int) -> None:
    """nn.Dropout in training keeps a bool mask (1 B per element) per site (native_dropout)."""
    p = spec.hidden_dropout
    if p <= 0:
        return
    h = spec.hidden_size
    n_sites = 2  # after attention output projection and after the MLP
    add("dropout_masks", "dropout", 1.0 * n_sites * h, tp_split=False)
