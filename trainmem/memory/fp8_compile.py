"""fp8 linears (torchao ``Float8Linear``, tensorwise dynamic scaling: torchtitan's ``[float8]`` default) under
``--compile``, and FSDP2's float8 all-gather (``enable_fsdp_float8_all_gather``).

Compiled, what a ``Float8Linear`` keeps is not its autograd Function's ``save_for_backward`` (torchao 0.7.0,
2024-12, ``float8/float8_linear.py`` ``manual_float8_matmul_with_args_in_float8`` saves ``input_fp8`` and
``weight_fp8_t``; torchao 0.11.0, 2025-05, ``matmul_with_hp_or_float8_args`` saves ``input_hp`` and
``weight_hp_t``): AOTAutograd traces the Float8Tensor subclass down to plain aten ops (``abs``/``max`` for the
amax, ``reciprocal``/``mul``/``clamp``/``convert_element_type`` to float8_e4m3fn, ``_scaled_mm``) and the min-cut
partitioner (torch 2.13 ``torch/_functorch/partitioners.py``) re-decides the saved set from the joint graph, the
same for both releases. Traced (``aot_eager_decomp_partition``, fake tensors, llama-3.1-8b's block at b 2 × s 8192,
and a tiny llama block on real CPU tensors; torchao 0.7.0 and 0.11.0 on torch 2.13 CPU, whose ``_scaled_mm`` has a
meta kernel): against the bf16 compiled block (:func:`trainmem.memory.compile.compiled_layer_saved`)

- the inputs of q/k/v_proj, gate/up_proj and down_proj are no longer saved: their fp8 casts are pointwise from
  the layer input, the rsqrt rows, o_proj's output and gate/up (all saved anyway) and one saved fp32 scale each,
  so the partitioner recomputes them in backward;
- o_proj's input is saved once more as an fp8, column-major copy (``clone`` of its transpose, the ``_scaled_mm``
  operand of the weight gradient): 1 B per element, ``a · head_dim`` per token, beside the bf16 attention output
  the SDPA backward keeps;
- every linear's scale (and amax) is a 0-d tensor (a few dozen bytes per layer: not counted);
- the fp8 weights are recomputed from the (gathered) parameters: nothing per weight is saved.

For llama-3.1-8b that is 98,440 B per token per layer against 139,400 bf16 (traced exactly). Under torchtitan's
op-level SAC (``--recompute selective``) nothing changes: its policy sees ``aten.mm`` on the Float8Tensor subclass
(the SAC dispatch mode runs before the subclass' ``__torch_dispatch__``, which then calls ``_scaled_mm``), so it
saves the same bf16 matmul outputs as without fp8 (55,424 B per token per layer traced, = the bf16 policy; with
9dec370's extra ``aten.abs`` too). Under ``--recompute full`` the block keeps its input, its recompute is this set.

The trace needs torchao, which is not a trainmem dependency: tests/memory/test_fp8_compile.py checks the formula
by hand and against the partitioner where torchao is importable.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainmem.memory.layers.base import Term

if TYPE_CHECKING:
    from trainmem.model.spec import ModelSpec
    from trainmem.setup import TrainingSetup

__all__ = ["FP8_COMPILE_FAMILIES", "FP8_RECOMPUTED_TERMS", "torchao_compiled_fp8", "compiled_fp8_terms",
           "fp8_o_input_bytes_per_token", "fsdp_float8_gathered_bytes"]

#: Families whose compiled fp8 block was traced (the llama block; mistral's is the same without a window).
FP8_COMPILE_FAMILIES = ("llama", "mistral")
#: The bf16 compiled block's terms whose fp8 casts the partitioner recomputes instead of saving.
FP8_RECOMPUTED_TERMS = ("qkv_input", "mlp_input", "mlp_down_input")


def torchao_compiled_fp8(setup: TrainingSetup, fp8: bool) -> bool:
    """An fp8 run (``fp8``, or the setup's own precision) whose linears are torchao ``Float8Linear``."""
    return (fp8 or setup.precision == "fp8") and setup.engine != "megatron" and setup.fp8_backend == "torchao"


def fp8_o_input_bytes_per_token(spec: ModelSpec) -> float:
    """o_proj's fp8 column-major input copy: 1 B × heads × head_dim per token (module docstring)."""
    return float(spec.num_attention_heads * spec.head_dim)


def compiled_fp8_terms(spec: ModelSpec, terms: list[Term], tokens: int) -> list[Term]:
    """A compiled bf16 block's terms turned into the compiled torchao-fp8 block's: the linear inputs in
    :data:`FP8_RECOMPUTED_TERMS` go, o_proj's fp8 input copy comes (``tokens`` on this rank)."""
    out = [t for t in terms if t.name not in FP8_RECOMPUTED_TERMS]
    out.append(Term("o_input_fp8", "attention", int(round(fp8_o_input_bytes_per_token(spec) * tokens)), False))
    return out


def fsdp_float8_gathered_bytes(n_params: int, n_fp8: int) -> int:
    """Bytes FSDP2 all-gathers for a unit of ``n_params`` parameters, ``n_fp8`` of them ``Float8Linear`` weights
    under ``enable_fsdp_float8_all_gather``: torchao ``float8/fsdp_utils.py`` (0.7.0 and 0.11.0)
    ``WeightWithDynamicFloat8CastTensor.fsdp_pre_all_gather`` returns ``(float8_tensor._data,)`` (1 B per element)
    and its scale as metadata; ``fsdp_post_all_gather`` wraps the gathered data in a ``Float8Tensor`` (no copy),
    which the forward uses as its fp8 weight. The unit's other parameters (norm weights) stay 16-bit (2 B)."""
    return n_fp8 + 2 * (n_params - n_fp8)
