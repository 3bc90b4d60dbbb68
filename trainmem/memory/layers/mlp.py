"""The MLP block's saved tensors: dense (gated, plain gelu / gelu_new / relu / relu2, parallel-residual), routed
experts (transformers 5.24 grouped_mm) with shared experts, and gpt_oss's biased router and clamped-SwiGLU
experts. Notation as :mod:`trainmem.memory.activations`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainmem.memory.layers.base import compute_bytes, expert_dtype_bytes, is_amp, linear_inputs_saved
from trainmem.memory.layers.family import layer_family
from trainmem.model.spec import ModelSpec

if TYPE_CHECKING:  # (annotations only: no import of trainmem.setup, which validates with these modules)
    from trainmem.setup import TrainingSetup

__all__ = ["mlp_terms", "plain_mlp_act_saved_per_elem", "plain_mlp_act_forward_extra_per_elem",
           "relu2_backward_extra_per_elem", "moe_terms", "gpt_oss_router_bytes_per_token",
           "gpt_oss_expert_bytes_per_pair", "gpt_oss_moe_terms"]


def mlp_terms(spec: ModelSpec, setup: TrainingSetup, add, width: int, te: bool = False) -> None:
    """``te``: Transformer Engine linears (``te_fp8_linears``): the down projection keeps a 1-B fp8 copy of its
    input in place of the 16-bit tensor it alone kept."""
    h = spec.hidden_size
    c = compute_bytes(setup)
    fam = layer_family(spec)
    down_in = 1.0 if te else float(c)
    if spec.mlp_gated:
        n_in = 1 if fam.fused_gate_up else 2
        add("mlp_input", "mlp", linear_inputs_saved(setup, n_in, h, te), tp_split=False)
        # gate output (kept by the activation), act output and up output (kept by the product),
        # product (kept by down_proj): 4 tensors of width i.
        add("mlp_intermediate", "mlp", (3.0 * c + down_in) * width)
        return
    if fam.parallel_mlp_input == "second_norm_same_input":
        # ln_mlp reads the same residual as ln_attn (only its mean/rstd rows are new); its output feeds the MLP
        add("ln_mlp_stats", "norm", 8.0, tp_split=False)
    if not (spec.parallel_residual and fam.parallel_mlp_input == "shared_norm"):
        add("mlp_input", "mlp", linear_inputs_saved(setup, 1, h, te), tp_split=False)
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


def moe_terms(spec: ModelSpec, setup: TrainingSetup, add) -> None:
    """Router, top-k dispatch and experts (transformers 5.24 grouped_mm experts).

    Expert MLPs see T·k tokens in total on this rank (÷ ep does not change the tokens this rank
    processes: all-to-all brings as many in as it sends out). The experts run in the dtype of their
    weights (transformers casts the gathered tokens to it): fp32 under autocast with fp32 parameters.
    gpt_oss's biased router and experts and clamped SwiGLU: :func:`gpt_oss_moe_terms`."""
    if layer_family(spec).experts == "gpt_oss":
        gpt_oss_moe_terms(spec, setup, add)
        return
    h = spec.hidden_size
    c = compute_bytes(setup)
    ce = 4 if is_amp(setup) and not setup.is_lora else c  # (LoRA: 16-bit frozen experts)
    k = spec.num_experts_per_tok
    E = spec.num_experts
    mi = spec.moe_intermediate_size
    add("moe_input", "experts", linear_inputs_saved(setup, 1, h), tp_split=False)
    # router: fp32 softmax (4E), top-k indices (int64, 8k), the renormalising sum and its result
    # (4 + 4k), and the int64 permutations that sort tokens by expert and back, plus the per-slot
    # weights (3·8k + 4k).
    add("router", "router", 4.0 * E + 8.0 * k + 4.0 + 4.0 * k + 24.0 * k + 4.0 * k, tp_split=False)
    add("expert_inputs", "experts", ce * k * h)                  # tokens gathered per expert
    add("expert_intermediate", "experts", 4.0 * ce * k * mi)     # gate_up (2·mi), act, product
    add("expert_outputs_weighted", "experts", ce * k * h)        # down output kept by the weighting
    if spec.num_shared_experts and spec.shared_expert_intermediate_size:
        si = spec.shared_expert_intermediate_size
        gated = layer_family(spec).shared_expert_gate  # sigmoid(shared_expert_gate(x)) * shared_expert(x)
        n_in = 3 if gated else 2
        inputs = 2.0 * n_in * h if is_amp(setup) else 0.0   # pure: the MoE input tensor is shared
        add("shared_expert", "experts", 4.0 * c * si + inputs + (c * h + 4.0 if gated else 0.0))


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


def gpt_oss_moe_terms(spec: ModelSpec, setup: TrainingSetup, add) -> None:
    """gpt_oss's MoE block (``GptOssMLP``): the router ``F.linear(x, weight, bias)`` keeps its input (the
    post-attention norm's output; autocast: its 16-bit cast), the routing state
    (:func:`gpt_oss_router_bytes_per_token`) and k pairs per token of expert tensors
    (:func:`gpt_oss_expert_bytes_per_pair`). Under LoRA the experts and router are frozen (PEFT cannot adapt
    them, model/lora_targets.py): the down grouped GEMM keeps no input for its weight, and the expert-bias
    gathers no sorted expert ids (8 B per pair); the inputs of frozen linears go in :func:`_lora_frozen`."""
    h, k, i = spec.hidden_size, spec.num_experts_per_tok, spec.moe_intermediate_size
    add("moe_input", "experts", linear_inputs_saved(setup, 1, h), tp_split=False)
    frozen = setup.is_lora
    router = gpt_oss_router_bytes_per_token(k, compute_bytes(setup)) - (8.0 * k if frozen else 0.0)
    add("router", "router", router, tp_split=False)
    for name, per_pair in gpt_oss_expert_bytes_per_pair(h, i, expert_dtype_bytes(setup)).items():
        if not (frozen and name == "expert_down_input"):
            add(name, "experts", k * per_pair)
