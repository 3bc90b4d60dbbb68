"""Chinese for the messages of ``trainmem/hardware``… (format: see :mod:`trainmem.report.messages_zh`)."""

from __future__ import annotations

EXACT: dict[str, str] = {
    # hardware/cluster_spec.py
    "cluster: empty spec; write e.g. 64xH100-SXM-80G, 8xA100-SXM-80G,4xRTX-3090-24G or the path of a .toml or "
    ".yaml file":
        "集群：描述为空；请写成 64xH100-SXM-80G、8xA100-SXM-80G,4xRTX-3090-24G 这样的形式，"
        "或给出一个 .toml / .yaml 文件的路径",
    "the GPU count": "GPU 数量",
    "the node count": "节点数",
    "GPUs per node": "每节点 GPU 数",
    "node": "node（每节点 GPU 数）",
    # hardware/cluster_file.py
    "cluster: reading .toml files needs Python 3.11 or the tomli package (pip install tomli)":
        "集群：读取 .toml 文件需要 Python 3.11 或 tomli 包（pip install tomli）",
    "cluster: reading .yaml files needs PyYAML (pip install pyyaml)":
        "集群：读取 .yaml 文件需要 PyYAML（pip install pyyaml）",
}

PATTERNS: list[tuple[str, str]] = [
    # ------------------------------------------------------------------ hardware/links.py
    ("link: unknown link {name}; did you mean {near}?", "链路：未知链路 {name}；你是不是想用 {near!l}？"),
    ("link: unknown link {name} (known: {known})", "链路：未知链路 {name}（可用的有：{known!l}）"),
    ("link: {name}: -sharedN takes N from 1 to {n:d} GPUs per NIC",
     "链路：{name}：-sharedN 中的 N（共用一块网卡的 GPU 数）应为 1 到 {n}"),
    # ------------------------------------------------------------------ hardware/cluster_spec.py
    ("cluster: the spec has {n:d} characters; at most {m:d}", "集群：描述有 {n} 个字符，最多 {m} 个"),
    ("cluster: unbalanced brackets in {spec}", "集群：{spec} 中的方括号不配对"),
    ("cluster: an empty group in {spec} (two commas in a row?)", "集群：{spec} 中有一个空分组（是不是连写了两个逗号？）"),
    ("cluster: {n:d} groups; at most {m:d}", "集群：共 {n} 个分组，最多 {m} 个"),
    ("cluster: {where} is not COUNTxGPU (e.g. 64xH100-SXM-80G, or 4x8xH100 for 4 nodes of 8 GPUs)",
     "集群：{where} 不是“数量xGPU”的形式（例如 64xH100-SXM-80G；4x8xH100 表示 4 个节点、每节点 8 张卡）"),
    ("cluster: {where}: write the settings in [...] as key=value, not {item}",
     "集群：{where}：[...] 中的设置应写成 key=value，而不是 {item}"),
    ("cluster: {where}: unknown setting {key} in [...]; use node, intra, inter, host, host_memory",
     "集群：{where}：[...] 中有未知设置 {key}；可用的是 node、intra、inter、host、host_memory"),
    ("cluster: {where}: host_memory: {why}", "集群：{where}：host_memory：{why!t}"),
    ("cluster: {where}: host_memory must be a size such as 1TiB or 512GiB, not {v}",
     "集群：{where}：host_memory 应为内存大小，例如 1TiB 或 512GiB，而不是 {v}"),
    ("cluster: {where}: {key:w} is given twice", "集群：{where}：{key} 给了两次"),
    ("cluster: {where}: {what} must be a whole number from 1 to {m:d}, not {value}",
     "集群：{where}：{what!t}应为 1 到 {m} 之间的整数，而不是 {value}"),
    ("cluster: {where}: unknown GPU {g}; did you mean {near}? (trainmem gpus lists them)",
     "集群：{where}：未知 GPU {g}；你是不是想用 {near!l}？（trainmem gpus 会列出全部）"),
    ("cluster: {where}: unknown GPU {g} (trainmem gpus lists them)",
     "集群：{where}：未知 GPU {g}（trainmem gpus 会列出全部）"),
    ("cluster: {where}: {n:d} GPUs; at most {m:d}", "集群：{where}：共 {n} 张 GPU，最多 {m} 张"),
    ("cluster: {n:d} GPUs in all; at most {m:d}", "集群：总共 {n} 张 GPU，最多 {m} 张"),
    ("cluster: {gpu} is listed twice ({a} and {b}); give each GPU type once",
     "集群：{gpu} 出现了两次（{a} 和 {b}）；每种 GPU 只能写一次，请合并成一个分组"),
    ("cluster: {gpu} has no catalog default for its {level:w} link; name one: [{setting}=NAME]",
     "集群：GPU 目录没有给 {gpu} 的 {level} 链路提供默认值；请指定一个：[{setting}=NAME]"),
    # notes (Cluster.notes, shown with the plan's assumptions)
    ("between the GPU types: {link}, the slowest of the groups' inter-node links (no cross link given)",
     "不同 GPU 类型之间：按各分组节点间链路中最慢的 {link} 计算（未给出 cross 链路）"),
    ("{gpu}: {n:d} GPUs per node, {intra} inside a node, {inter} between nodes, {host} to the host "
     "(catalog defaults)",
     "{gpu}：每节点 {n} 张卡，节点内 {intra}，节点间 {inter}，与主机之间 {host}（GPU 目录默认值）"),
    ("{gpu}: {n:d} GPUs per node (catalog default)", "{gpu}：每节点 {n} 张卡（GPU 目录默认值）"),
    ("{gpu:w}: {link:w} inside a node (catalog default)", "{gpu}：节点内链路为 {link}（GPU 目录默认值）"),
    ("{gpu:w}: {link:w} between nodes (catalog default)", "{gpu}：节点间链路为 {link}（GPU 目录默认值）"),
    ("{gpu:w}: {link:w} to the host (catalog default)", "{gpu}：与主机之间的链路为 {link}（GPU 目录默认值）"),
    ("{gpu}: {n:d} GPUs in nodes of {per:d}: the last node holds {r:d}",
     "{gpu}：{n} 张卡按每节点 {per} 张放置，最后一个节点只有 {r} 张"),
    ("{link}: one NIC shared by {n:d} GPUs, {g:d} GB/s each way per GPU",
     "{link}：{n} 张 GPU 共用一块网卡，每张 GPU 单向 {g} GB/s"),
    ("{link:w}: {fields} assumed, not measured (see its links.json note)",
     "{link}：{fields!l} 为假设值，并非实测（见 links.json 中该行的说明）"),
    ("{link}: efficiency 1: its gbps is taken as the achieved rate (none given)",
     "{link}：未给出 efficiency，取 1，即把给出的 gbps 当作实际可达带宽"),
    # Cluster.label
    ("{n:d}× {gpu} (1 node)", "{n}× {gpu}（1 个节点）"),
    ("{n:d}× {gpu} ({nodes:d} nodes of {per:d}, the last with {r:d})",
     "{n}× {gpu}（{nodes} 个节点，每节点 {per} 张，最后一个节点 {r} 张）"),
    ("{n:d}× {gpu} ({nodes:d} nodes × {per:d})", "{n}× {gpu}（{nodes} 个节点 × 每节点 {per} 张）"),
    # ------------------------------------------------------------------ hardware/cluster_file.py
    ("cluster: {spec} is neither COUNTxGPU nor a .toml or .yaml file",
     "集群：{spec} 既不是“数量xGPU”的形式，也不是 .toml 或 .yaml 文件"),
    ("cluster: file {path} not found", "集群：找不到文件 {path}"),
    ("cluster: {path} is not a file", "集群：{path} 不是文件"),
    ("cluster: {path} has {n:d} bytes; at most {m:d}", "集群：{path} 有 {n} 字节，最多 {m} 字节"),
    ("cluster: cannot read {path}: {err}", "集群：无法读取 {path}：{err!t}"),
    # the parser's own reason stays verbatim, as code
    ("cluster: {path} is not valid TOML: {err}", "集群：{path} 不是合法的 TOML（解析器原文：`{err}`）"),
    ("cluster: {path} is not valid YAML: {err}", "集群：{path} 不是合法的 YAML（解析器原文：`{err}`）"),
    ("cluster: {where}: the file must hold a table with groups (and optionally cross)",
     "集群：{where}：文件内容应是一个包含 groups（以及可选的 cross）的表"),
    ("cluster: {where}: no groups; write [[groups]] tables (TOML) or a groups: list (YAML), each with gpu and count",
     "集群：{where}：没有分组；请写 [[groups]] 表（TOML）或 YAML 的 groups 列表，每项包含 gpu 和 count"),
    ("cluster: {where} must be a table (gpu, count, ...), not {v}",
     "集群：{where} 应为一个表（含 gpu、count 等），而不是 {v}"),
    ("cluster: {where}: gpu is missing", "集群：{where}：缺少 gpu"),
    ("cluster: {where}: give either count (GPUs) or nodes (nodes of gpus_per_node GPUs)",
     "集群：{where}：count（GPU 数）和 nodes（节点数，每节点 gpus_per_node 张）必须且只能给一个"),
    ("cluster: {where} must be a link name or a table (link, gbps, latency_us, efficiency, kind, name), not {v}",
     "集群：{where} 应为链路名或一个表（link、gbps、latency_us、efficiency、kind、name），而不是 {v}"),
    ("cluster: {where}: give link (a links.json row) or both gbps and latency_us",
     "集群：{where}：请给出 link（links.json 中的一行），或同时给出 gbps 和 latency_us"),
    ("cluster: {where}: unknown key {key} (known: {known})", "集群：{where}：未知的键 {key}（可用的有：{known!l}）"),
    ("cluster: {where}.kind must be one of {kinds}, not {v}", "集群：{where}.kind 应为 {kinds!l} 之一，而不是 {v}"),
    ("cluster: {where}.{key} must be a non-empty text, not {v}", "集群：{where}.{key} 应为非空文本，而不是 {v}"),
    ("cluster: {where}.{key} must be a whole number from 1 to {m:d}, not {v}",
     "集群：{where}.{key} 应为 1 到 {m} 之间的整数，而不是 {v}"),
    ("cluster: {where}.{key} must be a number from 0 to {m:d}, not {v}",
     "集群：{where}.{key} 应为 0 到 {m} 之间的数，而不是 {v}"),
    ("cluster: {where}.{key} must be a number above 0 and at most {m:d}, not {v}",
     "集群：{where}.{key} 应为大于 0 且不超过 {m} 的数，而不是 {v}"),
    # a link error inside a cluster spec: "cluster: '8xA100[inter=IB-HDX]': link: unknown link …" (keep last)
    ("cluster: {where}: {msg}", "集群：{where}：{msg!t}"),
]
