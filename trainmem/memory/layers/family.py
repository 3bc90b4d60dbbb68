"""Each family's decoder layer, declared once, as data: what its norms, attention and MLP save and in which
dtype, what full recompute finds already held, and the frames beyond its saved tensors.

The term functions (``layers/norms.py``, ``layers/attention.py``, ``layers/mlp.py``, ``layers/lora.py``,
``layers/model_wide.py``, ``memory/gpt_oss_frames.py``) read a :class:`LayerFamily` — looked up once per call
with :func:`layer_family` — instead of asking ``spec.model_type``. A family that builds its layer from the same
ops as one already here is one more entry of :data:`FAMILIES` (tests/memory/test_layer_families.py registers a
toy one); a new kind of op is a new field and the term that reads it. Outside the terms, ``memory/op_sac.py``
(which linears run ``aten.addmm``), ``memory/compile.py`` (q/k norms), ``perf/flops.py`` (fused qkv and gate_up
matmuls), ``memory/states.py`` (Adafactor's factors of those) and ``memory/megatron_activations.py`` (which layers
Megatron-Core's TE GPT layer describes; Qwen2-MoE's shared-expert gate) read the same description.

What is *not* per family, and so not here:

- the shapes (``h``, ``a``, ``kv``, ``d``, ``i``, experts, MLA ranks) and the config switches every family
  shares (``mlp_gated``, ``hidden_act``, ``norm``, ``parallel_residual``, dropout, softcapping): on
  :class:`~trainmem.model.spec.ModelSpec`;
- the precision class (compute / residual / expert bytes, autocast) and the kernel CUDA picks
  (``layers/base.py``);
- sharding: every term carries ``tp_split`` (inside the column/row-parallel region, ÷ tp); with sequence
  parallelism every term is ÷ tp except, under torch TP (fsdp2), the all-gathered inputs of the
  ColwiseParallel linears (``qkv_input``, ``mlp_input``, ``moe_input``); context parallelism divides the
  tokens (``activations.layer_saved``). No family differs in these today. Megatron-Core's TE layers
  (``memory/megatron_activations.py``) and torch.compile's partitioner (``memory/compile.py``) are whole-layer
  formulas of their own, registered in ``layers.base.LAYER_MODELS``.

Sources: the transformers 5.24 modeling files named in each field's docstring (gpt_oss @ 5.24.0; Qwen1's
remote-code ``modeling_qwen.py``); each choice traced in tests/memory/test_activations_measured.py and
tests/trace/.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Literal

from trainmem.model.spec import ModelSpec

__all__ = ["Bias", "LinearBiases", "LayerFamily", "FAMILIES", "DEFAULT_FAMILY", "layer_family", "register_family",
           "families_markdown"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Bias:
    """Whether a group of a layer's linears adds its bias in ``aten.addmm``: fixed, or read from a config key."""

    default: bool = False
    """The value without a key, or the key's value when the config leaves it out (or null)."""
    key: str | None = None
    """The config key the modeling file passes to ``bias=`` (None: the module fixes it)."""
    negate: bool = False
    """The key says *no* bias (Qwen1's ``no_bias``): the bias is its negation."""

    def of(self, cfg: dict[str, Any] | None) -> bool:
        """The bias for ``cfg`` (an HF config dict)."""
        if self.key is None:
            return self.default
        value = (cfg or {}).get(self.key)
        value = self.default if value is None else bool(value)
        return not value if self.negate else value

    def __repr__(self) -> str:
        if self.key is None:
            return repr(self.default)
        return f"{'not ' if self.negate else ''}cfg.get({self.key!r}, {self.default!r})"


_NO, _YES = Bias(), Bias(default=True)


