"""Chinese for ``--from FILE`` (``trainmem/frameworks/readers``): the assumption lines a reader writes (one per value:
from the file, from the framework's defaults, how a value is modelled, the keys ignored), the sources of the values
that are sentences, and the one-line refusals (format: see :mod:`trainmem.report.messages_zh`)."""

from __future__ import annotations

EXACT: dict[str, str] = {
    # ------------------------------------------------------------------ statements (how a value is modelled)
    "sample_packing on: every sequence is the full sequence_len":
        "sample_packing 已开启：每条序列都是完整的 sequence_len",
    "packing on: every sequence is the full max_length": "packing 已开启：每条序列都是完整的 max_length",
    "packing on: every sequence is the full cutoff_len": "packing 已开启：每条序列都是完整的 cutoff_len",
    "dataset.packed on: every sequence is the full tokenizer.max_seq_len":
        "dataset.packed 已开启：每条序列都是完整的 tokenizer.max_seq_len",
    "bf16 on (TRL 1.16 SFTConfig: bf16=None means True unless fp16)":
        "bf16 开启（TRL 1.16 SFTConfig：bf16=None 在未设 fp16 时即为 True）",
    "--sequence-parallel off: Megatron-LM disables it when tensor parallelism is 1":
        "--sequence-parallel 关闭：张量并行为 1 时 Megatron-LM 会自动关掉它",
    "the arguments inside the script's if blocks are read as if every condition held":
        "脚本里 if 分支中的参数全部读入，按每个条件都成立处理",
    "model.megatron_amp_O2 false: NeMo's O1 (autocast) bf16 is estimated as Megatron's mixed-bf16 (O2: bf16 "
    "weights, fp32 main weights)":
        "model.megatron_amp_O2 为 false：NeMo 的 O1（autocast）bf16 按 Megatron 的 mixed-bf16 估算"
        "（O2：bf16 权重，fp32 主权重）",
    # ------------------------------------------------------------------ sources that are sentences
    "torchtune's NF4Tensor (torchao)": "torchtune 的 NF4Tensor（torchao）",
    "a *_distributed recipe (FSDP2 fully_shard)": "*_distributed 配方（FSDP2 fully_shard）",
    "bf16 (the model loaded in bfloat16)": "bf16（模型以 bfloat16 加载）",
    "fp16 (the model loaded in float16)": "fp16（模型以 float16 加载）",
    "bf16 + dtype bfloat16 (16-bit weights)": "bf16 + dtype bfloat16（16 位权重）",
    "dtype bfloat16 without autocast": "dtype bfloat16，不开 autocast",
    "bf16/fp16 false": "bf16/fp16 为 false",
    "bf16 under Accelerate's FSDP: MixedPrecisionPolicy gathers and reduces in bf16, as accelerate_config "
    "mixed_precision bf16":
        "Accelerate FSDP 下的 bf16：MixedPrecisionPolicy 以 bf16 做 all-gather 和归约，与 accelerate_config 的 "
        "mixed_precision bf16 相同",
    "mixed_precision bf16 (FSDP MixedPrecisionPolicy: bf16 gathers and reduction)":
        "mixed_precision bf16（FSDP MixedPrecisionPolicy：以 bf16 做 all-gather 和归约）",
    "devices > 1 (FSDP full sharding)": "devices > 1（FSDP 全分片）",
    "devices > 1 (FSDP, a fully_shard unit per Block)": "devices > 1（FSDP，每个 Block 一个 fully_shard 单元）",
    "devices > 1 (litgpt checkpoints every Block)": "devices > 1（litgpt 对每个 Block 做检查点）",
    "enable_liger_kernel (sft/pt: Liger's fused linear cross-entropy)":
        "enable_liger_kernel（sft/pt 阶段：Liger 的融合线性交叉熵）",
    "neither --bf16 nor --fp16": "既没有 --bf16 也没有 --fp16",
    "micro-batch size": "micro-batch 大小",
    "global batch / (micro-batch × dp)": "全局 batch / (micro-batch × dp)",
    "torchtitan (FSDP2 fully_shard)": "torchtitan（FSDP2 fully_shard）",
    "NeMo (Megatron-Core)": "NeMo（Megatron-Core）",
    "Megatron-LM arguments": "Megatron-LM 参数",
    "Megatron-LM: --optimizer adam (AdamW)": "Megatron-LM：--optimizer adam（AdamW）",
    "torch.optim default (foreach on CUDA)": "torch.optim 的默认实现（CUDA 上为 foreach）",
    "a *_distributed recipe": "*_distributed 配方",
    "qlora_ builder": "qlora_ 构建函数",
    "compile + loss._component_ torch.nn.CrossEntropyLoss (the recipe drops training.compile_loss's return: the loss "
    "stays eager)":
        "compile + loss._component_ torch.nn.CrossEntropyLoss（该 recipe 丢弃了 training.compile_loss 的返回值：损失保持 eager）",
    "mixed_precision no: no autocast, fp32 weights unless the script loads them in bf16 (then give --precision bf16)":
        "mixed_precision no：不开 autocast，权重为 fp32，除非脚本以 bf16 加载（那时请给 --precision bf16）",
    "LoRA on no module: every lora_query/key/value/projection/mlp/head is false":
        "LoRA 没有作用在任何模块上：lora_query/key/value/projection/mlp/head 全为 false",
    # ------------------------------------------------------------------ refusals (after "--from FILE: ")
    "unfrozen_parameters (training a subset of the weights) is not modelled":
        "unfrozen_parameters（只训练一部分权重）没有建模",
    "load_in_8bit: an 8-bit base is modelled under adapter lora (LoRA over LLM.int8)":
        "load_in_8bit：8 位基座只在 adapter lora 下建模（LLM.int8 上的 LoRA）",
    "load_in_8bit: an 8-bit base model is not modelled (adapter qlora with load_in_4bit is)":
        "load_in_8bit：8 位基座模型没有建模（adapter qlora 配合 load_in_4bit 有建模）",
    "load_in_8bit: an 8-bit base model is not modelled (use load_in_4bit for QLoRA)":
        "load_in_8bit：8 位基座模型没有建模（QLoRA 请用 load_in_4bit）",
    "lora_modules_to_save / lora_target_parameters (modules trained in full, or parameters targeted directly) are "
    "not modelled":
        "lora_modules_to_save / lora_target_parameters（整体训练的模块，或直接指定的参数）没有建模",
    "cut_cross_entropy is not modelled (liger_fused_linear_cross_entropy is)":
        "cut_cross_entropy 没有建模（liger_fused_linear_cross_entropy 有建模）",
    "load_in_4bit without an adapter: axolotl refuses a 4-bit full fine-tune":
        "load_in_4bit 却没有 adapter：axolotl 不允许 4 位全量微调",
    "adapter qlora with load_in_4bit false is not QLoRA": "adapter qlora 而 load_in_4bit 为 false，不是 QLoRA",
    "bf16 and fp16 are both true (TrainingArguments refuses it)": "bf16 和 fp16 同时为 true（TrainingArguments 会拒绝）",
    "fsdp hybrid_shard is not modelled (use full_shard or shard_grad_op)":
        "fsdp hybrid_shard 没有建模（请用 full_shard 或 shard_grad_op）",
    "lora_modules_to_save (fully trained extra modules) is not modelled":
        "lora_modules_to_save（额外整体训练的模块）没有建模",
    "load_in_4bit without use_peft: a 4-bit base needs LoRA adapters to train":
        "load_in_4bit 却没有 use_peft：4 位基座需要 LoRA 适配器才能训练",
    "dtype float16 without fp16 autocast (pure fp16 training) is not a recipe trainmem models under the HF Trainer; "
    "set fp16: true":
        "dtype float16 而不开 fp16 autocast（纯 fp16 训练）：trainmem 没有为 HF Trainer 建模这种精度方案；请设 fp16: true",
    "devices auto: give the number of GPUs (devices: N)": "devices auto：请给出 GPU 数（devices: N）",
    "quantize on several devices: litgpt supports quantization on one device only":
        "多卡上的 quantize：litgpt 只支持单卡量化",
    "quantize with a -mixed precision (bf16-mixed is the default): litgpt refuses it; set precision: bf16-true":
        "quantize 配 -mixed 精度（默认就是 bf16-mixed）：litgpt 会拒绝；请设 precision: bf16-true",
    "use_unsloth / use_galore / use_badam / use_apollo are not modelled":
        "use_unsloth / use_galore / use_badam / use_apollo 没有建模",
    "additional_target (modules trained in full beside LoRA) is not modelled":
        "additional_target（LoRA 之外整体训练的模块）没有建模",
    "use_dora (DoRA's magnitude vectors and weight norms) is not modelled":
        "use_dora（DoRA 的幅度向量和权重范数）没有建模",
    "mixed_precision fp8 under Accelerate is not modelled; use bf16": "Accelerate 下的 mixed_precision fp8 没有建模；请用 bf16",
    "the global batch size without the world size (the accumulation depends on it)":
        "给了全局 batch 却没有总卡数（梯度累积步数取决于它）",
    "training.global_batch_size with data_parallel_shard_degree -1: the accumulation depends on the world size":
        "training.global_batch_size 配 data_parallel_shard_degree -1：梯度累积步数取决于总卡数",
    "optimizer.early_step_in_backward under FSDP is not modelled": "FSDP 下的 optimizer.early_step_in_backward 没有建模",
    "model.lora_rank is missing (the LoRA builders require it)": "缺少 model.lora_rank（LoRA 构建函数需要它）",
    "LoRA on no module: lora_attn_modules is empty and apply_lora_to_mlp is off":
        "LoRA 没有作用在任何模块上：lora_attn_modules 为空且 apply_lora_to_mlp 关闭",
    "optimizer.foreach False (the for-loop step) is not modelled": "optimizer.foreach False（逐参数循环的更新）没有建模",
    "a binary file, not a training config": "是二进制文件，不是训练配置",
    "the file is empty": "文件是空的",
    "no such file": "文件不存在",
    "is a directory, not a file": "是目录，不是文件",
    "not UTF-8 text": "不是 UTF-8 文本",
    "larger than 16 MiB, not a training config": "大于 16 MiB，不是训练配置",
    "not a config trainmem reads: axolotl, LLaMA-Factory, torchtune, litgpt, HF TrainingArguments / TRL, DeepSpeed, "
    "Accelerate, torchtitan, Megatron-LM arguments or NeMo YAML":
        "不是 trainmem 能读的配置：axolotl、LLaMA-Factory、torchtune、litgpt、HF TrainingArguments / TRL、DeepSpeed、"
        "Accelerate、torchtitan、Megatron-LM 参数或 NeMo YAML",
    "the file names no model": "文件里没有指明模型",
    "data_types.grad_accum_dtype fp32 with bf16 runs DeepSpeed's BF16_Optimizer, which trainmem does not model":
        "data_types.grad_accum_dtype 为 fp32 且开启 bf16 时运行 DeepSpeed 的 BF16_Optimizer，trainmem 没有建模",
    "--from: reading YAML needs PyYAML (pip install 'trainmem[yaml]')":
        "--from：读取 YAML 需要 PyYAML（pip install 'trainmem[yaml]'）",
    "missing the MODEL argument (a catalog name, a config.json path or a size like 7B), or give --from FILE":
        "缺少 MODEL 参数（目录中的模型名、config.json 路径或 7B 这样的规模），或者给出 --from FILE",
}

