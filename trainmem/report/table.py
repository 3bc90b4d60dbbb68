"""Rich tables for ``trainmem estimate``: every figure labelled GiB (1024³) and GB (10⁹)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from trainmem.memory.estimate import MemoryEstimate
from trainmem.memory.timeline import CATEGORIES
from trainmem.model.spec import ModelSpec
from trainmem.report.i18n import t
from trainmem.setup import TrainingSetup
from trainmem.units import GB, GiB

__all__ = ["print_estimate", "print_max_micro_batch", "STATIC_CATEGORIES"]

#: Categories that stay allocated between steps (the flat baseline); the rest come and go each step.
STATIC_CATEGORIES = ("parameters", "master_weights", "optimizer_states")


def _both(n: int) -> tuple[str, str]:
    return f"{n / GiB:,.2f}", f"{n / GB:,.2f}"


def _setup_line(setup: TrainingSetup) -> str:
    s = setup
    par = f"gpus={s.gpus} dp={s.dp} tp={s.tp} pp={s.pp} cp={s.cp} ep={s.ep}" + (" sp" if s.sp else "")
    extra = f" lora r={s.lora_rank}" + (" qlora" if s.qlora else "") if s.is_lora else ""
    return (f"engine={s.engine} precision={s.precision} optimizer={s.optimizer} zero={s.zero} "
            f"offload={s.offload} seq={s.seq_len} mb={s.micro_batch} ga={s.grad_accum} "
            f"recompute={s.recompute} attn={s.attn} {par}{extra}")


def print_estimate(spec: ModelSpec, setup: TrainingSetup, est: MemoryEstimate, lang: str = "en",
                   console: Console | None = None) -> None:
    con = console or Console()
    tab = Table(title=f"{t('title', lang)} — {spec.name} ({spec.n_params / 1e9:.2f} B {t('params', lang)})",
                caption=_setup_line(setup))
    tab.add_column(t("category", lang))
    tab.add_column(t("kind", lang))
    tab.add_column("GiB", justify="right")
    tab.add_column("GB", justify="right")
    tab.add_column(t("share", lang), justify="right")
    peak = est.peak_allocated_bytes
    for cat in CATEGORIES:
        n = est.breakdown_at_peak_bytes.get(cat, 0)
        if n == 0:
            continue
        kind = t("static", lang) if cat in STATIC_CATEGORIES else t("dynamic", lang)
        tab.add_row(t(cat, lang), kind, *_both(n), f"{100 * n / peak:.1f} %")
    tab.add_section()
    tab.add_row(f"[bold]{t('peak_allocated', lang)}[/bold]", "", *_both(peak), "100 %")
    tab.add_row(t("peak_reserved", lang), "", *_both(est.peak_reserved_bytes), "")
    tab.add_row(t("device_total", lang), "", *_both(est.device_total_bytes), "")
    tab.add_row(t("static_total", lang), "", *_both(est.static_bytes), "")
    if est.host_memory_bytes:
        tab.add_row(t("host", lang), "", *_both(est.host_memory_bytes), "")
    con.print(tab)
    verdict = t("fits", lang) if est.fits else t("does_not_fit", lang)
    color = "green" if est.fits else "red"
    con.print(f"[{color}]{verdict} {est.gpu} ({est.gpu_memory_bytes / GiB:.1f} GiB)[/{color}]; "
              f"{t('headroom', lang)} {est.headroom_bytes / GiB:+.2f} GiB; {t('peak_at', lang)}: {est.peak_phase}; "
              f"{t('trainable', lang)} {est.n_trainable_params:,}")
    con.print(f"[dim]{t('assumptions', lang)}:[/dim]")
    for a in est.assumptions:
        con.print(f"[dim]  - {a}[/dim]")


def print_max_micro_batch(best: int, est: MemoryEstimate | None, setup: TrainingSetup, lang: str = "en") -> None:
    con = Console()
    if best == 0 or est is None:
        con.print(f"[red]{t('none_fits', lang)} {setup.gpu}[/red]")
        return
    con.print(f"{t('max_mb', lang)} ({setup.gpu}, seq {setup.seq_len}): [bold]{best}[/bold] — "
              f"{t('device_total', lang)} {est.device_total_bytes / GiB:.2f} GiB / {est.gpu_memory_bytes / GiB:.1f} GiB")
