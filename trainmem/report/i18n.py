"""English and Chinese strings for user-facing reports (``--lang zh``)."""

from __future__ import annotations

__all__ = ["LANGS", "t"]

LANGS = ("en", "zh")

_STRINGS: dict[str, dict[str, str]] = {
    "parameters": {"en": "parameters", "zh": "模型参数"},
    "master_weights": {"en": "fp32 master weights", "zh": "FP32 主权重"},
    "gradients": {"en": "gradients", "zh": "梯度"},
    "optimizer_states": {"en": "optimizer states", "zh": "优化器状态"},
    "activations": {"en": "activations (+ logits/loss)", "zh": "激活值（含 logits/loss）"},
    "temporaries": {"en": "temporaries", "zh": "临时缓冲区"},
    "communication_buffers": {"en": "communication buffers", "zh": "通信缓冲区"},
    "other": {"en": "other (cuBLAS workspace, buffers)", "zh": "其他（cuBLAS 工作区等）"},
    "category": {"en": "category", "zh": "类别"},
    "kind": {"en": "kind", "zh": "类型"},
    "static": {"en": "static", "zh": "静态"},
    "dynamic": {"en": "dynamic", "zh": "动态"},
    "share": {"en": "share of peak", "zh": "峰值占比"},
    "peak_allocated": {"en": "peak allocated (max_memory_allocated)", "zh": "峰值已分配（max_memory_allocated）"},
    "peak_reserved": {"en": "peak reserved (max_memory_reserved)", "zh": "峰值保留（max_memory_reserved）"},
    "device_total": {"en": "device total (nvidia-smi)", "zh": "设备总占用（nvidia-smi）"},
    "static_total": {"en": "static between steps", "zh": "步间静态占用"},
    "host": {"en": "host RAM per rank", "zh": "每进程主机内存"},
    "fits": {"en": "fits on", "zh": "可放入"},
    "does_not_fit": {"en": "does NOT fit on", "zh": "放不下"},
    "headroom": {"en": "headroom", "zh": "余量"},
    "peak_at": {"en": "peak during", "zh": "峰值出现在"},
    "title": {"en": "Memory of one training step, most loaded GPU", "zh": "单步训练显存（负载最重的 GPU）"},
    "assumptions": {"en": "Assumptions", "zh": "假设"},
    "params": {"en": "parameters", "zh": "参数量"},
    "trainable": {"en": "trainable", "zh": "可训练"},
    "max_mb": {"en": "largest micro-batch that fits", "zh": "可容纳的最大 micro-batch"},
    "none_fits": {"en": "even micro-batch 1 does not fit", "zh": "micro-batch 为 1 也放不下"},
    "formula": {"en": "formula", "zh": "公式"},
    "source": {"en": "source", "zh": "来源"},
    "accounting": {"en": "accounting", "zh": "口径"},
    "why": {"en": "why it differs", "zh": "差异原因"},
    "note": {"en": "note", "zh": "说明"},
    "explain_title": {"en": "How each line is computed", "zh": "每一项的计算方式"},
    "acc_title": {"en": "Model states per GPU under other accountings (no activations)",
                  "zh": "其他口径下的每卡模型状态（不含激活值）"},
    "act_title": {"en": "Activations of all layers, one micro-batch", "zh": "全部层的激活值（单个 micro-batch）"},
}


def t(key: str, lang: str = "en") -> str:
    """The string for ``key`` in ``lang`` (falls back to English, then to the key)."""
    row = _STRINGS.get(key)
    if row is None:
        return key
    return row.get(lang) or row["en"]
