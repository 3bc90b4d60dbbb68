"""LoRA's layer terms: full fine-tuning's saved tensors with a frozen base (what only frozen weights' gradients
needed goes), the adapters' own (PEFT ``tuners/lora/layer.py``, litgpt's fused-qkv slices), ``lora_dropout``'s,
and the frames a LoRA layer holds beyond its saved tensors in forward and recompute (traced:
tests/trace/test_lora_trace.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainmem.memory.layers.base import (Term, adapters_16bit, compute_bytes, is_amp, lora_input_requires_grad,
                                        opt_embed_proj_dim, opt_post_ln, residual_bytes, sdpa_math_fallback)
from trainmem.memory.layers.family import layer_family
from trainmem.memory.layers.mlp import plain_mlp_act_saved_per_elem
from trainmem.memory.layers.norms import norm_saved_per_elem, qk_norm_saved_per_elem
from trainmem.model.spec import ModelSpec

if TYPE_CHECKING:  # (annotations only: no import of trainmem.setup, which validates with these modules)
    from trainmem.setup import TrainingSetup

__all__ = ["lora_shapes", "lora_terms", "opt_proj_adapter_bytes", "lora_dropout_terms", "lora_recompute_frame_bytes",
           "lora_forward_frame_bytes", "lora_head_frame_bytes"]


def lora_shapes(spec: ModelSpec, targets: tuple[str, ...], layer_idx: int = 0) -> list[tuple[int, int]]:
    """(in_features, out_features) of each adapted linear of layer ``layer_idx`` (model/lora_targets.py)."""
    from trainmem.model.lora_targets import targeted_layer_linears
    return [(lin.fin, lin.fout) for lin in targeted_layer_linears(spec, targets, layer_idx)]


#: Terms that only a frozen linear's weight gradient needed (its input), dropped under LoRA.
_FROZEN_LINEAR_INPUTS = ("qkv_input", "mlp_input", "moe_input", "expert_inputs", "o_input")


def lora_terms(spec: ModelSpec, setup: TrainingSetup, layer_idx: int, terms: list[Term]) -> list[Term]:
    """A LoRA layer's saved tensors: full fine-tuning's terms without what only frozen weights' gradients
    needed (:func:`_lora_frozen`, :func:`_lora_first_layer`), plus the adapters' own
    (:func:`_lora_adapter_terms`); traced in tests/trace/test_lora_trace.py."""
    from trainmem.model.lora_targets import targeted_layer_linears
    adapted = targeted_layer_linears(spec, setup.lora_targets, layer_idx)
    out = _lora_frozen(spec, setup, terms)
    if layer_idx == 0 and not lora_input_requires_grad(setup) and not opt_proj_adapter_bytes(spec, setup, "emb_out"):
        out = _lora_first_layer(spec, setup, adapted, out)
    first_no_grad = layer_idx == 0 and not lora_input_requires_grad(setup)
    return out + _lora_adapter_terms(spec, setup, adapted) + lora_dropout_terms(spec, setup, adapted,
                                                                                 input_grad=not first_no_grad)


def opt_proj_adapter_bytes(spec: ModelSpec, setup: TrainingSetup, reads: str) -> int:
    """OPT with word_embed_proj_dim ≠ hidden (opt-350m) under LoRA targeting ``project_in`` (``reads`` =
    ``emb_out``) or ``project_out`` (``head_in``; e.g. all-linear): what that adapter keeps, for T tokens, as
    :func:`_lora_adapter_terms` counts a layer's (16-bit base: lora_A's fp32 copy of its input, 4·fin, and the
    fp32 rank activation, 4·r; under autocast the 16-bit casts, 2·fin and 2·r, and the adapter weights' 16-bit
    copies; fp32: the input itself is the embedding output / last hidden state, already kept: 4·r). An adapted
    project_in also makes the first layer's input require grad (its output is the adapter's sum), so layer 0
    keeps what a middle layer keeps. 0 for other families and targets."""
    if not (setup.is_lora and opt_embed_proj_dim(spec)):
        return 0
    from trainmem.model.lora_targets import targeted_model_linears
    lins = [lin for lin in targeted_model_linears(spec, setup.lora_targets) if lin.reads == reads]
    if not lins:
        return 0
    T = setup.micro_batch * setup.seq_len // setup.cp
    rank, amp, fp32 = setup.lora_rank, is_amp(setup), setup.precision == "fp32"
    out = 0
    for lin in lins:
        if fp32:
            out += 4 * rank * T
        elif amp:
            out += 2 * (lin.fin + rank) * T + 2 * rank * (lin.fin + lin.fout)
        else:
            out += 4 * (lin.fin + rank) * T
    return out


def _opt_norm_input_is_new(spec: ModelSpec, amp: bool) -> bool:
    """OPT under LoRA: the input LayerNorm's saved input is not the checkpointed (16-bit) layer input when
    autocast casts it to fp32 (layer_norm is an fp32-list op; traced) or, post-LN, when the norm reads the
    attention's residual sum instead."""
    return layer_family(spec).lora_norm_input_cast and (amp or opt_post_ln(spec))


