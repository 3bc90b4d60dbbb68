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
The flags below are those of the transformers 5.24 modeling files (Qwen1: the hub's remote ``modeling_qwen.py``),
traced on fake tensors (trainmem/trace/op_sac.py; tests/trace/test_op_sac_trace.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from trainmem.memory.layers.family import layer_family
from trainmem.model.spec import ModelSpec

__all__ = ["OpSacLinear", "block_linears", "op_sac_saved_mm_width"]


@dataclass(frozen=True, slots=True)
class OpSacLinear:
    """One linear of a decoder block, in call order."""

    width: int
    """Output features per token (the whole layer's, before tensor parallelism)."""
    mm: bool
    """Runs ``aten.mm`` (counted by the policy; odd-numbered ones saved); False: ``aten.addmm`` (recomputed)."""
    column: bool
    """Column-parallel under TP (its output is tp-local); row-parallel outputs are full-width partial sums."""


def _flag(spec: ModelSpec, key: str, default: bool) -> bool:
    cfg = spec.hf_config or {}
    value = cfg.get(key, default)
    return default if value is None else bool(value)


def _biases(spec: ModelSpec) -> tuple[bool, bool, bool, bool]:
    """(q/k/v, o, MLP up-side, MLP down) carry a bias *and* run ``aten.addmm`` (see the module docstring)."""
    mt = spec.model_type
    if mt == "gpt2":  # Conv1D: torch.addmm for c_attn, attn.c_proj, c_fc, mlp.c_proj
        return True, True, True, True
    if mt == "falcon":  # FalconLinear: input @ weight.T, + bias: aten.mm whatever config.bias says
        return False, False, False, False
    if mt in ("qwen2",):  # Qwen2Attention: q/k/v bias=True, o_proj and the MLP without
        return True, False, False, False
    if mt == "qwen2_moe":  # q/k/v bias=config.qkv_bias (default True)
        return _flag(spec, "qkv_bias", True), False, False, False
    if mt == "qwen":  # QWenAttention.c_attn bias=True; c_proj, w1, w2, mlp.c_proj bias=not no_bias
        other = not _flag(spec, "no_bias", True)
        return True, other, other, other
    if mt == "gpt_neox":  # query_key_value / dense: attention_bias (default True); the MLP always biased
        att = _flag(spec, "attention_bias", True)
        return att, att, True, True
    if mt == "opt":  # q/k/v/out_proj, fc1, fc2: enable_bias (default True)
        b = _flag(spec, "enable_bias", True)
        return b, b, b, b
    if mt in ("bert", "roberta"):  # nn.Linear default bias=True everywhere
        return True, True, True, True
    if mt in ("mistral", "mixtral", "phi3"):  # no bias keys: bias=False
        return False, False, False, False
    att = _flag(spec, "attention_bias", mt == "gpt_oss")  # llama, gemma*, qwen3*, nemotron, gpt_oss
    mlp = _flag(spec, "mlp_bias", False) if mt in ("llama", "nemotron") else False
    return att, att, mlp, mlp


def block_linears(spec: ModelSpec) -> list[OpSacLinear]:
    """A dense decoder block's linears in the order its forward calls them: q, k, v (or the fused qkv), o, then
    gate and up (or the fused gate_up / the plain MLP's first linear), then down."""
    h, a, kv, d, dv, i = (spec.hidden_size, spec.num_attention_heads, spec.num_kv_heads, spec.head_dim,
                          spec.v_head_dim, spec.intermediate_size)
    qkv_b, o_b, up_b, down_b = _biases(spec)
    fam = layer_family(spec)
    if fam.fused_qkv_linear:
        out = [OpSacLinear(a * d + kv * d + kv * dv, not qkv_b, True)]
    else:
        out = [OpSacLinear(w, not qkv_b, True) for w in (a * d, kv * d, kv * dv)]
    out.append(OpSacLinear(h, not o_b, False))
    if fam.fused_gate_up:
        out.append(OpSacLinear(2 * i, not up_b, True))
    else:
        out += [OpSacLinear(i, not up_b, True)] * (2 if spec.mlp_gated else 1)
    out.append(OpSacLinear(h, not down_b, False))
    return out


def op_sac_saved_mm_width(linears: list[OpSacLinear], tp: int) -> float:
    """Output features per token the policy saves of the block's linears on one rank: the 1st, 3rd, … ``aten.mm``
    (addmm ones neither saved nor counted); column-parallel outputs ÷ tp."""
    mms = [ln.width / tp if ln.column else ln.width for ln in linears if ln.mm]
    return sum(w for n, w in enumerate(mms, start=1) if n % 2 == 1)
