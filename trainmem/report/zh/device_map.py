"""Chinese for the messages of ``--device-map auto`` (trainmem/memory/device_map.py) and ``--attn flex``
(trainmem/memory/flex_attention.py), and their checks in trainmem/setup.py (format: see
:mod:`trainmem.report.messages_zh`)."""

from __future__ import annotations

EXACT: dict[str, str] = {
    "--device-map auto is HF's naive model parallelism in one process: it needs --engine torch without "
    "dp/tp/pp/cp/ep (--gpus N is the GPUs the layers are split over)":
        "--device-map auto 是 HF 在单个进程内的朴素模型并行：需要 --engine torch，且不带 dp/tp/pp/cp/ep"
        "（--gpus N 是切分各层所用的 GPU 数）",
    "--device-map auto needs --gpus >= 2 (the GPUs the layers are split over)":
        "--device-map auto 需要 --gpus >= 2（切分各层所用的 GPU 数）",
    "--device-map auto with --offload-activations, --optimizer-in-backward or --qlora-impl torchao is not "
    "modelled": "--device-map auto 与 --offload-activations、--optimizer-in-backward 或 --qlora-impl torchao 的组合未建模",
    "--device-map auto with tied word embeddings is not modelled (accelerate keeps the tied head on the "
    "embedding's GPU)": "--device-map auto 与共享词嵌入（tied word embeddings）的组合未建模（accelerate 把共享的输出层"
        "放在词嵌入所在的 GPU 上）",
    "--device-map auto: the embedding is not on GPU 0; not modelled": "--device-map auto：词嵌入不在 GPU 0 上；未建模",
    "--device-map auto: the head is not on the last GPU the layers reach; not modelled":
        "--device-map auto：输出层不在各层所到的最后一块 GPU 上；未建模",
    "--attn flex with megatron or --cp > 1 is not modelled (FlexAttention's context parallelism all-gathers "
    "k/v: not the SDPA ring modelled for --cp)": "--attn flex 与 megatron 或 --cp > 1 的组合未建模（FlexAttention 的"
        "上下文并行是 all-gather k/v，不是 --cp 所建模的 SDPA ring）",
    "attn flex: FlexAttention under torch.compile keeps q, k, v, output and logsumexp as the fused SDPA kernels "
    "(AOTAutograd keeps what flex_attention_backward reads), plus one causal block mask per batch (int32 block "
    "counts and indices of 128x128 blocks, kv and q sides, shared by every layer)":
        "attn flex：torch.compile 下的 FlexAttention 与融合 SDPA kernel 一样保存 q、k、v、输出和 logsumexp"
        "（AOTAutograd 只保留 flex_attention_backward 要读的张量），另加每个 batch 一份 causal block mask"
        "（128x128 块的 int32 块数与索引，kv 侧和 q 侧各一份，所有层共用）",
    # trace/support.py
    "--device-map auto (one process over several GPUs; the tracer runs one device)":
        "--device-map auto（一个进程跨多块 GPU；tracer 只模拟一个设备）",
    "--attn flex (torch 2.13 has no FlexAttention backward on CPU)":
        "--attn flex（torch 2.13 在 CPU 上没有 FlexAttention 的反向传播）",
}

PATTERNS: list[tuple[str, str]] = [
    ("--device-map auto: the model does not fit on {n:d} GPUs; accelerate would offload layers to the CPU, which "
     "is not modelled", "--device-map auto：模型放不进 {n} 块 GPU；accelerate 会把部分层卸载到 CPU，未建模"),
    ("device_map auto: layers {l:w} over GPUs 0..{k:d} (transformers get_balanced_memory + accelerate "
     "infer_auto_device_map), embedding on GPU 0, head and loss on GPU {h:d}, logits copied back to GPU 0 "
     "(AlignDevicesHook io_same_device); one GPU busy at a time, no DDP; the figures are GPU {g:d}'s, the most "
     "loaded", "device_map auto：各层按 {l} 分到 GPU 0..{k}（transformers get_balanced_memory + accelerate "
     "infer_auto_device_map），词嵌入在 GPU 0，输出层和损失在 GPU {h}，logits 复制回 GPU 0（AlignDevicesHook "
     "io_same_device）；同一时刻只有一块 GPU 在算，没有 DDP；显示的是最满的 GPU {g} 的数字"),
]
