"""Rich tables for ``trainmem trace`` (and ``--compare``)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from trainmem.model.spec import ModelSpec
from trainmem.report.i18n import t
from trainmem.setup import TrainingSetup
from trainmem.units import GB, GiB

__all__ = ["print_trace", "print_comparison"]


def print_trace(spec: ModelSpec, setup: TrainingSetup, result, lang: str = "en") -> None:  # noqa: ANN001
    con = Console()
    tab = Table(title=f"Traced step — {spec.name} (fake tensors, CUDA emulated)" if lang == "en"
                else f"追踪的训练步 — {spec.name}（fake tensor，模拟 CUDA）")
    for col in (t("category", lang), "GiB", "GB", t("share", lang), "max over step GiB"):
        tab.add_column(col, justify="right" if col != t("category", lang) else "left")
    peak = result.peak_allocated_bytes
    for cat, n in result.breakdown_at_peak_bytes.items():
        if n or result.category_peak_bytes.get(cat):
            tab.add_row(t(cat, lang), f"{n / GiB:.3f}", f"{n / GB:.3f}", f"{100 * n / peak:.1f} %",
                        f"{result.category_peak_bytes.get(cat, 0) / GiB:.3f}")
    tab.add_section()
    tab.add_row(t("peak_allocated", lang), f"{peak / GiB:.3f}", f"{peak / GB:.3f}", "100 %", "")
    tab.add_row(t("static_total", lang), f"{result.static_bytes / GiB:.3f}", f"{result.static_bytes / GB:.3f}", "", "")
    con.print(tab)
    con.print(f"{t('peak_at', lang)}: {result.peak_phase} ({result.peak_module}); traced in {result.wall_seconds:.1f} s")
    for e in result.emulations:
        con.print(f"[dim]  emulated: {e}[/dim]")
    for n in result.notes:
        con.print(f"[dim]  note: {n}[/dim]")


def print_comparison(spec: ModelSpec, setup: TrainingSetup, cmp, lang: str = "en") -> None:  # noqa: ANN001
    con = Console()
    tab = Table(title=f"Estimate vs trace — {spec.name}" if lang == "en" else f"估算 vs 追踪 — {spec.name}")
    for col in (t("category", lang), "estimate GiB", "trace GiB", "error"):
        tab.add_column(col, justify="left" if col == t("category", lang) else "right")
    for cat, e, r, err in cmp.rows():
        if e or r:
            tab.add_row(t(cat, lang), f"{e / GiB:.3f}", f"{r / GiB:.3f}",
                        f"{100 * err:+.1f} %" if r else ("—" if not e else "new"))
    tab.add_section()
    tab.add_row(t("peak_allocated", lang), f"{cmp.estimate_peak_bytes / GiB:.3f}",
                f"{cmp.trace.peak_allocated_bytes / GiB:.3f}", f"{100 * cmp.peak_error:+.2f} %")
    con.print(tab)
    con.print(f"peak: estimate during {cmp.estimate.peak_phase}; trace during {cmp.trace.peak_phase} "
              f"({cmp.trace.peak_module}). The estimate's cuBLAS workspace ({cmp.estimate.cuda_only_bytes / 2**20:.0f} MiB) "
              "is left out: a CPU trace cannot see it.")
