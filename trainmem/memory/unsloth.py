"""Unsloth's own kernels (``--kernels unsloth``, ``--loss unsloth``): what its patched Llama saves for backward.

Read from unslothai/unsloth @ ef70177a24 (2023-12-23, "Small fixes (#48)"), the release LLaMA-Factory's
``use_unsloth`` ran in its Dec 2023 performance comparison (LLaMA-Factory v0.4.0 added unsloth on 2023-12-23).
``FastLlamaModel.pre_patch`` (unsloth/models/llama.py) replaces ``LlamaAttention``, ``LlamaDecoderLayer``,
``LlamaModel`` and ``LlamaForCausalLM``'s forwards:

- both RMSNorms run ``Fast_RMS_Layernorm`` (unsloth/kernels/rms_layernorm.py): ``ctx.save_for_backward(X, W,
  r)`` — the 16-bit input X, the weight (a parameter) and one fp32 inverse RMS per row; its backward returns
  no weight gradient (the norm weights do not train). HF's ``LlamaRMSNorm`` keeps an fp32 copy of X instead.
  The input norm's X is the layer's input: under gradient checkpointing the checkpoint holds it already;
- RoPE runs ``Fast_RoPE_Embedding`` (rope_embedding.py) in place on Q and K: ``ctx.cos = cos; ctx.sin = sin``,
  views of the rotary module's ``cos_cached`` / ``sin_cached`` (nothing per token);
- the attention is ``flash_attn_func`` (with flash-attn installed: the same saved tensors as ``--attn flash``),
  else xformers or SDPA;
- ``get_peft_model`` (LoRA only: ``lora_dropout`` must be 0 and ``bias`` "none", else ``TypeError``) patches a
  layer's MLP with ``LoRA_MLP`` only if gate_proj, up_proj and down_proj all carry LoRA, its q/k/v with
  ``LoRA_QKV`` only if all three do, and o_proj with ``LoRA_W`` if it does (unsloth/kernels/fast_lora.py):
  ``LoRA_MLP`` saves ``(gateA, gateB, upA, upB, downA, downB, X, e, g)`` — adapter weights (parameters), the
  16-bit MLP input X and the gate and up outputs e, g (16-bit, width i; the SwiGLU product is recomputed in
  backward); ``LoRA_QKV`` saves ``(X, QA, QB, KA, KB, VA, VB)``: X; ``LoRA_W`` saves ``(A, B, X)``: the
  attention output, which the attention kernel keeps already. ``matmul_lora`` casts A and B to X's dtype inside
  the Function's forward (no autograd: nothing else kept). Linears not patched run PEFT's ``Linear`` as before;
- the loss is ``fast_cross_entropy_loss`` (cross_entropy_loss.py) on the 16-bit logits of ``self.lm_head``
  (no ``.float()``): :func:`trainmem.memory.loss.unsloth_ce_buffers`.

Hand counts from that source are the evidence here; a fake-tensor trace of these autograd Functions
reimplemented from the same source would not be independent, so none is claimed. Core module: no torch import.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainmem.memory.layers.base import Term, compute_bytes, sdpa_math_fallback
from trainmem.model.spec import ModelSpec

if TYPE_CHECKING:  # annotations only: trainmem.setup validates with the memory modules (no import circle)
    from trainmem.setup import TrainingSetup

__all__ = ["UNSLOTH_SOURCE", "UNSLOTH_MODEL_TYPES", "KERNELS_NOTE", "LOSS_NOTE",
           "fast_rms_norm_saved_bytes_per_token", "fused_lora_groups", "lora_mlp_saved_bytes_per_token",
           "lora_qkv_saved_bytes_per_token", "unsloth_layer_terms"]

UNSLOTH_SOURCE = "unslothai/unsloth @ ef70177a24 (2023-12-23)"
#: Families ``FastLanguageModel`` patched at that commit (unsloth/models/llama.py, mistral.py).
UNSLOTH_MODEL_TYPES = ("llama", "mistral")

KERNELS_NOTE = (f"unsloth's kernels ({UNSLOTH_SOURCE}): fast RMSNorm saves its 16-bit input and an fp32 rstd row "
                "(kernels/rms_layernorm.py), RoPE in place saves nothing per token (rope_embedding.py); LoRA_MLP / "
                "LoRA_QKV / LoRA_W replace PEFT where gate+up+down / q+k+v / o all carry LoRA (kernels/fast_lora.py: "
                "MLP saves X, e, g; QKV saves X; O saves the attention output the kernel keeps)")
LOSS_NOTE = (f"unsloth's fast_cross_entropy_loss ({UNSLOTH_SOURCE} kernels/cross_entropy_loss.py): the 16-bit "
             "logits saved as they are, an fp32 logsumexp per token, the gradient written into the logits in place")

_MLP = ("mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")
_QKV = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj")
_O = ("self_attn.o_proj",)


def fast_rms_norm_saved_bytes_per_token(hidden: int, elem_bytes: int, input_held: bool) -> int:
    """``Fast_RMS_Layernorm.forward`` saves ``(X, W, r)``: X (``elem_bytes``·hidden, unless ``input_held``: the
    checkpointed layer input, kept by the checkpoint already), W (a parameter: 0) and r (fp32, 4 B a row)."""
    return (0 if input_held else elem_bytes * hidden) + 4


def lora_mlp_saved_bytes_per_token(hidden: int, intermediate: int, elem_bytes: int) -> int:
    """``LoRA_MLP.forward`` saves X (hidden), e = X·Wg + LoRA and g = X·Wu + LoRA (intermediate each), all in
    X's 16-bit dtype; the adapter weights are parameters (fast_lora.py @ ef70177a24)."""
    return elem_bytes * (hidden + 2 * intermediate)