@dataclass(frozen=True, kw_only=True, slots=True)
class LinearBiases:
    """Which of a dense block's linears add a bias in ``aten.addmm`` (read by memory/op_sac.py: torchtitan's
    op-SAC save list names ``aten.mm``, not ``aten.addmm``); the defaults are LlamaAttention's
    ``bias=config.attention_bias`` and LlamaMLP's ``bias=config.mlp_bias``."""

    qkv: Bias = Bias(key="attention_bias")
    """q, k, v (or the fused qkv)."""
    o: Bias = Bias(key="attention_bias")
    """The attention output projection."""
    up: Bias = Bias(key="mlp_bias")
    """The MLP's up side: gate and up, the fused gate_up or the plain MLP's first linear."""
    down: Bias = Bias(key="mlp_bias")
    """The MLP's down projection."""

    def __repr__(self) -> str:
        return f"(qkv {self.qkv!r}, o {self.o!r}, up {self.up!r}, down {self.down!r})"


@dataclass(frozen=True, kw_only=True, slots=True)
class LayerFamily:
    """One family's layer as far as its saved tensors go; the defaults are LlamaDecoderLayer's
    (transformers/models/llama/modeling_llama.py)."""

    # --- norms ------------------------------------------------------------------------------------------
    rms_normalised_fp32: bool = False
    """RMSNorm keeps the fp32 normalised value (8 B per element with the fp32 input copy) instead of casting it
    back first (4 + r): GemmaRMSNorm's ``x.float()`` ... ``* (1 + w)``; GptOssRMSNorm's ``(weight *
    x_normed).to(input_dtype)``."""
    layernorm_1p: bool = False
    """NemotronLayerNorm1P: under autocast the input, ``weight + 1`` and bias are cast to 16 bits and the norm
    runs in 16 bits (its output is shared by the linears reading it); ``weight + 1`` is a new tensor."""
    qk_norm: Literal["none", "cast_back", "fp32"] = "none"
    """RMSNorm over head_dim on q and k: ``cast_back`` keeps its fp32 copy and the value cast back to the
    projections' dtype (4 + c; Qwen3), ``fp32`` the fp32 normalised value (8; Gemma-3)."""
    sandwich_norms: bool = False
    """post_attention_layernorm and post_feedforward_layernorm on the sublayer outputs before the residual adds
    (Gemma-2/3): each keeps its fp32 input copy and normalised value."""
    parallel_norms_share_input: bool = False
    """With a parallel residual, the second norm reads the same residual tensor as the first and keeps only its
    mean/rstd rows (GPT-NeoX's ``use_parallel_residual``)."""
    # --- attention ------------------------------------------------------------------------------------------
    fused_qkv_linear: bool = False
    """One linear makes q, k and v (c_attn / query_key_value / qkv_proj): one saved input, not three casts."""
    sdpa_saves: Literal["q_k_v", "fused_output", "rotary_qk_fused_output"] = "q_k_v"
    """What the fused SDPA kernel's q, k, v are: new tensors (``q_k_v``); all views of the fused projection's
    output, which stays alive whole (``fused_output``, GPT-2); or rotary's new q and k with v a view of the
    fused output (``rotary_qk_fused_output``, GPT-NeoX, Phi-3, Qwen1)."""
    sdpa_padding_mask: bool = False
    """The layer builds its own (b, 1, s, s) mask and hands it to SDPA, which keeps it (Qwen1 without
    flash-attn, ``QWenAttention.forward``): c·s bytes a token."""
    kv_broadcast_copies: bool = False
    """k and v are copied to every head before the kernel (Falcon's new decoder architecture:
    ``torch.broadcast_to(key, query.shape)``)."""
    eager_softmax: Literal["fp32_cast", "compute", "sink"] = "fp32_cast"
    """Eager attention's probabilities: ``softmax(..., dtype=float32).to(dtype)`` (fp32 + its 16-bit cast),
    in the compute dtype (GPT-2, BERT, RoBERTa, Falcon), or gpt_oss's sink softmax over s + 1 keys
    (``layers.attention.sink_softmax_bytes_per_token``)."""
    window_mask: bool = False
    """A Mistral-style sliding window becomes an explicit (1, 1, s, s) bool mask once it does not cover the
    sequence, so SDPA runs the memory-efficient kernel with k/v repeated (mistral, mixtral, phi3, qwen2/3 and
    their MoE variants; Gemma-2/3 and gpt_oss window their layers otherwise)."""
    rope_half_width: bool = False
    """The rotary cos/sin are (1, s, d/2), applied to both halves (GptOssRotaryEmbedding: ``emb = freqs``)."""
    checkpoint_holds_eager_mask: bool = False
    """Under full (non-reentrant) recompute with eager attention, layer 0's checkpoint holds the model's
    (b, 1, s, s) additive mask to the end of the backward (gpt_oss, Nemotron, OPT: traced)."""
    # --- MLP ------------------------------------------------------------------------------------------------
    fused_gate_up: bool = False
    """gate and up are one linear (Phi-3's gate_up_proj): one saved input."""
    parallel_mlp_input: Literal["own_norm", "shared_norm", "second_norm_same_input"] = "own_norm"
    """With a parallel residual, what feeds the MLP: its own norm; the attention's one LayerNorm (Falcon: under
    autocast the MLP's first linear casts its own 16-bit copy); or a second LayerNorm on the same residual
    (Falcon's new architecture with two norms: only its mean/rstd rows are new)."""
    shared_expert_gate: bool = False
    """The shared expert's output is scaled by ``sigmoid(shared_expert_gate(x))`` (Qwen2-MoE)."""
    experts: Literal["grouped_mm", "gpt_oss"] = "grouped_mm"
    """Routed experts: transformers 5.24's grouped_mm experts with a softmax/top-k router, or gpt_oss's biased
    router and clamped SwiGLU (``layers.mlp.gpt_oss_moe_terms``)."""
    block_keeps_attn_output: bool = False
    """The decoder layer keeps the attention output in a local while its MLP runs (GPT2Block's
    ``attn_output``): part of LoRA's MLP frame."""
    # --- what full recompute finds already held --------------------------------------------------------------
    norm_keeps_layer_input: Literal["never", "always", "without_autocast"] = "never"
    """A LayerNorm family's first norm (or, post-LN, q/k/v_proj) keeps the layer's input itself, which the
    checkpoint holds already: always (GPT-2, GPT-NeoX, Falcon: ``nn.LayerNorm`` reads the stream as it is), or
    only without autocast (Nemotron's LayerNorm1P and post-LN OPT keep a 16-bit cast under it). RMSNorm
    families keep it on an fp32 stream (``x.to(float32)`` is x): ``layers.model_wide``."""
    fp32_norm_input_held_under_lora: bool = False
    """RMSNorm on an fp32 stream: the layer input the norm keeps is the checkpointed one under LoRA as well
    (gpt_oss, traced)."""
    lora_norm_input_cast: bool = False
    """Under LoRA the input LayerNorm's saved input is not the checkpointed 16-bit input when autocast casts it
    to fp32 or, post-LN, when the norm reads the attention's residual sum (OPT, traced)."""
    # --- the order backward releases them in (read by memory/plan.py; traced: tests/trace/) ------------------
    post_attention_norm_released_with_mlp: bool = False
    """The post-attention norm's saved tensors die at its backward, before the attention's, so they count with
    the MLP block (gpt_oss, Nemotron, OPT: traced)."""
    attention_backward_v_grad_only: bool = False
    """Eager attention's backward, traced (tests/trace/test_nemotron_opt_trace.py): the probabilities' gradient,
    its fp32 upcast and softmax's input gradient come out of ``matmul(probs, v)``'s backward, which also made v's
    gradient (a·dv per token, repeat_kv's expanded heads); autograd runs the probabilities' branch first (higher
    sequence numbers), so that v gradient waits beside the s² pair, while o_proj's input gradient is already
    spent and q's and k's come once the s² tensors are gone. Under SDPA the fused kernel's own backward
    (``layers.attention.fused_attention_backward_bytes``). Nemotron, OPT."""
    dropout_masks_released_per_block: bool = False
    """The layer's two dropout masks die at the start of their blocks' backward: the one after fc2 with the MLP's
    first release, the one after out_proj before the attention core's backward (OPTDecoderLayer, traced)."""
    tied_head_grad_token_embedding_only: bool = False
    """With a tied head, only ``embed_tokens`` gets its gradient at the head's backward; the learned positions
    (and project_in) get theirs at their own backward, the last of the step (OPT, traced)."""
    # --- model-wide ------------------------------------------------------------------------------------------
    embedding_dropout: bool = False
    """The embedding output goes through dropout (1 B mask per element when hidden dropout > 0: GPT-2, BERT,
    RoBERTa)."""
    embed_projections: bool = False
    """OPTDecoder: ``word_embed_proj_dim`` may differ from hidden (project_in / project_out), the final norm
    exists only pre-LN, and ``enable_input_require_grads``'s embedding leaf is kept under LoRA because the first
    layer reads a new tensor."""
    post_ln: bool = False
    """Norms after each residual add (OPT with ``do_layer_norm_before`` false): q/k/v_proj read the layer input."""
    transients: Literal["generic", "gpt_oss"] = "generic"
    """Which traced model of the tensors beyond the saved ones applies to forward, recompute and the attention
    backward: the generic walk's, or gpt_oss's (``memory/gpt_oss_frames.py``)."""
    # --- which op each linear runs (read by memory/op_sac.py; traced: tests/trace/test_op_sac_trace.py) ---------
    addmm_bias: LinearBiases = LinearBiases()
    """Which linears carry a bias added by ``aten.addmm`` (torch 2.13 ``Linear.cpp`` ``linear``: a bias and a
    contiguous input; without one, ``aten.mm``). transformers' Conv1D (GPT-2) always calls ``torch.addmm``;
    Falcon's ``FalconLinear`` adds its bias after ``input @ weight.T`` (an ``aten.mm``): no addmm bias."""
    # --- Megatron-Core (read by memory/megatron_activations.py) ----------------------------------------------
    hf_terms_under_megatron: bool = False
    """Megatron-Core's TE GPT layer (pre-norm, sequential residual, standard or GQA attention, dense or routed MLP:
    ``megatron_activations.megatron_layer_saved``) does not reproduce this layer, which keeps its
    transformers-derived terms under ``--engine megatron``: Gemma's fp32 (1 + w) RMSNorm, sandwich norms and
    soft-capping, Qwen3's q/k norms."""
    variant: Callable[[dict[str, Any]], LayerFamily] | None = None
    """Where a config key changes the layer (Falcon's ``new_decoder_architecture``, OPT's
    ``do_layer_norm_before``): the description for that config."""


