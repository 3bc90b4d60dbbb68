"""Chinese for the messages of ``trainmem/perf`` (format: see :mod:`trainmem.report.messages_zh`)."""

from __future__ import annotations

EXACT: dict[str, str] = {
    # ------------------------------------------------------------------ perf/notes.py (step-time assumptions)
    "GEMMs run at the GPU's measured achievable matmul fraction (MAMF) times the share sustained in "
    "training (calibrated on published runs), with tile and wave quantization and a fixed cost per GEMM; "
    "memory-bound ops at 92 % of the HBM bandwidth (torchao roofline); eager mode without torch.compile "
    "except under torchao float8.":
        "GEMM 按该 GPU 实测的可达矩阵乘算力比例（MAMF）乘以训练中能维持的比例（用公开训练数据校准）计算，并计入 tile 与 "
        "wave 量化以及每个 GEMM 的固定开销；访存受限的算子按 HBM 带宽的 92 % 计算（torchao roofline）；除 torchao "
        "float8 外均为 eager 模式，不含 torch.compile。",
    "Megatron with Transformer Engine: fused QKV and fc1 GEMMs and fused norm, RoPE, SwiGLU and "
    "bias-dropout-add kernels.":
        "Megatron + Transformer Engine：QKV 与 fc1 为融合 GEMM，norm、RoPE、SwiGLU 和 bias-dropout-add 均为融合 kernel。",
    "transformers modules in eager mode: unfused RMSNorm, rotary embedding and activation kernels.":
        "transformers 模块以 eager 模式运行：RMSNorm、旋转位置编码和激活函数都是未融合的 kernel。",
    "Attention runs FlashAttention-3-class kernels (cuDNN fused attention under Transformer Engine) on the "
    "causal half of the score matrix.":
        "attention 使用 FlashAttention-3 级别的 kernel（Transformer Engine 下的 cuDNN fused attention），"
        "只计算 causal 掩码下的一半打分矩阵。",
    "Attention runs FlashAttention-2 kernels (the flash backend of torch SDPA) on the causal half of the "
    "score matrix.":
        "attention 使用 FlashAttention-2 kernel（torch SDPA 的 flash 后端），只计算 causal 掩码下的一半打分矩阵。",
    "Attention runs a memory-efficient fused kernel at an assumed 35 % of the 16-bit peak.":
        "attention 使用 memory-efficient 融合 kernel，假设达到 16 位峰值算力的 35 %。",
    "Attention runs flash-attn's Triton FlashAttention (llm-foundry attn_impl triton) at half of "
    "FlashAttention-2's efficiency on the causal half of the score matrix.":
        "attention 使用 flash-attn 的 Triton 版 FlashAttention（llm-foundry 的 attn_impl triton），效率按 "
        "FlashAttention-2 的一半计，只计算 causal 掩码下的一半打分矩阵。",
    "Eager attention: batched matmuls over the whole score matrix and an fp32 softmax.":
        "eager attention：在完整打分矩阵上做批量矩阵乘，softmax 以 fp32 计算。",
    "Tensor-parallel collectives are exposed (no async-TP or --tp-comm-overlap); with sequence parallelism "
    "their volume equals the all-reduce's.":
        "张量并行的集合通信全部暴露在关键路径上（不考虑 async-TP 或 --tp-comm-overlap）；开启序列并行时通信量与 "
        "all-reduce 相同。",
    "Megatron with sequence parallelism runs --tp-comm-overlap, as the published recipes do: each "
    "tensor-parallel collective is pipelined with its GEMM in tp chunks, one chunk stays exposed.":
        "开启序列并行的 Megatron 按公开配方使用 --tp-comm-overlap：每个张量并行集合通信按 tp 份切块与对应的 GEMM "
        "流水重叠，只有一块暴露在关键路径上。",
    "torchtitan's async TP micro-pipelines each tensor-parallel all-gather and reduce-scatter with its "
    "matmul in tp chunks (inductor's micro_pipeline_tp, under torch.compile); one chunk stays exposed.":
        "torchtitan 的 async TP 把每次张量并行的 all-gather 和 reduce-scatter 按 tp 份切块，与对应的矩阵乘流水重叠"
        "（torch.compile 下 inductor 的 micro_pipeline_tp）；只有一块暴露在关键路径上。",
    "Communication hidden under compute slows that compute by 18.9 % while both run (Lee et al. 2025); "
    "the extra time is counted as communication.":
        "被计算掩盖的通信在两者同时运行期间会让计算慢 18.9 %（Lee et al. 2025）；多出的时间计入通信。",
    "Each optimizer step adds a fixed host overhead (data loading, host synchronisations, logging), "
    "calibrated on published runs and counted with the optimizer.":
        "每个优化器步额外计入一段固定的主机端开销（数据加载、主机同步、日志），用公开训练数据校准，计入 optimizer 一项。",
    "Megatron-DeepSpeed: DeepSpeed's PipelineEngine blocks on each pipeline send and receive (4 per "
    "micro-batch on an interior stage, each TP rank sending 1/tp and all-gathering the rest), bf16 "
    "accumulates every micro-batch's gradients into fp32 (BF16_Optimizer), and the gradient all-reduce, "
    "the tied-embedding all-reduce and the parameter all-gather run after the pipeline flush.":
        "Megatron-DeepSpeed：DeepSpeed 的 PipelineEngine 在每次流水线发送和接收时阻塞（中间 stage 每个 micro-batch 4 次，"
        "每个 TP rank 发送 1/tp 再 all-gather 其余部分），bf16 下每个 micro-batch 的梯度都累加到 fp32（BF16_Optimizer），"
        "梯度 all-reduce、绑定词嵌入的 all-reduce 和参数 all-gather 都在流水线排空之后执行。",
    "Context parallelism exchanges K and V around the ring while each chunk's attention runs; only the excess "
    "is exposed.":
        "上下文并行在每个分块计算 attention 的同时沿环交换 K 和 V，只有超出计算时间的部分暴露出来。",
    "Expert-parallel all-to-alls (dispatch and combine) are exposed, and routing is assumed balanced.":
        "专家并行的 all-to-all（dispatch 与 combine）全部暴露，并假设路由是均衡的。",
    "MoE routing is assumed balanced: every expert gets top-k times tokens divided by E rows.":
        "假设 MoE 路由均衡：每个专家分到 top-k × token 数 ÷ E 行。",
    "DDP all-reduces the gradients once per step (no_sync during accumulation), overlapped with the last "
    "backward except the last 25 MiB bucket.":
        "DDP 每个训练步对梯度做一次 all-reduce（梯度累积期间 no_sync），与最后一个 micro-batch 的反向传播重叠，"
        "只有最后一个 25 MiB bucket 暴露。",
    "FSDP2 (torchtitan) all-gathers parameters and reduce-scatters fp32 gradients every micro-batch, "
    "overlapped layer by layer with compute.":
        "FSDP2（torchtitan）每个 micro-batch 都 all-gather 参数并 reduce-scatter fp32 梯度，逐层与计算重叠。",
    "FSDP2 under pipeline parallelism gathers parameters once per step and reduce-scatters gradients "
    "once after the last backward.":
        "流水线并行下的 FSDP2 每个训练步只 all-gather 一次参数，并在最后一次反向传播之后 reduce-scatter 一次梯度。",
    "Megatron runs with --overlap-grad-reduce and --overlap-param-gather (as the published recipes do) "
    "and reduces bf16 gradients in fp32.":
        "Megatron 开启 --overlap-grad-reduce 和 --overlap-param-gather（与公开的配方一致），bf16 梯度以 fp32 规约。",
    "DeepSpeed keeps overlap_comm at its default (off for ZeRO-0/1/2, on for ZeRO-3) and reduces "
    "16-bit gradients.":
        "DeepSpeed 的 overlap_comm 取默认值（ZeRO-0/1/2 关闭，ZeRO-3 开启），梯度以 16 位规约。",
    "The pipeline bubble is (pp - 1) / vpp micro-batch times of the slowest stage (Narayanan et al. "
    "2021, section 2.2).":
        "流水线气泡为最慢 stage 的 (pp - 1) / vpp 个 micro-batch 时间（Narayanan et al. 2021，第 2.2 节）。",
    "Pipeline sends and receives are exposed each micro-batch, except Megatron's interleaved schedule, "
    "which overlaps them after the warm-up.":
        "流水线的 send/recv 每个 micro-batch 都暴露，只有 Megatron 的 interleaved 调度在 warm-up 之后把它们与计算重叠。",
    "Full recomputation re-runs each layer's forward, with its tensor-parallel and expert-parallel "
    "communication, in the backward.":
        "完全重计算在反向传播中把每层的前向（连同其张量并行和专家并行通信）重新跑一遍。",
    "Selective recomputation (Megatron) re-runs each layer's attention core in the backward.":
        "选择性重计算（Megatron）在反向传播中重新计算每层的 attention 核心部分。",
    "Selective recomputation (torchtitan op-level SAC) re-runs every second matmul and all "
    "memory-bound ops of each layer in the backward.":
        "选择性重计算（torchtitan 算子级 SAC）在反向传播中重新计算每层每隔一个的矩阵乘以及所有访存受限的算子。",
    "fp8 (Transformer Engine): the layers' linear GEMMs run in fp8 at the measured fp8 matmul fraction, "
    "casts fused into the producing kernels and weights cast once per step; attention, router and LM head "
    "stay 16-bit.":
        "fp8（Transformer Engine）：各层 linear 的 GEMM 以 fp8 运行，按实测的 fp8 矩阵乘算力比例计算；类型转换融合进"
        "产生该张量的 kernel，权重每个训练步只转换一次；attention、router 和 LM head 仍为 16 位。",
    "fp8 (torchao rowwise float8 with compiled casts): the layers' linear GEMMs run in fp8, inputs, "
    "gradients and weights cast every micro-batch; attention, router and LM head stay 16-bit.":
        "fp8（torchao rowwise float8，类型转换经 compile 融合）：各层 linear 的 GEMM 以 fp8 运行，输入、梯度和权重"
        "每个 micro-batch 都要转换；attention、router 和 LM head 仍为 16 位。",
    "torchtitan applies no fully_shard to tensor parallelism without data or context parallelism "
    "(dp = cp = 1) and then disables mixed precision (maybe_enable_amp: \"Mixed precision training with "
    "TP or PP is only supported when FSDP/HSDP/CP is enabled\"), so this recipe computes in fp32 at the "
    "fp32 (non-TF32) peak, and MFU is against the 16-bit peak it asks for; dp or cp of 2 or more, or "
    "the pure bf16 recipe (torchtitan training.dtype = bfloat16), computes in 16 bits.":
        "torchtitan 在没有数据并行和上下文并行（dp = cp = 1）时不对张量并行应用 fully_shard，并随之关闭混合精度"
        "（maybe_enable_amp：\"Mixed precision training with TP or PP is only supported when FSDP/HSDP/CP is "
        "enabled\"），因此该配方以 fp32 计算，按 fp32（非 TF32）峰值算力计时，MFU 仍按它所要求的 16 位峰值计算；"
        "dp 或 cp 不小于 2，或使用纯 bf16 配方（torchtitan training.dtype = bfloat16），才以 16 位计算。",
    "torch autocast casts every fp32 weight to 16 bits in each forward and keeps the residual stream in fp32.":
        "torch autocast 在每次前向中把每个 fp32 权重转换成 16 位，残差流保持 fp32。",
    "The CPU optimizer runs at an assumed 3 billion parameters per second per node (DeepSpeedCPUAdam; "
    "torch's CPU AdamW 6 times slower), over the GPU's host link.":
        "CPU 优化器按每节点每秒 30 亿参数的假设速度计算（DeepSpeedCPUAdam；torch 的 CPU AdamW 慢 6 倍），"
        "数据经 GPU 与主机之间的链路传输。",
    "LoRA: the frozen base weights skip their weight-gradient GEMMs and the adapters run as small GEMMs.":
        "LoRA：冻结的基座权重不做权重梯度的 GEMM，适配器以小 GEMM 运行。",
    "QLoRA: each NF4 weight is dequantised to 16 bits for the forward and for the input-gradient GEMM.":
        "QLoRA：每个 NF4 权重在前向和输入梯度的 GEMM 之前都要反量化成 16 位。",
    "Ranks are placed in Megatron's order tp-cp-ep-dp-pp; a group that spans nodes uses the inter-node "
    "link at each GPU's share of the NICs.":
        "rank 按 Megatron 的顺序 tp-cp-ep-dp-pp 排布；跨节点的通信组使用节点间链路，带宽按每张卡分到的网卡份额计算。",
    "The optimizer step is memory-bound: the owned parameters' tensors are read and written once per "
    "kernel pass.":
        "优化器更新是访存受限的：本卡负责的参数及其状态在每个 kernel pass 中各读写一次。",
}

