"""Chinese for the messages of ``trainmem/plan`` and the ``plan``/``compare`` commands (format: see
:mod:`trainmem.report.messages_zh`)."""

from __future__ import annotations

EXACT: dict[str, str] = {
    # plan_cli.py
    "--global-batch is required (sequences per optimizer step, ≥ 1)": "必须给出 --global-batch（每次优化器更新的序列数，≥ 1）",
    "--min-gpus and --tokens/--days need --gpu TYPE": "--min-gpus 和 --tokens/--days 需要 --gpu TYPE",
    "--tokens and --days go together": "--tokens 和 --days 必须同时给出",
    "--cluster is required (e.g. --cluster 8xH100-SXM-80G)": "必须给出 --cluster（例如 --cluster 8xH100-SXM-80G）",
    "--export needs -o DIR": "--export 需要 -o DIR",
    # search.py assumptions
    "global batch preserved exactly: micro_batch × grad_accum × dp = global batch (per GPU type in mixed pools)":
        "全局 batch 严格保持：micro_batch × grad_accum × dp = 全局 batch（混合集群中按每种 GPU 分别计算）",
    "tensor parallelism inside one node; Megatron runs TP with --sequence-parallel, torchtitan with SequenceParallel":
        "张量并行限制在单个节点内；Megatron 的 TP 配合 --sequence-parallel，torchtitan 配合 SequenceParallel",
    "only one configuration fits": "只有一种配置放得下",
    "cluster spec": "集群描述",
    # explain.py: the time-breakdown parts as a sentence names them
    "compute": "计算", "recompute": "重计算", "tensor-parallel communication": "张量并行通信",
    "context-parallel communication": "上下文并行通信", "expert all-to-all": "专家并行 all-to-all",
    "pipeline send/receive": "流水线收发", "data-parallel communication": "数据并行通信",
    "pipeline bubble": "流水线气泡", "offload traffic": "卸载传输", "optimizer step": "优化器更新",
    # compare.py techniques
    "bf16 mixed precision": "bf16 混合精度",
    "fp16 mixed precision": "fp16 混合精度",
    "selective recompute": "选择性重计算",
    "full recompute": "完全重计算",
    "FSDP2 (ZeRO-3)": "FSDP2（ZeRO-3）",
    "FSDP2 reshard after forward (ZeRO-3)": "FSDP2 前向后重新分片（ZeRO-3）",
    "distributed optimizer (ZeRO-1)": "分布式优化器（ZeRO-1）",
    "optimizer offload (ZeRO-Offload)": "优化器卸载（ZeRO-Offload）",
    "optimizer + parameter offload (ZeRO-3 Offload)": "优化器 + 参数卸载（ZeRO-3 Offload）",
    "CPU offload (FSDP2 CPUOffloadPolicy)": "CPU 卸载（FSDP2 CPUOffloadPolicy）",
    "activation offloading to CPU (OffloadActivations)": "激活值卸载到 CPU（OffloadActivations）",
    "LoRA without dropout (lora_dropout 0)": "去掉 LoRA dropout（lora_dropout 0）",
    "optimizer CPU offload": "优化器 CPU 卸载",
    "8-bit AdamW (bitsandbytes)": "8 位 AdamW（bitsandbytes）",
    "fused optimizer (fused=True, adamw_torch_fused)": "融合优化器（fused=True，adamw_torch_fused）",
}

