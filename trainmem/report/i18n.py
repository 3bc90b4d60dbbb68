"""English and Chinese strings for user-facing reports (``--lang zh``).

Two layers, both at the presentation boundary (the library keeps producing English):

- :func:`t` — the report's own labels by key (table headers, categories).
- :func:`tr` — any whole English message (an assumption, an error line, a note, a phase name, an
  explain formula) translated through the catalogue in :mod:`trainmem.report.messages_zh`: an exact
  entry, else the first message *pattern* that matches the whole text. A pattern is the English
  message with ``{name}`` holes (``{n:d}`` a number, ``{x:w}`` one token, ``{u:p}`` a URL or path,
  ``{s}`` any text); the holes become named regex groups, compiled once, on the first zh message.
  The Chinese template puts the groups back: ``{name}`` as captured, ``{name!t}`` translated in turn
  (a phase inside a sentence, a reason inside an error), ``{name!l}`` an enumeration with ``、``.
  Messages the library joins with ``; `` (an alias note and a derived entry's note) are translated
  part by part when the whole has no entry. Text with no entry comes back unchanged (English):
  ``tests/report/test_zh.py`` finds it.
"""

from __future__ import annotations

import re
from functools import lru_cache

__all__ = ["LANGS", "check_lang", "t", "tr"]

LANGS = ("en", "zh")


def check_lang(lang: str) -> None:
    """Refuse a report language trainmem has no catalogue for (one line, exit 2 / HTTP 422)."""
    from trainmem.errors import ConfigError
    if lang not in LANGS:
        raise ConfigError(f"lang: {lang!r} is not one of {', '.join(LANGS)}")

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
    "peak_reserved": {"en": "peak reserved (max_memory_reserved)", "zh": "峰值已保留（max_memory_reserved）"},
    "peak_reserved_over_run": {"en": "peak reserved over the run (--sample-lengths)",
                               "zh": "整次训练的峰值已保留（--sample-lengths）"},
    "device_total": {"en": "device total (nvidia-smi)", "zh": "设备总占用（nvidia-smi）"},
    "static_total": {"en": "static between steps", "zh": "步间常驻显存"},
    "host": {"en": "host RAM per rank", "zh": "每个进程的主机内存"},
    "title": {"en": "Memory of one training step, most loaded GPU", "zh": "单步训练显存（负载最重的那张卡）"},
    "assumptions": {"en": "Assumptions", "zh": "假设"},
    "params": {"en": "parameters", "zh": "参数"},
    "formula": {"en": "formula", "zh": "公式"},
    "source": {"en": "source", "zh": "来源"},
    "accounting": {"en": "accounting", "zh": "口径"},
    "why": {"en": "why it differs", "zh": "差异原因"},
    "note": {"en": "note", "zh": "说明"},
    "explain_title": {"en": "How each line is computed", "zh": "每一项是怎么算的"},
    "acc_title": {"en": "Model states per GPU under other accountings (no activations)",
                  "zh": "其他口径下的每卡模型状态（不含激活值）"},
    "act_title": {"en": "Activations of all layers, one micro-batch", "zh": "所有层的激活值（单个 micro-batch）"},
    "trace_title": {"en": "Traced step — {name} (fake tensors, CUDA emulated)",
                    "zh": "追踪的训练步 — {name}（fake tensor，模拟 CUDA 行为）"},
    "compare_title": {"en": "Estimate vs trace — {name}", "zh": "估算 vs 追踪 — {name}"},
    "max_over_step": {"en": "max over step GiB", "zh": "整步最大值 GiB"},
    "estimate_gib": {"en": "estimate GiB", "zh": "估算 GiB"},
    "trace_gib": {"en": "trace GiB", "zh": "追踪 GiB"},
    "error_col": {"en": "error", "zh": "误差"},
    "new": {"en": "new", "zh": "新增"},
    "error": {"en": "error", "zh": "错误"},
}


def t(key: str, lang: str = "en", **fields: object) -> str:
    """The label for ``key`` in ``lang`` (falls back to English, then to the key), ``fields`` filled in."""
    row = _STRINGS.get(key)
    if row is None:
        return key
    text = row.get(lang) or row["en"]
    return text.format(**fields) if fields else text