def lora_qkv_saved_bytes_per_token(hidden: int, elem_bytes: int) -> int:
    """``LoRA_QKV.forward`` saves X (the input norm's output) and the six adapter weights (parameters)."""
    return elem_bytes * hidden


def fused_lora_groups(adapted_paths: tuple[str, ...]) -> tuple[str, ...]:
    """Which of ``mlp`` / ``qkv`` / ``o`` ``get_peft_model`` patches, given the layer's adapted linears' paths:
    a group only when every linear of it carries LoRA (llama.py ``get_peft_model`` @ ef70177a24)."""
    have = set(adapted_paths)
    return tuple(g for g, paths in (("mlp", _MLP), ("qkv", _QKV), ("o", _O)) if set(paths) <= have)


def _norm_terms(spec: ModelSpec, setup: TrainingSetup, terms: list[Term]) -> list[Term]:
    """HF's two RMSNorm terms replaced by :func:`fast_rms_norm_saved_bytes_per_token`'s."""
    T = setup.micro_batch * setup.seq_len // setup.cp
    c, h = compute_bytes(setup), spec.hidden_size
    held = setup.recompute == "full"
    new = {"input_norm": fast_rms_norm_saved_bytes_per_token(h, c, held) * T,
           "post_attention_norm": fast_rms_norm_saved_bytes_per_token(h, c, False) * T}
    return [Term(t.name, t.component, new[t.name], t.tp_split) if t.name in new else t for t in terms]


def unsloth_layer_terms(spec: ModelSpec, setup: TrainingSetup, layer_idx: int, full_terms: list[Term],
                        lora_terms_fn) -> list[Term]:  # noqa: ANN001 - layers.lora.lora_terms
    """One decoder layer under unsloth's patches: ``full_terms`` (full fine-tuning's, before LoRA) through
    ``lora_terms_fn`` for the linears unsloth leaves to PEFT, then the fused Functions' saved tensors for the
    groups it patches (:func:`fused_lora_groups`), then the norms (:func:`_norm_terms`)."""
    from trainmem.model.lora_targets import targeted_layer_linears
    adapted = targeted_layer_linears(spec, setup.lora_targets, layer_idx)
    groups = fused_lora_groups(tuple(lin.path for lin in adapted))
    fused = {p for g, ps in (("mlp", _MLP), ("qkv", _QKV), ("o", _O)) if g in groups for p in ps}
    left = tuple(lin.path.rsplit(".", 1)[-1] for lin in adapted if lin.path not in fused)
    terms = lora_terms_fn(spec, setup.model_copy(update={"lora_targets": left}), layer_idx, full_terms)
    T = setup.micro_batch * setup.seq_len // setup.cp
    c, h, i = compute_bytes(setup), spec.hidden_size, spec.intermediate_size
    if "mlp" in groups:  # LoRA_MLP keeps X, e, g in place of the transformers MLP's tensors
        terms = [t for t in terms if t.name not in ("mlp_intermediate", "mlp_input")]
        terms.append(Term("mlp_intermediate", "mlp", 2 * c * i * T, True))
        terms.append(Term("mlp_input", "mlp", c * h * T, False))
    if "qkv" in groups:
        terms.append(Term("lora_input", "lora", lora_qkv_saved_bytes_per_token(h, c) * T, False))
    if "o" in groups and (setup.attn == "eager" or sdpa_math_fallback(spec, setup)):
        terms.append(Term("o_input", "attention", c * h * T, False))  # (a fused kernel keeps it already)
    return _norm_terms(spec, setup, terms)
