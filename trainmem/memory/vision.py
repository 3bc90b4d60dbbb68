"""A vision-language model's vision tower in the step: its parameters (frozen or trained), what it keeps for
backward, its forward's transient, and the setups it is modelled for. The tower itself is described in
:mod:`trainmem.model.vlm`; this module is pure Python (no torch) until a fit is measured there.

In the step (HF ``*ForConditionalGeneration.forward``, transformers 5.24): ``get_image_features`` runs the tower
and the projector before the language model's first layer; their output is scattered into ``inputs_embeds``
(the image tokens are part of ``seq_len``). A trained tower keeps what autograd saved from its forward until its
backward, which runs last (after the embedding's: the gradient reaches it through the scattered features), and
makes its parameters' gradients there. A frozen tower (``requires_grad=False``) keeps nothing: its forward's
peak is a transient before the first layer. Under ``--recompute full`` HF's ``activation_checkpointing_enable``
checkpoints the tower's blocks too (``GradientCheckpointingLayer``), which the fit measures.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainmem.model.spec import ModelSpec

if TYPE_CHECKING:
    from trainmem.setup import TrainingSetup

__all__ = ["vision_state", "vision_images", "vision_trainable_params", "vision_frozen_params", "vision_saved_bytes",
           "vision_forward_transient_bytes", "vision_refusal", "vision_notes"]


def vision_state(setup: TrainingSetup) -> str:
    """``trained`` (tower and projector), ``projector`` (the projector only) or ``frozen``."""
    if setup.train_vision:
        return "trained"
    return "projector" if setup.train_projector else "frozen"


def vision_images(spec: ModelSpec, setup: TrainingSetup) -> tuple[int, int]:
    """(images per sample, patches the tower sees per image) for ``setup.image_tokens``: one image of
    ``patches_per_token·N`` patches (Qwen: 4·N), or ``N / tokens_per_image`` images of the fixed size
    (LLaVA-1.5: 576 tokens, 577 positions with CLS)."""
    vt, n = spec.vision, setup.image_tokens
    if vt is None or n == 0:
        return 0, 0
    if vt.tokens_per_image is None:
        return 1, vt.patches_per_token * n
    return n // vt.tokens_per_image, vt.tokens_per_image * vt.patches_per_token + vt.extra_positions


def vision_trainable_params(spec: ModelSpec, setup: TrainingSetup) -> int:
    """Parameters of the vision part that get gradients and optimizer states."""
    vt = spec.vision
    if vt is None or not setup.image_tokens:  # (a tower that does not run gets no .grad: AdamW makes no state)
        return 0
    return {"trained": vt.params, "projector": vt.projector_params, "frozen": 0}[vision_state(setup)]


def vision_frozen_params(spec: ModelSpec, setup: TrainingSetup) -> int:
    """Parameters of the vision part that are stored only (no gradient, no optimizer state)."""
    return (spec.vision.params - vision_trainable_params(spec, setup)) if spec.vision is not None else 0


def _fit(spec: ModelSpec, setup: TrainingSetup):  # noqa: ANN202 - trainmem.model.vlm.VisionFit
    from trainmem.memory.layers.base import derived_attn, derived_mode

    return spec.vision.fit(derived_mode(setup), derived_attn(setup), vision_state(setup), setup.recompute == "full")


def vision_saved_bytes(spec: ModelSpec, setup: TrainingSetup) -> int:
    """Bytes the tower and the projector keep for backward per micro-batch (``micro_batch`` samples), from the
    fake-tensor fit (:class:`trainmem.model.vlm.VisionFit`); 0 without images or for a frozen tower."""
    images, patches = vision_images(spec, setup)
    if not images or vision_state(setup) == "frozen":
        return 0
    return _fit(spec, setup).saved_bytes(setup.micro_batch * images, patches)


def vision_forward_transient_bytes(spec: ModelSpec, setup: TrainingSetup) -> int:
    """The tower's forward peak above what it leaves alive (its running block's tensors), per micro-batch."""
    images, patches = vision_images(spec, setup)
    if not images:
        return 0
    return _fit(spec, setup).transient_bytes(setup.micro_batch * images, patches)


def vision_refusal(spec: ModelSpec, setup: TrainingSetup) -> str | None:
    """Why ``setup`` is not modelled for this model's vision part (one line), or None."""
    vt = spec.vision
    if vt is None:
        if setup.image_tokens or setup.train_vision or setup.train_projector:
            from trainmem.model.vlm import VLM_MODEL_TYPES  # (the families with a tower: their registry)
            what = "--image-tokens" if setup.image_tokens else "--train-vision/--train-projector"
            return (f"{what}: {spec.name} has no vision tower (vision-language models: {', '.join(VLM_MODEL_TYPES)}; "
                    "gemma3 with its vision_config)")
        return None
    for axis in ("tp", "pp", "cp", "ep"):
        if getattr(setup, axis) > 1:
            return (f"{axis}({getattr(setup, axis)}) > 1 is not modelled for {vt.model_type}'s vision tower; use data "
                    "parallelism (torch, fsdp2, deepspeed)")
    if setup.engine == "fsdp2" and setup.fsdp_version == 1:
        return (f"{vt.model_type}: FSDP1 (flat parameters mixing a frozen tower and a trained model) is not modelled; "
                "use --fsdp-version 2 or deepspeed")
    if setup.engine == "megatron" or setup.device_map:
        return f"{vt.model_type}: --engine megatron and --device-map are not modelled with a vision tower"
    if setup.is_lora and vision_state(setup) != "frozen":
        return (f"{vt.model_type}: LoRA with --train-vision/--train-projector is not modelled (the tower's adapters or "
                "modules_to_save); LoRA trains the language model with the tower frozen")
    if setup.offload_activations and vision_state(setup) != "frozen":
        return f"{vt.model_type}: --offload-activations with a trained vision tower is not modelled"
    n, per = setup.image_tokens, vt.tokens_per_image
    if per is not None and n % per:
        return (f"--image-tokens {n}: {vt.model_type} gives {per} tokens per image; give a multiple of {per}")
    if per is None and n and n < 4:
        return f"--image-tokens {n}: an image gives at least 4 tokens ({vt.model_type}: (H/14)·(W/14)/4, H, W >= 28)"
    return None


