"""Chinese for the messages of ``--sample-lengths`` / ``--run-steps`` (trainmem/memory/run_reserve.py, its checks in
trainmem/setup.py and the run figure's lines in trainmem/memory/estimate.py; format: see
:mod:`trainmem.report.messages_zh`)."""

from __future__ import annotations

EXACT: dict[str, str] = {
    "--run-steps needs --sample-lengths (the run's sample lengths)":
        "--run-steps 需要 --sample-lengths（这次训练的样本长度）",
    "--sample-lengths with pipeline parallelism (pp > 1) is not modelled: the run replay walks one rank's "
    "micro-batches one after another":
        "--sample-lengths 与流水线并行（pp > 1）的组合未建模：整次训练的重放按顺序逐个走一个 rank 的 micro-batch",
    "run replay: the model states alone do not fit the capacity: the run runs out of memory":
        "整次训练重放：仅模型状态就放不进容量：这次训练会显存不足（OOM）",
    "run replay: the step's sizes are not quadratic in the length; walked at each distinct length":
        "整次训练重放：这一步的分配大小不是长度的二次式；对每个不同长度各走一遍",
    "peak_reserved_over_run_bytes = peak_reserved_bytes + (the run replay's peak reserved − the same replay with "
    "every micro-batch at --seq-len), at most the capacity":
        "peak_reserved_over_run_bytes = peak_reserved_bytes + （整次训练重放的 reserved 峰值 − 每个 micro-batch 都取 "
        "--seq-len 时同样重放的峰值），不超过容量",
}

PATTERNS: list[tuple[str, str]] = [
    ("sample_lengths {ref}: this server reads no local files (start it with trainmem serve --allow-paths); give "
     "MEAN:STD or MEAN:STD:MIN:MAX tokens",
     "sample_lengths {ref}：此服务不读取本地文件（要读取请用 trainmem serve --allow-paths 启动）；请给出 MEAN:STD 或 "
     "MEAN:STD:MIN:MAX（token 数）"),
    ("--sample-lengths {v}: give MEAN:STD or MEAN:STD:MIN:MAX tokens, or a file of lengths one per line",
     "--sample-lengths {v}：请给出 MEAN:STD 或 MEAN:STD:MIN:MAX（token 数），或每行一个长度的文件"),
    ("--sample-lengths {v}: the mean must be > 0 tokens", "--sample-lengths {v}：均值必须 > 0 个 token"),
    ("--sample-lengths {v}: MIN must be >= 1 and MAX >= MIN", "--sample-lengths {v}：MIN 必须 >= 1，且 MAX >= MIN"),
    ("--sample-lengths {v}: the mean is outside [MIN, MAX]", "--sample-lengths {v}：均值不在 [MIN, MAX] 之内"),
    ("--sample-lengths {p}: no such file (give MEAN:STD[:MIN:MAX] or a file of lengths)",
     "--sample-lengths {p}：文件不存在（请给出 MEAN:STD[:MIN:MAX] 或长度文件）"),
    ("--sample-lengths {p}, line {n:d}: {v} is not a positive number of tokens",
     "--sample-lengths {p} 第 {n} 行：{v} 不是正的 token 数"),
    ("--sample-lengths {p}: the file holds no lengths", "--sample-lengths {p}：文件里没有长度"),
    ("--sample-lengths {p}: fewer than --micro-batch {b:d} samples of at most --seq-len {s:d} tokens",
     "--sample-lengths {p}：不超过 --seq-len {s} 个 token 的样本不足 --micro-batch {b} 个"),
    ("--sample-lengths {p}: every sample is longer than --seq-len {s:d} (MIN {m:d})",
     "--sample-lengths {p}：每个样本都比 --seq-len {s} 长（MIN {m}）"),
    ("--sample-lengths {p}: almost every sample is longer than --seq-len {s:d}",
     "--sample-lengths {p}：几乎每个样本都比 --seq-len {s} 长"),
    ("sample lengths from {f} in its order: {k:d} of at most {s:d} tokens kept, {n:d} micro-batches of {b:d}",
     "样本长度取自 {f}（按文件顺序）：保留 {k} 个不超过 {s} 个 token 的样本，{n} 个 micro-batch，每个 {b} 条"),
    ("sample lengths log-normal with mean {m:d} and std {d:d} tokens (sigma² = ln(1 + std²/mean²)), truncated to "
     "{r}, seed {e:d}; samples over --seq-len {s:d} dropped ({x:d} of {y:d}); {n:d} micro-batches of {b:d}, each "
     "padded to its longest",
     "样本长度取对数正态分布，均值 {m}、标准差 {d} 个 token（sigma² = ln(1 + std²/mean²)），截断到 {r}，种子 {e}；"
     "超过 --seq-len {s} 的样本被丢弃（{y} 个中丢弃 {x} 个）；{n} 个 micro-batch，每个 {b} 条，各自 padding 到最长的样本"),
    ("reserved over the run: the step replayed through the caching allocator at each micro-batch's length "
     "(trainmem/trace/allocator.py rules; large pool), capacity {c:d} GiB (the GPU less the CUDA context and NCCL "
     "buffers); cached segments are released only when a cudaMalloc fails",
     "整次训练的 reserved：这一步按每个 micro-batch 的长度在 caching allocator 中重放（trainmem/trace/allocator.py "
     "的规则；large pool），容量 {c} GiB（GPU 显存减去 CUDA context 和 NCCL 缓冲区）；只有 cudaMalloc 失败时才释放"
     "缓存的 segment"),
    ("run replay: micro-batch {i:d} ({n:d} tokens) does not fit even after the cached segments are released: the "
     "run runs out of memory",
     "整次训练重放：micro-batch {i}（{n} 个 token）在释放缓存的 segment 之后仍然放不下：这次训练会显存不足（OOM）"),
]
