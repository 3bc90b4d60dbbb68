"""Which of a decoder block's linears torchtitan's op-level selective checkpointing saves: the ``aten`` op each runs.

torchtitan 0.2.2 ``torchtitan/distributed/activation_checkpoint.py`` ``_apply_op_sac._get_custom_policy`` tags
MUST_SAVE the outputs of the ops in ``op_sac_save_list`` (``torchtitan/models/llama3/infra/parallelize.py``
``_op_sac_save_list``: ``aten.mm``, the SDPA kernels, flex/varlen attention, ``reduce_scatter_tensor``,
``aten.max``) except every second ``aten.mm`` (``meta[mm_count_key]``: only ``aten.mm`` increments it), and
PREFER_RECOMPUTE everything else. ``aten.addmm`` is not in the list: a linear that runs it is recomputed in
backward and does not move the counter.

Which op a linear runs (torch 2.13 ``aten/src/ATen/native/Linear.cpp`` ``linear``): with a bias and a 2-D input,
or a contiguous 3-D (strided) input, ``at::addmm(bias, input, weight.t())`` (``_flatten_nd_linear``); without a
bias, ``matmul`` folds the batch into ``at::mm``. transformers' Conv1D (GPT-2; ``pytorch_utils.py``) always calls
``torch.addmm(self.bias, ...)``; Falcon's ``FalconLinear`` (modeling_falcon.py) computes ``input @ weight.T``
and adds the bias after (an ``aten.mm`` with or without bias). Each block's inputs to its linears are contiguous
(the norms' outputs, the attention output after ``transpose(1, 2).contiguous()``, the MLP products).
Which linears carry such a bias is each family's description (``layers/family.py`` ``LayerFamily.addmm_bias``,
from the transformers 5.24 modeling files; Qwen1: the hub's remote ``modeling_qwen.py``), traced on fake tensors
(trainmem/trace/op_sac.py; tests/trace/test_op_sac_trace.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from trainmem.memory.layers.family import layer_family
from trainmem.model.spec import ModelSpec

__all__ = ["OpSacLinear", "block_linears", "moe_block_linears", "moe_fallback_offsets_bytes", "op_sac_saved_mm_width"]


@dataclass(frozen=True, slots=True)
class OpSacLinear:
    """One linear of a decoder block, in call order."""

    width: int
    """Output features per token (the whole layer's, before tensor parallelism)."""
    mm: bool
    """Runs ``aten.mm`` (counted by the policy; odd-numbered ones saved); False: ``aten.addmm`` (recomputed)."""
    column: bool
    """Column-parallel under TP (its output is tp-local); row-parallel outputs are full-width partial sums."""


def _biases(spec: ModelSpec) -> tuple[bool, bool, bool, bool]:
    """(q/k/v, o, MLP up-side, MLP down) carry a bias *and* run ``aten.addmm``: the family's description
    (:attr:`~trainmem.memory.layers.family.LayerFamily.addmm_bias`, read against the spec's config)."""
    b, cfg = layer_family(spec).addmm_bias, spec.hf_config
    return b.qkv.of(cfg), b.o.of(cfg), b.up.of(cfg), b.down.of(cfg)


def _attention_linears(spec: ModelSpec) -> list[OpSacLinear]:
    """q, k, v (or the fused qkv), then o."""
    h, a, kv, d, dv = spec.hidden_size, spec.num_attention_heads, spec.num_kv_heads, spec.head_dim, spec.v_head_dim
    qkv_b, o_b, _, _ = _biases(spec)
    if layer_family(spec).fused_qkv_linear:
        out = [OpSacLinear(a * d + kv * d + kv * dv, not qkv_b, True)]
    else:
        out = [OpSacLinear(w, not qkv_b, True) for w in (a * d, kv * d, kv * dv)]
    out.append(OpSacLinear(h, not o_b, False))
    return out


def block_linears(spec: ModelSpec) -> list[OpSacLinear]:
    """A dense decoder block's linears in the order its forward calls them: q, k, v (or the fused qkv), o, then
    gate and up (or the fused gate_up / the plain MLP's first linear), then down."""
    h, i = spec.hidden_size, spec.intermediate_size
    _, _, up_b, down_b = _biases(spec)
    fam = layer_family(spec)
    out = _attention_linears(spec)
    if fam.fused_gate_up:
        out.append(OpSacLinear(2 * i, not up_b, True))
    else:
        out += [OpSacLinear(i, not up_b, True)] * (2 if spec.mlp_gated else 1)
    out.append(OpSacLinear(h, not down_b, False))
    return out


_MOE_BLOCKS = ("mixtral", "qwen2_moe", "qwen3_moe")
"""The MoE blocks whose op order is read (transformers 5.24): ``MixtralSparseMoeBlock``,
``Qwen2MoeSparseMoeBlock``, ``Qwen3MoeSparseMoeBlock``. Other MoE families keep plan.py's ``_selective``."""


def moe_block_linears(spec: ModelSpec) -> list[OpSacLinear] | None:
    """An MoE decoder block's ``aten.mm`` / ``aten.addmm`` in call order, or None where the block is not read.

    transformers 5.24: the router (``MixtralTopKRouter`` / ``Qwen2MoeTopKRouter`` / ``Qwen3MoeTopKRouter``) is
    ``F.linear(hidden_states, self.weight)`` without bias: one ``aten.mm`` of width num_experts, counted by the
    policy; its softmax / topk / renormalisation are recomputed. The routed experts run
    ``integrations/moe.py`` ``grouped_mm_experts_forward`` (the default experts implementation; trace/moe.py):
    ``aten._grouped_mm`` on CUDA bf16, the custom op ``transformers::grouped_mm_fallback`` otherwise. Neither is
    in torchtitan 0.2.2's ``_op_sac_save_list`` (models/llama3/infra/parallelize.py, the list modelled; its own
    MoE models' lists add ``all_to_all_single``, an expert-parallel collective HF experts do not run), and
    neither is ``aten.mm``: the experts' matmuls, their sort / gather / scatter and the routing weights are
    recomputed and do not move the counter. Qwen2-MoE (``Qwen2MoeSparseMoeBlock.forward``) runs its shared
    expert first (gate, up, down: bias-free ``Qwen2MoeMLP``, all ``aten.mm``), then the router, the experts, and
    ``shared_expert_gate`` (a bias-free hidden→1 linear, ``aten.mm``). Router and shared-expert gate outputs
    are replicated under TP (column False: not ÷ tp). The experts' implementation ``eager`` (a per-expert
    ``F.linear`` loop, data-dependent ``aten.mm`` count) is not modelled."""
    if spec.model_type not in _MOE_BLOCKS:
        return None
    h, n_exp = spec.hidden_size, spec.num_experts
    out = _attention_linears(spec)
    router = OpSacLinear(n_exp, True, False)
    if layer_family(spec).shared_expert_gate:  # (Qwen2-MoE: shared expert, router, experts, its gate)
        si = spec.shared_expert_intermediate_size
        out += [OpSacLinear(si, True, True), OpSacLinear(si, True, True), OpSacLinear(h, True, False), router,
                OpSacLinear(1, True, False)]
    else:
        out.append(router)
    return out


def moe_fallback_offsets_bytes(num_experts: int, precision: str) -> int:
    """What an MoE block keeps outside the policy's reach: transformers 5.24 ``integrations/moe.py``
    ``_grouped_mm_fallback_setup_context`` stores the int32 expert offsets (``torch.cumsum(..., dtype=int32)``,
    one per expert, shared by the experts' projections) as ``ctx.offs``, an attribute, not a saved tensor, so
    the checkpoint cannot drop it. The fallback runs unless input and weights are bf16 (``_can_use_grouped_mm``
    on CUDA sm80+, trace/moe.py): every precision but pure bf16. ``aten._grouped_mm`` saves through autograd
    (dropped). Bytes per layer and micro-batch."""
    return 0 if precision == "bf16" else 4 * num_experts


def op_sac_saved_mm_width(linears: list[OpSacLinear], tp: int) -> float:
    """Output features per token the policy saves of the block's linears on one rank: the 1st, 3rd, … ``aten.mm``
    (addmm ones neither saved nor counted); column-parallel outputs ÷ tp."""
    mms = [ln.width / tp if ln.column else ln.width for ln in linears if ln.mm]
    return sum(w for n, w in enumerate(mms, start=1) if n % 2 == 1)