def _lora_frozen(spec: ModelSpec, setup: TrainingSetup, terms: list[Term]) -> list[Term]:
    """Full fine-tuning's terms with a frozen base (autograd saves an operand only for an input that
    requires grad):

    - base linears keep no input (``qkv_input``, ``mlp_input``, eager ``o_input``, MoE inputs dropped);
      the MLP's output projection no longer keeps the product (gated: 3 of 4 tensors of width i remain;
      plain: the activation's input; gelu_new: its 4 formula tensors); the shared expert likewise;
    - RMSNorm's ``weight * x_normed`` keeps nothing for the frozen weight: the fp32 copy kept by
      ``pow``/``mul`` (4 B) and the rsqrt row remain, not 4 + r (q/k norms, Gemma's norms alike);
      nn.LayerNorm still keeps its input; under autocast GPT-NeoX/Falcon's second LayerNorm on the same
      16-bit residual keeps its own fp32 cast;
    - under checkpointing, a norm's saved input that is the checkpointed input itself (LayerNorm; RMSNorm
      in fp32, where ``x.to(float32)`` is x) is not counted twice.
    """
    amp = is_amp(setup)
    h, c = spec.hidden_size, compute_bytes(setup)
    T = setup.micro_batch * setup.seq_len // setup.cp
    kernel_keeps_out = setup.attn in ("sdpa", "flash") and not sdpa_math_fallback(spec, setup)
    rows = 4.0 / h
    full = setup.recompute == "full"

    def scaled(t: Term, factor: float) -> Term:
        return Term(t.name, t.component, int(round(t.bytes * factor)), t.tp_split)

    out: list[Term] = []
    for t in terms:
        if t.name in _FROZEN_LINEAR_INPUTS or (t.name == "attn_out" and not kernel_keeps_out):
            continue  # (the math composite's output is o_proj's input only)
        per_elem = norm_saved_per_elem(spec, setup)
        if t.name == "input_norm" and spec.norm == "layernorm" and full and not _opt_norm_input_is_new(spec, amp):
            t = scaled(t, (8.0 / h) / per_elem)
        elif t.name in ("input_norm", "post_attention_norm") and spec.norm == "rmsnorm" and t.bytes:
            fp32_ckpt_input = t.name == "input_norm" and setup.precision == "fp32" and full
            t = scaled(t, (rows if fp32_ckpt_input else 4.0 + rows) / per_elem)
        elif amp and (t.name == "ln_mlp_stats" or (t.name == "post_attention_norm" and spec.parallel_residual
                                                   and layer_family(spec).parallel_norms_share_input)):
            t = Term(t.name, t.component, t.bytes + 4 * h * T, t.tp_split)
        elif t.name == "qk_norm":
            d = spec.head_dim
            per_head = qk_norm_saved_per_elem(spec, setup) * d + 4.0
            t = scaled(t, (4.0 * d + 4.0) / per_head)
        elif t.name == "post_sublayer_norms":  # Gemma-2/3: x.float() kept, not the fp32 normalised value
            t = scaled(t, 0.5)
        elif t.name == "mlp_intermediate" and not spec.mlp_gated and spec.hidden_act in ("relu", "relu2"):
            total, down_only = plain_mlp_act_saved_per_elem(spec, setup)
            t = scaled(t, (total - down_only) / total)
        elif t.name == "mlp_intermediate":
            n = 4 if spec.mlp_gated else (5 if spec.hidden_act == "gelu_new" else 2)
            gelu_amp = spec.hidden_act == "gelu_new" and amp and not spec.mlp_gated
            t = scaled(t, 14.0 / 16.0 if gelu_amp else (n - 1) / n)
        elif t.name == "expert_intermediate":
            t = scaled(t, 0.75)
        elif t.name == "shared_expert":
            n_in = (3 if layer_family(spec).shared_expert_gate else 2) if amp else 0
            dropped = (c * spec.shared_expert_intermediate_size + 2.0 * n_in * h) * T
            t = Term(t.name, t.component, t.bytes - int(round(dropped)), t.tp_split)
        out.append(t)
    return out


