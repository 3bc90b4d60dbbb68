"""The shared vocabulary of a layer's saved tensors: :class:`Term`, :class:`LayerSaved`, the registry of
layer formulas that replace the eager one (:data:`LAYER_MODELS`), and the facts of a setup every term reads —
the precision class (``c`` compute bytes, ``r`` residual-stream bytes, autocast or not), the attention kernel
CUDA picks, and the structural facts of a family that more than one term needs.

Part of the layer description split out of ``memory/activations.py`` (see :mod:`trainmem.memory.layers`); this
module imports no other term module, so every one of them can import it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from trainmem.memory.layers.family import layer_family
from trainmem.model.spec import ModelSpec

if TYPE_CHECKING:  # (annotations only: no import of trainmem.setup, which validates with these modules)
    from trainmem.setup import TrainingSetup

__all__ = ["Term", "LayerSaved", "LayerModel", "LAYER_MODELS", "tp_only_fp32", "torch_cp", "is_amp", "compute_bytes",
           "residual_bytes", "te_fp8_linears", "linear_inputs_saved", "derived_mode", "derived_attn",
           "sdpa_math_fallback", "sliding_window_mask", "adapters_16bit", "lora_input_requires_grad",
           "expert_dtype_bytes", "additive_mask_bytes", "opt_post_ln", "opt_embed_proj_dim", "opt_final_layer_norm"]


@dataclass(frozen=True, slots=True)
class Term:
    """One saved tensor (or group) of a layer: bytes for T tokens on this rank."""

    name: str
    component: str
    """attention | mlp | norm | experts | router | dropout | lora | weight_copies"""
    bytes: int
    tp_split: bool = True
    """Divided by tensor parallelism (inside the column/row-parallel region)."""


@dataclass(frozen=True, slots=True)
class LayerSaved:
    terms: tuple[Term, ...]

    @property
    def total_bytes(self) -> int:
        return sum(t.bytes for t in self.terms)

    def by_component(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for t in self.terms:
            out[t.component] = out.get(t.component, 0) + t.bytes
        return out


@dataclass(frozen=True, slots=True)
class LayerModel:
    """A layer formula that replaces the eager one where it applies: each function returns None elsewhere."""

    layer_saved: Callable[[ModelSpec, TrainingSetup, int, bool], LayerSaved | None]
    """(spec, setup, layer index, fp8) -> what the layer keeps, as :func:`layer_saved`."""
    checkpoint_input_bytes: Callable[[ModelSpec, TrainingSetup], int | None]
    """As :func:`recomputed_checkpoint_input_bytes` (recompute full)."""


LAYER_MODELS: list[LayerModel] = []
"""The layer formulas built on this module's terms that :func:`layer_saved` asks first:
torch.compile's (memory/compile.py) and Megatron-Core's TE layers (memory/megatron_activations.py). They register
themselves when imported (``trainmem.memory`` imports both), so this module imports neither (no import circle)."""


def _fsdp2_mixed(setup: TrainingSetup) -> bool:
    """FSDP2's MixedPrecisionPolicy(param_dtype=16-bit) gathers 16-bit parameters and runs the module
    in 16 bits without autocast: activations are those of a pure 16-bit model."""
    return setup.engine == "fsdp2" and setup.fsdp_applied and setup.precision in ("amp-bf16", "amp-fp16")


def tp_only_fp32(setup: TrainingSetup) -> bool:
    """fsdp2 with tensor parallelism alone (no fully_shard): torchtitan disables mixed precision ("Mixed
    precision training with TP or PP is only supported when FSDP/HSDP/CP is enabled", torchtitan
    distributed/utils.py ``maybe_enable_amp``), so an amp recipe computes in fp32 (traced: trace/tp.py)."""
    return setup.engine == "fsdp2" and not setup.fsdp_applied and setup.precision in ("amp-bf16", "amp-fp16")


def torch_cp(setup: TrainingSetup) -> bool:
    """fsdp2 context parallelism: torch's ring attention over SDPA, batches sharded as torchtitan 0.2.2 does
    (trainmem/memory/context_parallel.py; traced: trace/cp.py)."""
    return setup.cp > 1 and setup.engine == "fsdp2"


def is_amp(setup: TrainingSetup) -> bool:
    """torch.autocast over fp32 parameters (casts at every matmul). With LoRA the amp recipes already load the
    frozen base in 16 bits (trace/lora.py), so ``--accelerate-autocast`` on a bf16 LoRA setup is the same step:
    autocast over a 16-bit base and fp32 adapters (peft casts x to the adapters' dtype, autocast casts back)."""
    if setup.accelerate_autocast and setup.is_lora:
        return True
    return setup.precision in ("amp-bf16", "amp-fp16") and not _fsdp2_mixed(setup) and not tp_only_fp32(setup)


def compute_bytes(setup: TrainingSetup) -> int:
    """Bytes per element of matmul inputs/outputs: 4 for fp32 (and fsdp2 TP-only amp, see tp_only_fp32), else 2."""
    return 4 if setup.precision == "fp32" or tp_only_fp32(setup) else 2


def residual_bytes(setup: TrainingSetup) -> int:
    """Bytes per element of the residual stream: fp32 params under autocast keep it fp32
    (embedding output and residual adds are not autocast ops); pure 16-bit models (and FSDP2 with a
    16-bit param_dtype) keep it 16-bit."""
    if _fsdp2_mixed(setup) or (setup.is_lora and setup.precision != "fp32"):
        return 2  # (LoRA: the frozen base is loaded in 16 bits, autocast recipes included: trace/lora.py)
    return 4 if setup.precision in ("fp32", "amp-bf16", "amp-fp16") else 2


def te_fp8_linears(setup: TrainingSetup, fp8: bool) -> bool:
    """An fp8 run outside Megatron whose linears are Transformer Engine ``te.Linear`` (``--fp8-backend te``).
    Each one quantizes its own input and saves only that fp8 copy for the weight gradient, 1 B per element:
    TE v0.x–1.x ``_Linear.forward`` ``save_for_backward(inputmat_no_fp8 if ... not fp8_wgrad else None,
    inputmat_t if ... fp8_wgrad else None, weight, weight_t_fp8, ...)``; TE 2.x keeps the quantized input
    with its column-wise usage only (transformer_engine/pytorch/module/linear.py)."""
    return fp8 and setup.engine != "megatron" and setup.fp8_backend == "te"


def linear_inputs_saved(setup: TrainingSetup, n_consumers: int, width: int, te_fp8: bool = False) -> float:
    """Bytes per token kept by the linears that read one norm output of ``width`` features.
    Pure/fp32: the one shared input tensor (r or c B). Autocast: each linear casts its input to
    16 bits itself (no cache for non-leaf tensors, aten/src/ATen/autocast_mode.h cached_cast), so
    every consumer keeps its own 2-byte copy. Transformer Engine linears (``te_fp8``): each its own fp8 copy."""
    if te_fp8:
        return 1.0 * n_consumers * width
    if is_amp(setup):
        return 2.0 * n_consumers * width
    return float(residual_bytes(setup) if setup.precision != "fp32" else 4) * width


def derived_mode(setup: TrainingSetup) -> str:
    """The precision class a derived layer description is measured in (trainmem/model/derive.py): ``amp``
    (fp32 parameters under autocast), ``fp32``, or ``16`` (16-bit compute: pure bf16/fp16, FSDP2's param_dtype)."""
    return "amp" if is_amp(setup) else ("fp32" if compute_bytes(setup) == 4 else "16")


def derived_attn(setup: TrainingSetup) -> str:
    """The attention a derived layer is measured with: flash-attn saves what CUDA's flash SDPA kernel saves
    (q, k, v, output, logsumexp), so ``flash`` is measured as ``sdpa``."""
    return "eager" if setup.attn == "eager" else "sdpa"


def sdpa_math_fallback(spec: ModelSpec, setup: TrainingSetup) -> bool:
    """CUDA SDPA falls back to the math kernel for fp32 inputs with native GQA (flash needs 16-bit,
    the memory-efficient kernel has no enable_gqa): trace/sdpa.py ``cuda_backend``."""
    return (setup.attn == "sdpa" and compute_bytes(setup) == 4 and spec.num_kv_heads < spec.num_attention_heads
            and spec.head_dim == spec.v_head_dim <= 256 and not spec.is_encoder
            and spec.q_lora_rank is None and spec.kv_lora_rank is None)


def sliding_window_mask(spec: ModelSpec, setup: TrainingSetup) -> bool:
    """Mistral-style sliding-window attention (mistral, mixtral, phi3; qwen2 with use_sliding_window):
    once the window does not cover the sequence, transformers builds an explicit (1, 1, s, s) boolean
    mask, so sdpa cannot use is_causal/enable_gqa: k and v are expanded to every head (repeat_kv) and
    CUDA runs the memory-efficient kernel, which keeps the mask."""
    sw = spec.sliding_window
    return (sw is not None and sw <= setup.seq_len // setup.cp and setup.attn == "sdpa"
            and layer_family(spec).window_mask)


def adapters_16bit(setup: TrainingSetup) -> bool:
    """LoRA adapters in the base's 16-bit dtype (``adapter_dtype`` bf16: torchtune, PEFT
    ``autocast_adapter_dtype=False``): ``x.to(lora_A.weight.dtype)`` is x itself, autocast casts nothing."""
    return setup.adapter_dtype == "bf16"


def lora_input_requires_grad(setup: TrainingSetup) -> bool:
    """Whether the first layer's input requires grad under LoRA: only with gradient checkpointing, where
    PEFT users call ``enable_input_require_grads()`` (HF Trainer does); otherwise the frozen embedding's
    output has no grad and autograd records nothing before the first adapter (trace/lora.py)."""
    return setup.recompute != "none"


def expert_dtype_bytes(setup: TrainingSetup) -> int:
    """Bytes per element of what routed experts compute: the dtype of their weights, since
    ``integrations/moe.py`` ``_grouped_mm`` casts the gathered tokens to it (``input.to(weight.dtype)``;
    grouped_mm is not an autocast op): fp32 under autocast with fp32 parameters; LoRA's frozen 16-bit base."""
    return 4 if is_amp(setup) and not setup.is_lora else compute_bytes(setup)


def additive_mask_bytes(setup: TrainingSetup) -> int:
    """One (b, 1, s, s) additive mask in the residual dtype (masking_utils.py ``eager_mask``)."""
    return setup.micro_batch * (setup.seq_len // setup.cp) * setup.seq_len * residual_bytes(setup)


def opt_post_ln(spec: ModelSpec) -> bool:
    """OPT with ``do_layer_norm_before`` false (opt-350m): ``OPTDecoderLayer.forward`` normalises after each
    residual add, so q/k/v_proj read the layer's input itself and the decoder has no final layer norm
    (``LayerFamily.post_ln``)."""
    return layer_family(spec).post_ln


def opt_embed_proj_dim(spec: ModelSpec) -> int:
    """OPT's ``word_embed_proj_dim`` where it differs from hidden_size (opt-350m: 512 of 1024), i.e. where
    ``OPTDecoder`` builds project_in / project_out; 0 otherwise (and for other families)."""
    if not layer_family(spec).embed_projections:
        return 0
    w = spec.hf_config.get("word_embed_proj_dim") or spec.hidden_size
    return w if w != spec.hidden_size else 0


def opt_final_layer_norm(spec: ModelSpec) -> bool:
    """Whether ``OPTDecoder`` has its ``final_layer_norm``: pre-LN (``do_layer_norm_before``) and not
    ``_remove_final_layer_norm``."""
    return not opt_post_ln(spec) and spec.hf_config.get("_remove_final_layer_norm", False) is not True