DEFAULT_FAMILY = LayerFamily()
"""Llama's layer: what any family not listed in :data:`FAMILIES` is taken as (llama, mistral without a window
behaves the same; derived families never reach the term functions)."""


def _falcon(cfg: dict[str, Any]) -> LayerFamily:
    """``new_decoder_architecture``: `kv_broadcast_copies`, and with ``num_ln_in_parallel_attn`` 2 (the default)
    `parallel_mlp_input='second_norm_same_input'`. FalconDecoderLayer (modeling_falcon.py): the new architecture
    broadcasts k/v to every head and normalises the MLP's input with its own ``ln_mlp``."""
    if not cfg.get("new_decoder_architecture"):
        return _FALCON
    two = (cfg.get("num_ln_in_parallel_attn") or 2) == 2
    return replace(_FALCON, kv_broadcast_copies=True, variant=None,
                   parallel_mlp_input="second_norm_same_input" if two else "shared_norm")


def _opt(cfg: dict[str, Any]) -> LayerFamily:
    """``do_layer_norm_before`` false: `post_ln`, `norm_keeps_layer_input='without_autocast'`. OPTDecoderLayer:
    opt-350m is post-LN."""
    if cfg.get("do_layer_norm_before", True) is False:
        return replace(_OPT, post_ln=True, norm_keeps_layer_input="without_autocast", variant=None)
    return _OPT


