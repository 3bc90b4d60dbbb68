"""LLaMA-Factory's vision-language keys → the VLM setup fields (``train_vision``, ``train_projector``,
``freeze_vision``, ``image_tokens``), LLaMA-Factory v0.9.5 (tag v0.9.5 = 7af9095):

* ``freeze_vision_tower``, ``freeze_multi_modal_projector`` (default true), ``freeze_language_model`` (default
  false): hparams/finetuning_args.py. A full fine-tune freezes the modules they name
  (model/model_utils/visual.py ``get_forbidden_modules``; model/adapter.py ``_setup_full_tuning``). Under LoRA
  ``lora_target: all`` takes every linear outside the projector, and outside the tower while it is frozen
  (model/model_utils/misc.py ``find_all_linear_modules``), and ``patch_target_modules`` drops the frozen parts'
  modules; the projector is never trained in full under LoRA (no ``modules_to_save``).
* ``image_max_pixels`` (default 768·768) / ``image_min_pixels`` (default 32·32): hparams/model_args.py. The plugin
  scales an image above ``image_max_pixels`` down to that area, one below ``image_min_pixels`` up
  (data/mm_plugin.py ``BasePlugin._preprocess_image``), then the model's processor makes the tokens.
* ``template``: names the plugin (data/template.py ``get_mm_plugin``): ``qwen2_vl`` (Qwen2-VL, Qwen2.5-VL:
  ``Qwen2VLPlugin``, ``image_grid_thw.prod() // merge_size²`` tokens per image = (H/14)·(W/14)/4), ``llava``
  (``LlavaPlugin``: (336/14)² = 576 tokens, the CLS position dropped by ``vision_feature_select_strategy``
  default) and ``gemma3`` (``Gemma3Plugin``: ``mm_tokens_per_image`` 256; ``image_do_pan_and_scan`` adds crops).

The image tokens are those of one image per sample at the largest size the file lets through (the peak sample).
"""

from __future__ import annotations

from trainmem.frameworks.readers._base import Reading

__all__ = ["read_llama_factory_vision", "qwen2_vl_image_tokens"]

_WHO = "LLaMA-Factory 0.9.5"
_MAX_PIXELS_DEFAULT = 768 * 768
#: template → the trainmem VLM family its plugin expands image tokens for (data/template.py, v0.9.5).
_PLUGIN = {"qwen2_vl": "qwen2_vl", "llava": "llava", "yi_vl": "llava", "gemma3": "gemma3"}
#: Fixed tokens per image of the plugins whose processor resizes every image to one size.
_FIXED_TOKENS = {"llava": 576, "gemma3": 256}
_KEYS = ("freeze_vision_tower", "freeze_multi_modal_projector", "freeze_language_model", "image_max_pixels",
         "image_min_pixels", "image_do_pan_and_scan")


def qwen2_vl_image_tokens(pixels: int) -> int:
    """Visual tokens of one Qwen2-VL / Qwen2.5-VL image of ``pixels`` pixels: 14-px patches, 2×2 merged
    (transformers 5.24 models/qwen2_vl/image_processing_qwen2_vl.py ``smart_resize`` then rounds each side to a
    multiple of 28 px, which moves this by a few percent either way with the aspect ratio: not modelled)."""
    return pixels // (14 * 14 * 4)


def read_llama_factory_vision(r: Reading, kind: str) -> None:
    """The VLM keys of a LLaMA-Factory file (``kind``: lora or full), when it has any or its template is a
    vision template; nothing otherwise (``template`` stays an ignored key of a text fine-tune)."""
    template = r.data.get("template")
    family = _PLUGIN.get(str(template)) if template is not None else None
    if family is None and not any(r.data.get(k) is not None for k in _KEYS):
        return
    if family is not None:
        r.use("template")
    _freezing(r, kind)
    _image_tokens(r, family, template)


def _freezing(r: Reading, kind: str) -> None:
    if r.bool_("freeze_language_model", False):
        raise r.refuse("freeze_language_model true (the language model frozen) is not modelled: trainmem trains the "
                       "language model, in full or with LoRA")
    tower = not r.bool_("freeze_vision_tower", True)
    projector = not r.bool_("freeze_multi_modal_projector", True)
    if kind == "lora":
        if tower:
            raise r.refuse("freeze_vision_tower false under LoRA (LoRA adapters in the vision tower: "
                           "find_all_linear_modules) is not modelled")
        if projector:
            r.out.statements.append("freeze_multi_modal_projector false: no effect under LoRA (LLaMA-Factory 0.9.5 "
                                    "neither adapts nor trains the projector: find_all_linear_modules leaves it out, no "
                                    "modules_to_save)")
        return
    if tower and not projector:
        raise r.refuse("freeze_vision_tower false with freeze_multi_modal_projector true (the tower trained, the "
                       "projector frozen) is not modelled")
    if tower:
        r.set("train_vision", True, "freeze_vision_tower false, freeze_multi_modal_projector false")
    elif projector:
        r.set("train_projector", True, "freeze_multi_modal_projector false")
    elif r.has("freeze_vision_tower") or r.has("freeze_multi_modal_projector"):
        r.set("freeze_vision", True, "freeze_vision_tower, freeze_multi_modal_projector")
    else:
        r.default("freeze_vision", True, f"{_WHO}: freeze_vision_tower=True, freeze_multi_modal_projector=True")


def _image_tokens(r: Reading, family: str | None, template: object) -> None:
    r.use("image_min_pixels")
    if family is None:
        r.use("image_max_pixels")
        r.out.statements.append(f"image tokens not read: template {template} is not one whose images trainmem counts "
                                "(qwen2_vl, llava, gemma3); give --image-tokens")
        return
    if family == "gemma3" and r.bool_("image_do_pan_and_scan"):
        raise r.refuse("image_do_pan_and_scan true (Gemma 3's extra crops per image) is not modelled")
    if family in _FIXED_TOKENS:
        r.use("image_max_pixels")
        n = _FIXED_TOKENS[family]
        r.set("image_tokens", n, f"template {template}")
        r.out.statements.append(f"image_tokens {n}: one image per sample ({family}'s processor resizes every image "
                                f"to one size: {n} tokens; image_max_pixels has no effect on them)")
        return
    pixels = r.int_("image_max_pixels")
    if pixels:
        r.set("image_tokens", qwen2_vl_image_tokens(pixels), f"image_max_pixels, template {template}")
    else:
        pixels = _MAX_PIXELS_DEFAULT
        r.default("image_tokens", qwen2_vl_image_tokens(pixels), f"{_WHO}: image_max_pixels=589824 (768×768)")
    r.out.statements.append(
        f"image_tokens {qwen2_vl_image_tokens(pixels)}: one image per sample, scaled down to image_max_pixels "
        f"{pixels} ({_WHO} mm_plugin.py _preprocess_image), {pixels} / (14·14·4) tokens (Qwen2-VL: 14-px patches, "
        "2×2 merged; the processor's rounding of each side to 28 px not modelled); smaller images and text-only "
        "samples give fewer")
