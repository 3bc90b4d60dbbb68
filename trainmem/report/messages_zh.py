"""Chinese for every English message trainmem shows (see :func:`trainmem.report.i18n.tr`).

``EXACT``: whole messages without numbers or names. ``PATTERNS``: (English pattern, Chinese template)
pairs, tried in order, first full match wins. In the English pattern ``{name}`` is any text (shortest
match), ``{name:d}`` a number (``1,024``, ``0.5``, ``5e+08``), ``{name:w}`` one token without spaces,
``{name:p}`` a URL or a path;
everything else is literal. In the template ``{name}`` is the captured text, ``{name!t}`` the
captured text translated in turn, ``{name!l}`` an enumeration with ``、`` for its ``, ``.

Style: Chinese as ML engineers write it — full-width punctuation（，。：；）, a space between Chinese and Latin words, the terms people use (显存, 激活值, 梯度,
优化器状态, 主权重, 重计算, 张量并行, 流水线并行, 数据并行, 序列并行, 专家并行, 卸载, 峰值, 余量);
ZeRO, FSDP2, LoRA, GiB, flag names (``--micro-batch``), code names and formulas stay as they are.

A new English message needs an entry here: ``tests/report/test_zh.py`` fails until it has one.
Group entries by the module that raises or appends the message.
"""

from __future__ import annotations

__all__ = ["EXACT", "PATTERNS"]

