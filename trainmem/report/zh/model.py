"""Chinese for the messages of the deriver (trainmem/model/derive.py) and the hub fetch (trainmem/model/hub.py)."""

from __future__ import annotations

EXACT: dict[str, str] = {
    "Llama 4's mixture-of-experts layers (Llama4TextMoe, transformers 5.24 modeling_llama4.py) run every expert on "
    "every token: the router's sigmoid top-k scores (0 for the others) scale num_local_experts copies of the tokens, "
    "batched through torch.bmm; what they save grows with tokens·num_local_experts, not tokens·top_k, and is measured "
    "so":
        "Llama 4 的混合专家层（Llama4TextMoe，transformers 5.24 modeling_llama4.py）让每个专家处理每个 token：路由器的 "
        "sigmoid top-k 分数（其余为 0）缩放 num_local_experts 份 token 副本，经 torch.bmm 批量计算；它们为反向保存的张量随 "
        "tokens·num_local_experts 增长，而不是 tokens·top_k，并按此测量",
    "the hub has no such repository (a private one needs HF_TOKEN)":
        "Hugging Face Hub 上没有这个仓库（私有仓库需要设置 HF_TOKEN）",
    "the hub repository has no config.json": "该 Hugging Face Hub 仓库没有 config.json",
}

_PASS = ("download it where there is network (huggingface-cli download {r2} config.json) and pass the file's path "
         "(or its folder) as the model")
_PASS_ZH = "请在有网络的机器上下载它（huggingface-cli download {r2} config.json），再把该文件的路径（或其所在目录）作为模型传入"