def vision_notes(spec: ModelSpec, setup: TrainingSetup) -> list[str]:
    """The assumptions for the vision part."""
    vt = spec.vision
    if vt is None:
        return []
    images, patches = vision_images(spec, setup)
    state = vision_state(setup)
    out = [vt.note]
    trained = {"trained": "tower and projector trained (gradients, optimizer states, saved activations)",
               "projector": "projector trained, tower frozen (LLaMA-Factory freeze_multi_modal_projector: false)",
               "frozen": "tower and projector frozen (LLaMA-Factory freeze_vision_tower / freeze_multi_modal_projector "
                         "and ms-swift freeze_vit / freeze_aligner defaults): stored, no gradients or optimizer "
                         "states, nothing saved; the forward's peak is a transient"}[state]
    out.append(f"vision: {trained}")
    if images:
        out.append(f"vision: {setup.image_tokens} image tokens per sample, part of seq_len {setup.seq_len} "
                   f"({images} image(s) of {patches} patches per sample)")
    else:
        out.append("vision: --image-tokens 0: text-only batches; the tower does not run, gets no gradients and no "
                   "optimizer state (torch.optim skips a parameter whose .grad is None): it is stored only")
    if setup.is_lora:
        out.append("vision with LoRA: adapters in the language model only, as LLaMA-Factory (find_all_linear_modules "
                   "without the frozen tower and projector) and ms-swift target them; PEFT's target_modules matched "
                   "over the whole model (all-linear, or CLIP's own q_proj/v_proj names) would adapt the tower too, "
                   "which then saves activations: not modelled")
    if setup.engine == "fsdp2" and state != "frozen":
        out.append("vision under FSDP: the tower's per-block all-gathers (transient) are not modelled")
    return out
