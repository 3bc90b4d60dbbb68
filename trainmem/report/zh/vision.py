"""Chinese for the messages of vision-language models (trainmem/model/vlm.py, trainmem/memory/vision.py and their
setup checks in trainmem/setup.py)."""

from __future__ import annotations

EXACT: dict[str, str] = {
    # ------------------------------------------------------------------ setup.py
    "--freeze-vision contradicts --train-vision / --train-projector":
        "--freeze-vision 与 --train-vision / --train-projector 互相矛盾",
    # ------------------------------------------------------------------ memory/vision.py (assumptions)
    "vision: tower and projector trained (gradients, optimizer states, saved activations)":
        "视觉：训练视觉塔和投影层（有梯度、优化器状态和为反向保存的激活值）",
    "vision: projector trained, tower frozen (LLaMA-Factory freeze_multi_modal_projector: false)":
        "视觉：只训练投影层，视觉塔冻结（LLaMA-Factory freeze_multi_modal_projector: false）",
    "vision: tower and projector frozen (LLaMA-Factory freeze_vision_tower / freeze_multi_modal_projector and ms-swift "
    "freeze_vit / freeze_aligner defaults): stored, no gradients or optimizer states, nothing saved; the forward's "
    "peak is a transient":
        "视觉：视觉塔和投影层冻结（LLaMA-Factory freeze_vision_tower / freeze_multi_modal_projector 与 ms-swift "
        "freeze_vit / freeze_aligner 的默认值）：只存参数，没有梯度和优化器状态，不为反向保存任何张量；前向的峰值只是临时的",
    "vision: --image-tokens 0: text-only batches; the tower does not run, gets no gradients and no optimizer state "
    "(torch.optim skips a parameter whose .grad is None): it is stored only":
        "视觉：--image-tokens 0：纯文本批次；视觉塔不运行，没有梯度也没有优化器状态（torch.optim 跳过 .grad 为 None "
        "的参数）：只存参数",
    "vision with LoRA: adapters in the language model only, as LLaMA-Factory (find_all_linear_modules without the "
    "frozen tower and projector) and ms-swift target them; PEFT's target_modules matched over the whole model "
    "(all-linear, or CLIP's own q_proj/v_proj names) would adapt the tower too, which then saves activations: not "
    "modelled":
        "视觉 + LoRA：adapter 只加在语言模型里，与 LLaMA-Factory（find_all_linear_modules 排除冻结的视觉塔和投影层）和 "
        "ms-swift 的做法一致；若 PEFT 的 target_modules 在整个模型上匹配（all-linear，或 CLIP 自己的 q_proj/v_proj 名字），"
        "视觉塔也会被加上 adapter，从而要保存激活值：没有建模",
    "vision under FSDP: the tower's per-block all-gathers (transient) are not modelled":
        "FSDP 下的视觉塔：逐块的 all-gather（临时显存）没有建模",
}

PATTERNS: list[tuple[str, str]] = [
    # ------------------------------------------------------------------ setup.py
    ("--image-tokens {n:d} is above --seq-len {s:d}: the image tokens are part of the language model's sequence",
     "--image-tokens {n} 超过了 --seq-len {s}：图像 token 是语言模型序列的一部分"),
    # ------------------------------------------------------------------ model/vlm.py
    ("model_type {mt}: its text model counts {n:d} parameters as {f:w}, transformers' {a:w} has {m:d}; not modelled",
     "model_type {mt}：按 {f} 计算其文本模型有 {n} 个参数，transformers 的 {a} 却有 {m} 个；没有建模"),
    ("transformers cannot run {a}'s vision tower on this config: {e}", "transformers 无法在这个配置上运行 {a} 的视觉塔：{e}"),
    ("{mt:w}: {a:w} built on the meta device: vision tower {t:d} + projector {p:d} parameters; the language model is "
     "its described family; what the tower saves measured on fake tensors (1 and 2 images, three sizes: "
     "trainmem/model/vlm.py)",
     "{mt}：在 meta 设备上构建 {a}：视觉塔 {t} + 投影层 {p} 个参数；语言模型按其已有描述的家族计算；视觉塔为反向保存的张量"
     "在 fake tensor 上测得（1 张和 2 张图像、三种尺寸：trainmem/model/vlm.py）"),
    ("{mt:w}: {a:w} built on the meta device: vision tower {t:d} + projector {p:d} parameters; the language model is "
     "its described family; what the tower saves measured on fake tensors (1 and 2 images: trainmem/model/vlm.py)",
     "{mt}：在 meta 设备上构建 {a}：视觉塔 {t} + 投影层 {p} 个参数；语言模型按其已有描述的家族计算；视觉塔为反向保存的张量"
     "在 fake tensor 上测得（1 张和 2 张图像：trainmem/model/vlm.py）"),
    ("{mt:w}'s vision tower (the tracer builds causal LMs; the tower is measured by the estimate itself: "
     "docs/vision.md)",
     "{mt} 的视觉塔（追踪器只构建因果语言模型；视觉塔由估算本身测量：docs/vision.md）"),
    # ------------------------------------------------------------------ memory/vision.py
    ("{what}: {m} has no vision tower (vision-language models: {fams}; gemma3 with its vision_config)",
     "{what}：{m} 没有视觉塔（视觉-语言模型：{fams!l}；gemma3 需带 vision_config）"),
    ("{ax:w}({n:d}) > 1 is not modelled for {mt:w}'s vision tower; use data parallelism (torch, fsdp2, deepspeed)",
     "{mt} 的视觉塔不支持 {ax}({n}) > 1 的建模；请用数据并行（torch、fsdp2、deepspeed）"),
    ("{mt:w}: FSDP1 (flat parameters mixing a frozen tower and a trained model) is not modelled; use --fsdp-version 2 "
     "or deepspeed",
     "{mt}：FSDP1（flat parameter 中混有冻结的视觉塔和训练中的模型）没有建模；请用 --fsdp-version 2 或 deepspeed"),
    ("{mt:w}: --engine megatron and --device-map are not modelled with a vision tower",
     "{mt}：带视觉塔时不支持 --engine megatron 和 --device-map 的建模"),
    ("{mt:w}: LoRA with --train-vision/--train-projector is not modelled (the tower's adapters or modules_to_save); "
     "LoRA trains the language model with the tower frozen",
     "{mt}：LoRA 加 --train-vision/--train-projector 没有建模（视觉塔的 adapter 或 modules_to_save）；"
     "LoRA 训练语言模型，视觉塔冻结"),
    ("{mt:w}: --offload-activations with a trained vision tower is not modelled",
     "{mt}：训练视觉塔时不支持 --offload-activations 的建模"),
    ("--image-tokens {n:d}: {mt:w} gives {per:d} tokens per image; give a multiple of {q:d}",
     "--image-tokens {n}：{mt} 每张图像给出 {per} 个 token；请给它的整数倍"),
    ("--image-tokens {n:d}: an image gives at least 4 tokens ({mt:w}: (H/14)·(W/14)/4, H, W >= 28)",
     "--image-tokens {n}：一张图像至少给出 4 个 token（{mt}：(H/14)·(W/14)/4，H、W >= 28）"),
    ("vision: {n:d} image tokens per sample, part of seq_len {s:d} ({i:d} image(s) of {p:d} patches per sample)",
     "视觉：每个样本 {n} 个图像 token，计入 seq_len {s}（每个样本 {i} 张图像，每张 {p} 个 patch）"),
]
