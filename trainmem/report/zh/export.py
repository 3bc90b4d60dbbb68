"""Chinese for the messages of ``trainmem/export``… (format: see :mod:`trainmem.report.messages_zh`)."""

from __future__ import annotations

EXACT: dict[str, str] = {
    # ------------------------------------------------------------------ export/common.py, writer.py
    "export target: the model reference is empty or has a line break": "导出目标：模型名称为空或含有换行符",
    "export: no files to write": "导出：没有要写入的文件",
    # ------------------------------------------------------------------ export/deepspeed.py
    "DeepSpeed sets expert parallelism in the model code (deepspeed.moe.layer.MoE ep_size), not in ds_config.json; "
    "use ep 1":
        "DeepSpeed 的专家并行是在模型代码里设置的（deepspeed.moe.layer.MoE 的 ep_size），不在 ds_config.json 里；"
        "请用 ep 1",
    "DeepSpeed with HF models recomputes whole layers (gradient checkpointing); use recompute full or none":
        "DeepSpeed 配合 HF 模型只能按整层重计算（gradient checkpointing）；请用 recompute full 或 none",
    # ------------------------------------------------------------------ export/torchtitan.py
    "LoRA is not a torchtitan job config feature; use --export accelerate (PEFT) for LoRA":
        "torchtitan 的 job config 不支持 LoRA；LoRA 请用 --export accelerate（PEFT）",
    "torchtitan's mixed_precision_param is bfloat16 or float32; it has no fp16 recipe":
        "torchtitan 的 mixed_precision_param 只能是 bfloat16 或 float32，没有 fp16 精度方案",
    "torchtitan reduces FSDP gradients in float32 (mixed_precision_reduce); the pure-bf16 recipe was estimated "
    "with bf16 reductions":
        "torchtitan 的 FSDP 梯度归约固定用 float32（mixed_precision_reduce）；而纯 bf16 方案是按 bf16 归约估算的",
    "torchtitan applies no FSDP at dp * cp = 1 (parallel_dims.fsdp_enabled); the estimate sharded with fully_shard":
        "dp × cp = 1 时 torchtitan 不启用 FSDP（parallel_dims.fsdp_enabled）；而估算是按 fully_shard 分片计算的",
    "torchtitan always applies sequence parallelism with tensor parallelism; drop --no-sp":
        "torchtitan 开张量并行时总会开序列并行；请去掉 --no-sp",
    "torchtitan's models run SDPA attention; eager attention has no setting":
        "torchtitan 的模型使用 SDPA attention，没有 eager attention 的选项",
    "torchtitan's trainer computes a plain cross-entropy and drops the logits; use --loss hf --loop trainer":
        "torchtitan 的 trainer 计算普通的交叉熵并提前释放 logits；请用 --loss hf --loop trainer",
    "torchtitan's llama3 model has an untied output layer; this model ties its embeddings":
        "torchtitan 的 llama3 模型输出层不与 embedding 共享权重，而这个模型是共享的（tied）",
    "torchtitan's llama3 model has no sliding window and no dropout":
        "torchtitan 的 llama3 模型不支持滑动窗口注意力，也没有 dropout",
    # ------------------------------------------------------------------ export/accelerate.py
    "Accelerate's Megatron-LM plugin is not exported; use --export megatron":
        "不导出 Accelerate 的 Megatron-LM 插件；请用 --export megatron",
    "Accelerate's config has no pipeline parallelism and its TP/CP follow transformers' tp_plan, not the torchtitan "
    "plan estimated; use --export torchtitan":
        "Accelerate 的配置没有流水线并行，它的张量并行/上下文并行走的是 transformers 的 tp_plan，"
        "不是估算所用的 torchtitan 方案；请用 --export torchtitan",
    "Accelerate checkpoints whole layers only; use recompute full or none":
        "Accelerate 只能按整层做激活检查点；请用 recompute full 或 none",
    "Accelerate's FSDP2 mixed precision reduces gradients in 16 bits, the estimate in fp32; use --precision bf16 "
    "or fp32, or --export torchtitan":
        "Accelerate 的 FSDP2 混合精度用 16 位归约梯度，而估算按 fp32 归约；请用 --precision bf16 或 fp32，"
        "或者 --export torchtitan",
}

