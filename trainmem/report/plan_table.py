"""Rich tables for ``trainmem plan`` and ``trainmem compare`` (memory in GiB = 1024³)."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from trainmem.plan.explain import PART_NAMES, label, sized_label
from trainmem.report.i18n import tr
from trainmem.units import GiB

__all__ = ["print_plans", "print_compare"]

_H = {
    "plans": ("Fastest plans that fit — {model} on {pool}", "能放下的最快方案 — {model}，{pool}"),
    "strategy": ("strategy", "方案"), "peak": ("peak GiB", "峰值 GiB"),
    "total": ("device GiB", "设备占用 GiB"), "step": ("step s", "单步 s"),
    "tps": ("tokens/s/GPU", "tokens/s/GPU"), "mfu": ("MFU", "MFU"), "where": ("where the time goes", "时间去向"),
    "runs": ("runs on", "运行方式"), "why": ("Why the best wins", "最佳方案为何胜出"),
    "assumptions": ("Assumptions", "假设"), "searched": ("searched {n} configurations, estimated memory of {m}, in {s:.2f} s",
                                                       "搜索了 {n} 种配置，估算了其中 {m} 种的显存，用时 {s:.2f} s"),
    "min": ("Fewest {gpu} that train it: {n}", "能训练它的最少 {gpu} 数量：{n}"),
    "deadline": ("Fewest {gpu} for {tokens:.3g} tokens in {days:g} days: {n} ({tps:,.0f} tokens/s)",
                 "{days:g} 天内训练 {tokens:.3g} tokens 所需最少 {gpu}：{n}（{tps:,.0f} tokens/s）"),
    "sized": ("  plan: {plan}; host RAM per node {host:.1f} GiB", "  方案：{plan}；每节点主机内存 {host:.1f} GiB"),
    "host_need": ("host RAM per node {host:.1f} GiB", "每节点主机内存 {host:.1f} GiB"),
    "node_host": ("  the node has {cap:,.0f} GiB host RAM ({src})", "  节点主机内存 {cap:,.0f} GiB（{src}）"),
    "export": ("Exported for {engine}:", "已导出 {engine} 配置："),
    "compare": ("What each technique saves and costs — {model}", "各项技术的显存节省与代价 — {model}"),
    "technique": ("technique", "技术"), "saves": ("saves GiB", "节省 GiB"), "slow": ("step time", "单步时间"),
    "fits": ("fits", "放得下"), "yes": ("yes", "是"), "no": ("no", "否"), "baseline": ("baseline", "基线"),
    "na": ("Not applicable here", "此处不适用"),
}
_PARTS_ZH = {"compute": "计算", "recompute": "重计算", "tp_comm": "张量并行通信", "cp_comm": "上下文并行通信",
             "ep_comm": "专家并行 all-to-all", "pp_comm": "流水线收发", "dp_comm": "数据并行通信",
             "bubble": "流水线气泡", "offload": "卸载传输", "optimizer": "优化器更新"}


def _h(key: str, lang: str, **kw: object) -> str:
    en, zh = _H[key]
    return (zh if lang == "zh" else en).format(**kw)


def _where(breakdown: dict[str, float], lang: str) -> str:
    total = sum(breakdown.values()) or 1.0
    parts = sorted(((v, k) for k, v in breakdown.items() if v > 0.005 * total), reverse=True)[:4]
    names = _PARTS_ZH if lang == "zh" else PART_NAMES
    return ("，" if lang == "zh" else ", ").join(f"{names.get(k, k)} {100 * v / total:.0f}%" for v, k in parts)


def _punct(lang: str) -> tuple[str, str]:
    """(colon, semicolon) as each language writes them."""
    return ("：", "；") if lang == "zh" else (": ", "; ")


def print_plans(req, result, extra: dict, lang: str = "en", console: Console | None = None) -> None:  # noqa: ANN001
    con = console or Console()
    if result is not None:
        tab = Table(title=_h("plans", lang, model=req.spec.name, pool=req.cluster.label))
        tab.add_column("#", justify="right")
        tab.add_column(_h("strategy", lang), overflow="fold", ratio=1)
        for col in ("peak", "total", "step", "tps", "mfu"):
            tab.add_column(_h(col, lang), justify="right", no_wrap=True)
        for i, p in enumerate(result.plans, 1):
            m = p.most_loaded.memory
            tab.add_row(str(i), escape(label(p)), f"{m.peak_allocated_bytes / GiB:.1f}",
                        f"{m.device_total_bytes / GiB:.1f} / {m.gpu_memory_bytes / GiB:.1f}", f"{p.step_seconds:.3f}",
                        f"{p.tokens_per_second / p.gpus:,.0f}", f"{100 * p.mfu:.1f} %")
        con.print(tab)
        colon, semi = _punct(lang)
        for i, p in enumerate(result.plans, 1):
            host = max(s.host_memory_bytes for s in p.shares)
            con.print(f"  {i}. {_h('where', lang)}{colon}{_where(p.time_breakdown, lang)}{semi}"
                      f"{_h('runs', lang)}{colon}{escape(tr(p.runs_on, lang))}"
                      + (f"{semi}{_h('host_need', lang, host=host / GiB)}" if host else ""))
        con.print(f"[bold]{_h('why', lang)}{colon.strip()}[/bold] {escape(tr(result.why, lang))}")
        con.print(_h("searched", lang, n=result.evaluated, m=result.estimated, s=result.search_seconds))
        con.print(f"[bold]{_h('assumptions', lang)}[/bold]")
        for a in result.assumptions:
            con.print(f"  - {escape(tr(a, lang))}")
    _print_sizing(extra, lang, con)


def _print_sized(d: dict, lang: str, con: Console) -> None:
    con.print(escape(_h("sized", lang, plan=sized_label(d["plan"]), host=d["host_memory_bytes"] / GiB)))
    if d.get("node_host_memory_bytes"):
        con.print(escape(_h("node_host", lang, cap=d["node_host_memory_bytes"] / GiB,
                            src=tr(d["node_host_memory_from"], lang))))


def _print_sizing(extra: dict, lang: str, con: Console) -> None:
    if "min_gpus" in extra:
        d = extra["min_gpus"]
        con.print(_h("min", lang, gpu=next(iter(d["plan"]["per_gpu_type"])), n=d["gpus"]))
        _print_sized(d, lang, con)
    if "gpus_for_deadline" in extra:
        d = extra["gpus_for_deadline"]
        con.print(_h("deadline", lang, gpu=next(iter(d["plan"]["per_gpu_type"])), n=d["gpus"], tokens=d["tokens"],
                     days=d["days"], tps=d["plan"]["tokens_per_second"]))
        _print_sized(d, lang, con)
    if "export" in extra:
        con.print(_h("export", lang, engine=extra["export"]["engine"]))
        for f in extra["export"]["files"]:
            con.print(f"  {escape(f)}")


def print_compare(spec, setup, out: dict, lang: str = "en", console: Console | None = None) -> None:  # noqa: ANN001
    con = console or Console()
    tab = Table(title=_h("compare", lang, model=spec.name))
    for col in ("technique", "peak", "saves", "slow", "fits"):
        tab.add_column(_h(col, lang), justify="left" if col == "technique" else "right", overflow="fold")
    b = out["baseline"]
    tab.add_row(_h("baseline", lang), f"{b['peak_allocated_bytes'] / GiB:.2f}", "", f"{b['step_seconds']:.3f} s",
                _h("yes" if b["fits"] else "no", lang))
    tab.add_section()
    for o in out["options"]:
        tab.add_row(escape(tr(o["technique"], lang)), f"{o['peak_allocated_bytes'] / GiB:.2f}",
                    f"{o['saves_bytes'] / GiB:+.2f}", f"{o['slowdown_pct']:+.1f} %", _h("yes" if o["fits"] else "no", lang))
    con.print(tab)
    if out["not_applicable"]:
        con.print(f"[bold]{_h('na', lang)}[/bold]")
        for n in out["not_applicable"]:
            con.print(f"  - {escape(tr(n['technique'], lang))}{_punct(lang)[0]}{escape(tr(n['reason'], lang))}")
