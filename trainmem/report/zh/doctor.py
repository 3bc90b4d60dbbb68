"""Chinese for the messages of ``trainmem/doctor`` and the ``doctor`` command (format: see
:mod:`trainmem.report.messages_zh`)."""

from __future__ import annotations

EXACT: dict[str, str] = {
    # inputs.py: what each flag expects
    "an error message or traceback": "报错信息或 traceback",
    "a per-step log (JSONL or CSV)": "逐步显存日志（JSONL 或 CSV）",
    "nvidia-smi output": "nvidia-smi 输出",
    # nvsmi.py
    "--nvidia-smi: the --query-gpu CSV needs the memory.used and memory.total columns":
        "--nvidia-smi：--query-gpu 的 CSV 需要 memory.used 和 memory.total 两列",
    "--nvidia-smi: CSV without its header line; run nvidia-smi with --format=csv (not noheader)":
        "--nvidia-smi：CSV 缺少表头行；请用 --format=csv 运行 nvidia-smi（不要加 noheader）",
    "--nvidia-smi: neither an nvidia-smi table nor --query-gpu / --query-compute-apps CSV":
        "--nvidia-smi：既不是 nvidia-smi 的表格输出，也不是 --query-gpu / --query-compute-apps 的 CSV",
    "--config: reading YAML needs PyYAML (pip install 'trainmem[yaml]')":
        "--config：读取 YAML 需要 PyYAML（pip install 'trainmem[yaml]'）",
    # doctor_cli.py
    "doctor: give the training config once, with --config or --from (the same reader)":
        "doctor：训练配置只需给一次，用 --config 或 --from（两者是同一个读取器）",
    # run.py
    "doctor: give at least one of --error, --log, --snapshot, --nvidia-smi, --config or a MODEL":
        "doctor：至少给出 --error、--log、--snapshot、--nvidia-smi、--config 或 MODEL 中的一项",
    "no MODEL given: the rules that need the estimate (duplicate copy, offload, expected bytes) are skipped":
        "没有给出 MODEL：需要估算的规则（重复副本、卸载、预期字节数）已跳过",
    "the log's last line was cut (a crash mid-write); it was skipped": "日志最后一行不完整（写入时进程崩溃），已跳过",
    # monitor.py
    "the Lightning callback needs Lightning (pip install lightning)": "Lightning 回调需要安装 Lightning（pip install lightning）",
    # rules.py: sentences without numbers
    "the model states fit: loading needs more than training holds (load in the training dtype, "
    "torch_dtype=torch.bfloat16, straight to the GPU) or another process holds memory":
        "模型状态本身放得下：加载时比训练时占得多（按训练精度加载，torch_dtype=torch.bfloat16，直接加载到 GPU），"
        "或者有别的进程占着显存",
    "no estimate: give MODEL and its flags to size the model states": "没有估算：给出 MODEL 和对应参数，才能算出模型状态的大小",
    "the traceback does not say where it was raised (give the whole traceback with --error)":
        "报错栈里看不出是在哪一步抛出的（用 --error 给出完整的 traceback）",
    "the run ended in an OOM": "这次运行最终 OOM",
    "expandable segments are already on": "expandable segments 已经开启",
    "an fp32 copy of the weights": "一份 fp32 权重副本",
    "a 16-bit copy of the weights": "一份 16 位权重副本",
    "the OOM message": "OOM 报错信息",
    "the monitor's log": "监控日志",
    "nvidia-smi's output": " nvidia-smi 的输出",
    "checked: the estimate, no rule matched": "已检查：估算，没有匹配的规则",
    "raised in the optimizer step while the estimate fits: the optimizer's states and the update's temporaries take "
    "more than estimated (check --optimizer, --precision, --zero)":
        "在优化器更新中抛出，而估算是放得下的：优化器状态和更新时的临时张量比估算的更大（检查 --optimizer、--precision、"
        "--zero）",
    "quantized base, QLoRA (--qlora: bitsandbytes load_in_4bit, LLaMA-Factory quantization_bit 4)":
        "量化基座，QLoRA（--qlora：bitsandbytes load_in_4bit，LLaMA-Factory quantization_bit 4）",
    # rules.py / fixes.py: actions
    "keep no tensors across steps: log loss.item(), store .detach().cpu() copies, keep metrics on the CPU":
        "不要跨步保留张量：日志里记录 loss.item()，要保存的张量用 .detach().cpu() 拷贝，指标放在 CPU 上累计",
    "free the duplicate weights: load in the training dtype (torch_dtype=torch.bfloat16) and del the fp32 model or "
    "state_dict; keep EMA copies on the CPU":
        "释放重复的权重：按训练精度加载（torch_dtype=torch.bfloat16），del 掉 fp32 的模型或 state_dict；EMA 副本放在 CPU 上",
    "wrap evaluation in torch.no_grad() (or torch.inference_mode())": "评估代码包在 torch.no_grad()（或 torch.inference_mode()）里",
    "free the stale copy: load the checkpoint on the CPU (torch.load(..., map_location='cpu'); transformers >= 4.27 "
    "loads optimizer.pt so, PR #22159) and del it after load_state_dict":
        "释放多余的副本：在 CPU 上加载 checkpoint（torch.load(..., map_location='cpu')；transformers >= 4.27 就是这样"
        "加载 optimizer.pt 的，PR #22159），load_state_dict 之后 del 掉它",
    "free the stale copy: build what is saved on the CPU before saving (model.to('cpu') or the state dict offloaded "
    "to the CPU; save the adapters alone, no deepcopy or merge_and_unload on the GPU)":
        "释放多余的副本：保存前在 CPU 上构建要保存的内容（model.to('cpu')，或把 state dict 卸载到 CPU；只保存 adapter，"
        "不要在 GPU 上 deepcopy 或 merge_and_unload）",
    "move batches to the GPU in the main process (pin_memory=True, .to(device, non_blocking=True)); no CUDA in "
    "DataLoader workers or collate_fn":
        "在主进程里把 batch 放到 GPU 上（pin_memory=True，.to(device, non_blocking=True)）；DataLoader worker 和 "
        "collate_fn 里不要碰 CUDA",
    "call torch.cuda.set_device(local_rank) before any CUDA work; torch.load(..., map_location='cpu')":
        "在任何 CUDA 操作之前调用 torch.cuda.set_device(local_rank)；torch.load(..., map_location='cpu')",
    "set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True": "设置 PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True",
    "free the memory held outside PyTorch's allocator (other processes: nvidia-smi --query-compute-apps)":
        "释放 PyTorch allocator 之外占用的显存（其他进程：nvidia-smi --query-compute-apps）",
    "no offload": "关闭卸载",
    # report.py
    "trainmem doctor: findings, most likely first": "trainmem doctor：诊断结果（按可能性从高到低）",
    "fixes (memory saved for this run, step-time change):": "修复建议（本次运行可省的显存，步时变化）：",
    "notes:": "说明：",
    "static overflow: the model states do not fit": "静态显存超限：模型状态放不下",
    "activation overflow: the step's dynamic memory does not fit": "激活值超限：训练步的动态显存放不下",
    "leak: memory grows from step to step": "显存泄漏：显存逐步增长",
    "fragmentation: reserved memory the allocator cannot use": "显存碎片：allocator 已保留但用不上的显存",
    "duplicate copy of the weights": "权重存在重复副本",
    "evaluation without torch.no_grad()": "评估时没有用 torch.no_grad()",
    "one rank holds more than the others": "某个 rank 的显存明显高于其他 rank",
    "the data loader holds GPU memory": "数据加载占用了显存",
    "other processes hold GPU memory": "其他进程占用了显存",
    "slow but stable: offload or ZeRO-3 communication": "显存稳定但训练慢：卸载或 ZeRO-3 通信瓶颈",
    "no problem found": "没有发现问题",
    "pinned (page-locked) host memory ran out, not the GPU's": "主机的锁页（pinned）内存用完了，不是 GPU 显存",
    "cannot tell: no cause reaches the threshold": "无法判断：没有哪个原因达到阈值",
    # rules.py: the job's own processes, pinned memory, undetermined
    "some have the job's program name: if they are its DataLoader workers, they hold CUDA contexts":
        "其中有的进程与本作业同名：如果是它的 DataLoader worker，占的是各自的 CUDA 上下文",
    "copy to the CPU without non_blocking=True (or in smaller pieces), set pin_memory=False in the DataLoader; under "
    "WSL2 pinned memory is capped: raise memory= in .wslconfig":
        "拷回 CPU 时不要用 non_blocking=True（或分小块拷贝），DataLoader 设 pin_memory=False；WSL2 下锁页内存有上限："
        "在 .wslconfig 里调大 memory=",
    "the run is under WSL2, which caps pinned host memory (CUDA on WSL: known limitations)":
        "这次运行在 WSL2 下，WSL2 限制了主机锁页内存的大小（CUDA on WSL 的已知限制）",
    "would decide: the whole traceback (--error), to see in which phase it was raised":
        "能判断的证据：完整的 traceback（--error），看出是在哪个阶段抛出的",
    "would decide: MODEL and its setup flags (--engine, --gpus, --micro-batch, --seq-len, --recompute), to size what "
    "the run should use": "能判断的证据：MODEL 和它的配置参数（--engine、--gpus、--micro-batch、--seq-len、--recompute），"
                          "用来算出这次运行应当占多少显存",
    "would decide: --log, the monitor's per-step log (a leak, the step's peak, rank by rank)":
        "能判断的证据：--log，监控器的逐步日志（是否泄漏、每步峰值、各 rank 的情况）",
    "would decide: --snapshot, torch.cuda.memory._dump_snapshot() at the OOM (what was alive, free blocks)":
        "能判断的证据：--snapshot，OOM 时的 torch.cuda.memory._dump_snapshot()（哪些张量还活着、空闲块）",
    "would decide: --nvidia-smi, the processes on the GPU": "能判断的证据：--nvidia-smi，GPU 上有哪些进程",
    "would decide: --gpu (or --gpu-memory), the GPU the run uses: the estimate is judged against it":
        "能判断的证据：--gpu（或 --gpu-memory），这次运行用的 GPU：估算要和它比较",
    # rules.py: DeepSpeed ZeRO-1/2's flat model-state buffers (STATE_BUFFERS)
    "the 16-bit flat copy of all the rank's parameters (2 B each), built at initialisation":
        "本 rank 全部参数的 16 位扁平副本（每个参数 2 B），在初始化时建立",
    "the rank's fp32 master-weight partition (4 B per parameter over the data-parallel ranks; Adam's exp_avg and "
    "exp_avg_sq are the same size)":
        "本 rank 的 fp32 主权重分区（每个参数 4 B，按数据并行 rank 数切分；Adam 的 exp_avg 和 exp_avg_sq 大小相同）",
    "the rank's 16-bit gradient partition (2 B per parameter over the data-parallel ranks)":
        "本 rank 的 16 位梯度分区（每个参数 2 B，按数据并行 rank 数切分）",
}

