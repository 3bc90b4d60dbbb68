"""Chinese for the vision-language lines of ``--from FILE`` (trainmem/frameworks/readers/llama_factory_vision.py):
the assumption lines and the one-line refusals (format: see :mod:`trainmem.report.messages_zh`)."""

from __future__ import annotations

EXACT: dict[str, str] = {
    "freeze_multi_modal_projector false: no effect under LoRA (LLaMA-Factory 0.9.5 neither adapts nor trains the "
    "projector: find_all_linear_modules leaves it out, no modules_to_save)":
        "freeze_multi_modal_projector 为 false：在 LoRA 下不起作用（LLaMA-Factory 0.9.5 既不给投影层加 adapter 也不训练它："
        "find_all_linear_modules 把它排除在外，也没有 modules_to_save）",
    # ------------------------------------------------------------------ refusals (after "--from FILE: ")
    "freeze_language_model true (the language model frozen) is not modelled: trainmem trains the language model, in "
    "full or with LoRA":
        "freeze_language_model 为 true（冻结语言模型）没有建模：trainmem 总是训练语言模型（全量或 LoRA）",
    "freeze_vision_tower false under LoRA (LoRA adapters in the vision tower: find_all_linear_modules) is not modelled":
        "LoRA 下的 freeze_vision_tower false（视觉塔里也加 LoRA adapter：find_all_linear_modules）没有建模",
    "freeze_vision_tower false with freeze_multi_modal_projector true (the tower trained, the projector frozen) is not "
    "modelled":
        "freeze_vision_tower 为 false 而 freeze_multi_modal_projector 为 true（训练视觉塔、冻结投影层）没有建模",
    "image_do_pan_and_scan true (Gemma 3's extra crops per image) is not modelled":
        "image_do_pan_and_scan 为 true（Gemma 3 每张图额外的裁剪块）没有建模",
}

PATTERNS: list[tuple[str, str]] = [
    ("image_tokens {n:d}: one image per sample, scaled down to image_max_pixels {p:d} ({who} mm_plugin.py "
     "_preprocess_image), {p2:d} / (14·14·4) tokens (Qwen2-VL: 14-px patches, 2×2 merged; the processor's rounding "
     "of each side to 28 px not modelled); smaller images and text-only samples give fewer",
     "image_tokens {n}：按每个样本一张图计，图缩小到 image_max_pixels {p}（{who} mm_plugin.py _preprocess_image），"
     "{p2} / (14·14·4) 个 token（Qwen2-VL：14 像素的 patch，2×2 合并；处理器把每边取整到 28 像素的倍数，没有建模）；"
     "更小的图和纯文本样本的 token 更少"),
    ("image_tokens {n:d}: one image per sample ({family:w}'s processor resizes every image to one size: {n2:d} tokens; "
     "image_max_pixels has no effect on them)",
     "image_tokens {n}：按每个样本一张图计（{family} 的处理器把每张图缩放到同一尺寸：{n2} 个 token；image_max_pixels "
     "对它没有影响）"),
    ("image tokens not read: template {t:w} is not one whose images trainmem counts (qwen2_vl, llava, gemma3); give "
     "--image-tokens",
     "没有读出图像 token 数：模板 {t} 不在 trainmem 会计算图像 token 的模板之列（qwen2_vl、llava、gemma3）；"
     "请给 --image-tokens"),
]
EXACT.update({
    "no freeze_mm_modules: axolotl 0.18.0 trains every parameter of a full fine-tune":
        "没有 freeze_mm_modules：axolotl 0.18.0 全量微调时训练所有参数",
    "image tokens not read: the model's processor makes them (axolotl image_size resizes first); give --image-tokens":
        "没有读出图像 token 数：它们由模型的处理器决定（axolotl 的 image_size 先缩放图像）；请给 --image-tokens",
})