PATTERNS: list[tuple[str, str]] = [
    # ------------------------------------------------------------------ the assumption lines (FileSetup.notes)
    ("{what}: from {file:w} ({key})", "{what!t}：来自 {file}（{key!t}）"),
    ("{what}: the {fmt:w} default for what {file:w} leaves out ({src})", "{what!t}：{file} 未设置，取 {fmt} 的默认值（{src!t}）"),
    ("ignored keys of {file:w} (no effect on the memory trainmem models): {keys}",
     "{file} 中被忽略的键（对 trainmem 建模的显存没有影响）：{keys!l}"),
    ("model {m:w}, the catalog's shape for {ref:w}", "model {m}（目录中 {ref} 所对应的结构）"),
    ("model {m:w}: given on the command line, not the file's {f:w}", "model {m}：用命令行给出的模型，而不是文件里的 {f}"),
    ("{key} [{name:w}]", "{name} 中的 {key!t}"),
    ("{z:w} auto (the HF integration fills it from hidden_size) is modelled at DeepSpeed's default {v:w}",
     "{z} auto（HF 集成按 hidden_size 填写）按 DeepSpeed 的默认值 {v} 建模"),
    ("{z:w} {v:w} is modelled at DeepSpeed's default {d:w}", "{z} {v} 按 DeepSpeed 的默认值 {d} 建模"),
    # sources that are sentences, with the framework's release in them
    ("bf16 auto: {who} enables bf16 on bf16 GPUs and loads the model in bfloat16",
     "bf16 auto：{who} 在支持 bf16 的 GPU 上开启 bf16，并以 bfloat16 加载模型"),
    ("{who}: neither bf16 nor fp16 set, float32 weights", "{who}：既没设 bf16 也没设 fp16，float32 权重"),
    ("{who}: neither bf16 nor fp16, float32 weights", "{who}：既没有 bf16 也没有 fp16，float32 权重"),
    ("{who}: no activation checkpointing on one device", "{who}：单卡上不做激活检查点"),
    ("{who}: bf16-mixed on bf16 GPUs", "{who}：支持 bf16 的 GPU 上为 bf16-mixed"),
    ("{who}: a single-device recipe (no fsdp_* key, the header names none *_distributed)",
     "{who}：单卡配方（没有 fsdp_* 键，文件头也没有提到 *_distributed）"),
    ("{p:w}: the base loaded in {p2:w}, the adapters upcast to fp32", "{p}：基座以 {p2} 加载，适配器升到 fp32"),
    ("{p:w}: trainable weights upcast to fp32 under autocast", "{p}：可训练权重升到 fp32，在 autocast 下计算"),
    ("{p}bf16/fp16 not enabled", "{p}bf16/fp16 未开启"),
    ("read from {p}:", "从 {p} 读到："),
    ("global batch {g:d}: the file's micro-batch × accumulation × dp {d:d}", "全局 batch {g}：文件的 micro-batch × 累积步数 × dp {d}"),
    ("plan searches what the file fixes ({keys}); pin it with --fix", "plan 会搜索文件里定死的这些设置（{keys!l}）；要固定请用 --fix"),
    ("the header's tune run --nproc_per_node {n:d}", "文件头里的 tune run --nproc_per_node {n}"),
    ("{src} / devices / micro-batch", "{src!t} / 卡数 / micro-batch"),
    ("{src} / pipeline_parallel_microbatch_size", "{src!t} 除以 pipeline_parallel_microbatch_size"),
    ("{p}data_parallel_shard_degree -1 takes what the world size leaves, which the file does not say: dp 1 (give "
     "--gpus)", "{p}data_parallel_shard_degree -1 取总卡数剩下的部分，而文件没有给出总卡数：按 dp 1 计（请给 --gpus）"),
    ("{w:w} (architecture)", "{w}（按模型结构）"),
    ("{w:w} (architecture; also matches {others})", "{w}（按模型结构；也与 {others!l} 相符）"),
    # ------------------------------------------------------------------ refusals
    ("--from {p:p}: {why}; give {flag:w} to choose", "--from {p}：{why!t}；请给出 {flag} 来选择"),
    ("--from {p:p}: {why}; give MODEL", "--from {p}：{why!t}；请给出 MODEL"),
    ("--from {p}: {why}; give MODEL", "--from {p}：{why!t}；请给出 MODEL"),
    ("--from {p:p}: {why}", "--from {p}：{why!t}"),
    ("--from {p}: {why}", "--from {p}：{why!t}"),
    ("not valid {s:w} ({detail})", "不是合法的 {s}（解析器的原话：\"{detail}\"）"),
    ("not valid {s:w} (nested too deeply)", "不是合法的 {s}（嵌套太深）"),
    ("not a {s:w} mapping of keys to values", "不是键值映射形式的 {s}"),
    ("cannot be read ({e})", "无法读取（{e}）"),
    ("{k:w} must be a positive integer (got {v})", "{k} 必须是正整数（当前为 {v}）"),
    ("{k:w} must be a probability in [0, 1) (got {v})", "{k} 必须是 [0, 1) 之间的概率（当前为 {v}）"),
    ("{k:w} must be true or false (got {v})", "{k} 必须是 true 或 false（当前为 {v}）"),
    ("{k:w} must be true, false or auto (got {v})", "{k} 必须是 true、false 或 auto（当前为 {v}）"),
    ("{k:w} must be 0, 1, 2 or 3 (got {v})", "{k} 必须是 0、1、2 或 3（当前为 {v}）"),
    ("{k:w} must be 0-3 (got {v})", "{k} 必须在 0-3 之间（当前为 {v}）"),
    ("{k:w} must be -1 or a positive integer (got {v})", "{k} 必须是 -1 或正整数（当前为 {v}）"),
    ("{k:w} must be a list of names (got {v})", "{k} 必须是名字列表（当前为 {v}）"),
    ("{k:w} must be a path to a DeepSpeed JSON or an inline mapping (got {v})",
     "{k} 必须是 DeepSpeed JSON 的路径或内联映射（当前为 {v}）"),
    ("gradient_checkpointing must be true, false, unsloth or offload (got {v})",
     "gradient_checkpointing 必须是 true、false、unsloth 或 offload（当前为 {v}）"),
    ("devices must be a positive integer (got {v})", "devices 必须是正整数（当前为 {v}）"),
    ("mixed_precision {m:w}: one of no, bf16, fp16, fp8", "mixed_precision {m}：应为 no、bf16、fp16、fp8 之一"),
    ("fsdp_config sharding {s:w}: trainmem models full sharding and SHARD_GRAD_OP",
     "fsdp_config 的分片方式 {s}：trainmem 只建模全分片和 SHARD_GRAD_OP"),
    ("{k:w} {f:w}: no such file (read relative to {base})", "{k} {f}：文件不存在（相对 {base} 读取）"),
    ("{k:w} {f:w}: no such file (looked beside the config, in {base}, and in the working directory)",
     "{k} {f}：文件不存在（在配置文件旁的 {base} 和工作目录里都找过）"),
    ("distributed_type {k:w}: trainmem models NO, MULTI_GPU, FSDP and DEEPSPEED",
     "distributed_type {k}：trainmem 只建模 NO、MULTI_GPU、FSDP 和 DEEPSPEED"),
    ("optimizer {n:w} is not an optimizer trainmem models (names it takes: {names})",
     "optimizer {n} 不是 trainmem 建模的优化器（可用的名字：{names!l}）"),
    ("{k:w} {n:w} is not an optimizer trainmem models (HF names it takes: {names})",
     "{k} {n} 不是 trainmem 建模的优化器（可用的 HF 名字：{names!l}）"),
    ("adapter {a:w}: trainmem models lora and qlora", "adapter {a}：trainmem 只建模 lora 和 qlora"),
    ("adapter {a:w} without lora_r: give the LoRA rank", "adapter {a} 没有 lora_r：请给出 LoRA 的秩"),
    ("adapter {a:w} names no modules: set lora_target_modules or lora_target_linear",
     "adapter {a} 没有指定模块：请设置 lora_target_modules 或 lora_target_linear"),
    ("{k:w}: that attention kernel is not modelled (flash_attention or sdp_attention)",
     "{k}：这种注意力内核没有建模（请用 flash_attention 或 sdp_attention）"),
    ("gradient_checkpointing {g:w} (checkpoints offloaded to the CPU) is not modelled; use true",
     "gradient_checkpointing {g}（检查点卸载到 CPU）没有建模；请用 true"),
    ("activation_offloading {o:w}: trainmem models true (pinned host memory), not disk or hidden_states",
     "activation_offloading {o}：trainmem 只建模 true（锁页主机内存），不建模 disk 或 hidden_states"),
    ("{p}data_types.grad_accum_dtype fp32 with bf16 runs DeepSpeed's BF16_Optimizer, which trainmem does not model",
     "{p}data_types.grad_accum_dtype 为 fp32 且开启 bf16 时运行 DeepSpeed 的 BF16_Optimizer，trainmem 没有建模"),
    ("{a:w} and {b:w} are both true (DeepSpeed refuses it)", "{a} 和 {b} 同时为 true（DeepSpeed 会拒绝）"),
    ("{p}train_batch_size {n:d} is not a multiple of micro-batch × accumulation",
     "{p}train_batch_size {n} 不是 micro-batch × 累积步数的整数倍"),
    ("{z:w} without offload_optimizer is not modelled (trainmem's parameter offload moves the optimizer too)",
     "只有 {z} 而没有 offload_optimizer 的情况没有建模（trainmem 的参数卸载会连优化器一起卸载）"),
    ("{k:w} {t:w} is not modelled (trainmem models DeepSpeed's Adam/AdamW and Lion)",
     "{k} {t} 没有建模（trainmem 只建模 DeepSpeed 的 Adam/AdamW 和 Lion）"),
    ("{k:w} {i:w} is not modelled (sdpa, eager, flash_attention_2/3)", "{k} {i} 没有建模（可用 sdpa、eager、flash_attention_2/3）"),
    ("fsdp {o}: trainmem models full_shard and shard_grad_op", "fsdp {o}：trainmem 只建模 full_shard 和 shard_grad_op"),
    ("train.global_batch_size {g:d} / {d:d} devices is not a multiple of train.micro_batch_size {m:d} (litgpt "
     "asserts gradient_accumulation_iters > 0)",
     "train.global_batch_size {g} / {d} 张卡不是 train.micro_batch_size {m} 的整数倍（litgpt 要求 "
     "gradient_accumulation_iters > 0）"),
    ("precision {p:w}: one of {names}", "precision {p}：应为 {names!l} 之一"),
    ("optimizer {n:w} is not modelled (AdamW, Adam, SGD)", "optimizer {n} 没有建模（可用 AdamW、Adam、SGD）"),
    ("quantize {q:w}: trainmem models NF4 (bnb.nf4, bnb.nf4-dq)", "quantize {q}：trainmem 只建模 NF4（bnb.nf4、bnb.nf4-dq）"),
    ("stage {s:w}: trainmem models the sft and pt stages (one policy model, no reference or reward model)",
     "stage {s}：trainmem 只建模 sft 和 pt 阶段（一个策略模型，没有参考模型或奖励模型）"),
    ("finetuning_type {k:w}: trainmem models lora and full", "finetuning_type {k}：trainmem 只建模 lora 和 full"),
    ("flash_attn {f:w}: one of auto, disabled, sdpa, fa2, fa3", "flash_attn {f}：应为 auto、disabled、sdpa、fa2、fa3 之一"),
    ("quantization_bit {b:w}: trainmem models 4-bit (QLoRA) bases only", "quantization_bit {b}：trainmem 只建模 4 位（QLoRA）基座"),
    ("--optimizer {o:w}: trainmem models adam and sgd under Megatron", "--optimizer {o}：Megatron 下 trainmem 只建模 adam 和 sgd"),
    ("global batch size {g:d} is not a multiple of micro-batch {m:d} × dp {d:d}",
     "全局 batch {g} 不是 micro-batch {m} × dp {d} 的整数倍"),
    ("recompute granularity {g:w}: full or selective", "重计算粒度 {g}：应为 full 或 selective"),
    ("{f:w}: give the split as --stage-layers", "{f}：请用 --stage-layers 给出切分"),
    ("recompute method uniform with {n:d} layers per checkpoint is not modelled",
     "recompute method uniform 且每个检查点 {n} 层的情况没有建模"),
    ("model.optim.name {o:w}: fused_adam or distributed_fused_adam", "model.optim.name {o}：应为 fused_adam 或 distributed_fused_adam"),
    ("trainer.precision {p:w}: bf16, 16 or 32", "trainer.precision {p}：应为 bf16、16 或 32"),
    ("{k:w} {n:d} (HSDP: FSDP inside replica groups) is not modelled", "{k} {n}（HSDP：副本组内做 FSDP）没有建模"),
    ("training.global_batch_size {g:d} is not a multiple of local_batch_size {l:d} × dp {d:d}",
     "training.global_batch_size {g} 不是 local_batch_size {l} × dp {d} 的整数倍"),
    ("model.converters {c}: trainmem models float8 only", "model.converters {c}：trainmem 只建模 float8"),
    ("optimizer.name {n:w}: trainmem models AdamW and Adam", "optimizer.name {n}：trainmem 只建模 AdamW 和 Adam"),
    ("optimizer.implementation {i:w} (the for-loop step) is not modelled; fused or foreach",
     "optimizer.implementation {i}（逐参数循环的更新）没有建模；请用 fused 或 foreach"),
    ("{k:w} {r:w}: one of default, always, never", "{k} {r}：应为 default、always、never 之一"),
    ("local_batch_size {l:d} is not a multiple of {k:w} {m:d}", "local_batch_size {l} 不是 {k} {m} 的整数倍"),
    ("activation_checkpoint selective_ac_option {o:w} (every {o2:w}-th layer checkpointed) is not modelled",
     "activation_checkpoint selective_ac_option {o}（每 {o2} 层做一次检查点）没有建模"),
    ("activation_checkpoint mode {m:w} (option {o:w}) is not modelled", "activation_checkpoint mode {m}（选项 {o}）没有建模"),
    ("dtype {d:w}: torchtune trains in bf16 or fp32", "dtype {d}：torchtune 只用 bf16 或 fp32 训练"),
    ("model.lora_attn_modules {names}: torchtune's names are q_proj, k_proj, v_proj, output_proj",
     "model.lora_attn_modules {names!l}：torchtune 的名字是 q_proj、k_proj、v_proj、output_proj"),
    ("optimizer._component_ {c:w} is not modelled ({names})", "optimizer._component_ {c} 没有建模（可用：{names!l}）"),
    ("loss._component_ {c:w} is not modelled ({names})", "loss._component_ {c} 没有建模（可用：{names!l}）"),
    ("model._component_ {c:w} matches no catalog model", "model._component_ {c} 与目录中的模型都不匹配"),
    ("[model] name {n:w} flavor {f:w} matches no catalog model", "[model] name {n} flavor {f} 与目录中的模型都不匹配"),
    ("the architecture in {w:w} ({desc}) matches no catalog model", "{w} 中的模型结构（{desc}）与目录中的模型都不匹配"),
]
