"""bitsandbytes before 0.43.2: ``MatMul4Bit`` keeps its 16-bit input for backward (``--qlora-impl bnb-legacy``).

bitsandbytes/autograd/_functions.py, ``MatMul4Bit.forward`` at 0.41.x / 0.42.0::

    output = torch.nn.functional.linear(A, F.dequantize_4bit(B, quant_state).to(A.dtype).t(), bias)
    ...
    if any(ctx.needs_input_grad[:2]):
        ctx.tensors = (A, B)          # A: the layer's 16-bit input
    else:
        ctx.tensors = (None, None)

From 0.43.2 (PR #1270, "fix QLoRA mem bug: delete useless buffered activation", 2024-07-16) it keeps
``ctx.tensors = (None, B)``: the NF4 weight needs no gradient and the input's gradient needs only B, so A was
dead weight. ``Linear4bit.forward`` (bitsandbytes/nn/modules.py, same releases) first does
``x = x.to(self.compute_dtype)``: a 16-bit input is passed as it is (so every 4-bit linear reading the same
tensor keeps that one tensor), an fp32 one (the norm outputs under autocast) is cast anew by each linear.

``ctx.tensors`` is a plain attribute, not ``save_for_backward``: under HF's reentrant activation checkpointing
(``use_reentrant=True``) the checkpointed forward runs without a graph and nothing is kept, and the layer being
recomputed keeps its A's until its backward; that is what adding them to the layer's saved set models. Under
non-reentrant checkpointing the attribute would escape the checkpoint (not modelled).

Core module: no torch import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainmem.model.lora_targets import layer_linears
from trainmem.model.spec import ModelSpec

if TYPE_CHECKING:  # (annotations only: no import of trainmem.setup, which validates with this module)
    from trainmem.setup import TrainingSetup

__all__ = ["legacy_matmul4bit_input_bytes_per_token", "legacy_ctx_retained_bytes_per_token", "previous_graph_bytes",
           "legacy_input_conditions", "first_adapted_read_order"]

#: Inputs that are already kept whole by something else when the attention kernel keeps its output (o_proj /
#: c_proj read the fused kernel's output, which flash / memory-efficient SDPA save themselves).
_KERNEL_KEPT = frozenset({"attn_out"})


#: The order in which a decoder layer's linears read their inputs (forward order of ``LoraLinear.reads``).
_READ_ORDER = {"attn_in": 0, "q_a": 1, "kv_a": 1, "attn_out": 2, "mlp_in": 3, "shared_act": 4, "mlp_act": 4}


def legacy_input_conditions(spec: ModelSpec, setup: TrainingSetup, layer_idx: int) -> tuple[bool, bool]:
    """The two conditions on which bitsandbytes' legacy matmuls (``MatMul4Bit`` < 0.43.2, ``MatMul8bitLt`` 0.41)
    keep a decoder layer's 16-bit inputs, shared by ``--qlora-impl bnb-legacy`` and ``--load-in-8bit``:
    ``kernel_keeps_out`` — the fused attention kernel (SDPA flash / memory-efficient, flash-attn) saves its output
    itself, so o_proj's input is kept already; ``input_frozen`` — layer 0 of a run whose input needs no grad
    (no input-requires-grad hook: trainmem/memory/layers/base.py ``lora_input_requires_grad``)."""
    from trainmem.memory.layers.base import lora_input_requires_grad, sdpa_math_fallback

    keeps_out = setup.attn in ("sdpa", "flash") and not sdpa_math_fallback(spec, setup)
    return keeps_out, layer_idx == 0 and not lora_input_requires_grad(setup)


def first_adapted_read_order(spec: ModelSpec, setup: TrainingSetup, layer_idx: int, input_frozen: bool) -> int:
    """With ``input_frozen``: the ``_READ_ORDER`` rank of the layer's first adapted linear (its input and what is
    read before it need no grad; ``len(_READ_ORDER)`` when none is adapted); else -1 (every input needs grad)."""
    from trainmem.model.lora_targets import targeted_layer_linears

    if not input_frozen:
        return -1
    return min((_READ_ORDER.get(lin.reads, 0) for lin in targeted_layer_linears(spec, setup.lora_targets, layer_idx)),
               default=len(_READ_ORDER))


def legacy_matmul4bit_input_bytes_per_token(spec: ModelSpec, setup: TrainingSetup, layer_idx: int,
                                            kernel_keeps_out: bool, input_frozen: bool = False) -> int:
    """Bytes per token one decoder layer's 4-bit linears keep beyond current bitsandbytes: each distinct 16-bit
    input tensor once (2 B per element of its width; ``reads`` groups the linears that read one tensor), or,
    under autocast, one 16-bit cast per linear of the fp32 norm outputs (``attn_in``, ``mlp_in``); the
    attention output is not counted when the fused kernel already keeps it. Every ``nn.Linear`` of the layer is
    a 4-bit one under QLoRA (PEFT/HF ``load_in_4bit`` quantises all but the LM head).

    ``ctx.tensors = (A, B)`` only ``if any(ctx.needs_input_grad[:2])``: with ``input_frozen`` (the first layer
    of a run whose input needs no grad) an input requires grad only downstream of the layer's first adapter, so
    the groups read up to and including the first adapted linear's keep nothing."""
    amp = setup.precision.startswith("amp")
    first_adapted = first_adapted_read_order(spec, setup, layer_idx, input_frozen)
    seen: set[str] = set()
    total = 0
    for lin in layer_linears(spec, layer_idx):
        if (kernel_keeps_out and lin.reads in _KERNEL_KEPT) or _READ_ORDER.get(lin.reads, 0) <= first_adapted:
            continue
        per_linear = amp and lin.reads in ("attn_in", "mlp_in")
        if lin.reads in seen and not per_linear:
            continue
        seen.add(lin.reads)
        total += 2 * lin.fin
    return total