PATTERNS: list[tuple[str, str]] = [
    # ------------------------------------------------------------------ export/__init__.py, common.py, writer.py
    ("cannot export to {engine:w}: {why}", "无法导出到 {engine}：{why!t}"),
    ("export: unknown engine {engine}; choose one of {choices}", "导出：未知的引擎 {engine}；请从 {choices!l} 中选择"),
    ("export target: nodes({n}) and gpus_per_node({g}) must be at least 1",
     "导出目标：nodes（{n}）和 gpus_per_node（{g}）都必须至少为 1"),
    ("export target: nodes({n}) * gpus_per_node({g}) != gpus({k}) of the setup",
     "导出目标：nodes（{n}）× gpus_per_node（{g}）不等于训练配置的 gpus（{k}）"),
    ("export: {name} is not a plain file name", "导出：{name} 不是一个普通的文件名"),
    ("export: {path} exists and is not a folder", "导出：{path} 已存在，但不是文件夹"),
    ("export: {path} exists and is not a plain file", "导出：{path} 已存在，但不是普通文件"),
    ("export: {path} exists with other content; pass --force to overwrite it",
     "导出：{path} 已存在且内容不同；要覆盖请加 --force"),
    ("export: cannot write into {path}: {err}", "导出：无法写入 {path}：{err}"),
    ("export: cannot write {path}: {err}", "导出：无法写入 {path}：{err}"),
    # ------------------------------------------------------------------ reasons (can_export)
    ("the {exporter:w} exporter runs setups estimated for the {engine:w} engine, not {got:w}",
     "{exporter} 导出器只接受按 {engine} 引擎估算的配置，这里是 {got}"),
    ("DeepSpeed's optimizer block has Adam, AdamW and Lion; {opt:w} would be a client optimizer of the training "
     "script", "DeepSpeed 配置的 optimizer 只有 Adam、AdamW 和 Lion；{opt} 只能由训练脚本自己创建（client optimizer）"),
    ("Megatron-LM has no {opt:w} optimizer (--optimizer adam, sgd or lion)",
     "Megatron-LM 没有 {opt} 优化器（--optimizer 只有 adam、sgd 或 lion）"),
    ("Megatron's interleaved schedule runs micro-batches in groups of pp; grad_accum({g:d}) is not a multiple of "
     "pp({p:d})", "Megatron 的交错流水线调度按 pp 个 micro-batch 一组执行；grad_accum（{g}）不是 pp（{p}）的整数倍"),
    ("Megatron with expert tensor parallelism = tp (as estimated) needs ep({ep:d}) to divide dp({dp:d}) * cp({cp:d})",
     "专家张量并行 = tp（与估算一致）时，Megatron 要求 ep（{ep}）整除 dp（{dp}）× cp（{cp}）"),
    ("the Megatron-LM exporter knows Llama, Mistral, Qwen2/3, Mixtral, Qwen-MoE and GPT-2 shapes, not {t:w}",
     "Megatron-LM 导出器支持 Llama、Mistral、Qwen2/3、Mixtral、Qwen-MoE 和 GPT-2 结构，不支持 {t}"),
    ("{t:w}: sliding-window attention, parallel residuals or softcapping have no export here",
     "{t}：滑动窗口注意力、并行残差或 softcapping 暂不支持导出"),
    ("{t:w}: its linear biases match none of Megatron's bias flags",
     "{t}：它的线性层 bias 与 Megatron 的任何 bias 选项都对不上"),
    ("{t:w}: Megatron's gated MLP is SwiGLU (silu), not {act:w}",
     "{t}：Megatron 的门控 MLP 只有 SwiGLU（silu），不支持 {act}"),
    ("num_layers({l:d}) over pp({p:d}): the estimate gives the remainder to the first stages, which Megatron's "
     "first/last-stage layer counts cannot express",
     "num_layers（{l}）分到 pp（{p}）个 stage：估算把余下的层分给前面的 stage，Megatron 的首/尾 stage 层数选项表达不了"),
    ("vocab_size({v:d}) is not divisible by tp({tp:d}): Megatron would pad the vocabulary, unlike the estimate",
     "vocab_size（{v}）不能被 tp（{tp}）整除：Megatron 会填充词表，和估算不一致"),
    ("torchtitan 0.2.2 builds Adam and AdamW only, not {opt:w}", "torchtitan 0.2.2 只支持 Adam 和 AdamW，不支持 {opt}"),
    ("torchtitan's llama3 model builds bias-free Llama-style decoders; {t:w} is not one (use --export accelerate)",
     "torchtitan 的 llama3 模型只能构建不带 bias 的 Llama 式解码器；{t} 不属于这一类（请用 --export accelerate）"),
]