PATTERNS: list[tuple[str, str]] = [
    # inputs.py
    ("{flag:w} {path}: no such file", "{flag} {path}：文件不存在"),
    ("{flag:w} {path}: is a directory, not a file", "{flag} {path}：是目录，不是文件"),
    ("{flag:w} {path}: larger than {n:d} MiB", "{flag} {path}：超过 {n} MiB"),
    ("{flag:w} {path}: cannot be read ({why})", "{flag} {path}：无法读取（{why}）"),
    ("{flag:w} {path}: the file is empty", "{flag} {path}：文件是空的"),
    ("{flag:w} {path}: binary data, not {what}", "{flag} {path}：是二进制数据，不是{what!t}"),
    ("{flag:w} {path}: not UTF-8 text, not {what}", "{flag} {path}：不是 UTF-8 文本，不是{what!t}"),
    # steplog.py
    ("--log {name} line {i:d}", "--log {name} 第 {i} 行"),
    ("{where}: {what:w} is not a number of bytes", "{where!t}：{what} 不是字节数"),
    ("{where}: {what:w} is out of range", "{where!t}：{what} 超出范围"),
    ("{where}: not a step record (needs step and allocated_bytes)", "{where!t}：不是逐步记录（需要 step 和 allocated_bytes）"),
    ("{where}: step_seconds is not a number", "{where!t}：step_seconds 不是数字"),
    ("--log {name}: line {i:d} is not JSON", "--log {name}：第 {i} 行不是 JSON"),
    ("--log {name}: line {i:d} is not a JSON object", "--log {name}：第 {i} 行不是 JSON 对象"),
    ("--log {name}: a CSV log needs the columns step, allocated_bytes, reserved_bytes (found: {found})",
     "--log {name}：CSV 日志需要 step、allocated_bytes、reserved_bytes 这几列（实际为：{found}）"),
    ("--log {name}: no step records", "--log {name}：没有逐步记录"),
    ("--log {name}: not a readable CSV ({why})", "--log {name}：无法读取的 CSV（{why}）"),
    # snapshot.py
    ("--snapshot {name}: not a pickle (expected torch.cuda.memory._dump_snapshot output)",
     "--snapshot {name}：不是 pickle 文件（应为 torch.cuda.memory._dump_snapshot 的输出）"),
    ("--snapshot {name}: the pickle holds a Python object ({obj}), not a memory snapshot; refused (only plain data "
     "is read)", "--snapshot {name}：pickle 里包含 Python 对象（{obj}），不是显存快照；已拒绝读取（只读取纯数据）"),
    ("--snapshot {name}: not a readable pickle ({why})", "--snapshot {name}：无法读取的 pickle（{why}）"),
    ("--snapshot {name}: a truncated or corrupt pickle", "--snapshot {name}：pickle 不完整或已损坏"),
    ("--snapshot {name}: not a torch.cuda.memory._snapshot() dict (no segments list)",
     "--snapshot {name}：不是 torch.cuda.memory._snapshot() 的 dict（没有 segments 列表）"),
    ("--snapshot {name}: a segment without total_size and blocks (not a memory snapshot)",
     "--snapshot {name}：有 segment 缺少 total_size 和 blocks（不是显存快照）"),
    # run.py
    ("--error {name}: no CUDA out-of-memory error in it (its error: `{err}`); this is not a memory problem",
     "--error {name}：里面没有 CUDA 显存不足（OOM）的报错（它的报错是：`{err}`）；这不是显存问题"),
    ("GPU memory {x} from {src} (give --gpu-memory to change it)", "GPU 显存 {x} 取自{src!t}（可用 --gpu-memory 修改）"),
    # rules.py: where it was raised
    ("raised in the forward of {m} ({loc})", "在 {m} 的前向传播中抛出（{loc}）"),
    ("raised in the forward ({loc})", "在前向传播中抛出（{loc}）"),
    ("raised while loading the model ({loc})", "在加载模型时抛出（{loc}）"),
    ("raised in the loss ({loc})", "在计算 loss 时抛出（{loc}）"),
    ("raised in the backward ({loc})", "在反向传播中抛出（{loc}）"),
    ("raised in the optimizer step ({loc})", "在优化器更新中抛出（{loc}）"),
    ("raised in the DataLoader ({loc}): batches are put on the GPU in a loader thread or worker",
     "在 DataLoader 中抛出（{loc}）：batch 是在加载线程或 worker 里放到 GPU 上的"),
    ("raised in the DataLoader ({loc})", "在 DataLoader 中抛出（{loc}）"),
    ("raised in an evaluation forward ({loc}) with no no_grad/inference_mode decorator on the stack",
     "在评估的前向传播中抛出（{loc}），调用栈上没有 no_grad/inference_mode 装饰器"),
    # rules.py: the OOM's numbers
    ("the OOM asked for {t} with {f} free of {c}", "OOM 时申请 {t}，GPU 共 {c}，空闲 {f}"),
    ("the OOM asked for {t}", "OOM 时申请 {t}"),
    ("PyTorch held {a} allocated and {u} reserved but unallocated", "PyTorch 已分配 {a}，另有 {u} 已保留但未分配"),
    ("the driver reported {f} free, more than the {t} requested: the memory was taken meanwhile (another process) "
     "or this process may use less (a memory fraction, MIG)",
     "驱动报告空闲 {f}，比申请的 {t} 还多：这部分显存在此期间被占用了（其他进程），或者本进程能用的更少（memory "
     "fraction、MIG）"),
    ("one request of {t} is {pct:w} of the GPU: check the tensor shapes (attention scores or logits of a long "
     "sequence)", "单次申请 {t}，占 GPU 的 {pct}：检查张量形状（长序列的注意力分数或 logits）"),
    # static / activation overflow
    ("estimate: model states (parameters, gradients, optimizer states) {s} between steps against {u} usable",
     "估算：模型状态（参数、梯度、优化器状态）在步间占 {s}，而可用显存只有 {u}"),
    ("estimate: model states {s} between steps", "估算：模型状态在步间占 {s}"),
    ("no sharding or offload option applies to the {e:w} engine on {n:d} GPU (trainmem compare)",
     "{n} 张 GPU 上的 {e} 引擎没有可用的切分或卸载方案（trainmem compare）"),
    ("the {t} request is {what}: a flat model-state buffer of DeepSpeed ZeRO-{z:d} (stage_1_and_2.py), static memory, "
     "not activations nor a shape bug",
     "申请的 {t} 是{what!t}：DeepSpeed ZeRO-{z} 的扁平模型状态缓冲区（stage_1_and_2.py），属于静态显存，不是激活值，"
     "也不是形状 bug"),
    ("a single {t} tensor is larger than the whole GPU: a shape bug, not a memory setting (run micro-batch 1 with a "
     "short sequence first)", "单个 {t} 的张量比整张 GPU 还大：这是形状 bug，不是显存配置问题（先用 micro-batch 1、"
     "短序列把流程跑通）"),
    ("estimate ({e:w}, {p:w}, micro-batch {mb:d} × {seq:d} tokens, {n:d} GPU): peak {pk} in {ph}, model states {s}, "
     "activations {a} at the peak on a {c} GPU",
     "估算（{e}，{p}，micro-batch {mb} × {seq} token，{n} 张 GPU）：峰值 {pk}（{ph!t}），模型状态 {s}，峰值时激活值 "
     "{a}，GPU 显存 {c}"),
    ("estimate ({e:w}, {p:w}, micro-batch {mb:d} × {seq:d} tokens, {n:d} GPU): peak {pk} in {ph}, model states {s}, "
     "activations {a} at the peak",
     "估算（{e}，{p}，micro-batch {mb} × {seq} token，{n} 张 GPU）：峰值 {pk}（{ph!t}），模型状态 {s}，峰值时激活值 "
     "{a}"),
    ("estimate ({e:w}, {p:w}, micro-batch {mb:d} × {seq:d} tokens, {n:d} GPU): peak {pk} in {ph}, model states {s}, "
     "activations {a} at the peak on a GPU not given (--gpu)",
     "估算（{e}，{p}，micro-batch {mb} × {seq} token，{n} 张 GPU）：峰值 {pk}（{ph!t}），模型状态 {s}，峰值时激活值 "
     "{a}，GPU 未给出（--gpu）"),
    ("the GPU is not given and the evidence does not show it: the estimate ({x} with CUDA context and NCCL) is not "
     "judged against the default {gpu:w}, --gpu decides whether it fits",
     "没有给出 GPU，证据里也看不出是哪款：估算（含 CUDA 上下文和 NCCL 共 {x}）不拿默认的 {gpu} 来判断放不放得下；"
     "由 --gpu 决定"),
    ("the GPU is not given (--gpu): the estimate ({d} with CUDA context and NCCL) is above {pct:w} of the largest "
     "catalog GPU's {c}: it overflows on any one GPU",
     "没有给出 GPU（--gpu）：估算（含 CUDA 上下文和 NCCL 共 {d}）超过目录里最大一款 GPU 显存 {c} 的 {pct}：在任何一张 "
     "GPU 上都放不下"),
    ("predicted, not observed (no OOM given): the estimate ({d} with CUDA context and NCCL) does not fit the {c} GPU",
     "是预测，不是观测（没有给出 OOM）：估算（含 CUDA 上下文和 NCCL 共 {d}）超出 {c} 的 GPU"),
    ("predicted, not observed (no OOM given): the estimate ({d} with CUDA context and NCCL) is within {pct:w} of the "
     "{c} GPU", "是预测，不是观测（没有给出 OOM）：估算（含 CUDA 上下文和 NCCL 共 {d}）与 {c} 的 GPU 只差不到 {pct}"),
    ("predicted, not observed (no OOM given): the estimate ({d} with CUDA context and NCCL) does not fit the default "
     "{gpu:w} ({c})", "是预测，不是观测（没有给出 OOM）：估算（含 CUDA 上下文和 NCCL 共 {d}）超出默认的 {gpu}（{c}）"),
    ("predicted, not observed (no OOM given): the estimate ({d} with CUDA context and NCCL) is within {pct:w} of the "
     "default {gpu:w} ({c})",
     "是预测，不是观测（没有给出 OOM）：估算（含 CUDA 上下文和 NCCL 共 {d}）与默认的 {gpu}（{c}）只差不到 {pct}"),
    ("at the estimate's peak ({ph}): model states {s}, activations {a}, temporaries {t}: the model states and the "
     "update overflow", "估算的峰值处（{ph!t}）：模型状态 {s}，激活值 {a}，临时张量 {t}：放不下的是模型状态和更新"),
    ("at the estimate's peak ({ph}): model states {s}, activations {a}, temporaries {t}: the step's dynamic memory "
     "overflows", "估算的峰值处（{ph!t}）：模型状态 {s}，激活值 {a}，临时张量 {t}：放不下的是训练步的动态显存"),
    ("the estimate fits ({x} with CUDA context and NCCL): the run uses more than its flags describe (check "
     "--micro-batch, --seq-len, --recompute)",
     "估算是放得下的（含 CUDA 上下文和 NCCL 共 {x}）：实际运行比这些参数描述的用得多（检查 --micro-batch、--seq-len、"
     "--recompute）"),
    # leak
    ("allocated after each step grows by {s}/step over steps {a:d}–{b:d} on rank {r:d} (Theil–Sen; Mann–Kendall p = "
     "{p:w}), {g} in all",
     "每步结束时的已分配显存以每步 {s} 的速度增长（rank {r}，第 {a}–{b} 步；Theil–Sen 斜率，Mann–Kendall p = {p}），"
     "共增长 {g}"),
    ("at this rate the {c} GPU is full in about {n:d} more steps", "按这个速度，{c} 的 GPU 大约再过 {n} 步就会占满"),
    ("the estimate keeps {s} between steps, flat", "估算的步间显存为 {s}，应当保持不变"),
    # fragmentation
    ("{u} reserved but unallocated ≥ the {t} requested: the cache held the bytes, not in one block",
     "已保留但未分配的显存 {u} ≥ 申请的 {t}：缓存里的字节数够，但不是连续的一整块"),
    ("{u} reserved but unallocated, {pct:w} of the GPU", "已保留但未分配 {u}，占 GPU 的 {pct}"),
    ("per-step log: reserved exceeds the highest step peak allocated so far by {o} (estimate {e})",
     "逐步日志：reserved 比此前各步最高的峰值已分配多出 {o}（估算 {e}）"),
    ("snapshot: {s} free inside partly used segments of {r} reserved; largest free block {l}, smaller than the {q} "
     "requested", "快照：已保留的 {r} 中，部分占用的 segment 里还空着 {s}；最大空闲块 {l}，小于申请的 {q}"),
    ("the estimate expects {e} of allocator slack at the peak", "估算认为峰值时 allocator 的富余为 {e}"),
    # duplicate copy
    ("between steps {b} allocated against {s} estimated: {x} more, {k:d} B × {p:d} parameters ({what})",
     "步间已分配 {b}，估算为 {s}：多出 {x}，相当于 {k} B × {p} 个参数（{what!t}）"),
    # evaluation
    ("evaluation steps peak {e} above the between-step baseline, {pct:w} of the training step's {t}: activations are "
     "kept for a backward that never comes",
     "评估步的峰值比步间基线高 {e}，是训练步（{t}）的 {pct}：激活值被保留下来，等着一个永远不会执行的反向传播"),
    ("snapshot: {a} of activations alive under an evaluation function", "快照：评估函数下仍存活的激活值有 {a}"),
    # data loader
    ("snapshot: {b} allocated from torch.utils.data frames", "快照：有 {b} 是在 torch.utils.data 的调用栈中分配的"),
    # rank imbalance
    ("GPU {g:d} holds {n:d} processes of other ranks ({t} in all, {e} each): each rank made a CUDA context on GPU "
     "{g2:d}", "GPU {g} 上有 {n} 个其他 rank 的进程（共 {t}，每个 {e}）：每个 rank 都在 GPU {g2} 上建了 CUDA 上下文"),
    ("GPU {g:d} holds {n:d} more processes of the same program ({e} each, {t} in all): CUDA contexts of the other "
     "ranks (or of DataLoader workers)",
     "GPU {g} 上还有 {n} 个同一程序的进程（每个 {e}，共 {t}）：是其他 rank（或 DataLoader worker）的 CUDA 上下文"),
    ("rank {r:d} peaks at {x}, the others {y} (median): {d} more", "rank {r} 的峰值为 {x}，其余 rank 为 {y}（中位数）：多出 {d}"),
    ("GPU {g:d} uses {x}, the others {y} (median): {d} more", "GPU {g} 占用 {x}，其余 GPU 为 {y}（中位数）：多出 {d}"),
    ("with pp={pp:d} the pipeline stages hold different activations (1F1B): some spread is expected",
     "pp={pp} 时各流水线阶段保存的激活值不同（1F1B）：有一定差异是正常的"),
    ("even out rank {r:d}: check its data (sampler, sequence lengths, per-rank caches) and its parallel layout",
     "让 rank {r} 与其他 rank 持平：检查它的数据（sampler、序列长度、每个 rank 的缓存）和并行布局"),
    ("even out GPU {g:d}: check its data (sampler, sequence lengths, per-rank caches) and its parallel layout",
     "让 GPU {g} 与其他 GPU 持平：检查它的数据（sampler、序列长度、每个 rank 的缓存）和并行布局"),
    # other processes
    ("other processes hold {t} of the GPU, enough for the {r} requested", "其他进程占用了 GPU 的 {t}，足够放下申请的 {r}"),
    ("other processes hold {t} of the GPU", "其他进程占用了 GPU 的 {t}"),
    ("{o} of the GPU is used outside this process's PyTorch allocator (about {e} expected for the CUDA context and "
     "NCCL)", "GPU 上有 {o} 不在本进程的 PyTorch allocator 里（CUDA 上下文和 NCCL 预计约 {e}）"),
    ("nvidia-smi: besides the largest process, {procs} (if they are your DataLoader workers, they hold CUDA contexts)",
     "nvidia-smi：除了占用最多的进程，还有 {procs}（如果它们是你自己的 DataLoader worker，就是它们各自的 CUDA 上下文）"),
    ("nvidia-smi: on the job's GPUs besides its own processes, {procs}",
     "nvidia-smi：在本作业的 GPU 上，除了它自己的进程，还有 {procs}"),
    ("the OOM message lists {n:d} processes of this job's other ranks on GPU {g:d} ({t} in all): CUDA contexts they "
     "made on it, not another program",
     "OOM 报错列出了 GPU {g} 上本作业其他 rank 的 {n} 个进程（共 {t}）：是它们在这张卡上建的 CUDA 上下文，不是别的程序"),
    ("the OOM message lists {n:d} processes of this job's other ranks on GPU ({t} in all): CUDA contexts they made on "
     "it, not another program",
     "OOM 报错列出了这张 GPU 上本作业其他 rank 的 {n} 个进程（共 {t}）：是它们在这张卡上建的 CUDA 上下文，不是别的程序"),
    ("without them the {t} requested would have fit", "没有它们，申请的 {t} 本来放得下"),
    ("check process {pid:d} ({name}) on GPU {g:d}: stop it unless it is this job's own (a DataLoader worker)",
     "检查进程 {pid}（{name}，GPU {g}）：如果不是本作业自己的（DataLoader worker），就结束它"),
    ("check process {pid:d} ({name}): stop it unless it is this job's own (a DataLoader worker)",
     "检查进程 {pid}（{name}）：如果不是本作业自己的（DataLoader worker），就结束它"),
    ("the CUDA error comes from a copy into pinned host memory ({code}): the host's page-locked memory ran out, not "
     "the GPU's", "这个 CUDA 错误来自一次拷入主机锁页内存的操作（{code}）：用完的是主机的锁页内存，不是 GPU 显存"),
    ("the estimate peaks in the optimizer step at {p} ({d} with CUDA context and NCCL) on the {c} GPU: the model "
     "states and the update's temporaries overflow, not the activations",
     "估算的峰值在优化器更新阶段，为 {p}（含 CUDA 上下文和 NCCL 共 {d}），GPU 显存 {c}：放不下的是模型状态和更新时的"
     "临时张量，不是激活值"),
    ("the estimate ({d} with CUDA context and NCCL) is within {pct:w} of the {c} GPU: inside the estimator's error "
     "on published measurements (more often low than high, docs/published.md), an overflow is expected",
     "估算（含 CUDA 上下文和 NCCL 共 {d}）与 {c} 的 GPU 只差不到 {pct}：这在估算对公开实测数据的误差范围之内（偏低比"
     "偏高更常见，docs/published.md），预计会超出显存"),
    ("PyTorch held {a} allocated, {x} over the estimate's peak of {p}: the step holds more dynamic memory than its "
     "flags describe (sequences longer than --seq-len, a larger micro-batch); the model states do not change with "
     "the data",
     "PyTorch 已分配 {a}，比估算的峰值 {p} 多出 {x}：这一步的动态显存比参数描述的更多（序列比 --seq-len 长，或 "
     "micro-batch 更大）；模型状态不会随数据变化"),
    # --config read by the --from reader (doctor/launch.py): its message, said of --config (also "--config: why")
    ("--config {p:p}: {why}; give {flag:w} to choose", "--config {p}：{why!t}；请给出 {flag} 来选择"),
    ("--config {p:p}: {why}", "--config {p}：{why!t}"),
    ("--config {p}: {why}", "--config {p}：{why!t}"),
    # stale copies at save / resume
    ("raised while resuming from a checkpoint ({loc}): the checkpoint's tensors are loaded onto the GPU next to the "
     "live ones", "在从 checkpoint 恢复训练时抛出（{loc}）：checkpoint 里的张量被加载到了 GPU 上，和正在用的那份并存"),
    ("raised while saving a checkpoint ({loc}): the copy made for saving (a state dict gathered on the GPU, a "
     "deepcopy or merged model) sits next to the live weights",
     "在保存 checkpoint 时抛出（{loc}）：为保存而做的副本（在 GPU 上汇总的 state dict、deepcopy 或合并后的模型）和"
     "正在用的权重并存"),
    ("estimate: the optimizer states and master weights take {b}; training itself fits in {d}",
     "估算：优化器状态和主权重占 {b}；训练本身 {d} 就放得下"),
    ("estimate: the optimizer states and master weights take {b}", "估算：优化器状态和主权重占 {b}"),
    ("estimate: a copy of the weights takes {b}; training itself fits in {d}", "估算：一份权重副本占 {b}；训练本身 {d} 就放得下"),
    ("estimate: a copy of the weights takes {b}", "估算：一份权重副本占 {b}"),
    # fixes compare has no row for
    ("shorter or truncated sequences (--seq-len {n:d}: cutoff_len / max_seq_length / max_length; truncate or drop "
     "the longest samples)",
     "更短或截断的序列（--seq-len {n}：cutoff_len / max_seq_length / max_length；截断或丢弃最长的样本）"),
    ("a bigger GPU: {g:w} ({m}), the smallest in the catalog that fits this setup unchanged (--gpu {g2:w}); step "
     "time not compared: the run's GPU type is not known",
     "换更大的 GPU：{g}（{m}），目录里在配置不变时放得下的最小一款（--gpu {g2}）；未比较步时：不知道这次运行用的是哪款 GPU"),
    ("a bigger GPU: {g:w} ({m}), the smallest in the catalog that fits this setup unchanged (--gpu {g2:w})",
     "换更大的 GPU：{g}（{m}），目录里在配置不变时放得下的最小一款（--gpu {g2}）"),
    ("more GPUs: {n:d} × {g:w} with the model states sharded by {what}",
     "增加 GPU：{n} 张 {g}，模型状态由 {what} 分片"),
    ("no cause reaches likelihood {x:w}", "没有哪个原因的可能性达到 {x}"),
    ("candidates: {c}", "候选原因：{c!l}"),
    ("stop process {pid:d} ({name}) on GPU {g:d}", "结束进程 {pid}（{name}，GPU {g}）"),
    ("stop process {pid:d} on GPU {g:d}", "结束进程 {pid}（GPU {g}）"),
    ("stop process {pid:d} ({name})", "结束进程 {pid}（{name}）"),
    ("stop process {pid:d}", "结束进程 {pid}"),
    # offload
    ("memory stable at {b} over {n:d} steps (no trend)", "显存稳定在 {b}，共 {n} 步（没有增长趋势）"),
    ("performance model: {t:d} s per step, of which {o:d} s offload traffic and {d:d} s data-parallel communication "
     "({pct:w})", "性能模型：每步 {t} 秒，其中卸载传输 {o} 秒、数据并行通信 {d} 秒（占 {pct}）"),
    ("observed median step {q:d} s", "实测每步中位数 {q} 秒"),
    # none
    ("checked: {what}, no rule matched", "已检查：{what!l}，没有匹配的规则"),
    ("--error holds no CUDA out-of-memory error (its error: `{err}`): not a memory problem",
     "--error 里没有 CUDA 显存不足（OOM）的报错（它的报错是：`{err}`）：不是显存问题"),
    ("estimate: peak {p}, {d} with CUDA context and NCCL, on {c}", "估算：峰值 {p}，含 CUDA 上下文和 NCCL 共 {d}，GPU 显存 {c}"),
    ("per-step log: {n:d} records on {r:d} rank(s), no trend, between steps {b}",
     "逐步日志：{n} 条记录，{r} 个 rank，没有增长趋势，步间显存 {b}"),
    # fixes from trainmem compare: the technique, then the flags
    ("{tech} (--{flags})", "{tech!t}（--{flags}）"),
    # report.py
    ("{i:d}. {cause:w} — {title} (likelihood {x:d})", "{i}. {cause} — {title!t}（可能性 {x}）"),
    ("precision {p:w}: the {gpu:w} has no bfloat16, so the {e:w} engine runs its fp16 recipe (give --precision to "
     "change it)", "精度 {p}：{gpu} 不支持 bfloat16，因此 {e} 引擎使用它的 fp16 方案（可用 --precision 修改）"),
    ("--precision {p:w} on the {e:w} engine is its {m:w} recipe (16-bit parameters, fp32 master weights)",
     "{e} 引擎上的 --precision {p} 就是它的 {m} 方案（16 位参数，fp32 主权重）"),
    ("expected {e}, observed {o}", "预期 {e}，实测 {o}"),
    ("{a}: saves {s}, step time {t} %, fits", "{a}：省 {s}，步时 {t} %，放得下"),
    ("{a}: uses {s} more, step time {t} %, fits", "{a}：多用 {s}，步时 {t} %，放得下"),
    ("{a}: saves {s}, step time {t} %", "{a}：省 {s}，步时 {t} %"),
    ("{a}: step time {t} %, fits", "{a}：步时 {t} %，放得下"),
    ("{a}: step time {t} %", "{a}：步时 {t} %"),
    ("{a}: uses {s} more, step time {t} %", "{a}：多用 {s}，步时 {t} %"),
]
