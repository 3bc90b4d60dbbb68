"""axolotl's multimodal keys (axolotl v0.18.0, src/axolotl/utils/schemas/model.py ``processor_type``,
schemas/config.py ``freeze_mm_modules``, schemas/multimodal.py ``image_size``): a config with ``processor_type``
fine-tunes a multimodal model. axolotl freezes nothing unless ``freeze_mm_modules`` (train.py:
``freeze_mm_modules(model)``, utils/freeze.py: the vision/audio towers and projectors ``requires_grad=False``), so
a full fine-tune trains the tower and the projector; under LoRA ``lora_target_modules`` decides. The image tokens
come from the model's processor (``image_size`` resizes first): not read, said so.
"""

from __future__ import annotations

from trainmem.frameworks.readers._base import Reading

__all__ = ["read_axolotl_vision"]


def read_axolotl_vision(r: Reading) -> None:
    """The multimodal keys of an axolotl file (nothing when it has none)."""
    if not any(r.data.get(k) is not None for k in ("processor_type", "freeze_mm_modules", "image_size")):
        return
    r.use("processor_type", "image_size", "image_resize_algorithm")
    if r.bool_("freeze_mm_modules"):
        r.set("freeze_vision", True, "freeze_mm_modules")
    elif r.data.get("adapter") is None:
        r.set("train_vision", True, "no freeze_mm_modules: axolotl 0.18.0 trains every parameter of a full fine-tune")
    r.out.statements.append("image tokens not read: the model's processor makes them (axolotl image_size resizes "
                            "first); give --image-tokens")
