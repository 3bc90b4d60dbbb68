"""Chinese for ``--stack`` (``trainmem/frameworks``): the assumption lines :func:`trainmem.frameworks.apply_stack`
writes and the stacks' notes (format: see :mod:`trainmem.report.messages_zh`). A stack's note is listed whole,
prefixed by its stack's name, as the assumptions show it."""

from __future__ import annotations

EXACT: dict[str, str] = {
    "hf-trainer: an fp32 checkpoint (no 16-bit dtype in its config.json) trains in fp32: give --precision fp32":
        "hf-trainer：fp32 的 checkpoint（config.json 里没有 16 位 dtype）会以 fp32 训练：请给 --precision fp32",
    "trl: TRL's fused LM head is counted as Liger's fused linear cross-entropy (its own tiles: 4096 tokens by 32768 "
    "vocabulary columns, in the compute dtype)":
        "trl：TRL 的融合 LM head 按 Liger 的融合线性交叉熵计算（它自己的分块是 4096 个 token × 32768 列词表，"
        "以计算精度存放）",
    "trl: sequences are padded to the longest of the batch, not to max_length: seq_len is an upper bound":
        "trl：序列只填充到 batch 内最长的一条，而不是 max_length：seq_len 是上限",
    "trl: a model object passed to SFTTrainer keeps its own dtype (from_pretrained loads a 16-bit checkpoint in 16 "
    "bits): give --precision bf16 then":
        "trl：直接传给 SFTTrainer 的模型对象保持它自己的 dtype（from_pretrained 会把 16 位 checkpoint 按 16 位加载）："
        "这时请给 --precision bf16",
    "torchtune: full distributed fine-tuning shards tok_embeddings and output as their own FSDP units "
    "(custom_sharded_layers); trainmem wraps each decoder layer and the root":
        "torchtune：多卡全量微调把 tok_embeddings 和 output 各自作为单独的 FSDP 单元分片（custom_sharded_layers）；"
        "trainmem 按每个 decoder 层加根模块包装",
    "litgpt: LitGPT's LoRA adapts slices of the fused qkv projection (LoRAQKVLinear): qkv.q,qkv.v with bf16-true; "
    "under bf16-mixed (--precision amp-bf16) counted as PEFT adapters on q_proj and v_proj":
        "litgpt：LitGPT 的 LoRA 作用在融合 qkv 投影的切片上（LoRAQKVLinear）：bf16-true 时按 qkv.q、qkv.v 计算；"
        "bf16-mixed（--precision amp-bf16）时按 PEFT 在 q_proj 和 v_proj 上的适配器计算",
    "litgpt: sequences are padded to the longest of the batch, not to max_seq_length: seq_len is an upper bound":
        "litgpt：序列只填充到 batch 内最长的一条，而不是 max_seq_length：seq_len 是上限",
    "axolotl: the examples pack samples (sample_packing: true): every row is sequence_len tokens long":
        "axolotl：示例配置会打包样本（sample_packing: true）：每一行都是 sequence_len 个 token",
    "llama-factory: gradient checkpointing is reentrant (use_reentrant_gc=True)":
        "llama-factory：梯度检查点是可重入式的（use_reentrant_gc=True）",
    "unsloth: Unsloth's own Triton kernels (RoPE, RMSNorm, LoRA MLP/QKV/O) are counted for Llama and Mistral "
    "(--kernels unsloth); on other families they save fewer tensors than the transformers modules trainmem counts":
        "unsloth：Unsloth 自己的 Triton kernel（RoPE、RMSNorm、LoRA MLP/QKV/O）对 Llama 和 Mistral 已计入"
        "（--kernels unsloth）；在其他模型族上，它们为反向保存的张量比 trainmem 所计的 transformers 模块少",
    "unsloth: use_gradient_checkpointing='unsloth' is counted as torchtune's OffloadActivations (5 checkpointed "
    "inputs in flight), not unsloth_zoo's own offloaded checkpointer":
        "unsloth：use_gradient_checkpointing='unsloth' 按 torchtune 的 OffloadActivations 计算（5 个检查点输入在途），"
        "而不是 unsloth_zoo 自己的卸载式检查点",
    "ms-swift: ms-swift trains LoRA by default (tuner_type lora): give --lora-rank 0 for full fine-tuning":
        "ms-swift：ms-swift 默认训练 LoRA（tuner_type lora）：全量微调请给 --lora-rank 0",
    "ms-swift: swift megatron sft (--engine megatron) has Megatron-SWIFT's own defaults, not listed here":
        "ms-swift：swift megatron sft（--engine megatron）有 Megatron-SWIFT 自己的默认值，这里没有列出",
    "torchtitan: torchtitan's op-level selective checkpointing (models/llama3/infra/parallelize.py _op_sac_save_list: "
    "matmul outputs but every second, attention, reductions saved) is counted as trainmem's selective recompute; "
    "without a config (JobConfig) it checkpoints every second block fully: --recompute full --recompute-layers N/2":
        "torchtitan：torchtitan 的算子级选择性检查点（models/llama3/infra/parallelize.py _op_sac_save_list：保存除每隔一个"
        "之外的矩阵乘输出、注意力和归约结果）按 trainmem 的 selective 重计算计；不用配置文件（JobConfig）时它每隔一个 "
        "block 做完整检查点：对应 --recompute full --recompute-layers N/2",
    "torchtitan: the 70B and 405B train configs checkpoint every block: --recompute full (local_batch_size 8 and 2)":
        "torchtitan：70B 和 405B 的训练配置对每个 block 都做检查点：请给 --recompute full（local_batch_size 分别为 8 和 2）",
    "megatron: Megatron-LM trains fp32 unless --bf16 or --fp16 is given; NeMo and Megatron-Bridge recipes set bf16 "
    "mixed precision and the distributed optimizer: give --precision mixed-bf16 --zero 1":
        "megatron：不给 --bf16 或 --fp16 时 Megatron-LM 以 fp32 训练；NeMo 和 Megatron-Bridge 的配方会设 bf16 "
        "混合精度和分布式优化器：请给 --precision mixed-bf16 --zero 1",
    "megatron-bridge: the recipe sets context parallelism 2 (cfg.model.context_parallel_size = 2): give --cp 2 to "
    "run it as written":
        "megatron-bridge：该配方设了上下文并行 2（cfg.model.context_parallel_size = 2）：要按配方原样运行请给 --cp 2",
    "deepspeed: the training loop is the user's: trainmem's default (the output dropped before backward) unless "
    "--loop script":
        "deepspeed：训练循环由用户自己写：按 trainmem 的默认（反向前丢弃模型输出）计算，除非给 --loop script",
    "llm-foundry: the optimizer is Composer's DecoupledAdamW (a per-parameter loop), counted as torch.optim.AdamW "
    "foreach":
        "llm-foundry：优化器是 Composer 的 DecoupledAdamW（逐参数循环），按 torch.optim.AdamW foreach 计算",
}

PATTERNS: list[tuple[str, str]] = [
    ("stack {s:w}: the defaults of {r} fill the flags not given", "stack {s}：未给出的参数取 {r} 的默认值"),
    ("{f:w} {v:w}: the {s:w} default, not modelled by trainmem ({src})",
     "{f} {v}：{s} 的默认值，trainmem 尚未建模（{src}）"),
    ("{f:w} {v:w}: the {s:w} default, not applied: {why}", "{f} {v}：{s} 的默认值，未采用：{why!t}"),
    ("{f:w} {v:w}: the {s:w} default ({src})", "{f} {v}：{s} 的默认值（{src}）"),
    ("stack: not a known framework; one of: {names} (got {v})", "stack：不认识的框架；可选：{names}（输入为 {v}）"),
    ("warning: {s:w} runs on {e}, not the {x:w} engine: its defaults are applied where the engine takes them",
     "注意：{s} 只在 {e} 上运行，不支持 {x} 引擎：它的默认值只用在该引擎接受的字段上"),
    ("--stack {s:w} runs on {e}; the plan asks for {x}", "--stack {s} 只在 {e} 上运行；这个 plan 要的是 {x}"),
]