_NO_BIAS = LinearBiases(qkv=_NO, o=_NO, up=_NO, down=_NO)  # (Mistral, Mixtral, Phi-3: no bias keys, bias=False)
_OPT_BIAS = Bias(key="enable_bias", default=True)  # (OPTAttention q/k/v/out_proj, fc1, fc2)
_ATTENTION_BIAS_ON = Bias(key="attention_bias", default=True)  # (GPT-NeoX query_key_value / dense; gpt_oss q/k/v/o)
_QWEN1_BIAS = Bias(key="no_bias", default=True, negate=True)  # (c_proj, w1, w2, mlp.c_proj: bias=not no_bias)
_NO_MLP_BIAS = LinearBiases(up=_NO, down=_NO)  # (the MLP has no bias key: Gemma*, Qwen3*, gpt_oss, DeepSeek)
_ALL_BIASED = LinearBiases(qkv=_YES, o=_YES, up=_YES, down=_YES)  # (GPT-2's Conv1D; nn.Linear's default in BERT)
_QWEN3 = LayerFamily(qk_norm="cast_back", window_mask=True, addmm_bias=_NO_MLP_BIAS, hf_terms_under_megatron=True)
_GEMMA = LayerFamily(rms_normalised_fp32=True, addmm_bias=_NO_MLP_BIAS, hf_terms_under_megatron=True)
_GEMMA2 = replace(_GEMMA, sandwich_norms=True)
_GEMMA3 = replace(_GEMMA2, qk_norm="fp32")
_GPT2_STYLE = LayerFamily(eager_softmax="compute", embedding_dropout=True, addmm_bias=_ALL_BIASED)
_FALCON = LayerFamily(fused_qkv_linear=True, eager_softmax="compute", parallel_mlp_input="shared_norm",
                      norm_keeps_layer_input="always", variant=_falcon,
                      addmm_bias=_NO_BIAS)  # (FalconLinear: input @ weight.T, + bias: aten.mm whatever config.bias)