EXACT: dict[str, str] = {
    # FSDP1 (memory/engines/fsdp1.py, setup.py)
    "FSDP1 MixedPrecision: each unit's local shard is copied to 16 bits (_mp_shard) for its all-gather into the "
    "16-bit unsharded flat parameter": "FSDP1 MixedPrecision：每个单元的本地分片先复制成 16 位（_mp_shard），"
        "再 all-gather 成 16 位的未分片 flat parameter",
    "FSDP1 LoRA (use_orig_params=False): adapters wrapped as their own units (PEFT fsdp_auto_wrap_policy); frozen "
    "units have no gradient": "FSDP1 LoRA（use_orig_params=False）：adapter 各自包装成单独的单元（PEFT "
        "fsdp_auto_wrap_policy）；冻结的单元没有梯度",
    "FSDP1 CPUOffload(offload_params=True): sharded parameters, _cpu_grad and the optimizer on the host; each unit's "
    "sharded gradient (_saved_grad_shard) stays on the GPU until the end of backward":
        "FSDP1 CPUOffload(offload_params=True)：分片参数、_cpu_grad 和优化器都在主机内存；每个单元的分片梯度"
        "（_saved_grad_shard）在反向传播结束前一直留在 GPU 上",
    "FSDP1 no_sync on every micro-batch but the last (HF Trainer / accelerate; CPU offload needs it): each unit's "
    "unsharded gradient stays on the GPU until the last micro-batch's reduce-scatter":
        "FSDP1 在除最后一个以外的每个 micro-batch 上处于 no_sync（HF Trainer / accelerate；CPU offload 必须如此）："
        "每个单元的未分片梯度一直留在 GPU 上，直到最后一个 micro-batch 的 reduce-scatter",
    "--fsdp-version 1 selects FSDP1 under --engine fsdp2": "--fsdp-version 1 表示在 --engine fsdp2 下使用 FSDP1",
    "--fsdp-version 1 is modelled without tp/pp/cp/ep (FSDP1 over data parallel ranks only)":
        "--fsdp-version 1 只对不带 tp/pp/cp/ep 的情况建模（FSDP1 只在数据并行 rank 之间分片）",
    "--fsdp-version 1 with fp8 is not modelled (fp8 is torchao float8 under FSDP2)":
        "--fsdp-version 1 与 fp8 的组合未建模（fp8 指 FSDP2 下的 torchao float8）",
    # --compile (memory/compile.py)
    "cannot trace --compile with --device cuda (the compiled layer is traced on fake tensors: drop --device); use "
    "`trainmem estimate`": "无法在 --device cuda 下追踪 --compile（编译后的层在 fake tensor 上追踪：去掉 --device）；"
        "请用 `trainmem estimate`",
    "tensor or context parallelism": "张量并行或上下文并行",
    "--recompute selective (op-level checkpointing)": "--recompute selective（算子级检查点）",
    "fp8 linears": "fp8 线性层",
    "LoRA without --recompute full": "不带 --recompute full 的 LoRA",
    "fp8 linears (torchao Float8Linear's saved set is version-dependent)":
        "fp8 线性层（torchao Float8Linear 保存的张量随版本而变）",
    "--recompute selective on MoE layers": "MoE 层上的 --recompute selective",
    "--no-compile-loss needs --compile (it keeps the loss eager under a compiled model)":
        "--no-compile-loss 需要 --compile（它让编译后的模型里的 loss 保持 eager）",
    "--no-compile-loss: the loss stays eager, its buffers as without --compile (torchtitan between e8977b0, "
    "2024-12-18, and its 2025 compile.components)":
        "--no-compile-loss：loss 保持 eager，其缓冲区与不加 --compile 时相同（torchtitan 在 e8977b0（2024-12-18）"
        "到 2025 年 compile.components 之间的做法）",
    "torch.compile with LoRA (torchtune's LoRA recipes with compile: True), modelled with --recompute full only: each "
    "block keeps its checkpointed input, as eager; the one block recomputed at a time in backward is counted with its "
    "eager saved tensors (a compiled LoRA block is not measured: an upper bound of that one layer); the loss compiled":
        "torch.compile 加 LoRA（torchtune 的 LoRA 配方加 compile: True），只在 --recompute full 下建模：每个 block 与 "
        "eager 一样只保留检查点输入；反向传播中每次重算的那一个 block 按 eager 保存的张量计（编译后的 LoRA block "
        "未实测：该层的上界）；loss 编译",
    "torch.compile with --recompute selective: torchtitan's op-level SAC tags honoured by the partitioner "
    "(PREFER_RECOMPUTE recomputed, MUST_SAVE kept where backward reads it): eager SAC's saved set less the block's "
    "last matmul output when the policy saves it (trainmem/memory/compile.py)":
        "torch.compile 加 --recompute selective：分割器遵循 torchtitan 算子级 SAC 的标记（PREFER_RECOMPUTE 重算，"
        "MUST_SAVE 在反向读取时保留）：即 eager SAC 保存的集合，减去策略保存的 block 最后一个 matmul 的输出"
        "（trainmem/memory/compile.py）",
    "--compile is modelled with --attn sdpa or flash (a compiled eager softmax is not measured)":
        "--compile 只对 --attn sdpa 或 flash 建模（编译后的 eager softmax 未实测）",
    "--compile with a masked or math-kernel attention (sliding window, fp32 with GQA) is not modelled; use a 16-bit "
    "recipe without a window": "--compile 与带掩码或走 math 内核的 attention（滑动窗口、fp32 加 GQA）的组合未建模；"
        "请用不带窗口的 16 位方案",
    "torch.compile: each decoder layer and the loss compiled (torchtitan apply_compile and its compiled loss, "
    "torchtune compile): saved tensors as the min-cut partitioner keeps them (torch/_functorch/partitioners.py, "
    "torch 2.13), the loss keeps the 16-bit logits and two fp32 values per token; embeddings, final norm and head "
    "eager (HF Trainer's whole-model compile also makes transformers build an explicit b·s² attention mask: not "
    "modelled); eager kernels' temporaries; step time unchanged (no cited compile speed-up factor)":
        "torch.compile：每个 decoder 层和 loss 都编译（torchtitan apply_compile 及其编译的 loss、torchtune compile）："
        "保存的张量按 min-cut 分割器的选择计算（torch/_functorch/partitioners.py，torch 2.13），loss 只保留 16 位 logits "
        "和每个 token 两个 fp32 值；embedding、最后的 norm 和输出层按 eager 计算（HF Trainer 的整模型编译还会让 "
        "transformers 构造显式的 b·s² attention mask：未建模）；临时张量按 eager 内核计；step 时间不变（没有可引用的"
        "编译加速系数）",
    "torch.compile with --recompute full: each checkpointed block is compiled with its checkpoint (torchtitan "
    "apply_ac, then apply_compile): it keeps its input; its recompute is the compiled saved set":
        "torch.compile 加 --recompute full：每个做检查点的 block 连同检查点一起编译（torchtitan 先 apply_ac 再 "
        "apply_compile）：只保留输入；重算时保存的是编译后的张量集合",
    # ------------------------------------------------------------------ fp8 (setup.py, memory/estimate.py)
    "fp8 with LoRA is not modelled; use a 16-bit recipe": "fp8 与 LoRA 同用的情况没有建模；请用 16 位精度方案",
    "fp8 (Transformer Engine, Megatron --fp8-format hybrid): bf16 parameters, fp32 main grads and master weights as "
    "mixed-bf16; each transformer-layer weight keeps an fp8 copy and its fp8 transpose across the micro-batches of a "
    "step (TE weight workspace, is_first_microbatch), 2 B per weight; the TE linears save their inputs in fp8 (1 B per "
    "element), the attention core and the fused activation in bf16 (trainmem/memory/megatron_activations.py)":
        "fp8（Transformer Engine，Megatron --fp8-format hybrid）：bf16 参数，fp32 main grad 和主权重与 mixed-bf16 相同；"
        "每个 Transformer 层的权重在一个训练步的所有 micro-batch 之间保留一份 fp8 副本及其 fp8 转置"
        "（TE weight workspace，is_first_microbatch），每个权重 2 B；TE 线性层以 fp8 保存其输入（每个元素 1 B），"
        "注意力核心和融合激活函数的输入以 bf16 保存（trainmem/memory/megatron_activations.py）",
    "fp8 (torchao Float8Linear, torchtitan [float8]): amp-bf16 memory; weights are cast to fp8 in each forward and "
    "backward (transient) and the linears save their bf16 inputs, so no fp8 copy persists":
        "fp8（torchao Float8Linear，torchtitan [float8]）：显存与 amp-bf16 相同；权重在每次前向和反向时临时转换为 fp8，"
        "线性层保存的是 bf16 输入，因此不会常驻 fp8 副本",
    "fp8 (Transformer Engine te.Linear in place of nn.Linear: Accelerate's TE backend, llm-foundry fc_type te): "
    "amp-bf16 memory; each linear saves an fp8 copy of its input (1 B per element) and an fp8 copy and transpose of "
    "its unsharded weight for backward (2 B per weight, every layer alive from its forward to its backward: counted "
    "for the whole step); the LM head stays bf16":
        "fp8（用 Transformer Engine 的 te.Linear 替换 nn.Linear：Accelerate 的 TE 后端、llm-foundry 的 fc_type te）："
        "显存按 amp-bf16 计；每个线性层为反向保存一份 fp8 输入（每元素 1 B），以及未分片权重的 fp8 副本和转置"
        "（每个权重 2 B，各层从前向一直活到反向，按整步计入）；LM head 仍为 bf16",
    "--fp8-backend needs --precision fp8": "--fp8-backend 需要配合 --precision fp8",
    "--fp8-allgather needs --engine fsdp2 with --precision fp8 (torchao Float8Linear)":
        "--fp8-allgather 需要 --engine fsdp2 且 --precision fp8（torchao Float8Linear）",
    "trace --compile --precision fp8 needs torchao (pip install torchao)":
        "trace --compile --precision fp8 需要 torchao（pip install torchao）",
    "loss fused-ce: flash-attn's CrossEntropyLoss saves the 16-bit logits for its backward (they outlive a dropped "
    "model output until the loss backward) and writes a 16-bit gradient; no fp32 copy":
        "loss fused-ce：flash-attn 的 CrossEntropyLoss 为反向保存 16 位 logits（即使模型输出已被丢弃，也会一直活到 "
        "loss 的反向），梯度直接写成 16 位；不产生 fp32 副本",
    "--backward-prefetch post is FSDP's BACKWARD_POST: it needs --engine fsdp2 with zero 3 (a backward all-gather "
    "to delay)": "--backward-prefetch post 对应 FSDP 的 BACKWARD_POST：需要 --engine fsdp2 且 zero 3（反向时才有 all-gather 可推迟）",
    "--async-tp is torchtitan's async tensor parallelism: it needs --engine fsdp2 with --tp > 1 and sequence "
    "parallelism (not --no-sp)":
        "--async-tp 是 torchtitan 的异步张量并行：需要 --engine fsdp2、--tp > 1 且开启序列并行（不能用 --no-sp）",
    "--recompute-layers is not modelled for gpt_oss; use --recompute full or none":
        "gpt_oss 暂不支持 --recompute-layers 建模；请用 --recompute full 或 none",
    "--recompute-layers with vpp > 1 is not modelled (Megatron counts it per virtual chunk)":
        "--recompute-layers 与 vpp > 1 同时使用暂未建模（Megatron 按每个虚拟流水线块分别计数）",
    "--recompute-layers with LoRA is not modelled; use --recompute full or none":
        "--recompute-layers 与 LoRA 同时使用暂未建模；请用 --recompute full 或 none",
    "--recompute-layers with torch context parallelism is not modelled; use --recompute full or none":
        "--recompute-layers 与 torch 上下文并行同时使用暂未建模；请用 --recompute full 或 none",
    "attn: Qwen1 (QWenLMHeadModel) on torch 2 runs flash-attn or sdpa, not eager; use --attn flash or sdpa":
        "attn：Qwen1（QWenLMHeadModel）在 torch 2 上走 flash-attn 或 sdpa，而非 eager；请用 --attn flash 或 sdpa",
    "Qwen1 (remote-code QWenLMHeadModel) is modelled without tensor parallelism and not under the megatron engine":
        "Qwen1（远程代码 QWenLMHeadModel）只按无张量并行建模，不支持 megatron 引擎",
    "--fp8-backend torchao: Megatron's fp8 runs Transformer Engine; use --fp8-backend te":
        "--fp8-backend torchao：Megatron 的 fp8 走的是 Transformer Engine，请用 --fp8-backend te",
    # ------------------------------------------------------------------ phases (estimate timeline)
    "step start": "训练步开始",
    "step end": "训练步结束",
    "optimizer step": "优化器更新（optimizer step）",
    "zero_grad": "梯度清零（zero_grad）",
    # phases (trace)
    "setup": "准备",
    "build": "构建模型",
    "optimizer.step": "优化器更新（optimizer.step）",
    # ------------------------------------------------------------------ memory/estimate.py assumptions
    "steady state: an optimizer step after the first (optimizer states exist), all micro-batches included":
        "稳态：第一步之后的一次优化器更新（优化器状态已存在），包含该步的全部 micro-batch",
    "loop trainer: loss = compute_loss(model, batch) returns the loss only, so the model output (logits) is freed "
    "before (loss / grad_accum).backward(), as in HF Trainer/TRL, torchtitan and Megatron; optimizer.step(); "
    "optimizer.zero_grad(set_to_none=True)":
        "训练循环 trainer：loss = compute_loss(model, batch) 只返回 loss，模型输出（logits）在 "
        "(loss / grad_accum).backward() 之前就已释放，HF Trainer/TRL、torchtitan 和 Megatron 都是这样；"
        "随后 optimizer.step()；optimizer.zero_grad(set_to_none=True)",
    "loop script: outputs = model(input_ids, labels=labels); (outputs.loss / grad_accum).backward(): the model "
    "output (logits) stays alive through backward and is dropped after it; optimizer.step(); "
    "optimizer.zero_grad(set_to_none=True)":
        "训练循环 script：outputs = model(input_ids, labels=labels)；(outputs.loss / grad_accum).backward()："
        "模型输出（logits）在整个反向传播期间一直保留，反向结束后才释放；随后 optimizer.step()；"
        "optimizer.zero_grad(set_to_none=True)",
    "sizes rounded up to 512 B per allocation (CUDA caching allocator)":
        "每次分配向上取整到 512 B（CUDA caching allocator 的粒度）",
    "attn flash: flash-attention-2 kernels keep q, k, v, output and logsumexp (no s² buffer), native GQA":
        "attn flash：flash-attention-2 kernel 只保存 q、k、v、输出和 logsumexp（没有 s² 大小的缓冲区），原生支持 GQA",
    "LoRA: adapters fp32 (PEFT default), base frozen; only adapters have gradients and optimizer state":
        "LoRA：适配器为 fp32（PEFT 默认），基座冻结；只有适配器有梯度和优化器状态",
    "LoRA (PEFT, lora_dropout 0, bias none): the frozen base is 16-bit (amp recipes: autocast over it); frozen "
    "linears keep no input, frozen norms no normalised copy; each adapter keeps its (cast) input and rank "
    "activation; gradient checkpointing with enable_input_require_grads, else nothing is saved before layer 0's "
    "first adapter":
        "LoRA（PEFT，lora_dropout 0，bias none）：冻结的基座为 16 位（amp 配方下由 autocast 转换）；冻结的线性层"
        "不保存输入，冻结的 norm 不保存归一化后的副本；每个适配器保存它（转换后）的输入和 rank 维激活值；"
        "开启激活检查点时配合 enable_input_require_grads，否则第 0 层第一个适配器之前的激活值都不保存",
    "QLoRA: NF4 base weights, block 64, double quantisation (≈0.516 B/weight); embeddings, norms and LM head 16-bit":
        "QLoRA：基座权重为 NF4，块大小 64，双重量化（≈0.516 B/权重）；embedding、norm 和 LM head 为 16 位",
    "QLoRA: each NF4 weight is dequantised to a 16-bit temporary for its matmul":
        "QLoRA：每个 NF4 权重在做矩阵乘之前反量化成一个 16 位临时张量",
    "fsdp2 with tensor parallelism only: torchtitan disables mixed precision without FSDP (maybe_enable_amp), so "
    "the amp recipe computes in fp32":
        "fsdp2 只开张量并行：没有 FSDP 时 torchtitan 会关闭混合精度（maybe_enable_amp），所以 amp 配方实际以 fp32 计算",
    "DDP: bucket buffers hold a second copy of the gradients (gradient_as_bucket_view=False, the default)":
        "DDP：bucket 缓冲区里还有一份梯度副本（gradient_as_bucket_view=False，默认值）",
    "FSDP2 CPUOffloadPolicy: sharded parameters, gradients and optimizer states live in pinned host memory; "
    "the step runs on the CPU":
        "FSDP2 CPUOffloadPolicy：分片后的参数、梯度和优化器状态放在锁页主机内存里；优化器更新在 CPU 上执行",
    "DeepSpeed ZeRO-Offload: fp32 master weights, optimizer states and the fp32 gradient partition in pinned host "
    "memory; DeepSpeedCPUAdam steps on the CPU":
        "DeepSpeed ZeRO-Offload：fp32 主权重、优化器状态和 fp32 梯度分片放在锁页主机内存里；"
        "DeepSpeedCPUAdam 在 CPU 上做优化器更新",
    "Megatron --optimizer-cpu-offload: fp32 master weights and Adam states on the host":
        "Megatron --optimizer-cpu-offload：fp32 主权重和 Adam 状态卸载到主机内存",
    "Megatron: bf16 params, persistent fp32 main-grad buffer, FusedAdam; distributed optimizer shards "
    "master+states over dp·cp":
        "Megatron：bf16 参数，常驻的 fp32 main-grad 缓冲区，FusedAdam；分布式优化器把主权重和优化器状态"
        "在 dp·cp 上切分",
    "Megatron: bf16 params, persistent fp32 main-grad buffer, FusedAdam; optimizer replicated":
        "Megatron：bf16 参数，常驻的 fp32 main-grad 缓冲区，FusedAdam；优化器状态在各 rank 上完整复制",
    "Megatron: bf16 params, persistent 16-bit main-grad buffer, FusedAdam; distributed optimizer shards "
    "master+states over dp·cp":
        "Megatron：bf16 参数，常驻的 16 位 main-grad 缓冲区，FusedAdam；分布式优化器把主权重和优化器状态"
        "在 dp·cp 上切分",
    "Megatron: bf16 params, persistent 16-bit main-grad buffer, FusedAdam; optimizer replicated":
        "Megatron：bf16 参数，常驻的 16 位 main-grad 缓冲区，FusedAdam；优化器状态在各 rank 上完整复制",
    "Megatron grad_reduce_in_fp32=False: gradients accumulate and reduce in 16 bits; the optimizer casts the "
    "gradients of the parameters it owns to fp32 for step()":
        "Megatron grad_reduce_in_fp32=False：梯度以 16 位累加和归约；优化器在 step() 时把自己负责的参数的梯度转换为 fp32",
    "Megatron --fp8-param-gather: the layers' linear weights are stored in fp8 (1 B each, uint8 parameter buffer) "
    "with their fp8 transpose (Hopper), not as bf16 plus an fp8 copy":
        "Megatron --fp8-param-gather：各层线性层权重以 fp8 存储（每个 1 B，uint8 参数缓冲区），外加其 fp8 转置（Hopper），"
        "而不是 bf16 权重加一份 fp8 副本",
    "fsdp2 with tensor parallelism only (dp = cp = 1): no fully_shard, as torchtitan runs it; each rank holds its "
    "TP shard of parameters, gradients and optimizer states":
        "fsdp2 只开张量并行（dp = cp = 1）：和 torchtitan 一样不做 fully_shard；每个 rank 持有参数、梯度和"
        "优化器状态各自的 TP 分片",
    # ------------------------------------------------------------------ explain.py (formulas, sources, accountings)
    "P · bytes(param dtype): fp32/amp 4, bf16/fp16 2; LoRA: frozen base 16-bit + fp32 adapters":
        "P · 参数 dtype 的字节数：fp32/amp 为 4，bf16/fp16 为 2；LoRA：冻结的基座 16 位 + fp32 适配器",
    "P·bytes/dp sharded (DTensor dim-0) + units all-gathered in param_dtype while in flight (+ prefetch); "
    "root unsharded forward→backward":
        "P·bytes/dp 分片（DTensor 沿 dim 0）+ 正在计算的单元按 param_dtype all-gather 出的完整参数（含预取）；"
        "root 模块从前向到反向一直不重新分片",
    "16-bit params 2P (ZeRO-3: 2P/dp + gathered layer + prefetch)":
        "16 位参数 2P（ZeRO-3：2P/dp + 收集出的当前层 + 预取）",
    "bf16 params 2P/(tp·pp) per rank; experts ÷ ep":
        "每个 rank 上 bf16 参数 2P/(tp·pp)；专家参数再 ÷ ep",
    "fp32 copy 4P, ÷ dp with ZeRO ≥ 1 / Megatron distributed optimizer (÷ dp·cp)":
        "fp32 副本 4P，ZeRO ≥ 1 或 Megatron 分布式优化器下 ÷ dp（Megatron 为 ÷ dp·cp）",
    "optimizer step: one state-sized foreach temporary (adamw), + grad-sized (adam/sgd weight decay); "
    "backward: activation gradients ≈ r·T·h + 2·c·T·i":
        "优化器更新：一个与优化器状态同样大小的 foreach 临时张量（adamw），另加一个梯度大小的"
        "（adam/sgd 的 weight decay）；反向传播：激活值的梯度 ≈ r·T·h + 2·c·T·i",
    "optimizer step: fused kernel, no temporaries; backward: activation gradients ≈ r·T·h + 2·c·T·i":
        "优化器更新：融合内核，没有临时张量；反向传播：激活值的梯度 ≈ r·T·h + 2·c·T·i",
    "DDP: a second copy of the gradients; DeepSpeed ZeRO-1/2: 16-bit ipg bucket of 5e8 elements; "
    "FSDP2: fp32 reduce-scatter input of one unit":
        "DDP：再存一份梯度；DeepSpeed ZeRO-1/2：5e8 个元素的 16 位 ipg bucket；FSDP2：一个单元的 fp32 "
        "reduce-scatter 输入",
    "cuBLAS workspace": "cuBLAS 工作区",
    "torch.nn.Module parameters; FSDP2 torch/distributed/fsdp/_fully_shard/_fsdp_param.py; DeepSpeed stage3.py":
        "torch.nn.Module 的参数；FSDP2 见 torch/distributed/fsdp/_fully_shard/_fsdp_param.py；DeepSpeed 见 stage3.py",
    "ZeRO paper §3 (K=12); DeepSpeed stage_1_and_2.py single_partition_of_fp32_groups; Megatron distrib_optimizer.py":
        "ZeRO 论文 §3（K=12）；DeepSpeed stage_1_and_2.py 中的 single_partition_of_fp32_groups；"
        "Megatron distrib_optimizer.py",
    "torch AccumulateGrad; FSDP2 sharded fp32 grads (reduce_dtype); DeepSpeed averaged_gradients partition; "
    "Megatron main_grad buffer":
        "torch 的 AccumulateGrad；FSDP2 分片的 fp32 梯度（reduce_dtype）；DeepSpeed 的 averaged_gradients 分片；"
        "Megatron 的 main_grad 缓冲区",
    "torch/optim/adam.py exp_avg/exp_avg_sq in param dtype; sgd momentum_buffer; Adafactor row/col factors; "
    "bitsandbytes 8-bit":
        "torch/optim/adam.py 中与参数同 dtype 的 exp_avg/exp_avg_sq；sgd 的 momentum_buffer；"
        "Adafactor 的行/列因子；bitsandbytes 8 位状态",
    "derived from what transformers 5.24 modules save for backward (trainmem/memory/activations.py); "
    "loss_utils.py ForCausalLMLoss upcast":
        "按 transformers 5.24 各模块为反向传播保存的张量推导（trainmem/memory/activations.py）；"
        "loss_utils.py 中 ForCausalLMLoss 的升精度",
    "foreach optimizer temporaries (torch/optim/adam.py _multi_tensor_adam: _foreach_sqrt); activation gradients "
    "in backward":
        "foreach 优化器的临时张量（torch/optim/adam.py _multi_tensor_adam 中的 _foreach_sqrt）；"
        "反向传播中激活值的梯度",
    "fused optimizer (torch/optim/adamw.py _fused_adamw: one multi-tensor kernel, in place); "
    "activation gradients in backward":
        "融合优化器（torch/optim/adamw.py _fused_adamw：一个多张量内核，原地更新）；反向传播中激活值的梯度",
    "DDP reducer buckets (reducer.cpp); DeepSpeed ipg buffer reduce_bucket_size=5e8; FSDP2 reduce-scatter input":
        "DDP reducer 的 bucket（reducer.cpp）；DeepSpeed 的 ipg 缓冲区 reduce_bucket_size=5e8；"
        "FSDP2 的 reduce-scatter 输入",
    "seed article (FP32 master kept whole)": "原文（FP32 主权重不切分）",
    "16 B/param, ZeRO shards Adam (and grads, params) but not the FP32 master copy":
        "每参数 16 B，ZeRO 切分 Adam 状态（以及梯度、参数），但不切分 FP32 主权重",
    "ZeRO paper (Rajbhandari et al. 2020)": "ZeRO 论文（Rajbhandari 等，2020）",
    "(2+2+12)Ψ; stage 2: 2Ψ + 14Ψ/N — the master copy is part of K and is sharded":
        "(2+2+12)Ψ；stage 2：2Ψ + 14Ψ/N —— 主权重算在 K 里，也被切分",
    "DeepSpeed estimate_zero2/3_model_states_mem_needs": "DeepSpeed 的 estimate_zero2/3_model_states_mem_needs",
    "2P + 18P/N: adds the fp32 gradient partition (4 B); stage 3: 4·largest layer + 18P/N":
        "2P + 18P/N：多算了 fp32 梯度分片（4 B）；stage 3：4·最大层 + 18P/N",
    "Megatron theoretical_memory_usage.py": "Megatron 的 theoretical_memory_usage.py",
    "18 B/param; 6 + 12/dp with the distributed optimizer (fp32 main grads)":
        "每参数 18 B；开分布式优化器时为 6 + 12/dp（fp32 main grad）",
    "trainmem (at the peak, this engine)": "trainmem（峰值时刻，当前引擎）",
    "what the engine allocates, at the moment of the peak; buckets and activations listed separately":
        "引擎在峰值时刻实际分配的量；bucket 和激活值另行列出",
    "seed: b·s·h·L·2": "原文：b·s·h·L·2",
    "Korthikanti 2022: s·b·h·(34 + 5as/h)·L": "Korthikanti 2022：s·b·h·(34 + 5as/h)·L",
    "one hidden state per layer: far too low (the seed's '512 MB' is 512 MiB)":
        "每层只算了一个 hidden state，远远偏低（原文的“512 MB”其实是 512 MiB）",
    "GPT block without flash attention; HF blocks keep more per token but no s² with sdpa":
        "针对不用 flash attention 的 GPT block；HF 的 block 每个 token 保存得更多，但用 sdpa 时没有 s² 项",
    "trainmem (this model, this recipe)": "trainmem（当前模型、当前配方）",
    "from what the transformers modules save; see the activations line above":
        "按 transformers 各模块实际保存的张量计算；见上表的激活值一行",
    # ------------------------------------------------------------------ trace (step.py notes and emulations)
    "allocator: every block rounded up to 512 B (CUDACachingAllocator kMinBlockSize); reserved memory from a "
    "replay of the caching allocator (trace/allocator.py)":
        "分配器：每个 block 向上取整到 512 B（CUDACachingAllocator 的 kMinBlockSize）；"
        "保留显存由 caching allocator 的回放得到（trace/allocator.py）",
    "transformers: eager branches on fake tensors (unpacked batch → is_causal SDPA, no s×s mask)":
        "transformers：在 fake tensor 上走 eager 分支（不打包的 batch → is_causal 的 SDPA，不生成 s×s 掩码）",
    "optimizer: foreach=True (the CUDA default); Adam's step counters kept on the host":
        "优化器：foreach=True（CUDA 上的默认值）；Adam 的 step 计数放在主机上",
    "dropout: CUDA's fused native_dropout (bool mask)": "dropout：CUDA 的融合 native_dropout（bool 掩码）",
    "autograd: the LM head weight's gradients (tied embedding, chunked loss) summed in place in the InputBuffer, "
    "as for plain tensors (fake ones add out of place)":
        "autograd：LM head 权重的多份梯度（共享的 embedding、分块损失）在 InputBuffer 中原地相加，与普通张量一致"
        "（fake tensor 上原本是非原地相加）",
    "autocast: CUDA op lists and weight-cast cache (autocast_mode.h)":
        "autocast：CUDA 的算子列表和权重类型转换缓存（autocast_mode.h）",
    "mamba-2: mamba_ssm's fused split-conv1d-scan function's saved tensors (its backward's recomputation temporaries "
    "are not emulated)": "mamba-2：mamba_ssm 融合的 split-conv1d-scan 函数所保存的张量（未模拟其反向重计算的临时张量）",
    "moe: grouped_mm experts (routing-independent shapes; non-bf16 via transformers' fallback op)":
        "moe：专家用 grouped_mm 计算（形状与路由结果无关；非 bf16 时走 transformers 的回退算子）",
    "GradScaler never skips a step (finite gradients assumed)": "GradScaler 从不跳过更新（假设梯度都是有限值）",
    "FSDP2 on a fake process group: collectives allocate their buffers but move no data; unsharded gradients "
    "before the reduce-scatter count as temporaries":
        "FSDP2 跑在 fake 进程组上：集合通信会分配缓冲区但不传数据；reduce-scatter 之前未分片的梯度算作临时缓冲区",
    "host-side scalar tensors made during the step (< 1 KiB each) are counted as device memory":
        "训练步中在主机侧创建的标量张量（每个 < 1 KiB）按显存计入",
    "not called": "未调用",
    "on": "开启",
    "off": "关闭",
    "steady step": "稳态步",
    "warm-up step": "预热步",
    # ------------------------------------------------------------------ setup.py errors
    "the torch engine is data parallel only (DDP); tp/pp/cp/ep need --engine megatron or fsdp2":
        "torch 引擎只支持数据并行（DDP）；tp/pp/cp/ep 需要 --engine megatron 或 fsdp2",
    "tp/pp/cp are not modelled for the deepspeed engine; use --engine megatron for 3D parallelism":
        "deepspeed 引擎下没有建模 tp/pp/cp；3D 并行请用 --engine megatron",
    "--sp (sequence parallelism) is a megatron or fsdp2 (with --tp) option":
        "--sp（序列并行）只用于 megatron 或 fsdp2（配合 --tp）",
    "--sp needs tp > 1 (sequence parallelism splits the tp group's activations)":
        "--sp 需要 tp > 1（序列并行切分的是张量并行组内的激活值）",
    "flash attention needs 16-bit compute; fp32 cannot use --attn flash":
        "flash attention 需要 16 位计算；fp32 不能用 --attn flash",
    "offload needs an engine that does it: deepspeed (zero >= 1), fsdp2 or megatron":
        "卸载需要支持它的引擎：deepspeed（zero >= 1）、fsdp2 或 megatron",
    "deepspeed offload needs zero >= 1 (ZeRO-Offload)": "deepspeed 卸载需要 zero >= 1（ZeRO-Offload）",
    "fsdp2's CPUOffloadPolicy offloads parameters, gradients and optimizer together; use --offload optimizer+params":
        "fsdp2 的 CPUOffloadPolicy 会把参数、梯度和优化器状态一起卸载；请用 --offload optimizer+params",
    "megatron offloads the optimizer only (--optimizer-cpu-offload), with the distributed optimizer (--zero 1)":
        "megatron 只能卸载优化器（--optimizer-cpu-offload），并且要开分布式优化器（--zero 1）",
    "QLoRA (bitsandbytes) under FSDP: only the packed 4-bit data is a parameter (sharded, all-gathered); each rank "
    "keeps the whole quant state (absmax)":
        "FSDP 下的 QLoRA（bitsandbytes）：只有打包的 4 位数据是参数（切分、all-gather）；每个 rank 都保留完整的量化状态（absmax）",
    "--accelerate-autocast models 16-bit weights under accelerate's autocast: needs --precision bf16 and --engine torch":
        "--accelerate-autocast 模拟 accelerate autocast 下的 16 位权重：需要 --precision bf16 和 --engine torch",
    "--script-keeps-graph needs --loop script and no pipeline parallelism":
        "--script-keeps-graph 需要 --loop script，且不能用流水线并行",
    "--loop script: Megatron's schedule returns the loss, never the logits; use --loop trainer":
        "--loop script：Megatron 的调度只返回 loss，从不返回 logits；请用 --loop trainer",
    "--qlora needs --lora-rank > 0": "--qlora 需要 --lora-rank > 0",
    "load_in_8bit: the base weights are LLM.int8 (config.quantization_config load_in_8bit); modelled as bitsandbytes "
    "0.41 runs them":
        "load_in_8bit：基座权重为 LLM.int8（config.quantization_config load_in_8bit）；按 bitsandbytes 0.41 的做法建模",
    "--load-in-8bit (LLM.int8 base weights) needs --lora-rank > 0, no --qlora, and --engine torch":
        "--load-in-8bit（LLM.int8 基座权重）需要 --lora-rank > 0、不与 --qlora 同用，且需 --engine torch",
    "LLM.int8 base (--load-in-8bit, bitsandbytes 0.41): 1 B per decoder-layer linear weight + an fp32 absmax per "
    "output row; each int8 linear keeps its 16-bit input and an int8 copy of it (CAt) for backward; outlier "
    "columns (subA, data-dependent) not counted":
        "LLM.int8 基座（--load-in-8bit，bitsandbytes 0.41）：decoder 层每个线性层权重 1 B，外加每个输出行一个 fp32 "
        "absmax；每个 int8 线性层为反向保存它的 16 位输入及其 int8 副本（CAt）；离群列（subA，取决于数据）不计入",
    "--grad-reduce-16bit is a megatron option for 16-bit and fp8 recipes (Megatron-Core grad_reduce_in_fp32=False)":
        "--grad-reduce-16bit 是 megatron 引擎用于 16 位和 fp8 精度方案的选项（Megatron-Core grad_reduce_in_fp32=False）",
    "--fp8-params needs --engine megatron with --precision fp8 (--fp8-param-gather)":
        "--fp8-params 需要 --engine megatron 且 --precision fp8（--fp8-param-gather）",
    "--fp8-params needs the distributed optimizer (--zero 1): Megatron-LM asserts it for --fp8-param-gather":
        "--fp8-params 需要分布式优化器（--zero 1）：Megatron-LM 对 --fp8-param-gather 有此断言",
    "--megatron-deepspeed is DeepSpeed's PipelineEngine under Megatron's model: it needs --engine megatron and --pp > 1":
        "--megatron-deepspeed 表示用 DeepSpeed 的 PipelineEngine 运行 Megatron 的模型：需要 --engine megatron 且 --pp > 1",
    "LoRA is not modelled for the megatron engine; use torch, fsdp2 or deepspeed":
        "megatron 引擎下没有建模 LoRA；请用 torch、fsdp2 或 deepspeed",
    "--qlora computes in 16 bits; use amp-bf16 or bf16": "--qlora 以 16 位计算；请用 amp-bf16 或 bf16",
    "lora_targets is empty": "lora_targets 为空",
    "--loss-chunks needs --loss chunked or fused-linear": "--loss-chunks 需要 --loss chunked 或 fused-linear",
    "--no-sp turns off fsdp2's SequenceParallel; it contradicts --sp": "--no-sp 关闭 fsdp2 的 SequenceParallel，与 --sp 矛盾",
    "--no-sp turns off fsdp2's SequenceParallel; other engines have sp off unless --sp":
        "--no-sp 关闭的是 fsdp2 的 SequenceParallel；其他引擎不加 --sp 时本来就不开序列并行",
    "--no-loss-parallel is an fsdp2 option (megatron's cross-entropy is always vocab-parallel)":
        "--no-loss-parallel 只用于 fsdp2（megatron 的交叉熵始终按词表并行）",
    "attn: gemma2 has no sdpa implementation in transformers (logit softcapping); use --attn eager or flash":
        "attn：transformers 里 gemma2 没有 sdpa 实现（logit softcapping）；请用 --attn eager 或 flash",
    "encoder models (bert/roberta) are not modelled for the megatron engine":
        "megatron 引擎下没有建模 encoder 模型（bert/roberta）",
    "attn: gpt_oss has no sdpa implementation in transformers (attention sinks); use --attn eager or flash":
        "attn：transformers 里 gpt_oss 没有 sdpa 实现（attention sinks）；请用 --attn eager 或 flash",
    "--cp with --attn eager: torch's context parallelism shards F.scaled_dot_product_attention "
    "(torch.distributed.tensor.experimental.context_parallel); use --attn sdpa or flash":
        "--cp 不能配合 --attn eager：torch 的 context parallelism 切分的是 F.scaled_dot_product_attention"
        "（torch.distributed.tensor.experimental.context_parallel）；请用 --attn sdpa 或 flash",
    "gpt_oss has no sdpa attention in transformers (attention sinks)":
        "transformers 里 gpt_oss 没有 sdpa attention（attention sinks）",
    "gpt_oss under the megatron engine is not modelled (Megatron-Core's attention sinks and clamped SwiGLU experts); "
    "use --engine fsdp2, deepspeed or torch":
        "megatron 引擎下的 gpt_oss 还没有建模（Megatron-Core 的 attention sinks 和带截断的 SwiGLU 专家）；"
        "请用 --engine fsdp2、deepspeed 或 torch",
    "gemma2 has no sdpa attention in transformers (logit softcapping)":
        "transformers 里 gemma2 没有 sdpa attention（logit softcapping）",
    # ------------------------------------------------------------------ model errors
    "config.json lacks 'model_type'": "config.json 缺少 'model_type'",
    "config.json (model_type 'gemma3') lacks 'text_config'": "config.json（model_type 'gemma3'）缺少 'text_config'",
    "lora-targets: empty; give module names (comma or space separated) or all-linear":
        "lora-targets 为空；请给出模块名（逗号或空格分隔）或 all-linear",
    # ------------------------------------------------------------------ trace errors
    "tracing needs torch and transformers: pip install 'trainmem[trace]'":
        "追踪需要 torch 和 transformers：pip install 'trainmem[trace]'",
    "tracing LoRA needs peft: pip install 'trainmem[trace]'": "追踪 LoRA 需要 peft：pip install 'trainmem[trace]'",
    "a torch.distributed process group is already initialised; trace in a fresh process":
        "torch.distributed 进程组已经初始化过了；请在新进程里追踪",
    "--device cuda needs torch: pip install 'trainmem[trace]'": "--device cuda 需要 torch：pip install 'trainmem[trace]'",
    "--device cuda: no CUDA device here; the default fake-tensor trace needs none":
        "--device cuda：这台机器上没有 CUDA 设备；默认的 fake tensor 追踪不需要 GPU",
    "--device cuda measures one GPU with the torch engine; run multi-GPU jobs under torchrun and compare with "
    "`trainmem estimate`":
        "--device cuda 只测量 torch 引擎下的单卡；多卡任务请用 torchrun 运行，再与 `trainmem estimate` 对比",
    # trace/support.py: what cannot be traced (inside "cannot trace {what}; use `trainmem estimate`")
    "model: an 8-bit (LLM.int8) base; trainmem models 4-bit (QLoRA, NF4) bases only":
        "model：8 位（LLM.int8）基座；trainmem 只对 4 位（QLoRA、NF4）基座建模",
    "warning: DoRA (use_dora) adds a magnitude vector per adapted module and a weight-norm in forward that trainmem "
    "does not model; estimated as LoRA":
        "警告：DoRA（use_dora）为每个被适配模块增加一个幅度向量，并在前向中做权重归一化，trainmem 未对此建模；按 LoRA 估算",
    "recompute full: gradient checkpointing is on in the model": "recompute full：模型已开启梯度检查点",
    "--optimizer-in-backward is modelled for --engine torch on one GPU (torchtune's single-device recipes)":
        "--optimizer-in-backward 只对单卡 --engine torch 建模（torchtune 的单卡 recipe）",
    "--optimizer-in-backward with --loss fused-linear is not modelled (Liger computes the head's weight gradient in "
    "the forward)": "--optimizer-in-backward 与 --loss fused-linear 的组合未建模（Liger 在前向中计算输出层的权重梯度）",
    "optimizer in backward (torchtune optimizer_in_bwd): one optimizer per parameter, stepped in its "
    "post-accumulate-grad hook, which then frees the gradient; no gradient outlives its parameter's backward":
        "优化器融入反向（torchtune optimizer_in_bwd）：每个参数一个优化器，在其 post-accumulate-grad hook 中更新，随后释放梯度；"
        "任何梯度都不会在其参数的反向结束后继续存在",
    "--optimizer-in-backward (per-parameter optimizers in post-accumulate-grad hooks)":
        "--optimizer-in-backward（每个参数一个优化器，挂在 post-accumulate-grad hook 上）",
    "adamw-8bit (bitsandbytes kernels)": "adamw-8bit（bitsandbytes kernel）",
    "--loss cce (Cut Cross-Entropy's Triton kernels)": "--loss cce（Cut Cross-Entropy 的 Triton kernel）",
    "--loss cce with tp > 1 is not modelled (Cut Cross-Entropy's vocab-parallel options)":
        "--loss cce 与 tp > 1 的组合尚未建模（Cut Cross-Entropy 的词表并行选项）",
    "LoRA/QLoRA fine-tuning (not traced yet)": "LoRA/QLoRA 微调（暂不支持追踪）",
    "--attn flash (flash-attention-2 kernels need a GPU; --attn sdpa traces CUDA's flash SDPA kernel)":
        "--attn flash（flash-attention-2 kernel 需要 GPU；--attn sdpa 会追踪 CUDA 的 flash SDPA kernel）",
    "--recompute selective (not traced yet)": "--recompute selective（暂不支持追踪）",
    "fsdp2 with amp-fp16 (loss scaling of sharded gradients is not traced yet)":
        "fsdp2 配合 amp-fp16（分片梯度的 loss scaling 暂不支持追踪）",
    "--fsdp-version 1 (the tracer runs FSDP2's fully_shard; FSDP1's flat parameters are estimated only)":
        "--fsdp-version 1（追踪器运行的是 FSDP2 的 fully_shard；FSDP1 的 flat parameter 只做估算）",
    # ------------------------------------------------------------------ click (usage errors)
    "aborted": "已中止",
    "Missing argument 'model'.": "缺少参数 MODEL（模型名、config.json 路径或 7B 这样的规模）。",
    "Missing argument 'MODEL'.": "缺少参数 MODEL（模型名、config.json 路径或 7B 这样的规模）。",
    "Input should be a valid integer, unable to parse string as an integer": "应为整数，无法把该字符串解析为整数",
    "Input should be a valid integer": "应为整数",
    "Input should be a valid integer, got a number with a fractional part": "应为整数，不能带小数部分",
    "Input should be a valid boolean": "应为布尔值",
    # json.JSONDecodeError, OSError, UnicodeDecodeError reasons
    "Expecting value": "这里应当是一个值",
    "Expecting property name enclosed in double quotes": "这里应当是用双引号括起来的键名",
    "Expecting ',' delimiter": "这里应当是逗号 ','",
    "Expecting ':' delimiter": "这里应当是冒号 ':'",
    "Extra data": "末尾有多余内容",
    "Unterminated string starting at": "字符串没有结束引号，起始于",
    "Invalid control character at": "非法控制字符，位于",
    "Invalid \\escape": "非法的转义字符",
    "Permission denied": "没有权限",
    "Is a directory": "这是一个目录",
    "No such file or directory": "文件或目录不存在",
    "File name too long": "文件名太长",
    "invalid start byte": "非法的起始字节",
    "invalid continuation byte": "非法的后续字节",
    "unexpected end of data": "数据意外结束",
    # ------------------------------------------------------------------ adapters (setup.py, memory/engines/base.py)
    "compile on a GPU, one published measurement (torchtune, Llama-3.2-3B bf16, layers compiled, the loss "
    "eager as its full_finetune_single_device recipe runs it; benchmarks/published_points.json): compile saved "
    "9 GiB, this model 8.75 GiB; the compiled loss has no GPU measurement":
        "compile 在 GPU 上的一个公开实测（torchtune，Llama-3.2-3B bf16，各层编译，损失按其 full_finetune_single_device "
        "recipe 的实际运行方式保持 eager；benchmarks/published_points.json）：compile 节省了 9 GiB，本模型算出 8.75 GiB；"
        "编译后的损失没有 GPU 实测",
    "--lora-dropout with an lm_head adapter is not modelled (the head adapter's dropout of the b·s·h input); use "
    "--lora-dropout 0 for the estimate of the rest":
        "带 lm_head adapter 的 --lora-dropout 尚未建模（head adapter 对 b·s·h 输入做的 dropout）；"
        "请用 --lora-dropout 0 估算其余部分",
    "--adapter-dtype: deepspeed casts the whole model (adapters included) to 16 bits and keeps fp32 masters itself; "
    "the adapter dtype is a torch/fsdp2 choice":
        "--adapter-dtype：deepspeed 会把整个模型（包括 adapter）转换为 16 位，并自行保留 fp32 主权重；"
        "adapter 的 dtype 只在 torch/fsdp2 下可选",
    "--offload-activations (torchtune/TRL OffloadActivations) is modelled for --engine torch or fsdp2 without "
    "pipeline parallelism":
        "--offload-activations（torchtune/TRL 的 OffloadActivations）只对不带流水线并行的 --engine torch 或 fsdp2 建模",
    "activation offloading (torchtune/TRL OffloadActivations, use_streams): the decoder layers' saved tensors of >= "
    "1024 B in pinned host memory (host_memory_bytes; each rounded to a power of two with checkpointing, a lower bound "
    "without), the last 5 in flight on the GPU, each layer's brought back for its backward; the LM head and the loss "
    "stay on the GPU; the copies cost step time where they outlast the forward or backward":
        "激活值卸载（torchtune/TRL 的 OffloadActivations，use_streams）：decoder 层保存的 >= 1024 B 的张量放在锁页主机内存中"
        "（host_memory_bytes；开启重计算时每个张量向上取整到 2 的幂，否则为下限），最近 5 个在传输途中仍留在 GPU 上，"
        "每层的张量在其反向传播时取回；输出层和损失留在 GPU 上；拷贝时间超出前向或反向计算的部分计入训练步时间",
    "--offload-activations (saved tensors copied to pinned host memory on a CUDA side stream)":
        "--offload-activations（保存的张量在 CUDA 副流上拷贝到锁页主机内存）",
    "litgpt's fused-qkv LoRA slices (qkv.q/k/v; the tracer runs PEFT, which adapts whole modules)":
        "litgpt 在融合 qkv 上的 LoRA 切片（qkv.q/k/v；追踪器运行的是 PEFT，它只能适配整个模块）",
    "LoRA: adapters bf16 (the base's dtype: torchtune, PEFT autocast_adapter_dtype=False; no fp32 copy), gradients "
    "and optimizer states in it; base frozen":
        "LoRA：adapter 为 bf16（与基座相同的 dtype：torchtune，PEFT autocast_adapter_dtype=False；没有 fp32 副本），"
        "其梯度和优化器状态也是 bf16；基座冻结",
}