def legacy_ctx_retained_bytes_per_token(spec: ModelSpec, setup: TrainingSetup, layer_idx: int) -> int:
    """Bytes per token one decoder layer's ``MatMul4Bit`` nodes still hold once the backward has run.

    ``ctx.tensors`` is a plain attribute of the node's ctx: autograd releases what ``save_for_backward`` saved
    when the node's backward runs (``retain_graph=False``), not the ctx's attributes, which live as long as the
    graph does (torch/csrc/autograd/python_function.cpp: ``PyNode::release_variables`` clears
    ``saved_variables`` only; tests/memory/test_bnb_legacy_carry.py checks it on torch). Every input counts
    here, the attention output too: the fused kernel's own saved copy of it is gone with its backward."""
    _, frozen = legacy_input_conditions(spec, setup, layer_idx)
    return legacy_matmul4bit_input_bytes_per_token(spec, setup, layer_idx, False, frozen)


def previous_graph_bytes(spec: ModelSpec, setup: TrainingSetup, layer_ids: tuple[int, ...] | list[int],
                         tokens: int, logits_bytes: int) -> int:
    """``--script-keeps-graph``: what the previous micro-batch's graph holds while the next forward runs — its
    output (the logits, ``logits_bytes``) and, under ``qlora_impl`` bnb-legacy, each 4-bit linear's 16-bit
    input ``A`` on ``ctx.tensors`` (:func:`legacy_ctx_retained_bytes_per_token` × ``tokens`` per layer).

    litgpt finetune/lora.py ``fit`` (00af8b0d; lit-gpt 8641822 alike) runs ``logits = model(input_ids,
    lm_head_chunk_size=128)`` each iteration: the name is rebound only when the forward returns, so the old
    list of logit chunks, and through their ``grad_fn`` the whole old graph, is freed after the new forward
    and before its loss. 0 without the flag."""
    if not setup.script_keeps_graph:
        return 0
    ctx = 0
    if setup.qlora and setup.qlora_impl == "bnb-legacy":
        ctx = sum(legacy_ctx_retained_bytes_per_token(spec, setup, i) for i in layer_ids) * tokens
    return logits_bytes + ctx
