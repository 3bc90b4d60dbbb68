"""Rich tables for ``trainmem trace`` (and ``--compare``)."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from trainmem.model.spec import ModelSpec
from trainmem.report.i18n import t, tr
from trainmem.setup import TrainingSetup
from trainmem.units import GB, GiB

__all__ = ["print_trace", "print_comparison", "shown_rows", "RESOLUTION_BYTES"]


def print_trace(spec: ModelSpec, setup: TrainingSetup, result, lang: str = "en") -> None:  # noqa: ANN001
    con = Console()
    tab = Table(title=t("trace_title", lang, name=spec.name))
    for col in (t("category", lang), "GiB", "GB", t("share", lang), t("max_over_step", lang)):
        tab.add_column(col, justify="right" if col != t("category", lang) else "left")
    peak = result.peak_allocated_bytes
    for cat, n in result.breakdown_at_peak_bytes.items():
        if n or result.category_peak_bytes.get(cat):
            tab.add_row(t(cat, lang), f"{n / GiB:.3f}", f"{n / GB:.3f}", f"{100 * n / peak:.1f} %",
                        f"{result.category_peak_bytes.get(cat, 0) / GiB:.3f}")
    tab.add_section()
    tab.add_row(t("peak_allocated", lang), f"{peak / GiB:.3f}", f"{peak / GB:.3f}", "100 %", "")
    tab.add_row(t("static_total", lang), f"{result.static_bytes / GiB:.3f}", f"{result.static_bytes / GB:.3f}", "", "")
    res, exp = result.peak_reserved_bytes, result.peak_reserved_expandable_bytes
    if res:
        tab.add_row(t("peak_reserved", lang), f"{res / GiB:.3f}", f"{res / GB:.3f}",
                    f"{100 * res / peak:.1f} %", "")
        tab.add_row("  expandable_segments:True", f"{exp / GiB:.3f}", f"{exp / GB:.3f}", f"{100 * exp / peak:.1f} %", "")
    con.print(tab)
    zh = lang == "zh"
    phase = escape(tr(result.peak_phase, lang))
    if zh:
        con.print(f"峰值出现在{phase}阶段，所在模块 {escape(result.peak_module)}；追踪耗时 {result.wall_seconds:.1f} s。")
    else:
        con.print(f"peak during: {phase} ({escape(result.peak_module)}); traced in {result.wall_seconds:.1f} s")
    if res:
        frag = 100 * result.fragmentation_at_peak
        con.print(f"分配器：保留峰值时共 {result.reserved_segments} 个 segment；已分配峰值时，保留显存中有 {frag:.1f} % 未被分配。"
                  if zh else f"allocator: {result.reserved_segments} segments at the reserved peak, "
                  f"{frag:.1f} % of reserved not allocated at the allocated peak")
    for e in result.emulations:
        con.print(f"[dim]  {'模拟' if zh else 'emulated'}{'：' if zh else ': '}{escape(tr(e, lang))}[/dim]")
    for n in result.notes:
        con.print(f"[dim]  {'说明' if zh else 'note'}{'：' if zh else ': '}{escape(tr(n, lang))}[/dim]")


#: What the comparison table shows (3 decimals of GiB); a category under half of it on both sides is left out:
#: its relative error (a few hundred bytes against none: "0.000 / 0.000 / -100.0 %") says nothing.
RESOLUTION_BYTES = -(-GiB // 2000)  # (rounded up: what prints 0.001)


def shown_rows(rows: list[tuple[str, int, int, float]]) -> list[tuple[str, int, int, float]]:
    """The comparison rows (category, estimate bytes, trace bytes, relative error) the table shows: those with
    bytes on either side at the table's resolution."""
    return [row for row in rows if max(row[1], row[2]) >= RESOLUTION_BYTES]


def print_comparison(spec: ModelSpec, setup: TrainingSetup, cmp, lang: str = "en") -> None:  # noqa: ANN001
    con = Console()
    tab = Table(title=t("compare_title", lang, name=spec.name))
    for col in (t("category", lang), t("estimate_gib", lang), t("trace_gib", lang), t("error_col", lang)):
        tab.add_column(col, justify="left" if col == t("category", lang) else "right")
    for cat, e, r, err in shown_rows(cmp.rows()):
        tab.add_row(t(cat, lang), f"{e / GiB:.3f}", f"{r / GiB:.3f}",
                    f"{100 * err:+.1f} %" if r else ("—" if not e else t("new", lang)))
    tab.add_section()
    tab.add_row(t("peak_allocated", lang), f"{cmp.estimate_peak_bytes / GiB:.3f}",
                f"{cmp.trace.peak_allocated_bytes / GiB:.3f}", f"{100 * cmp.peak_error:+.2f} %")
    if cmp.trace.peak_reserved_bytes:
        tab.add_row(t("peak_reserved", lang), f"{cmp.estimate_reserved_bytes / GiB:.3f}",
                    f"{cmp.trace.peak_reserved_bytes / GiB:.3f}", f"{100 * cmp.reserved_error:+.2f} %")
    con.print(tab)
    ws = cmp.estimate.cuda_only_bytes / 2**20
    est_phase, trace_phase = escape(tr(cmp.estimate.peak_phase, lang)), escape(tr(cmp.trace.peak_phase, lang))
    if lang == "zh":
        con.print(f"峰值：估算在{est_phase}阶段，追踪在{trace_phase}阶段（模块 {escape(cmp.trace.peak_module)}）。"
                  f"估算中的 cuBLAS 工作区（{ws:.0f} MiB）不计入对比：CPU 上的追踪看不到它。")
        return
    con.print(f"peak: estimate during {est_phase}; trace during {trace_phase} "
              f"({escape(cmp.trace.peak_module)}). The estimate's cuBLAS workspace ({ws:.0f} MiB) "
              "is left out: a CPU trace cannot see it.")
