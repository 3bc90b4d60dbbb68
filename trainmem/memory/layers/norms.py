"""What a layer's norms keep for backward, per normalised element (RMSNorm, LayerNorm, Gemma's and gpt_oss's
fp32-normalised RMSNorm, Nemotron's LayerNorm1P), read from the transformers 5.24 modules."""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainmem.memory.layers.base import compute_bytes, is_amp, residual_bytes
from trainmem.memory.layers.family import layer_family
from trainmem.model.spec import ModelSpec

if TYPE_CHECKING:  # (annotations only: no import of trainmem.setup, which validates with these modules)
    from trainmem.setup import TrainingSetup

__all__ = ["norm_saved_per_elem", "layernorm1p", "layernorm1p_weight_bytes", "norm_output_shared",
           "qk_norm_saved_per_elem"]


def norm_saved_per_elem(spec: ModelSpec, setup: TrainingSetup) -> float:
    """Bytes per normalised element a norm keeps for backward.

    - LlamaRMSNorm (modeling_llama.py): ``x.to(fp32)`` kept by ``pow`` (4 B; the input itself when
      already fp32) and ``x*rsqrt`` cast back to the input dtype, kept by ``weight *`` (r B): 4 + r.
    - GemmaRMSNorm: ``x.float()`` (4) and the fp32 normalised value kept by ``* (1 + w)`` (4): 8.
    - GptOssRMSNorm (modeling_gpt_oss.py @ 5.24.0): ``(self.weight * x_normed).to(input_dtype)``, the
      weight multiplying the fp32 normalised value before the cast back: 4 + 4 = 8, as Gemma's
      (both: ``LayerFamily.rms_normalised_fp32``).
    - nn.LayerNorm (native_layer_norm): its input (r B; fp32 under CUDA autocast, where layer_norm
      is an fp32 op, and the residual is fp32 already) plus mean/rstd (8 B per row, negligible).
    - NemotronLayerNorm1P (modeling_nemotron.py ``NemotronLayerNorm1P.forward``): under autocast
      ``_cast_if_autocast_enabled`` casts the input (and ``weight + 1``, bias) to the autocast dtype and
      ``F.layer_norm`` runs with autocast disabled, so native_layer_norm keeps that 16-bit cast (c B), not
      an fp32 input; otherwise its input as nn.LayerNorm (r B). Its weight and bias copies:
      :func:`layernorm1p_weight_bytes`.
    """
    r = residual_bytes(setup)
    if spec.norm == "layernorm":  # (under autocast its input is cast to fp32 if not fp32 already)
        if is_amp(setup) and layernorm1p(spec):
            return float(compute_bytes(setup)) + 8.0 / spec.hidden_size
        return float(4 if is_amp(setup) else r) + 8.0 / spec.hidden_size
    rows = 4.0 / spec.hidden_size  # rsqrt(variance + eps): one fp32 value per row, kept by the multiply
    if layer_family(spec).rms_normalised_fp32:
        return 8.0 + rows
    return 4.0 + r + rows


def layernorm1p(spec: ModelSpec) -> bool:
    """Nemotron's norms are ``NemotronLayerNorm1P`` (transformers/models/nemotron/modeling_nemotron.py @ 5.24):
    ``F.layer_norm(*_cast_if_autocast_enabled(device, input, shape, self.weight + 1.0, self.bias, eps))``
    inside ``maybe_autocast(enabled=False)``: under autocast the input, ``weight + 1`` and the bias are cast
    to the autocast dtype and the norm runs (and returns) in 16 bits (``LayerFamily.layernorm_1p``)."""
    return layer_family(spec).layernorm_1p


def layernorm1p_weight_bytes(spec: ModelSpec, setup: TrainingSetup) -> int:
    """What one ``NemotronLayerNorm1P`` call keeps beyond its input and rows, independent of the tokens:
    native_layer_norm saves the weight and bias it was given (its backward takes both), and ``weight + 1.0``
    is a new h-sized tensor every forward. Without autocast that sum, in the parameters' compute dtype
    (c·h; the bias is the parameter itself); under autocast with fp32 parameters the 16-bit casts of the
    sum and of the bias (the fp32 sum is a temporary): 2·c·h; with LoRA's 16-bit frozen base the casts
    are no-ops and only the sum is new (c·h)."""
    n = 2 if (is_amp(setup) and not setup.is_lora) else 1
    return n * compute_bytes(setup) * spec.hidden_size


def norm_output_shared(spec: ModelSpec, setup: TrainingSetup) -> bool:
    """Whether the linears reading a norm's output share one 16-bit tensor under autocast: Nemotron's
    LayerNorm1P returns its output in the autocast dtype already (:func:`layernorm1p`), so autocast's
    linears cast nothing (``cached_cast`` returns a tensor already in the target dtype) and q/k/v_proj all
    keep that one output, where nn.LayerNorm's fp32 output is cast by each linear for itself."""
    return is_amp(setup) and layernorm1p(spec)


def qk_norm_saved_per_elem(spec: ModelSpec, setup: TrainingSetup) -> float:
    """Bytes per element of q and k a q_norm / k_norm (RMSNorm over head_dim) keeps (``LayerFamily.qk_norm``):
    the projections' outputs are in the compute dtype (16-bit under autocast too), so Qwen3's keeps an fp32 copy
    (4) and the normalised value cast back to it (c); Gemma-3's the fp32 copy and the fp32 normalised value (8).
    0 where the family has none. (Plus one fp32 rsqrt per head row: the caller's 4 B per head.)"""
    kind = layer_family(spec).qk_norm
    if kind == "none":
        return 0.0
    return 4.0 + compute_bytes(setup) if kind == "cast_back" else 8.0
