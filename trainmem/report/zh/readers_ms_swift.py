"""Chinese for the ms-swift lines of ``--from FILE`` (trainmem/frameworks/readers/ms_swift.py) and the regex LoRA
targets (readers/peft_regex.py): assumption lines and one-line refusals (format: see
:mod:`trainmem.report.messages_zh`)."""

from __future__ import annotations

EXACT: dict[str, str] = {
    "a regex of LoRA targets is matched on the model's module names: needs torch and transformers "
    "(pip install 'trainmem[trace]')":
        "LoRA 目标的正则表达式要在模型的模块名上匹配：需要 torch 和 transformers（pip install 'trainmem[trace]'）",
    "padding_free on: modelled as micro-batch sequences of the full max_length":
        "padding_free 已开启：按 micro-batch 条完整 max_length 长的序列估算",
    # ------------------------------------------------------------------ refusals (after "--from FILE: ")
    "target_modules all-embedding (LoRA on the embeddings) is not modelled":
        "target_modules all-embedding（在嵌入层上加 LoRA）没有建模",
    "bf16 and fp16 are both on (ms-swift sets fp16 for float16/float32 weights unless fp16 is false; "
    "TrainingArguments refuses both)":
        "bf16 和 fp16 同时开启（float16/float32 权重时 ms-swift 会打开 fp16，除非 fp16 为 false；"
        "TrainingArguments 不接受两者同开）",
    "freeze_vit / freeze_aligner false under LoRA (adapters in the vision tower or aligner) is not modelled":
        "LoRA 下的 freeze_vit / freeze_aligner false（视觉塔或对齐层里也加 adapter）没有建模",
    "freeze_llm true (the language model frozen) is not modelled":
        "freeze_llm 为 true（冻结语言模型）没有建模",
    "freeze_vit false with freeze_aligner true (the tower trained, the aligner frozen) is not modelled":
        "freeze_vit 为 false 而 freeze_aligner 为 true（训练视觉塔、冻结对齐层）没有建模",
    "optimizer plugins (optimizer, use_galore, lisa_activated_layers) are not modelled; use optim":
        "优化器插件（optimizer、use_galore、lisa_activated_layers）没有建模；请用 optim",
    "fp16 autocast over bfloat16 weights is not a recipe trainmem models":
        "在 bfloat16 权重上做 fp16 autocast 不是 trainmem 建模的配方",
    "torch_dtype float16 with tuner_type full: the HF Trainer's GradScaler refuses fp16 gradients; use bfloat16 or "
    "float32":
        "torch_dtype float16 配 tuner_type full：HF Trainer 的 GradScaler 不接受 fp16 梯度；请用 bfloat16 或 float32",
}

PATTERNS: list[tuple[str, str]] = [
    ("--from {p}: {k:w} is a regex (PEFT full-matches it on the module names)",
     "--from {p}：{k} 是正则表达式（PEFT 在模块名上做全匹配）"),
    ("{h}: the file names no model to match it on; give MODEL or --lora-targets",
     "{h!t}：文件里没有可供匹配的模型；请给出 MODEL 或 --lora-targets"),
    ("{h}: on {m} it {e}; give --lora-targets", "{h!t}：在 {m} 上 {e}；请给出 --lora-targets"),
    ("{h}, not matched: {e}; give --lora-targets", "{h!t}，无法匹配：{e!t}；请给出 --lora-targets"),
    ("{m:w}: transformers has no class {a:w} to read the module names from",
     "{m}：transformers 里没有可读取模块名的类 {a}"),
    ("{m:w}: the decoder layers of {a:w} are not one ModuleList of {n:d} (found {f:d})",
     "{m}：{a} 的解码层不是一个长度为 {n} 的 ModuleList（找到 {f} 个）"),
    ("deepspeed {n:w}: the DeepSpeed JSON ms-swift ships, swift/config/{f:w}",
     "deepspeed {n}：ms-swift 自带的 DeepSpeed 配置，swift/config/{f}"),
    ("quant_bits {b:w} without quant_method: ms-swift quantizes nothing (a pre-quantized AWQ/GPTQ checkpoint is not "
     "modelled)",
     "quant_bits {b} 而没有 quant_method：ms-swift 不做量化（预先量化的 AWQ/GPTQ 检查点没有建模）"),
    ("quant_method {m:w} with {k:w} full: a quantized base trains only with adapters",
     "quant_method {m} 配 {k} full：量化的基座只能配 adapter 训练"),
    ("sequence_parallel_size {n:w} (ms-swift's Ulysses / ring sequence parallelism) is not modelled",
     "sequence_parallel_size {n}（ms-swift 的 Ulysses / ring 序列并行）没有建模"),
    ("attn_impl {a:w} is not modelled (sdpa, eager, flash_attn, flash_attention_2/3)",
     "attn_impl {a} 没有建模（sdpa、eager、flash_attn、flash_attention_2/3）"),
    ("{k:w} {r} is not a regular expression (re.compile refuses it)", "{k} {r} 不是正则表达式（re.compile 拒绝它）"),
    ("lora_targets {t:w}: {k:w} full-matched on the module names of {m} (meta-device build)",
     "lora_targets {t}：{k} 按 PEFT 的 fullmatch 在 {m} 的模块名上匹配得出（meta 设备上构建）"),
]