PATTERNS: list[tuple[str, str]] = [
    # ------------------------------------------------------------------ perf/device.py
    ("gpu: {g} has no published dense 16-bit peak (bf16_tflops), so its step time cannot be modelled",
     "gpu：{g} 没有公开的 16 位稠密算力峰值（bf16_tflops），无法估算训练步时间"),
    ("gpu: {g} has no published memory bandwidth (hbm_gbps), so its step time cannot be modelled",
     "gpu：{g} 没有公开的显存带宽（hbm_gbps），无法估算训练步时间"),
    ("gpu: {g} has no published fp8 peak (fp8_tflops); use a 16-bit precision",
     "gpu：{g} 没有公开的 fp8 算力峰值（fp8_tflops）；请改用 16 位精度"),
    ("gpu: {g} has no tabulated fp32 peak, so an fp32 step time cannot be modelled; use a 16-bit precision",
     "gpu：{g} 没有收录 fp32 算力峰值，无法估算 fp32 训练步时间；请改用 16 位精度"),
    # ------------------------------------------------------------------ perf/notes.py
    ("gpu {g} has no published matmul benchmark; its achievable GEMM fraction is borrowed from a sibling "
     "GPU or the A100 PCIe figure",
     "GPU {g} 没有公开的矩阵乘实测数据；其可达 GEMM 算力比例借用同系列 GPU 或 A100 PCIe 的数值"),
]