# --------------------------------------------------------------------------- message catalogue

_HOLE = re.compile(r"\{(\w+)(?::(\w))?\}")
_KINDS = {"d": r"-?[\d,]+(?:\.\d+)?(?:e[+-]?\d+)?", "w": r"\S+", "p": r"(?:https?://|\.{0,2}/|[A-Za-z]:\\)\S*",
          "": r".+?"}
_FILL = re.compile(r"\{(\w+)(?:!([tl]))?\}")


def _compile(english: str) -> re.Pattern[str]:
    """An English message with ``{name}`` holes → a regex matching the whole message."""
    if re.search(r"\{\w+!", english):
        raise ValueError(f"{english!r}: conversions (!t, !l) belong in the Chinese template")
    parts, pos = [], 0
    for m in _HOLE.finditer(english):
        parts.append(re.escape(english[pos:m.start()]))
        parts.append(f"(?P<{m.group(1)}>{_KINDS[m.group(2) or '']})")
        pos = m.end()
    parts.append(re.escape(english[pos:]))
    return re.compile("".join(parts), re.DOTALL)


def _literals(english: str) -> tuple[str, ...]:
    """The fixed text between ``english``'s holes, in order (a message lacking one cannot match)."""
    return tuple(piece for piece in _HOLE.split(english)[::3] if piece)


def _has_in_order(text: str, literals: tuple[str, ...]) -> bool:
    """Whether ``literals`` occur in ``text`` one after another: a linear pre-check that spares the
    regex (two lazy holes around a repeated separator backtrack quadratically on long input)."""
    pos = 0
    for piece in literals:
        pos = text.find(piece, pos)
        if pos < 0:
            return False
        pos += len(piece)
    return True


@lru_cache(maxsize=None)
def _catalogue(lang: str) -> tuple[dict[str, str], tuple[tuple[re.Pattern[str], tuple[str, ...], str], ...]]:
    if lang != "zh":
        return {}, ()
    from trainmem.report import messages_zh as m
    patterns = tuple((_compile(en), _literals(en), zh) for en, zh in m.PATTERNS)
    return dict(m.EXACT), patterns


def _lookup(text: str, lang: str) -> str | None:
    exact, patterns = _catalogue(lang)
    hit = exact.get(text)
    if hit is not None:
        return hit
    for rx, literals, template in patterns:
        if not _has_in_order(text, literals):
            continue
        m = rx.fullmatch(text)
        if m:
            groups = m.groupdict()
            return _FILL.sub(lambda f: _fill(groups[f.group(1)], f.group(2), lang), template)
    return None


def _fill(value: str, how: str | None, lang: str) -> str:
    if how == "t":  # a message inside the message
        return tr(value, lang)
    if how == "l":  # an enumeration: "a 1, b 2" → "a 1、b 2"
        return value.replace(", ", "、")
    return value


@lru_cache(maxsize=4096)
def tr(text: str, lang: str = "en") -> str:
    """``text`` (one whole English message) in ``lang``; unchanged when there is no entry for it."""
    if lang == "en" or not text:
        return text
    hit = _lookup(text, lang)
    if hit is not None:
        return hit
    parts = tuple(text.split("; "))
    if 1 < len(parts) <= _MAX_PARTS:  # messages joined by the library (an alias note and a derived entry's note)
        joined = _joined(parts, lang)
        if joined is not None:
            return joined
    return text


_MAX_PARTS = 8
"""At most this many ``; ``-separated parts are split into messages (the search is quadratic)."""


def _joined(parts: tuple[str, ...], lang: str) -> str | None:
    """``"; ".join(parts)`` as known messages, each of one or more consecutive parts (a message may
    hold ``; `` itself), joined with ``；``; None if there is no such split."""
    for i in range(len(parts), 0, -1):
        head = _lookup("; ".join(parts[:i]), lang)
        if head is None:
            continue
        if i == len(parts):
            return head
        rest = _joined(parts[i:], lang)
        if rest is not None:
            return head.rstrip("。") + "；" + rest
    return None