PATTERNS: list[tuple[str, str]] = [
    # ------------------------------------------------------------------ FSDP1 (memory/engines/fsdp1.py)
    ("FSDP1: one FlatParameter per unit, padded to a multiple of {n:d} ranks; shards kept in the load dtype, {b:d} B "
     "per element", "FSDP1：每个单元一个 FlatParameter，补齐到 {n} 个 rank 的整数倍；分片保持加载时的 dtype，"
     "每个元素 {b} B"),
    # ------------------------------------------------------------------ --compile (memory/compile.py)
    ("compiled decoder layer of {m:w}, {n:d} tokens (torch's min-cut partitioner on fake tensors): {x:d} MiB kept "
     "for backward", "{m} 编译后的一个 decoder 层，{n} 个 token（torch 的 min-cut 分割器，在 fake tensor 上运行）："
     "为反向传播保留 {x} MiB"),
    ("estimate --compile: {x:d} MiB per layer ({e:w} %)", "estimate --compile：每层 {x} MiB（{e} %）"),
    ("--compile is modelled for --engine torch or fsdp2 (torchtitan, torchtune, HF Trainer); {e:w}'s compiled step "
     "is not", "--compile 只对 --engine torch 或 fsdp2 建模（torchtitan、torchtune、HF Trainer）；{e} 的编译训练步未建模"),
    ("--compile with {why} is not modelled; use --compile with full fine-tuning, --recompute none or full",
     "--compile 与 {why!t} 的组合未建模；请在全参数微调、--recompute none 或 full 下使用 --compile"),
    ("--compile is modelled for {fams} (their compiled layers measured); not for {mt:w}",
     "--compile 只对 {fams!l} 建模（这些族编译后的层已实测）；{mt} 未建模"),
    # ------------------------------------------------------------------ fp8 (setup.py, memory/estimate.py)
    ("fp8 is modelled for megatron (Transformer Engine) and fsdp2 (torchao float8), not the {e:w} engine",
     "fp8 只对 megatron（Transformer Engine）和 fsdp2（torchao float8）建模，{e} 引擎不支持"),
    ("gpu {g:w} has no fp8 tensor cores; use mixed-bf16 or amp-bf16",
     "GPU {g} 没有 fp8 Tensor Core；请用 mixed-bf16 或 amp-bf16"),
    ("--recompute-layers {n:d} checkpoints the first N layers of each stage: it needs --recompute full (got {r:w})",
     "--recompute-layers {n} 只对每个流水线阶段的前 N 层做检查点：需要 --recompute full（当前为 {r}）"),
    # ------------------------------------------------------------------ phases
    ("forward mb{i:d}", "micro-batch {i} 的前向传播"),
    ("loss mb{i:d}", "micro-batch {i} 的 loss 计算"),
    ("backward mb{i:d}", "micro-batch {i} 的反向传播"),
    ("forward[{i:d}]", "micro-batch {i} 的前向传播"),
    ("loss[{i:d}]", "micro-batch {i} 的 loss 计算"),
    ("backward[{i:d}]", "micro-batch {i} 的反向传播"),
    # ------------------------------------------------------------------ memory/estimate.py assumptions
    ("optimizer torch.optim {o:w} with foreach=True (the CUDA default), weight decay 0.01",
     "优化器 torch.optim {o}，foreach=True（CUDA 上的默认值），weight decay 0.01"),
    ("optimizer torch.optim {o:w} with fused=True (no step temporaries), weight decay 0.01",
     "优化器 torch.optim {o}，fused=True（融合内核，更新时没有临时张量），weight decay 0.01"),
    ("--optimizer-impl is a torch.optim choice (torch, fsdp2); {e:w} runs its own fused optimizer",
     "--optimizer-impl 只对 torch.optim 有效（torch、fsdp2 引擎）；{e} 用的是它自己的融合优化器"),
    ("--optimizer-impl fused: torch.optim has fused kernels for {names}, not {o:w}",
     "--optimizer-impl fused：torch.optim 只有 {names!l} 有融合内核，{o} 没有"),
    ("pipeline: the most loaded stage is stage {i:d} of {p:d} (1F1B keeps min(p - i, m) micro-batches in flight)",
     "流水线并行：负载最重的是第 {i} 个 stage（共 {p} 个；1F1B 调度下同时在途的 micro-batch 为 min(p - i, m) 个）"),
    ("DeepSpeed 0.19 defaults: reduce_bucket_size=allgather_bucket_size={n:w} elements (the 16-bit reduce bucket "
     "is allocated at that size whatever the model and world size), FusedAdam (no foreach temporaries), "
     "contiguous_gradients=true, overlap_comm=false (true for stage 3)",
     "DeepSpeed 0.19 默认配置：reduce_bucket_size=allgather_bucket_size={n} 个元素（无论模型多大、卡数多少，"
     "16 位 reduce bucket 都按这个大小分配），FusedAdam（没有 foreach 临时张量），contiguous_gradients=true，"
     "overlap_comm=false（stage 3 为 true）"),
    ("gpu memory {g:d} GiB (--gpu-memory), not the catalog's {gpu}",
     "显存按 {g} GiB 计算（--gpu-memory），而不是 GPU 目录中 {gpu} 的容量"),
    ("{name}: bare size: exact parameter count, Llama-2-style shape for activations (h={h:d}, L={l:d}, "
     "heads={a:d}, kv_heads={kv:d}, ffn={f:d})",
     "{name}：只给了规模：参数量精确，激活值按 Llama-2 式的形状估算（h={h}，L={l}，heads={a}，kv_heads={kv}，ffn={f}）"),
    # api.py defaults and warnings
    ("seq_len {n:d}: the context of {name} (max_position_embeddings), shorter than the default {d:d} "
     "(give --seq-len to change it)",
     "seq_len 取 {n}：即 {name} 的上下文长度（max_position_embeddings），比默认的 {d} 短（可用 --seq-len 修改）"),
    ("attn eager: {why} (give --attn flash for flash-attention-2)",
     "attn 取 eager：{why!t}；要用 flash-attention-2 请加 --attn flash"),
    ("warning: seq_len({n:d}) > the context {name} was trained for ({c:d} tokens, max_position_embeddings and "
     "rope_scaling): RoPE extrapolates past it; the memory is as estimated, the model's quality there is not known",
     "警告：seq_len({n}) 超过了 {name} 训练时的上下文长度（{c} 个 token，由 max_position_embeddings 和 "
     "rope_scaling 决定）：超出部分靠 RoPE 外推；显存照常估算，但模型在这个长度上的效果未知"),
    # model/catalog.py alias and derived-entry notes
    ("{ref}: same layer shapes as the catalog's {entry} ({hf}); the {tags} variant of a model keeps its "
     "architecture (context length may differ)",
     "{ref}：层形状与目录中的 {entry}（{hf}）相同；模型的 {tags} 版本沿用原架构（上下文长度可能不同）"),
    ("{name:w}: {base:w} has the layer shapes of {of:w} (same parameters); its context is {c:d} tokens without rope "
     "scaling ({v}: {c2:d}, llama3 rope scaling)",
     "{name}：{base} 的层形状与 {of} 相同（参数相同）；上下文为 {c} 个 token，没有 rope scaling"
     "（{v} 为 {c2}，使用 llama3 rope scaling）"),
    ("{name}: {src:p}", "{name}：来源 {src}"),
    # ------------------------------------------------------------------ explain.py formulas with numbers
    ("trainable params × grad dtype ({dt:w}); earlier micro-batches' grads stay alive through later ones (torch, FSDP2)",
     "可训练参数 × 梯度 dtype（{dt}）；前面 micro-batch 的梯度会一直保留到后面的 micro-batch（torch、FSDP2）"),
    ("{o:w}: adamw/adam 2 states, sgd-momentum/lion 1, adamw-8bit 2 B/param; ÷ dp when sharded",
     "{o}：adamw/adam 每参数 2 个状态，sgd-momentum/lion 1 个，adamw-8bit 每参数 2 B；切分时 ÷ dp"),
    ("per layer per token, in units of h bytes: {comp} (= {k:d}·s·b·h B); ×layers in flight; logits {lg:d} GiB + "
     "loss kept {lk:d} GiB (14 B per b·s·V element at the loss backward)",
     "每层每个 token，以 h 字节为单位：{comp!l}（= {k}·s·b·h B）；× 同时在途的层数；logits {lg} GiB + "
     "loss 保留的 {lk} GiB（loss 反向时每个 b·s·V 元素 14 B）"),
    ("cuBLAS workspace (CublasHandlePool.cpp: {a:d} MiB on sm90+, {b:d} MiB before)",
     "cuBLAS 工作区（CublasHandlePool.cpp：sm90 及以上 {a} MiB，之前的架构 {b} MiB）"),
    # ------------------------------------------------------------------ trace notes and emulations
    ("sdpa: CUDA fused attention kernels (flash / memory-efficient; {used})",
     "sdpa：CUDA 的融合 attention kernel（flash / memory-efficient；{used!t}）"),
    ("TP {tp:d} (torchtitan's Llama plan, trace/tp.py): SequenceParallel {sp:w}, loss parallel {lp:w}, FSDP2 over "
     "dp_shard; DTensor's global-shape sharding propagation is not counted",
     "张量并行 TP {tp}（torchtitan 的 Llama 切分方案，trace/tp.py）：SequenceParallel {sp!t}，loss parallel {lp!t}，"
     "FSDP2 在 dp_shard 上切分；DTensor 按全局形状做切分传播时的开销不计入"),
    ("TP {tp:d} (torchtitan's Llama plan, trace/tp.py): SequenceParallel {sp:w}, loss parallel {lp:w}, no "
     "fully_shard (fp32 compute for amp recipes); DTensor's global-shape sharding propagation is not counted",
     "张量并行 TP {tp}（torchtitan 的 Llama 切分方案，trace/tp.py）：SequenceParallel {sp!t}，loss parallel {lp!t}，"
     "不做 fully_shard（amp 配方以 fp32 计算）；DTensor 按全局形状做切分传播时的开销不计入"),
    ("context parallel: torch's ring attention (load-balanced, allgather k/v, all-to-all dk/dv) over CUDA's flash "
     "kernel, {n:d} calls (trace/cp.py)",
     "上下文并行：torch 的 ring attention（负载均衡切分，allgather k/v，all-to-all dk/dv），底层为 CUDA 的 flash "
     "kernel，共 {n} 次调用（trace/cp.py）"),
    ("CP {cp:d} (torchtitan: FSDP2 over dp_shard × cp, head-tail sharded ids, labels and positions); DTensor's "
     "wrapping of q/k/v is not run (aliases only)",
     "上下文并行 CP {cp}（同 torchtitan：FSDP2 在 dp_shard × cp 上切分，ids、labels 和 positions 按首尾配对切分）；"
     "q/k/v 的 DTensor 包装不执行（只是别名，不占显存）"),
    ("static memory changed over the step: {a:d} -> {b:d} bytes", "常驻显存在这一步中发生了变化：{a} -> {b} 字节"),
    ("reserved: the allocation stream replayed through the caching allocator's rules (a pool per stream, no "
     "memory pressure), from the {which} on",
     "保留显存：把分配序列按 caching allocator 的规则回放得到（每个 stream 各有缓存池，无显存压力），从{which!t}开始"),
    # ------------------------------------------------------------------ setup.py errors (the arithmetic kept)
    ("gpus({g:d}) is not divisible by tp({tp:d}) * pp({pp:d}) * cp({cp:d}) = {d:d}",
     "gpus({g}) 不能被 tp({tp}) * pp({pp}) * cp({cp}) = {d} 整除"),
    ("{p:w} is not a recipe of the {e:w} engine; use {hint}", "{p} 不是 {e} 引擎的精度配方；请用 {hint!t}"),
    ("{o:w} (bitsandbytes) cannot be offloaded", "{o}（bitsandbytes）不能卸载"),
    # ------------------------------------------------------------------ plan --fix / --precision / --host-memory
    ("--fix {pins}: {why}", "--fix {pins}：{why!t}"),
    ("--precision {p:w} is a recipe of {runs}; the engines searched ({e}) do not run it{pins}",
     "--precision {p} 是 {runs} 的精度配方；搜索的引擎（{e}）不运行它{pins}"),
    ("--precision {p:w}: the planner takes bf16, fp16, fp32 or fp8 (each engine runs its own recipe of it) or a "
     "recipe: {r}", "--precision {p}：规划器接受 bf16、fp16、fp32 或 fp8（每个引擎运行自己的对应配方），或精度配方：{r}"),
    ("--precision {p:w}: {g:w} has no bfloat16; use {q:w} or --precision bf16 (fp16 recipes on it)",
     "--precision {p}：{g} 不支持 bfloat16；请用 {q} 或 --precision bf16（在它上面使用 fp16 配方）"),
    ("--fix: {k:w} takes true or false, got {v}", "--fix：{k} 只接受 true 或 false，得到 {v}"),
    ("--fix: fsdp_version takes 1 or 2, got {v}", "--fix：fsdp_version 只接受 1 或 2，得到 {v}"),
    ("--fix: stage_layers {v}: layer counts separated by '/', e.g. 15/16/16/15",
     "--fix：stage_layers {v}：各阶段层数用 '/' 分隔，例如 15/16/16/15"),
    ("--fix: {k:w} {v} is not {hint}", "--fix：{k} {v} 不是{hint!t}"),
    ("--fix: {k:w} must be ≥ 0, got {v}", "--fix：{k} 必须 ≥ 0，得到 {v}"),
    ("--fix: {k:w} is the request's own; give it with {flag}", "--fix：{k} 属于请求本身；请用 {flag} 给出"),
    ("--fix: recompute_layers needs recompute=full, got recompute={r:w}",
     "--fix：recompute_layers 需要 recompute=full，得到 recompute={r}"),
    ("--host-memory must be > 0, got {v}", "--host-memory 必须 > 0，得到 {v}"),
    ("--host-memory: {why}", "--host-memory：{why!t}"),
    # ------------------------------------------------------------------ Python API, live models, preflight
    ("{f:w}() got an unknown setup keyword {k:w}; valid: {v}", "{f}() 收到未知的 setup 关键字 {k}；可用：{v}"),
    ("model: expected a catalog name, a path, a config dict, a transformers PretrainedConfig or a torch.nn.Module, "
     "got {t:w}", "model：应为模型目录名、路径、config 字典、transformers PretrainedConfig 或 torch.nn.Module，得到 {t}"),
    ("on_overflow {v:w}: not one of {c}", "on_overflow {v}：不是 {c} 之一"),
    ("model: a PEFT {k:w} adapter; trainmem models LoRA (and QLoRA) only",
     "model：PEFT {k} 适配器；trainmem 只对 LoRA（和 QLoRA）建模"),
    ("model: the PEFT adapter {a:w} adapts no module trainmem can see (no LoraLayer)",
     "model：PEFT 适配器 {a} 没有适配任何 trainmem 能识别的模块（没有 LoraLayer）"),
    ("model: LoRA ranks differ between modules ({d}; rank_pattern); trainmem models one rank for every adapted module",
     "model：各模块的 LoRA rank 不同（{d}；rank_pattern）；trainmem 只对所有被适配模块使用同一个 rank 的情况建模"),
    ("lora_rank {r:d}, lora_targets {t:w}: read from the PEFT model's adapter {a:w} (the modules it adapted)",
     "lora_rank {r}、lora_targets {t}：读自 PEFT 模型的适配器 {a}（即它实际适配的模块）"),
    ("model: a {t:w} without a transformers config; trainmem needs the architecture: pass its config.json (path or "
     "dict) or a PretrainedConfig",
     "model：{t} 没有 transformers config；trainmem 需要模型结构：请传入它的 config.json（路径或字典）或 PretrainedConfig"),
    ("attn {a:w}: the model's attn_implementation {i:w}", "attn {a}：来自模型的 attn_implementation {i}"),
    ("--optimizer {o:w}: bitsandbytes' paged optimizers are modelled for --engine torch (single GPU or DDP), not {e:w}",
     "--optimizer {o}：bitsandbytes 的分页优化器只对 --engine torch（单卡或 DDP）建模，不支持 {e}"),
    ("--qlora-impl {i:w} needs --qlora", "--qlora-impl {i} 需要 --qlora"),
    ("--optimizer hf-adafactor (transformers' Adafactor) is modelled for --engine torch, not {e:w}",
     "--optimizer hf-adafactor（transformers 自带的 Adafactor）只对 --engine torch 建模，不支持 {e}"),
    ("lora-targets {t:w}: litgpt's fused-qkv slices need a decoder with q/k/v heads, not {m:w}",
     "lora-targets {t}：litgpt 的融合 qkv 切片需要带 q/k/v 注意力头的 decoder，{m} 不是"),
    ("--lora-dropout {p:d} needs LoRA (--lora-rank > 0)", "--lora-dropout {p} 需要 LoRA（--lora-rank > 0）"),
    ("lora-targets {t:w}: litgpt runs its adapters in the model's dtype; use --adapter-dtype bf16",
     "lora-targets {t}：litgpt 让 adapter 使用模型的 dtype；请用 --adapter-dtype bf16"),
    ("lora-targets {t:w} with {x:w}: the slices' projection would be adapted twice",
     "lora-targets {t} 与 {x} 同用：切片所在的投影会被适配两次"),
    ("--adapter-dtype {d:w} needs LoRA (--lora-rank > 0)", "--adapter-dtype {d} 需要 LoRA（--lora-rank > 0）"),
    ("--adapter-dtype bf16 keeps the adapters in the base's dtype: it needs a bf16 base (--precision bf16 or "
     "amp-bf16), not {p:w}",
     "--adapter-dtype bf16 让 adapter 保持基座的 dtype：需要 bf16 基座（--precision bf16 或 amp-bf16），而不是 {p}"),
    ("lora-targets lm_head with --loss {l:w} is not modelled (the loss does not run the head as one module); use "
     "--loss hf, chunked or fused-ce",
     "lora-targets lm_head 与 --loss {l} 的组合未建模（该损失函数不把输出层作为一个模块调用）；请用 --loss hf、chunked 或 fused-ce"),
    ("lora-targets lm_head with tp({t:d}) > 1 is not modelled (a vocab-parallel head's adapter); use tp 1",
     "lora-targets lm_head 与 tp({t}) > 1 的组合未建模（按词表并行切分的输出层上的 adapter）；请用 tp 1"),
    ("--optimizer-in-backward steps in the backward: it cannot accumulate gradients (grad_accum({g:d}) must be 1, as "
     "torchtune requires)",
     "--optimizer-in-backward 在反向传播中执行优化器更新，无法累积梯度（grad_accum({g}) 必须为 1，与 torchtune 的要求一致）"),
    ("{o:w} (bitsandbytes): the state buffers of parameters of >= 1e5 elements ({g:d} GiB) are CUDA managed memory "
     "(cudaMallocManaged), outside torch's allocator: not in max_memory_allocated/reserved; nvidia-smi shows them "
     "while resident; paged out to host RAM when the GPU is full, so they never cause an OOM",
     "{o}（bitsandbytes）：元素数 >= 1e5 的参数，其优化器状态缓冲区（{g} GiB）位于 CUDA 统一内存（cudaMallocManaged），"
     "不经过 torch 的分配器：不计入 max_memory_allocated/reserved；驻留在 GPU 时 nvidia-smi 能看到；GPU 满时被换出到主机内存，"
     "因此不会导致 OOM"),
    ("dp({dp:d}) * tp({tp:d}) * pp({pp:d}) * cp({cp:d}) != gpus({g:d})", "dp({dp}) * tp({tp}) * pp({pp}) * cp({cp}) != gpus({g})，并行度之积必须等于卡数"),
    ("zero({z:d}) is not available on the {e:w} engine; choose one of {c}", "{e} 引擎不支持 zero({z})；可选 {c}"),
    ("vpp({v:d}) needs pp > 1", "vpp({v}) 需要 pp > 1"),
    ("ep({ep:d}) does not divide dp({dp:d}) * cp({cp:d}) * tp({tp:d})", "ep({ep}) 不能整除 dp({dp}) * cp({cp}) * tp({tp})"),
    ("seq_len({s:d}) is not divisible by 2 * cp({cp:d}) (load-balanced context parallelism)",
     "seq_len({s}) 不能被 2 * cp({cp}) 整除（负载均衡的上下文并行要求如此）"),
    ("seq_len({s:d}) is not divisible by tp({tp:d}) with --sp", "开 --sp 时 seq_len({s}) 必须能被 tp({tp}) 整除"),
    ("deepspeed offload of parameters needs zero 3, got zero({z:d})", "deepspeed 卸载参数需要 zero 3，当前为 zero({z})"),
    ("--loss {l:w}: Megatron runs its own fused vocab-parallel cross-entropy; use --loss hf",
     "--loss {l}：Megatron 用自己的融合词表并行交叉熵；请用 --loss hf"),
    ("--loss {l:w} with tensor parallelism: the logits are vocab-parallel (loss parallel); use --loss hf, or "
     "--no-loss-parallel",
     "张量并行下的 --loss {l}：logits 按词表并行切分（loss parallel）；请用 --loss hf，或加 --no-loss-parallel"),
    ("{a:w} or {b:w}", "{a} 或 {b}"),  # _RECIPE_HINT ("amp-bf16 or bf16"), only reached through {hint} of the recipe error
    ("tp({tp:d}) does not divide num_attention_heads({a:d})", "tp({tp}) 不能整除 num_attention_heads({a})"),
    ("tp({tp:d}) and num_key_value_heads({kv:d}): neither divides the other",
     "tp({tp}) 与 num_key_value_heads({kv}) 互不整除"),
    ("pp({pp:d}) > num_layers({n:d})", "pp({pp}) > num_layers({n})：流水线 stage 数不能多于层数"),
    ("num_layers({n:d}) is not divisible by pp({pp:d}) * vpp({v:d}); give the split with --stage-layers",
     "num_layers({n}) 不能被 pp({pp}) * vpp({v}) 整除；请用 --stage-layers 指定每个 stage 的层数"),
    ("--attn-kernel {k:w} is a fused 16-bit attention kernel; not with --attn eager or fp32",
     "--attn-kernel {k} 是 16 位的融合 attention kernel，不能与 --attn eager 或 fp32 一起用"),
    ("--attn-kernel fa3: FlashAttention-3 needs a Hopper or Blackwell GPU, not {g}",
     "--attn-kernel fa3：FlashAttention-3 需要 Hopper 或 Blackwell GPU，{g} 不行"),
    ("--stage-layers gives {k:d} stages for pp({pp:d})", "--stage-layers 给了 {k} 个 stage，而 pp({pp}) 需要 {pp} 个"),
    ("--stage-layers {s}: every stage needs a layer", "--stage-layers {s}：每个 stage 至少要有一层"),
    ("--stage-layers {s}: comma-separated layer counts, e.g. 15,16,16,15",
     "--stage-layers {s}：应为逗号分隔的层数，例如 15,16,16,15"),
    ("--stage-layers {s} sums to {k:d}, not num_layers({n:d})", "--stage-layers {s} 加起来是 {k}，不等于 num_layers({n})"),
    ("ep({ep:d}) needs a mixture-of-experts model; {name} is dense", "ep({ep}) 需要 MoE 模型；{name} 是稠密模型"),
    ("ep({ep:d}) does not divide num_experts({e:d})", "ep({ep}) 不能整除 num_experts({e})"),
    ("seq_len({s:d}) > max_position_embeddings({m:d}) of a model with learned positions",
     "seq_len({s}) > max_position_embeddings({m})：该模型使用可学习的位置编码，不能超过它"),
    ("gpu-memory: {msg}", "gpu-memory：{msg!t}"),
    ("{v} is not a memory size; write e.g. 96GiB, 94GB or 80G (G = GiB)",
     "{v} 不是合法的显存大小；请写成 96GiB、94GB 或 80G（G 即 GiB）这样的形式"),
    ("{v} is not a positive memory size", "{v} 不是正的显存大小"),
    # pydantic's report, as setup._one_line writes it: "field: message (got value)"
    ("{f:w}: Input should be greater than or equal to {n:d} (got {v})", "{f}：应当 ≥ {n}（实际为 {v}）"),
    ("{f:w}: Input should be less than or equal to {n:d} (got {v})", "{f}：应当 ≤ {n}（实际为 {v}）"),
    ("{f:w}: Input should be greater than {n:d} (got {v})", "{f}：应当 > {n}（实际为 {v}）"),
    ("{f:w}: Input should be {c} or {last:w} (got {v})", "{f}：只能是 {c!l}、{last} 之一（实际为 {v}）"),
    ("{f:w}: Input should be {c:w} (got {v})", "{f}：只能是 {c}（实际为 {v}）"),
    ("{f:w}: {msg} (got {v})", "{f}：{msg!t}（实际为 {v}）"),
    # api.py size guards
    ("{name}: {n:d} parameters is above trainmem's limit of {lim:d}", "{name}：参数量 {n} 超过了 trainmem 的上限 {lim}"),
    ("seq_len({s:d}) > the {c:d} positions of {name} (max_position_embeddings({m:d}) less the padding offset)",
     "seq_len({s}) 超过了 {name} 的 {c} 个位置（max_position_embeddings({m}) 减去 padding 偏移）"),
    ("cannot trace {what} = {n:d} (the tracer's limit is {lim:d}, to finish in minutes); use `trainmem estimate`",
     "无法追踪：{what} = {n}（追踪器的上限是 {lim}，保证几分钟内跑完）；请用 `trainmem estimate`"),
    ("{f:w}: {n:d} is above trainmem's limit of {lim:d}", "{f}：{n} 超过了 trainmem 的上限 {lim}"),
    ("lang: {v} is not one of {c}", "lang：{v} 不在可选值 {c} 中"),
    ("device: {v} is not one of fake, cuda", "device：{v} 不在可选值 fake、cuda 中"),
    # ------------------------------------------------------------------ model/resolve.py, model/catalog.py
    ("unknown model {m}; did you mean {near}? (trainmem models lists the catalog; or give a path to a config.json "
     "or a folder holding one, or a size like 7B)",
     "未知模型 {m}；你是不是想用 {near!l}？（trainmem models 列出全部目录模型；也可以给 config.json 的路径、"
     "包含它的目录，或 7B 这样的规模）"),
    ("unknown model {m}: give a catalog name ({ex}, ...; trainmem models lists them), a path to a config.json or a "
     "folder holding one, or a size like 7B or 0.5B",
     "未知模型 {m}：请给出目录中的模型名（{ex!l} 等，trainmem models 会列出全部）、config.json 的路径或包含它的目录，"
     "或 7B、0.5B 这样的规模"),
    ("unknown model {m}; the hub gave no config.json ({exc:w}); did you mean {near}? (trainmem models lists the "
     "catalog; or give a path to a config.json or a folder holding one, or a size like 7B)",
     "未知模型 {m}；Hugging Face Hub 没有返回 config.json（{exc}）；你是不是想用 {near!l}？（trainmem models "
     "列出全部目录模型；也可以给 config.json 的路径、包含它的目录，或 7B 这样的规模）"),
    ("unknown model {m}; the hub gave no config.json ({exc:w}): give a catalog name ({ex}, ...; trainmem models "
     "lists them), a path to a config.json or a folder holding one, or a size like 7B or 0.5B",
     "未知模型 {m}；Hugging Face Hub 没有返回 config.json（{exc}）：请给出目录中的模型名（{ex!l} 等，"
     "trainmem models 会列出全部）、config.json 的路径或包含它的目录，或 7B、0.5B 这样的规模"),
    ("folder {f} holds no config.json", "目录 {f} 里没有 config.json"),
    ("no such file {f} (a model given as a path is a config.json or a folder holding one)",
     "没有这个文件：{f}（以路径给出的模型须是 config.json 或含有它的目录）"),
    ("cannot read {p} as JSON: nested too deeply to be a config.json", "无法把 {p} 读成 JSON：嵌套太深，不可能是 config.json"),
    ("cannot read {p} as JSON: {exc}", "无法把 {p} 读成 JSON：{exc!t}"),
    # what json / the file system say inside "cannot read ... as JSON: {exc}"
    ("{msg}: line {l:d} column {c:d} (char {ch:d})", "第 {l} 行第 {c} 列（字符 {ch}）：{msg!t}"),
    ("[Errno {n:d}] {msg}: {p}", "[Errno {n}] {msg!t}：{p}"),
    ("{c} codec can't decode byte {b:w} in position {i:d}: {why}", "无法按 {c} 解码位置 {i} 的字节 {b}：{why!t}"),
    ("{p} is not a config.json: its JSON is a {t:w}, not an object", "{p} 不是 config.json：它的 JSON 是 {t}，不是对象"),
    ("{m} is not in the model catalog; did you mean {near}? (trainmem models lists it)",
     "{m} 不在模型目录中；你是不是想用 {near!l}？（trainmem models 会列出全部）"),
    ("{m} is not in the model catalog (trainmem models lists it)", "{m} 不在模型目录中（trainmem models 会列出全部）"),
    # model/hf.py: the config checked as transformers would
    ("{w} (model_type {mt}) lacks {k}", "{w}（model_type {mt}）缺少 {k}"),
    ("{w} (model_type {mt}): {k:w}={v} is not a non-negative integer", "{w}（model_type {mt}）：{k}={v} 不是非负整数"),
    ("{w} (model_type {mt}): {k:w}={v} is not a number", "{w}（model_type {mt}）：{k}={v} 不是数字"),
    ("{w}: {k:w}({v:d}) must be >= {lo:d}", "{w}：{k}({v}) 必须 >= {lo}"),
    ("{w}: {k:w}({v:d}) is above trainmem's limit of {hi:d}", "{w}：{k}({v}) 超过了 trainmem 的上限 {hi}"),
    ("{w}: {k:w}={v} is not a boolean (true or false)", "{w}：{k}={v} 不是布尔值（true 或 false）"),
    ("{w}: mlp_only_layers={v} is not a list of layer indices", "{w}：mlp_only_layers={v} 不是层号列表"),
    ("{w}: layer_types={v} is not a list of layer type names", "{w}：layer_types={v} 不是层类型名称的列表"),
    ("{w}: layer_types has {n:d} entries for num_hidden_layers({l:d})",
     "{w}：layer_types 有 {n} 项，与 num_hidden_layers({l}) 不一致"),
    ("{w}: layer_types entry {v} is not sliding_attention or full_attention (the layer types {mt:w} builds masks for)",
     "{w}：layer_types 中的 {v} 既不是 sliding_attention 也不是 full_attention（{mt} 只为这两种层类型构建 mask）"),
    ("{w}: num_attention_heads({a:d}) does not divide hidden_size({h:d}) and no head_dim is given",
     "{w}：num_attention_heads({a}) 不能整除 hidden_size({h})，且没有给出 head_dim"),
    ("{w}: kv_channels({k:d}) * num_attention_heads({a:d}) != hidden_size({h:d}) (QWenAttention splits c_attn's "
     "output in hidden_size pieces)",
     "{w}：kv_channels({k}) × num_attention_heads({a}) ≠ hidden_size({h})（QWenAttention 按 hidden_size 切分 c_attn 的输出）"),
    ("{w}: intermediate_size({i:d}) // 2 must be >= 1 (QWenMLP's width)",
     "{w}：intermediate_size({i}) // 2 必须 ≥ 1（QWenMLP 的宽度）"),
    ("{w}: emb_dropout_prob > 0 (Qwen1's embedding dropout) is not modelled",
     "{w}：emb_dropout_prob > 0（Qwen1 的 embedding dropout）尚未建模"),
    ("{w}: rotary_pct={v} (partial rotary of Qwen1) is not modelled",
     "{w}：rotary_pct={v}（Qwen1 的部分旋转位置编码）尚未建模"),
    ("{w}: {ka:w}({a:d}) does not divide {kh:w}({h:d})", "{w}：{ka}({a}) 不能整除 {kh}({h})"),
    ("{w}: {k:w}={v} is not an activation of transformers (ACT2FN): {known}",
     "{w}：{k}={v} 不是 transformers 支持的激活函数（ACT2FN）：{known!l}"),
    ("{w}: a mixture-of-experts model needs at least one expert, got {k:w}({e:d})",
     "{w}：MoE 模型至少要有一个专家，当前为 {k}({e})"),
    ("{w}: num_experts_per_tok({k:d}) is not between 1 and {ke:w}({e:d})",
     "{w}：num_experts_per_tok({k}) 不在 1 到 {ke}({e}) 之间"),
    ("{w}: topk_group({t:d}) of n_group({g:d}) groups of {n:d} experts cannot route num_experts_per_tok({k:d})",
     "{w}：n_group({g}) 组、每组 {n} 个专家中选 topk_group({t}) 组，路由不出 num_experts_per_tok({k}) 个专家"),
    ("{w}: {k:w}={v} is not a JSON object", "{w}：{k}={v} 不是 JSON 对象"),
    ("{w}: {k:w}.rope_type={v} is not a RoPE type of transformers: {known}",
     "{w}：{k}.rope_type={v} 不是 transformers 支持的 RoPE 类型：{known!l}"),
    ("{w}: {k:w}.factor={v} is not a positive number", "{w}：{k}.factor={v} 不是正数"),
    ("{w}: RoPE needs an even rotary dimension, got head_dim({d:d})", "{w}：RoPE 的旋转维度必须是偶数，当前 head_dim({d})"),
    ("{w}: RoPE needs an even rotary dimension, got head_dim({d:d}) · partial_rotary_factor({f}) = {r:d}",
     "{w}：RoPE 的旋转维度必须是偶数，当前 head_dim({d}) · partial_rotary_factor({f}) = {r}"),
    ("{w}: partial_rotary_factor={v} is not a number in (0, 1]", "{w}：partial_rotary_factor={v} 不是 (0, 1] 之间的数"),
    ("{w}: partial_rotary_factor=null leaves NemotronAttention without one (rope_parameters['partial_rotary_factor'])",
     "{w}：partial_rotary_factor=null 会让 NemotronAttention 拿不到这个值（rope_parameters['partial_rotary_factor']）"),
    ("{w}: layerdrop={v} is not a probability", "{w}：layerdrop={v} 不是概率值"),
    ("{w}: num_attention_heads({a:d}) is above hidden_size({h:d}): head_dim would be 0",
     "{w}：num_attention_heads({a}) 大于 hidden_size({h})：head_dim 会是 0"),
    ("opt layerdrop {p}: every layer is counted (OPTDecoder skips each layer with that probability in training; the "
     "peak is that of a step that skips none)",
     "opt layerdrop {p}：所有层都计入（OPTDecoder 训练时以该概率跳过每一层；峰值按一层都不跳过的训练步计算）"),
    ("a config must be a JSON object, got {t:w}", "config 必须是 JSON 对象，当前为 {t}"),
    ("model_type {mt} is not supported; supported: {known}", "不支持 model_type {mt}；支持的有：{known!l}"),
    # model/lora_targets.py
    ("lora-targets: on {mt:w}, PEFT maps {t} onto the stacked routed experts / router (target_parameters, "
     "transformers 5.x); LoRA on those is not modelled; valid: {valid}",
     "lora-targets：在 {mt} 上，PEFT 会把 {t} 映射到堆叠的路由专家 / router（target_parameters，transformers 5.x）；"
     "这类 LoRA 没有建模；可用的有：{valid!l}"),
    ("lora-targets: {t} is not a linear module of {mt:w} (routed experts and routers are not nn.Linear in "
     "transformers 5.x: PEFT's target_modules cannot adapt them, and its target_parameters is not modelled); "
     "valid: {valid}",
     "lora-targets：{t} 不是 {mt} 的线性层（transformers 5.x 中路由专家和 router 不是 nn.Linear："
     "PEFT 的 target_modules 无法适配它们，target_parameters 也没有建模）；可用的有：{valid!l}"),
    ("lora-targets: {t} is not a linear module of {mt:w}; valid: {valid}",
     "lora-targets：{t} 不是 {mt} 的线性层；可用的有：{valid!l}"),
    ("lora-rank({r:d}) > min(in_features({i:d}), out_features({o:d})) = {b:d} of {path:w}",
     "lora-rank({r}) > {path} 的 min(in_features({i}), out_features({o})) = {b}"),
    # hardware/catalog.py
    ("gpu: unknown GPU {g}; did you mean {near}? (trainmem gpus lists them; --gpu-memory SIZE for others)",
     "gpu：未知 GPU {g}；你是不是想用 {near!l}？（trainmem gpus 会列出全部；其他型号请用 --gpu-memory SIZE）"),
    ("gpu: unknown GPU {g} (trainmem gpus lists them; --gpu-memory SIZE for others)",
     "gpu：未知 GPU {g}（trainmem gpus 会列出全部；其他型号请用 --gpu-memory SIZE）"),
    ("gpu {g:w} has no bfloat16 support; use fp16 recipes (amp-fp16, mixed-fp16) or fp32",
     "GPU {g} 不支持 bfloat16；请用 fp16 配方（amp-fp16、mixed-fp16）或 fp32"),
    ("engine {e:w} is not modelled", "没有建模 {e} 引擎"),
    # trace/pipeline.py
    ("pp({p:d}) with {mt:w} (a pipeline stage is traced for {fams})",
     "{mt} 上的 pp({p})（只对 {fams!l} 追踪流水线阶段）"),
    ("pp({p:d}) with tp, vpp, LoRA, a chunked/fused loss or a task head",
     "pp({p}) 与 tp、vpp、LoRA、分块/融合 loss 或任务头同时使用"),
    ("pipeline: stage {st:d} of {p:d} is the more loaded of the first and the last (1F1B with min(p - i, m) = "
     "{k:d} micro-batches in flight)",
     "流水线：第一个与最后一个阶段中，阶段 {st}（共 {p} 个）负载更高（1F1B，同时在途 min(p - i, m) = {k} 个 micro-batch）"),
    # model/heads.py
    ("{w}: num_labels({n}) is not an integer between 1 and {m:d}", "{w}：num_labels({n}) 必须是 1 到 {m} 之间的整数"),
    ("{mt:w} with a {h:w} head is not modelled; heads are modelled for {fams}",
     "没有建模带 {h} 头的 {mt}；分类头只支持：{fams!l}"),
    # ------------------------------------------------------------------ trace errors
    ("cannot trace {what}; use `trainmem estimate`", "无法追踪：{what!t}；请用 `trainmem estimate`"),
    ("the {e:w} engine (only torch and fsdp2 are traced)", "{e} 引擎（只支持追踪 torch 和 fsdp2）"),
    ("the torch engine with dp({dp:d}) > 1 (DDP buckets are not traced yet)",
     "dp({dp}) > 1 的 torch 引擎（暂不支持追踪 DDP 的 bucket）"),
    ("tp({tp:d}) with {mt:w} (the TP plan is verified for {fams})", "{mt} 上的 tp({tp})（TP 方案只在 {fams!l} 上验证过）"),
    ("LoRA with the {e:w} engine (LoRA is traced on the torch engine)", "{e} 引擎上的 LoRA（LoRA 只在 torch 引擎上追踪）"),
    ("--loss {l:w} on {arch:w} (traced for causal LMs without logit softcapping)",
     "{arch} 上的 --loss {l}（只对没有 logit softcapping 的因果语言模型追踪）"),
    ("offload {o:w}", "卸载（offload {o}）"),
    ("tp with {mt:w} (TP plan verified for {fams})", "{mt} 上的张量并行（TP 方案只在 {fams!l} 上验证过）"),
    ("{name}: no Hugging Face config to build the model from", "{name}：没有可用来构建模型的 Hugging Face config"),
    ("architecture {arch:w} (not in transformers {v:w})", "架构 {arch}（transformers {v} 中没有）"),
    ("optimizer {o:w} cannot be traced; use `trainmem estimate`", "无法追踪优化器 {o}；请用 `trainmem estimate`"),
    ("tracing needs torch and transformers ({m:w} missing): pip install 'trainmem[trace]'; or use `trainmem estimate`",
     "追踪需要 torch 和 transformers（缺少 {m}）：pip install 'trainmem[trace]'；或者用 `trainmem estimate`"),
    # ------------------------------------------------------------------ click's usage errors
    ("No such option: {o:w} (Possible options: {c})", "没有这个选项：{o}（可能想用的选项：{c!l}）"),
    ("No such option: {o:w} Did you mean {c:w}?", "没有这个选项：{o}，你是不是想用 {c}？"),
    ("No such option: {o:w}", "没有这个选项：{o}"),
    ("No such command {c}.", "没有这个命令：{c}。"),
    ("Option {o} requires an argument.", "选项 {o} 需要一个值。"),
    ("Option {o} does not take a value.", "选项 {o} 不接受值。"),
    ("Got unexpected extra argument ({a})", "多了一个参数（{a}）"),
    ("Got unexpected extra arguments ({a})", "多了几个参数（{a}）"),
    ("Got unexpected extra argument(s) ({a})", "多了参数（{a}）"),
    ("Missing argument {a}.", "缺少参数 {a}。"),
    ("Missing option {o}.", "缺少选项 {o}。"),
    ("Invalid value for {o}: {v} is not a valid integer.", "{o} 的取值无效：{v} 不是整数。"),
    ("Invalid value for {o}: {msg}", "{o} 的取值无效：{msg!t}"),
]


def _merge_areas() -> None:
    from trainmem.report.zh import merged

    exact, patterns = merged()
    EXACT.update(exact)
    PATTERNS[:0] = patterns


_merge_areas()