PATTERNS: list[tuple[str, str]] = [
    # compare.py: a fix that saves under 1 % of the gap
    ("saves {m:d} MiB of device memory, under 1 % of the {g:d} GiB the run is short",
     "只节省 {m} MiB 设备显存，不到此运行所缺 {g} GiB 的 1 %"),
    # search.py
    ("--global-batch must be ≥ 1, got {n:d}", "--global-batch 必须 ≥ 1，实际为 {n}"),
    ("--margin must be in [0, 100) percent, got {n:d}", "--margin 必须在 [0, 100) 百分比之间，实际为 {n}"),
    ("--top must be ≥ 1, got {n:d}", "--top 必须 ≥ 1，实际为 {n}"),
    ("--precision {p:w}: the planner takes bf16, fp16, fp32 or fp8 (each engine runs its own recipe of it)",
     "--precision {p}：规划器只接受 bf16、fp16、fp32 或 fp8（每个引擎按自己的方案执行）"),
    ("--precision fp8: {g:w} has no fp8 tensor cores", "--precision fp8：{g} 没有 fp8 Tensor Core"),
    ("--fix: dp·tp·pp·cp = {n:d} but the pool has {m:d} GPUs", "--fix：dp·tp·pp·cp = {n}，但集群有 {m} 张 GPU"),
    ("--fix: micro_batch({a:d}) × grad_accum({b:d}) × dp({c:d}) = {d:d}, not the global batch {e:d}",
     "--fix：micro_batch({a}) × grad_accum({b}) × dp({c}) = {d}，不等于全局 batch {e}"),
    ("--fix: this configuration needs {n:d} GiB per GPU with the {m:d} % margin; {g:w} has {x:d} GiB",
     "--fix：该配置在 {m} % 余量下每卡需要 {n} GiB 显存；{g} 只有 {x} GiB"),
    ("no configuration of {model:w} fits {pool:w}{what} at global batch {gb:d} × seq {seq:d} with a {m:d} % margin "
     "(try --min-gpus, a smaller --seq-len, or another --global-batch that more data-parallel degrees divide)",
     "{model} 在 {pool}{what!t} 上没有能放下的配置（全局 batch {gb} × 序列长度 {seq}，余量 {m} %）"
     "（可以试试 --min-gpus、更短的 --seq-len，或换一个能被更多数据并行度整除的 --global-batch）"),
    (" (knobs fixed: {fixed})", "（固定参数 {fixed}）"),
    ("fits: device total (reserved + CUDA context + NCCL) + {m:d} % of reserved ≤ GPU memory",
     "放得下的判据：设备总占用（reserved + CUDA 上下文 + NCCL）+ reserved 的 {m} % ≤ GPU 显存"),
    ("{g:w} has no bfloat16: fp16 recipes on it", "{g} 不支持 bfloat16：在它上面使用 fp16 方案"),
    # group.py / refusal.py / sizing.py: the node's host RAM
    ("{g:w}: {n:d} GiB host RAM per node ({src}); plans whose ranks on a node offload more there are refused "
     "(offloaded states only: pinned buffers, the data loader and the processes are not counted)",
     "{g}：每节点主机内存 {n} GiB（{src!t}）；一个节点上各 rank 卸载到主机的数据超过它的方案会被拒绝"
     "（只计卸载的模型状态：锁页缓冲区、数据加载器和进程本身不计）"),
    ("{g:w}: host RAM per node unknown: offload plans are not checked against it",
     "{g}：每节点主机内存未知：卸载方案不做主机内存检查"),
    ("catalog default for {g:w}, assumed", "{g} 的 GPU 目录默认值，为假设值"),
    ("catalog default for {g:w}", "{g} 的 GPU 目录默认值"),
    ("cluster file {w:w}", "集群文件 {w}"),
    ("needs {a:d} GiB host RAM per node, the node has {b:d} GiB ({src}; --host-memory SIZE or a cluster spec's "
     "[host_memory=SIZE] if it has more)",
     "每节点需要 {a} GiB 主机内存，而节点只有 {b} GiB（{src!t}；如果节点内存更多，请用 --host-memory SIZE 或在集群描述中写 "
     "[host_memory=SIZE]）"),
    ("no configuration of {model:w} fits {pool:w}{what}: the ones that fit the GPUs offload to the host; the least of "
     "them, {k}, {why}",
     "{model} 在 {pool}{what!t} 上没有能放下的配置：显存放得下的配置都要卸载到主机，其中主机内存需求最小的 {k}：{why!t}"),
    ("--fix {pins} on {pool:w}: {k} fits the GPU but {why}", "--fix {pins}（{pool}）：{k} 显存放得下，但{why!t}"),
    ("--fix {pins} on {pool:w}: the configurations with these pins that fit the GPU offload to the host; the least of "
     "them, {k}, {why}",
     "--fix {pins}（{pool}）：带这些固定参数且显存放得下的配置都要卸载到主机，其中主机内存需求最小的 {k}：{why!t}"),
    # compare.py: block recompute
    ("full recompute of {n:d} of {m:d} layers per stage (block)", "每个流水线阶段前 {n} 层（共 {m} 层）完全重计算（block 方式）"),
    # space.py
    ("--fix: {p} is not key=value", "--fix：{p} 不是 key=value 的形式"),
    ("--fix: unknown knob {k}; knobs: {ks}", "--fix：未知的参数 {k}；可用的参数：{ks!l}"),
    ("--fix: engine {e} is not one of {es}", "--fix：引擎 {e} 不在 {es!l} 之中"),
    ("--fix: recompute {r} is not one of {rs}", "--fix：重计算方式 {r} 不在 {rs!l} 之中"),
    ("--fix: offload {o} is not one of none, optimizer, optimizer+params", "--fix：卸载方式 {o} 不在 none、optimizer、optimizer+params 之中"),
    ("--fix: {k:w} must be a positive integer, got {v}", "--fix：{k} 必须是正整数，实际为 {v}"),
    # mixed.py
    ("custom loop: per-rank micro-batch and accumulation (each rank its own batch, loss weighted by its token share), on {e:w}",
     "自定义训练循环：每个 rank 各自的 micro-batch 和梯度累积（每个 rank 读自己的 batch，loss 按其 token 占比加权），引擎 {e}"),
    ("mixed pool: types wait for the slowest ({g:w}); gradients synchronised over {l:w}",
     "混合集群：各类 GPU 等待最慢的那一类（{g}）；梯度经 {l} 同步"),
    # explain.py
    ("{a} is {g:d} % faster than {b}: {s:d} s less {part} per step ({x:d} GiB vs {y:d} GiB per GPU)",
     "{a} 比 {b} 快 {g} %：每步少 {s} s 的{part!t}（每卡 {x} GiB 对比 {y} GiB）"),
    ("{a} and {b} are predicted equally fast ({t:d} s per step); the first needs {x:d} GiB per GPU, the second {y:d} GiB",
     "预测 {a} 与 {b} 一样快（每步 {t} s）；前者每卡需要 {x} GiB，后者 {y} GiB"),
    ("leaving {g} out is faster: the best plan over every type ({p}) reaches {a:d} tokens/s, this one {b:d}",
     "不用 {g!l} 反而更快：用上所有类型 GPU 的最佳方案（{p}）为 {a} tokens/s，本方案为 {b} tokens/s"),
    ("leaving {g} out is faster: no plan over every type fits or beats {a:d} tokens/s",
     "不用 {g!l} 反而更快：用上所有类型 GPU 的方案要么放不下，要么不超过 {a} tokens/s"),
    ("leaving {g} out is faster: no plan over every type fits",
     "不用 {g!l} 反而更快：用上所有类型 GPU 的方案都放不下"),
    # sizing.py
    ("{m:w} fits on no pool of up to {n:d} {g:w} at global batch {gb:d} × seq {seq:d}",
     "{m} 在最多 {n} 张 {g} 的任何集群上都放不下（全局 batch {gb} × 序列长度 {seq}）"),
    ("--tokens and --days must be positive, got {a:d} and {b:d}", "--tokens 和 --days 必须为正数，实际为 {a} 和 {b}"),
    ("no pool of up to {n:d} {g:w} trains {t:d} tokens in {d:d} days ({r:d} tokens/s needed)",
     "最多 {n} 张 {g} 也无法在 {d} 天内训练 {t} tokens（需要 {r} tokens/s）"),
    # plan_cli.py
    ("--export {t} is not one of deepspeed, megatron, torchtitan, accelerate",
     "--export {t} 不在 deepspeed、megatron、torchtitan、accelerate 之中"),
    ("--export {t:w}: none of the plans found is one {e:w} can run", "--export {t}：找到的方案中没有 {e} 能运行的"),
    # compare.py
    ("gradient accumulation ×{n:d} (same global batch)", "梯度累积 ×{n}（全局 batch 不变）"),
    ("ZeRO-{n:d} (DeepSpeed)", "ZeRO-{n}（DeepSpeed）"),
    ("tensor parallel {n:d}", "张量并行 {n}"),
    ("pipeline parallel {n:d}", "流水线并行 {n}"),
    ("global batch {n:d}", "全局 batch {n}"),
]