_OPT = LayerFamily(lora_norm_input_cast=True, embed_projections=True, checkpoint_holds_eager_mask=True,
                   norm_keeps_layer_input="always", post_attention_norm_released_with_mlp=True,
                   attention_backward_v_grad_only=True, dropout_masks_released_per_block=True,
                   tied_head_grad_token_embedding_only=True, variant=_opt,
                   addmm_bias=LinearBiases(qkv=_OPT_BIAS, o=_OPT_BIAS, up=_OPT_BIAS, down=_OPT_BIAS))

FAMILIES: dict[str, LayerFamily] = {
    "llama": DEFAULT_FAMILY,
    "mistral": LayerFamily(window_mask=True, addmm_bias=_NO_BIAS),
    "mixtral": LayerFamily(window_mask=True, addmm_bias=_NO_BIAS),
    "qwen2": LayerFamily(window_mask=True, addmm_bias=LinearBiases(qkv=_YES, o=_NO, up=_NO, down=_NO)),
    "qwen2_moe": LayerFamily(window_mask=True, shared_expert_gate=True,
                             addmm_bias=LinearBiases(qkv=Bias(key="qkv_bias", default=True), o=_NO, up=_NO, down=_NO)),
    "qwen3": _QWEN3,
    "qwen3_moe": _QWEN3,
    "gemma": _GEMMA,
    "gemma2": _GEMMA2,
    "gemma3_text": _GEMMA3,
    "gemma3": _GEMMA3,
    "phi3": LayerFamily(fused_qkv_linear=True, sdpa_saves="rotary_qk_fused_output", window_mask=True,
                        fused_gate_up=True, addmm_bias=_NO_BIAS),
    "gpt2": replace(_GPT2_STYLE, fused_qkv_linear=True, sdpa_saves="fused_output", block_keeps_attn_output=True,
                    norm_keeps_layer_input="always"),  # (Conv1D: torch.addmm for c_attn, c_proj, c_fc, mlp.c_proj)
    "bert": _GPT2_STYLE,
    "roberta": _GPT2_STYLE,
    "gpt_neox": LayerFamily(fused_qkv_linear=True, sdpa_saves="rotary_qk_fused_output",
                            parallel_norms_share_input=True, norm_keeps_layer_input="always",
                            addmm_bias=LinearBiases(qkv=_ATTENTION_BIAS_ON, o=_ATTENTION_BIAS_ON, up=_YES, down=_YES)),
    "falcon": _FALCON,
    "qwen": LayerFamily(fused_qkv_linear=True, sdpa_saves="rotary_qk_fused_output", sdpa_padding_mask=True,
                        addmm_bias=LinearBiases(qkv=_YES, o=_QWEN1_BIAS, up=_QWEN1_BIAS, down=_QWEN1_BIAS)),
    "nemotron": LayerFamily(layernorm_1p=True, checkpoint_holds_eager_mask=True,
                            norm_keeps_layer_input="without_autocast", post_attention_norm_released_with_mlp=True,
                            attention_backward_v_grad_only=True),
    "opt": _OPT,
    "gpt_oss": LayerFamily(rms_normalised_fp32=True, eager_softmax="sink", rope_half_width=True,
                           checkpoint_holds_eager_mask=True, experts="gpt_oss", fp32_norm_input_held_under_lora=True,
                           transients="gpt_oss", post_attention_norm_released_with_mlp=True,
                           addmm_bias=LinearBiases(qkv=_ATTENTION_BIAS_ON, o=_ATTENTION_BIAS_ON, up=_NO, down=_NO)),
    "deepseek_v2": LayerFamily(addmm_bias=_NO_MLP_BIAS),
    "deepseek_v3": LayerFamily(addmm_bias=_NO_MLP_BIAS),
}
"""model_type -> its layer. DeepSeek's latent attention is read from the spec's MLA ranks."""


