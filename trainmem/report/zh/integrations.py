"""Chinese entries of :mod:`trainmem.integrations` (the plain-loop preflight, the Lightning callback, ``trainmem
validate``). Same format and style as :mod:`trainmem.report.messages_zh`."""

from __future__ import annotations

__all__ = ["EXACT", "PATTERNS"]

EXACT: dict[str, str] = {}

PATTERNS: list[tuple[str, str]] = [
    # ------------------------------------------------------------------ integrations/loop.py
    ("optimizer: a {c:w}, which trainmem does not model; pass optimizer= the name of the closest of {names}",
     "optimizer：{c} 不在 trainmem 的建模范围内；请用 optimizer= 传入最接近的名字：{names}"),
    ("batch: expected a (batch, seq) tensor of token ids or a mapping with input_ids, got {g}",
     "batch：应为 (batch, seq) 的 token id 张量，或含 input_ids 的映射，得到 {g}"),
    ("autocast {v:w}: not one of {c} (or None)", "autocast {v}：不是 {c} 之一（或 None）"),
    # ------------------------------------------------------------------ integrations/lightning.py
    ("the {m:w} holds no transformers model (no submodule with a config); give PreflightCallback(model_attr=...) or "
     "estimate it with trainmem.estimate",
     "{m} 中没有 transformers 模型（没有带 config 的子模块）；请给出 PreflightCallback(model_attr=...)，或用 "
     "trainmem.estimate 估算"),
    ("trainer.precision {p:w}: trainmem models {c}", "trainer.precision {p}：trainmem 只建模 {c}"),
    ("model_attr {a:w}: the {m:w} has no such attribute", "model_attr {a}：{m} 没有这个属性"),
    ("FSDPStrategy sharding_strategy {s:w}: trainmem models FULL_SHARD, HYBRID_SHARD, SHARD_GRAD_OP",
     "FSDPStrategy sharding_strategy {s}：trainmem 只建模 FULL_SHARD、HYBRID_SHARD、SHARD_GRAD_OP"),
    # ------------------------------------------------------------------ integrations/validate.py
    ("{p}: no preflight lines", "{p}：没有 preflight 记录行"),
    ("{p}: the folder {f} does not exist", "{p}：文件夹 {f} 不存在"),
    ("{p}: cannot read ({why})", "{p}：无法读取（{why}）"),
    ("{p}: not a trainmem preflight line (no {k})", "{p}：不是 trainmem 的 preflight 记录行（缺少 {k}）"),
    ("{p}: predicted needs integer peak_allocated_bytes and peak_reserved_bytes",
     "{p}：predicted 需要整数的 peak_allocated_bytes 和 peak_reserved_bytes"),
    ("{p}: not JSON ({why})", "{p}：不是 JSON（{why}）"),
]