def _lora_first_layer(spec: ModelSpec, setup: TrainingSetup, adapted, out: list[Term]) -> list[Term]:
    """Layer 0 without ``enable_input_require_grads``: nothing is recorded before its first adapter: no
    input norm; no attention core without a q/k/v adapter; no MLP side without an adapter feeding it
    (parallel-residual families: an MLP adapter). q_norm / k_norm keep their input only when q_proj /
    k_proj is adapted; eager attention's matmuls keep an operand only for the other operand's grad
    (q·kᵀ: q iff k has grad; probs·v: probs iff v has grad)."""
    reads = {lin.reads for lin in adapted}
    core = bool(reads & {"attn_in", "q_a", "kv_a", "cross_in", "cross_q"})
    post = "mlp_in" in reads if spec.parallel_residual else (core or "attn_out" in reads)
    mlp = post or "mlp_in" in reads
    # (post-LN OPT: "input_norm" is self_attn_layer_norm after the attention, kept once anything before it is)
    out = [t for t in out if (t.name != "input_norm" or (post and opt_post_ln(spec)))
           and (core or t.component != "attention")
           and (post or t.component not in ("norm", "dropout"))
           and (mlp or t.name != "mlp_intermediate")]
    q_grad, k_grad, v_grad = (any(lin.path.endswith(n) or lin.path == "qkv." + n[0] for lin in adapted)
                              for n in ("q_proj", "k_proj", "v_proj"))
    if setup.attn == "eager" and (q_grad or k_grad or v_grad):
        keep = {"q": k_grad, "k_repeated": q_grad, "v_repeated": q_grad or k_grad,
                "softmax_fp32": q_grad or k_grad, "probs_16bit": v_grad, "probs": v_grad}
        out = [t for t in out if keep.get(t.name, True)]
    a, kv = spec.num_attention_heads, spec.num_kv_heads
    kept = a * q_grad + kv * k_grad
    return [Term(t.name, t.component, t.bytes * kept // (a + kv), t.tp_split) if t.name == "qk_norm" else t
            for t in out]


def _lora_adapter_terms(spec: ModelSpec, setup: TrainingSetup, adapted) -> list[Term]:
    """What the adapters keep. PEFT ``tuners/lora/layer.py`` ``Linear.forward``:
    ``x = x.to(lora_A.weight.dtype)`` (fp32 adapters), then
    ``result + lora_B(lora_A(dropout(x))) * scaling`` (dropout 0: identity). Per adapted linear reading
    ``fin`` features, adapter rank r, per token:

    - 16-bit base, no autocast: lora_A keeps its own fp32 copy of x (4·fin, one per adapter) and lora_B
      the fp32 rank activation (4·r);
    - 16-bit base under autocast: the fp32 copy is a temporary; lora_A keeps the 16-bit cast autocast
      makes of it (2·fin per adapter) and lora_B the 16-bit rank activation (2·r); autocast's cache keeps
      16-bit copies of the adapter weights, saved by their matmuls (2·r·(fin + fout) per layer);
    - fp32: lora_A keeps x itself, shared by the adapters that read the same tensor (4·fin once; the
      attention output is kept by the sdpa kernel already), and 4·r.

    Names place each in the estimator's backward order: o_proj's adapter is released early in the
    attention's backward (``o_input``, estimate.py ``_ATTN_EARLY``), the MLP output projection's first
    (``lora_down_input``, its ``prod`` part)."""
    amp, fp32 = is_amp(setup), setup.precision == "fp32"
    a16 = adapters_16bit(setup)
    rank = setup.lora_rank
    T = setup.micro_batch * setup.seq_len // setup.cp
    kernel_keeps_out = setup.attn in ("sdpa", "flash") and not sdpa_math_fallback(spec, setup)
    out: list[Term] = []
    shared: set[str] = set()
    for lin in adapted:
        name_in, name_a, comp = _adapter_slots(lin)
        if fp32 or a16:  # (adapters in the base's dtype: x is not cast, lora_A keeps x itself)
            e = 2 if a16 else 4
            if lin.reads not in shared and not (lin.reads == "attn_out" and kernel_keeps_out):
                out.append(Term(name_in, comp, e * lin.fin * T, False))
            shared.add(lin.reads)
            out.append(Term(name_a, comp, e * rank * T, False))
        elif amp:
            out.append(Term(name_in, comp, 2 * lin.fin * T, False))
            out.append(Term(name_a, comp, 2 * rank * T, False))
            out.append(Term("lora_weight_copies", "weight_copies", 2 * rank * (lin.fin + lin.fout), False))
        else:
            out.append(Term(name_in, comp, 4 * lin.fin * T, False))
            out.append(Term(name_a, comp, 4 * rank * T, False))
    slices = [lin for lin in adapted if lin.path.startswith("qkv.")]  # (litgpt's LoRAQKVLinear, lora_targets.py)
    if 0 < len(slices) < 3:  # its zero_pad's index_copy_ keeps its source, the Σ-widths lora_B output
        out.append(Term("lora_input", "lora", compute_bytes(setup) * sum(lin.fout for lin in slices) * T, False))
    return out


def _adapter_slots(lin) -> tuple[str, str, str]:  # noqa: ANN001 - a model.lora_targets linear
    """(name of the adapter's saved input, of its rank activation, component): the names place each term in the
    estimator's backward order (see :func:`_lora_adapter_terms`)."""
    if lin.reads == "attn_out":
        return "o_input", "lora_a_out", "attention"
    if lin.reads == "mlp_act":
        return "lora_down_input", "lora_down_input", "mlp"
    return "lora_input", "lora_a_out", "lora"


def lora_dropout_terms(spec: ModelSpec, setup: TrainingSetup, adapted, input_grad: bool = True) -> list[Term]:
    """What ``lora_dropout`` > 0 adds to :func:`_lora_adapter_terms` (PEFT 0.21 ``Linear.forward``:
    ``lora_B(lora_A(dropout(x)))``; ``nn.Dropout`` → ``native_dropout``, whose backward needs only its bool mask,
    1 B per element; torch 2.13 ``derivatives.yaml`` ``native_dropout``). Per adapted linear reading ``fin``
    features, per token:

    - every adapter keeps its own mask (1·fin), except where its input needs no gradient (``input_grad`` False:
      layer 0's attention input without ``enable_input_require_grads``), where autograd records no dropout;
    - fp32 and 16-bit adapters on a same-dtype input (x not cast): lora_A now saves the dropout output, a new
      tensor per adapter (e·fin), where without dropout it kept x itself, once per input shared by the adapters
      reading it (and not at all for o_proj's input the attention kernel keeps): those adapters add e·fin each,
      less the shared copy :func:`_lora_adapter_terms` counted;
    - a cast input (fp32 adapters on a 16-bit base, autocast or not): lora_A saved a new tensor already (the fp32
      copy, or autocast's 16-bit cast of it), which is now made from the dropout output: the same bytes.

    Names follow :func:`_lora_adapter_terms`'s, so each is released with the adapter's input in backward."""
    p = setup.lora_dropout
    if not (setup.is_lora and p):
        return []
    T = setup.micro_batch * setup.seq_len // setup.cp
    same_dtype = setup.precision == "fp32" or adapters_16bit(setup)
    e = 2 if adapters_16bit(setup) else 4
    kernel_keeps_out = setup.attn in ("sdpa", "flash") and not sdpa_math_fallback(spec, setup)
    out: list[Term] = []
    shared: set[str] = set()
    for lin in adapted:
        if lin.path.startswith("qkv.") and "qkv" in shared:
            continue  # (litgpt's LoRAQKVLinear: one dropout of x for its slices)
        if lin.path.startswith("qkv."):
            shared.add("qkv")
        name, _, comp = _adapter_slots(lin)
        extra = lin.fin if (input_grad or lin.reads != "attn_in") else 0  # the bool mask
        if same_dtype:
            extra += e * lin.fin  # the adapter's own dropout output
            if lin.reads not in shared and not (lin.reads == "attn_out" and kernel_keeps_out):
                extra -= e * lin.fin  # (x itself was counted once for the adapters sharing it)
            shared.add(lin.reads)
        out.append(Term(name, comp, extra * T, False))
    return out


def _lora_mlp_frame_per_token(spec: ModelSpec, setup: TrainingSetup, adapted) -> int:
    """Bytes per token the decoder layer's frame holds while its MLP runs and no saved tensor is them:
    the post-attention residual (kept by LayerNorm, and by RMSNorm in fp32 where its fp32 copy is the
    tensor itself) and the MLP input (the norm output; in fp32 lora_A of gate/up keeps it itself)."""
    h, c, r = spec.hidden_size, compute_bytes(setup), residual_bytes(setup)
    fp32 = setup.precision == "fp32"
    norm_out = 4 if (is_amp(setup) and spec.norm == "layernorm") else c
    residual = 0 if (spec.norm == "layernorm" or fp32) else r * h
    mlp_in_kept = fp32 and any(lin.reads == "mlp_in" for lin in adapted)
    held = c * h if layer_family(spec).block_keeps_attn_output else 0  # GPT2Block's ``attn_output`` local
    return residual + (0 if mlp_in_kept else norm_out * h) + held


def _lora_inside_mlp_in(spec: ModelSpec, setup: TrainingSetup, adapted) -> int:
    """Bytes per token beyond the layer's saved tensors inside its widest adapted MLP input projection
    (out width ``o``): the base output and the adapter's output and scaled copy being added (16-bit
    without autocast and fp32: 4·o each, under autocast 2·o each, plus the temporary fp32 copy of x, 4·h),
    less the saved tensors not made yet: the projection's own result, the output projection's adapter
    input, and what the activation keeps after it (Phi-3's fused gate_up: act(gate); gelu_new: 3 of its
    formula tensors)."""
    wide = max((lin.fout for lin in adapted if lin.reads == "mlp_in"), default=0)
    if not wide:
        return 0
    h, c, i = spec.hidden_size, compute_bytes(setup), spec.intermediate_size
    amp, a16 = is_amp(setup), adapters_16bit(setup)
    down = [lin for lin in adapted if lin.reads == "mlp_act"]
    later = (2 if amp or a16 else 4) * down[0].fin if down else 0
    if layer_family(spec).fused_gate_up:
        later += c * i
    elif spec.hidden_act == "gelu_new" and not spec.mlp_gated:
        later += 3 * c * i
    if a16:  # 16-bit adapters: no fp32 copy of x, the adapter's output and its scaled copy 2·o each
        return 4 * wide - later
    return (4 * h + 4 * wide if amp else 8 * wide) - later


def _relu_keeps_product(spec: ModelSpec) -> bool:
    """A non-gated ``relu`` MLP (OPT): the output projection's input is relu's own saved output
    (:func:`plain_mlp_act_saved_per_elem`), a saved tensor already, not a frame local of the LoRA frames below."""
    return spec.hidden_act == "relu" and not spec.mlp_gated


def lora_recompute_frame_bytes(spec: ModelSpec, setup: TrainingSetup, layer_idx: int) -> int:
    """Peak bytes beyond a LoRA layer's saved tensors while non-reentrant checkpointing recomputes it
    (traced, tests/trace/test_lora_trace.py), for T tokens: the frames of the MLP
    (:func:`_lora_mlp_frame_per_token`); when the MLP output projection is adapted, its lora_B backward
    is what starts the recomputation, with the gradient of the adapted output alive ((4 + c)·h in 16 bits
    without autocast: the fp32 sum ``result + lora_B(...) * scaling`` and its 16-bit input; c·h under
    autocast; 4·h in fp32); then the larger of the stop at that lora_B (its frame holds the product c·i,
    in fp32 kept anyway, the base output c·h and, under autocast, the product's fp32 copy 4·i of which
    lora_A keeps a 16-bit cast) and the inside of the widest adapted MLP input projection
    (:func:`_lora_inside_mlp_in`).
    """
    from trainmem.model.lora_targets import targeted_layer_linears
    T = setup.micro_batch * setup.seq_len // setup.cp
    h, c = spec.hidden_size, compute_bytes(setup)
    amp, fp32 = is_amp(setup), setup.precision == "fp32"
    a16 = adapters_16bit(setup)
    adapted = targeted_layer_linears(spec, setup.lora_targets, layer_idx)
    per_token = _lora_mlp_frame_per_token(spec, setup, adapted)
    down = [lin for lin in adapted if lin.reads == "mlp_act"]
    if down:
        i = down[0].fin
        per_token += 4 * h if fp32 else (c * h if amp or a16 else (4 + c) * h)
        stop = (0 if fp32 or _relu_keeps_product(spec) else c * i) + c * h + (4 * i if amp and not a16 else 0)
    else:
        stop = 0
    per_token += max(stop, _lora_inside_mlp_in(spec, setup, adapted), 0)
    div = setup.tp if setup.sp else 1
    return per_token * T // div


def lora_forward_frame_bytes(spec: ModelSpec, setup: TrainingSetup, layer_idx: int) -> int:
    """Peak bytes beyond a LoRA layer's saved tensors during its forward (traced): inside the adapted MLP
    output projection (the layer's last op), the frames hold the layer's input (the model's loop variable,
    r·h) and, without input grads, the embedding output (``inputs_embeds``, r·h; frozen layers do not keep
    either), the post-attention residual (RMSNorm families), the norm output (c·h) and the product (c·i;
    fp32: kept by lora_A anyway); the adapted linear its input's fp32 copy (autocast: a temporary, 4·i),
    the base output (c·h) and the adapter's output and its scaled copy (2·e·h, e = 2 under autocast,
    else 4)."""
    from trainmem.model.lora_targets import targeted_layer_linears
    adapted = targeted_layer_linears(spec, setup.lora_targets, layer_idx)
    down = [lin for lin in adapted if lin.reads == "mlp_act"]
    if not down and not any(lin.reads == "mlp_in" for lin in adapted):
        return 0
    T = setup.micro_batch * setup.seq_len // setup.cp
    h, c, r = spec.hidden_size, compute_bytes(setup), residual_bytes(setup)
    amp, fp32 = is_amp(setup), setup.precision == "fp32"
    a16 = adapters_16bit(setup)
    per_token = _lora_mlp_frame_per_token(spec, setup, adapted)
    stop = 0
    if down:
        i = down[0].fin
        product = 0 if fp32 or _relu_keeps_product(spec) else c * i
        stop = product + (4 * i if amp and not a16 else 0) + c * h + 2 * (2 if amp or a16 else 4) * h
    per_token += max(stop, _lora_inside_mlp_in(spec, setup, adapted))
    per_token += r * h * (1 if lora_input_requires_grad(setup) else 2)
    return per_token * T // (setup.tp if setup.sp else 1)


def lora_head_frame_bytes(spec: ModelSpec, setup: TrainingSetup) -> int:
    """LoRA: the final norm's output, which the frozen LM head does not keep, is still held by the model's
    forward while the loss is computed (c·h per token; LayerNorm under autocast: fp32)."""
    if not setup.is_lora or spec.is_encoder:
        return 0
    T = setup.micro_batch * setup.seq_len // setup.cp
    elem = 4 if (is_amp(setup) and spec.norm == "layernorm") else compute_bytes(setup)
    return elem * spec.hidden_size * T // (setup.tp if setup.sp else 1)