PATTERNS: list[tuple[str, str]] = [
    # ------------------------------------------------------------------ model/resolve.py with model/hub.py
    ("unknown model {m}; did you mean {near}? (trainmem models lists the catalog; or give a path to a config.json "
     "or a folder holding one, or a size like 7B); {hub}",
     "未知模型 {m}；你是不是想用 {near!l}？（trainmem models 列出全部目录模型；也可以给 config.json 的路径、"
     "包含它的目录，或 7B 这样的规模）；{hub!t}"),
    ("unknown model {m}: give a catalog name ({ex}, ...; trainmem models lists them), a path to a config.json or a "
     "folder holding one, or a size like 7B or 0.5B; {hub}",
     "未知模型 {m}：请给出目录中的模型名（{ex!l} 等，trainmem models 会列出全部）、config.json 的路径或包含它的目录，"
     "或 7B、0.5B 这样的规模；{hub!t}"),
    ("unknown model {m}; {why}; did you mean {near}? (trainmem models lists the catalog; or give a path to a "
     "config.json or a folder holding one, or a size like 7B)",
     "未知模型 {m}；{why!t}；你是不是想用 {near!l}？（trainmem models 列出全部目录模型；也可以给 config.json 的路径、"
     "包含它的目录，或 7B 这样的规模）"),
    ("unknown model {m}; {why}: give a catalog name ({ex}, ...; trainmem models lists them), a path to a config.json "
     "or a folder holding one, or a size like 7B or 0.5B",
     "未知模型 {m}；{why!t}：请给出目录中的模型名（{ex!l} 等，trainmem models 会列出全部）、config.json 的路径或"
     "包含它的目录，或 7B、0.5B 这样的规模"),
    ("{r} from the hub: offline (HF_HUB_OFFLINE=1) and its config.json is not in the hub cache: " + _PASS,
     "从 Hugging Face Hub 获取 {r}：处于离线模式（HF_HUB_OFFLINE=1），且 Hub 缓存里没有它的 config.json：" + _PASS_ZH),
    ("{r} from the hub: the hub cannot be reached and its config.json is not in the hub cache: " + _PASS,
     "从 Hugging Face Hub 获取 {r}：连不上 Hub，且 Hub 缓存里没有它的 config.json：" + _PASS_ZH),
    ("the hub gave no config.json for {r} ({exc:w}): " + _PASS,
     "Hugging Face Hub 没有返回 {r} 的 config.json（{exc}）：" + _PASS_ZH),
    ("huggingface_hub is not installed to fetch {r}'s config.json: " + _PASS,
     "没有安装 huggingface_hub，无法获取 {r} 的 config.json：" + _PASS_ZH),
    ("{r} is a gated repository: set HF_TOKEN to a token with access to it, or " + _PASS,
     "{r} 是受限（gated）仓库：请把 HF_TOKEN 设为有访问权限的 token，或者" + _PASS_ZH),
    ("the hub's config.json for {r} is not readable JSON: {exc:w}", "Hugging Face Hub 上 {r} 的 config.json 不是可读的 JSON：{exc}"),
    ("the hub's config.json for {r} is not a JSON object", "Hugging Face Hub 上 {r} 的 config.json 不是 JSON 对象"),
    # ------------------------------------------------------------------ model/derive.py
    ("model_type {mt} is not supported: transformers {v:w} has no causal-LM class for it to derive a description "
     "from (encoder-decoder, vision or unknown); described: {known}",
     "不支持 model_type {mt}：transformers {v} 中没有它的因果语言模型（causal-LM）类，无法据此推导描述"
     "（编码器-解码器、视觉模型或未知类型）；已有描述的：{known!l}"),
    ("model_type {mt} has no layer description in trainmem; deriving one from transformers needs torch and "
     "transformers: pip install 'trainmem[trace]' (described: {known})",
     "trainmem 中没有 model_type {mt} 的层描述；从 transformers 推导需要 torch 和 transformers："
     "pip install 'trainmem[trace]'（已有描述的：{known!l}）"),
    ("model_type {mt} has no layer description in trainmem; deriving one from transformers needs torch and "
     "transformers: pip install 'trainmem[trace]'",
     "trainmem 中没有 model_type {mt} 的层描述；从 transformers 推导需要 torch 和 transformers："
     "pip install 'trainmem[trace]'"),
    ("model_type {mt}: Mamba-1 mixers (selective scan: mamba, falcon_mamba, jamba) are not derived: what mamba_ssm's "
     "CUDA kernel saves for them is not modelled (Mamba-2 mixers are)",
     "model_type {mt}：Mamba-1 混合器（selective scan：mamba、falcon_mamba、jamba）不做推导：mamba_ssm 的 CUDA 内核为它们"
     "保存的张量没有建模（Mamba-2 混合器有）"),
    ("attn eager: {mt} has no sdpa attention in transformers ({a})", "attn eager：transformers 中 {mt} 没有 sdpa 注意力（{a}）"),
    ("{a}: no list of {n:d} decoder layers found to derive from", "{a}：找不到由 {n} 个解码器层组成的列表，无法推导"),
    ("{a}: layers {i:d} and {j:d} share the parameter {p}; layers that share weights (Zamba's shared transformer "
     "blocks) are not supported",
     "{a}：第 {i} 层和第 {j} 层共享参数 {p}；层之间共享权重（Zamba 的共享 transformer 块）不受支持"),
    ("config.json (model_type {mt}): transformers refuses it: {e}", "config.json（model_type {mt}）：transformers 拒绝了它：{e}"),
    ("transformers cannot build {a} from this config: {e}", "transformers 无法用这个配置构建 {a}：{e}"),
    ("transformers cannot run {a} on this config: {e}", "transformers 无法在这个配置上运行 {a}：{e}"),
    ("config.json: num_hidden_layers({n:d}) is above trainmem's limit of {lim:d}",
     "config.json：num_hidden_layers({n}) 超过了 trainmem 的上限 {lim}"),
    ("{ax:w}({n:d}) > 1 is not modelled for {mt}: its layer description is derived from transformers (sizes, not "
     "sharding); use dp only",
     "{mt} 的 {ax}({n}) > 1 没有建模：它的层描述是从 transformers 推导的（只有尺寸，没有切分方式）；请只用数据并行"),
    ("{what} is not modelled for {mt} (a layer description derived from transformers): use torch, fsdp2 or "
     "deepspeed without it",
     "{mt}（层描述从 transformers 推导）不支持 {what} 的建模：请用 torch、fsdp2 或 deepspeed，且不要启用它"),
    ("attn: {mt} has no sdpa implementation in transformers ({a}); use --attn eager",
     "attn：transformers 中 {mt} 没有 sdpa 实现（{a}）；请用 --attn eager"),
    ("{mt}: derived from transformers ({a} on the meta device for exact parameters; layer 1 of a {n:d}-layer copy "
     "traced on fake tensors at s = {ss} with 1 and 2 sequences for what each layer saves, linear + quadratic in s, "
     "per sequence and shared); engine paths: "
     "torch, fsdp2, deepspeed over data parallelism, recompute none or full (no tp/pp/cp/ep, megatron, LoRA, "
     "selective recompute, fp8 or offload until the family is described)",
     "{mt}：从 transformers 推导（在 meta 设备上构建 {a} 得到精确参数量；在 fake tensor 上追踪一个 {n} 层副本的第 1 层，"
     "序列长度 s = {ss}、每批 1 和 2 条序列，得到每层为反向保存的张量，按 s 的一次项 + 二次项拟合，分每条序列与各序列共享两部分）；支持的引擎路径：torch、fsdp2、"
     "deepspeed 的数据并行，重计算 none 或 full（在该家族有专门描述之前，不支持 tp/pp/cp/ep、megatron、LoRA、"
     "选择性重计算、fp8 和卸载）"),
    # ------------------------------------------------------------------ model/derive_seq2seq.py (encoder–decoder)
    ("model_type {mt}: transformers {v:w} has no sequence-to-sequence LM class for it",
     "model_type {mt}：transformers {v} 中没有它的序列到序列语言模型类"),
    ("config.json ({c:w}): no encoder/decoder layer counts ({keys})",
     "config.json（{c}）：没有编码器/解码器层数（{keys}）"),
    ("config.json: {k1:w}({a}) and {k2:w}({b}) must be positive integers",
     "config.json：{k1}({a}) 和 {k2}({b}) 必须是正整数"),
    ("config.json: {n:d} layers are above trainmem's limit of {lim:d}",
     "config.json：{n} 层超过了 trainmem 的上限 {lim}"),
    ("--loss {l:w} is not modelled for {mt} (encoder–decoder: its forward runs CrossEntropyLoss itself); use --loss hf",
     "{mt}（编码器–解码器：其 forward 自己调用 CrossEntropyLoss）不支持 --loss {l} 的建模；请用 --loss hf"),
    ("--compile is not modelled for {mt} (encoder–decoder); leave it off",
     "{mt}（编码器–解码器）不支持 --compile 的建模；请不要启用"),
    ("{mt}: encoder–decoder, derived from transformers ({a} on the meta device for exact parameters; {ne:d} encoder "
     "then {nd:d} decoder layers walked in that order; layers 0 and 1 of each stack of a {p1:d}+{p2:d}-layer copy traced "
     "on fake tensors at (source, target) = {ss} with 1 and 2 sequences); source --seq-len tokens, target --target-len "
     "(default: --seq-len); engine paths: torch, fsdp2, deepspeed over data parallelism, recompute none or full (no "
     "tp/pp/cp/ep, megatron, QLoRA, selective recompute, fp8, offload, --compile or another --loss)",
     "{mt}：编码器–解码器，从 transformers 推导（在 meta 设备上构建 {a} 得到精确参数量；先走 {ne} 个编码器层，再走 {nd} 个"
     "解码器层；在 fake tensor 上追踪一个 {p1}+{p2} 层副本中每个栈的第 0、1 层，（源长度, 目标长度）= {ss}、每批 1 和 2 条序列）；"
     "源序列为 --seq-len 个 token，目标序列为 --target-len 个（默认等于 --seq-len）；支持的引擎路径：torch、fsdp2、deepspeed 的数据并行，重计算 none 或 full"
     "（不支持 tp/pp/cp/ep、megatron、QLoRA、选择性重计算、fp8、卸载、--compile 或其他 --loss）"),
    ("--target-len is for encoder–decoder models (T5, BART ...); {name:w} is not one: give its tokens per sequence "
     "as --seq-len",
     "--target-len 只用于编码器–解码器模型（T5、BART 等）；{name} 不是这类模型：请用 --seq-len 给出每条序列的 token 数"),
    ("encoder–decoder: source {s:d} tokens (--seq-len) through the encoder, target {t:d} tokens (--target-len) "
     "through the decoder, its cross-attention, the LM head and the loss",
     "编码器–解码器：源序列 {s} 个 token（--seq-len）经过编码器，目标序列 {t} 个 token（--target-len）经过解码器、"
     "其交叉注意力、LM 头和损失"),
    ("{mt}: transformers builds {names} frozen (requires_grad=False); frozen parameters are not modelled for an "
     "encoder–decoder model (they would get gradients and optimizer states)",
     "{mt}：transformers 把 {names} 构建为冻结参数（requires_grad=False）；编码器–解码器模型的冻结参数没有建模"
     "（估算会给它们梯度和优化器状态）"),
    ("{mt}: LoRA on an encoder–decoder model is modelled with --engine torch, no QLoRA, no lm_head target and "
     "--recompute none",
     "{mt}：编码器–解码器模型上的 LoRA 只对 --engine torch、不用 QLoRA、不以 lm_head 为目标且 --recompute none 的情况建模"),
]
