"""LoRA over LLM.int8 base weights (``--load-in-8bit``: HF ``load_in_8bit=True`` / ``BitsAndBytesConfig(
load_in_8bit=True)``, axolotl ``load_in_8bit: true``), as bitsandbytes 0.41 runs it (the 2023 releases axolotl and
PEFT used; ``bitsandbytes/nn/modules.py`` and ``bitsandbytes/autograd/_functions.py`` at tag 0.41.0).

Weights (``Int8Params.cuda``): ``CB, CBt, SCB, SCBt, coo = double_quant(B); del CBt; del SCBt; self.data = CB`` —
1 B per weight (int8, row-major) and ``SCB``, one fp32 absmax per output row. ``Linear8bitLt.forward`` then
moves both to its ``MatmulLtState`` and, after the first pass on a GPU with igemmlt (compute capability >= 7.5),
replaces the row-major weight by its tiled copy (``del self.state.CB; self.weight.data = self.state.CxB``): still
1 B per weight. Every ``nn.Linear`` of the decoder layers is converted; the LM head is not (transformers'
``get_keys_to_not_convert``), as under 4-bit.

``MatMul8bitLt.forward`` (frozen weights, ``has_fp16_weights=False``, ``threshold`` 6.0)::

    CA, CAt, SCA, SCAt, coo_tensorA = F.double_quant(A.to(torch.float16), threshold=state.threshold)
    ...
    C32A, SA = F.transform(CA, "col32")
    out32, Sout32 = F.igemmlt(C32A, state.CxB, SA, state.SB)
    output = F.mm_dequant(out32, Sout32, SCA, state.SCB, bias=bias)
    ...
    if any(ctx.needs_input_grad[:2]):
        ctx.tensors = (CAt, subA, A)
    else:
        ctx.tensors = [None, None, A]

So each int8 linear keeps its 16-bit input ``A`` (always, even when nothing needs its gradient) and, when the
input needs a gradient, ``CAt`` — an int8 copy of A, 1 B per element, its own per linear — plus ``subA`` (A's
outlier columns, data-dependent, not counted). ``A`` is the tensor the linear was given, so linears that read one
tensor keep it once (as :mod:`trainmem.memory.bnb_legacy` counts the 4-bit linears' inputs). ``ctx.tensors`` is
a plain attribute: under HF's reentrant checkpointing only the layer being recomputed keeps them. Current
bitsandbytes (0.45+) keeps ``(None, subA, A)`` for frozen weights (no CAt); not modelled here.

The forward's temporaries at its widest linear (``in`` → ``out``, ``T`` tokens): CA, CAt and C32A (3 B · T · in)
and the int32 ``out32`` with the 16-bit ``output`` dequantised from it (6 B · T · out).

Core module: no torch import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainmem.memory.bnb_legacy import _READ_ORDER, first_adapted_read_order, legacy_matmul4bit_input_bytes_per_token
from trainmem.model.lora_targets import layer_linears
from trainmem.units import round_up_bytes

if TYPE_CHECKING:
    from trainmem.model.spec import ModelSpec
    from trainmem.setup import TrainingSetup

__all__ = ["INT8_NOTE", "int8_base_bytes", "int8_saved_bytes_per_token", "int8_forward_transient_bytes"]

INT8_NOTE = ("LLM.int8 base (--load-in-8bit, bitsandbytes 0.41): 1 B per decoder-layer linear weight + an fp32 "
             "absmax per output row; each int8 linear keeps its 16-bit input and an int8 copy of it (CAt) for "
             "backward; outlier columns (subA, data-dependent) not counted")


def int8_base_bytes(spec: ModelSpec, n_quantized: int) -> int:
    """Bytes of the int8 weights: 1 B per quantised weight and each linear's ``SCB`` (fp32 × out_features,
    rounded to the allocator's 512 B), over every decoder-layer linear (``Int8Params.cuda``, bitsandbytes 0.41)."""
    scb = sum(round_up_bytes(4 * lin.fout) for idx in range(spec.num_layers) for lin in layer_linears(spec, idx))
    return n_quantized + scb


def int8_saved_bytes_per_token(spec: ModelSpec, setup: TrainingSetup, layer_idx: int, kernel_keeps_out: bool,
                               input_frozen: bool) -> int:
    """Bytes per token a decoder layer's int8 linears keep for backward (module docstring): each distinct 16-bit
    input once (kept even without a gradient: ``ctx.tensors = [None, None, A]``; the attention output not when
    the fused kernel keeps it) and 1 B per input element per linear whose input needs a gradient (``CAt``). With
    ``input_frozen`` (layer 0 of a run whose input needs no grad) the linears read up to the first adapted one
    keep no CAt."""
    a_bytes = legacy_matmul4bit_input_bytes_per_token(spec, setup, layer_idx, kernel_keeps_out, False)
    first_adapted = first_adapted_read_order(spec, setup, layer_idx, input_frozen)
    cat_bytes = sum(lin.fin for lin in layer_linears(spec, layer_idx) if _READ_ORDER.get(lin.reads, 0) > first_adapted)
    return a_bytes + cat_bytes


def int8_forward_transient_bytes(spec: ModelSpec, tokens: int) -> int:
    """The largest of one int8 linear's forward temporaries over the layer's linears: CA, CAt, C32A (1 B each per
    input element) and ``out32`` (int32) with the 16-bit ``output`` (6 B per output element). CAt is also counted
    as saved; here it is the moment of the matmul."""
    return max((3 * tokens * lin.fin + 6 * tokens * lin.fout for lin in layer_linears(spec, 0)), default=0)