def register_family(model_type: str, family: LayerFamily) -> None:
    """Declare ``model_type``'s layer (a family built from ops the fields already describe)."""
    FAMILIES[model_type] = family


def layer_family(spec: ModelSpec) -> LayerFamily:
    """The description of ``spec``'s layer, resolved for its config (:attr:`LayerFamily.variant`)."""
    fam = FAMILIES.get(spec.model_type, DEFAULT_FAMILY)
    return fam.variant(spec.hf_config) if fam.variant is not None else fam


def families_markdown() -> str:
    """The table of docs/layers.md: each described model_type and the fields its description sets (config
    variants resolved for the default config); tests/memory/test_layer_families.py checks the doc carries it."""
    rows = ["| model_type | differs from Llama's layer in |", "|---|---|"]
    for mt in sorted(FAMILIES):
        fam = FAMILIES[mt].variant({}) if FAMILIES[mt].variant is not None else FAMILIES[mt]
        diff = [f"`{f.name}={getattr(fam, f.name)!r}`" if not isinstance(getattr(fam, f.name), bool) else f"`{f.name}`"
                for f in dataclasses.fields(LayerFamily)
                if f.name != "variant" and getattr(fam, f.name) != getattr(DEFAULT_FAMILY, f.name)]
        if FAMILIES[mt].variant is not None:
            note = " ".join((FAMILIES[mt].variant.__doc__ or "").split()).split(". ")[0]
            diff.append(f"config variant: {note}")
        rows.append(f"| {mt} | {', '.join(diff) or '—'} |")
    return "\n".join(rows) + "\n"
