"""Rich tables for ``trainmem estimate``: every figure labelled GiB (1024³) and GB (10⁹)."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from trainmem.memory.estimate import MemoryEstimate
from trainmem.memory.timeline import CATEGORIES
from trainmem.model.spec import ModelSpec
from trainmem.report.i18n import t, tr
from trainmem.setup import TrainingSetup
from trainmem.units import GB, GiB

__all__ = ["print_estimate", "print_max_micro_batch", "print_fix", "fix_lines", "wrap_command", "result_line",
           "STATIC_CATEGORIES"]

#: Categories that stay allocated between steps (the flat baseline); the rest come and go each step.
STATIC_CATEGORIES = ("parameters", "master_weights", "optimizer_states")


def _both(n: int) -> tuple[str, str]:
    return f"{n / GiB:,.2f}", f"{n / GB:,.2f}"


def _setup_line(setup: TrainingSetup) -> str:
    s = setup
    par = f"gpus={s.gpus} dp={s.dp} tp={s.tp} pp={s.pp} cp={s.cp} ep={s.ep}" + (" sp" if s.sp else "")
    if s.vpp > 1:
        par += f" vpp={s.vpp}"
    if s.stage_layers:
        par += " stage_layers=" + ",".join(map(str, s.stage_layers))
    extra = f" lora r={s.lora_rank}" + (" qlora" if s.qlora else "") if s.is_lora else ""
    return (f"engine={s.engine} precision={s.precision} optimizer={s.optimizer} zero={s.zero} "
            f"offload={s.offload} seq={s.seq_len} mb={s.micro_batch} ga={s.grad_accum} "
            f"recompute={s.recompute} attn={s.attn} {par}{extra}")


def print_estimate(spec: ModelSpec, setup: TrainingSetup, est: MemoryEstimate, lang: str = "en",
                   console: Console | None = None) -> None:
    con = console or Console()
    size = (f"{spec.n_params / 1e9:.2f} B 参数" if lang == "zh" else f"{spec.n_params / 1e9:.2f} B parameters")
    tab = Table(title=f"{t('title', lang)} — {spec.name}" + (f"（{size}）" if lang == "zh" else f" ({size})"),
                caption=_setup_line(setup))
    tab.add_column(t("category", lang), overflow="fold")
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
    if est.peak_reserved_over_run_bytes is not None:
        tab.add_row(t("peak_reserved_over_run", lang), "", *_both(est.peak_reserved_over_run_bytes), "")
    tab.add_row(t("device_total", lang), "", *_both(est.device_total_bytes), "")
    tab.add_row(t("static_total", lang), "", *_both(est.static_bytes), "")
    if est.host_memory_bytes:
        tab.add_row(t("host", lang), "", *_both(est.host_memory_bytes), "")
    con.print(tab)
    con.print(result_line(est, lang))
    con.print(f"[dim]{t('assumptions', lang)}{'：' if lang == 'zh' else ':'}[/dim]")
    for a in est.assumptions:
        con.print(f"[dim]  - {_esc(tr(a, lang))}[/dim]")


def _esc(text: str) -> str:
    """``text`` shown as is by rich (``[...]`` in a message is not markup)."""
    from rich.markup import escape
    return escape(text)


def result_line(est: MemoryEstimate, lang: str = "en") -> str:
    """The verdict under the table (rich markup): fits or not, headroom, the peak's phase, trainable count."""
    override = bool(est.setup.get("gpu_memory"))  # --gpu-memory: the catalog GPU's speed, that memory
    gpu = f"{est.gpu}{' with --gpu-memory' if override else ''} ({est.gpu_memory_bytes / GiB:.1f} GiB)"
    head = est.headroom_bytes / GiB
    if lang == "zh":
        gpu = f"{est.gpu}（{'--gpu-memory ' if override else ''}{est.gpu_memory_bytes / GiB:.1f} GiB）"
        verdict = (f"[green]{gpu}放得下：余量 {head:.2f} GiB[/green]" if est.fits
                   else f"[red]{gpu}放不下：还差 {-head:.2f} GiB[/red]")
        return (f"{verdict}；峰值出现在{_esc(tr(est.peak_phase, lang))}阶段；"
                f"可训练参数 {est.n_trainable_params:,} 个。")
    verdict = f"[green]fits on {gpu}[/green]" if est.fits else f"[red]does NOT fit on {gpu}[/red]"
    return (f"{verdict}; headroom {head:+.2f} GiB; peak during: {_esc(est.peak_phase)}; "
            f"trainable {est.n_trainable_params:,}")


def fix_lines(fix: dict | None, model: str, given: dict, lang: str = "en") -> tuple[str, str]:
    """(what the fix is, the command that runs it) for a run that does not fit — :func:`trainmem.plan.compare.
    cheapest_fix`'s object, the model reference and the setup fields the command line gave; ("...", "") when no
    single change applies."""
    from trainmem.plan.compare import fix_command

    if fix is None:
        return (("没有可应用于此运行的单项改动（trainmem compare 列出各项技术）" if lang == "zh" else
                 "no single change applies to this run (trainmem compare shows each technique)"), "")
    tech = tr(fix["technique"], lang)
    total, mem = fix["device_total_bytes"] / GiB, fix["gpu_memory_bytes"] / GiB
    if lang == "zh":
        head = (f"能放下的最快改动：{tech}（单步时间 {fix['slowdown_pct']:+.1f} %，"
                f"设备占用 {total:.2f} / {mem:.1f} GiB）：" if fix["fits"] else
                f"没有单项改动能放下；省得最多的是：{tech}（设备占用 {total:.2f} / {mem:.1f} GiB，仍放不下）：")
    else:
        head = (f"cheapest fix that fits: {tech} (step time {fix['slowdown_pct']:+.1f} %, device total "
                f"{total:.2f} of {mem:.1f} GiB):" if fix["fits"] else
                f"no single change makes it fit; the one that saves most: {tech} (device total {total:.2f} of "
                f"{mem:.1f} GiB, still short):")
    return head, fix_command("estimate", model, given, fix["changes"])


def print_fix(fix: dict | None, model: str, given: dict, lang: str = "en", console: Console | None = None) -> None:
    """The last lines of ``trainmem estimate`` for a run that does not fit: the cheapest fix that fits, as the
    command to run (printed unwrapped, to be copied)."""
    con = console or Console()
    head, cmd = fix_lines(fix, model, given, lang)
    con.print(f"[bold]{_esc(head)}[/bold]")
    if cmd:
        for line in wrap_command(cmd, con.width):
            con.print(line, markup=False, highlight=False, soft_wrap=True)


def wrap_command(cmd: str, width: int, indent: str = "  ") -> list[str]:
    """A shell command as lines of at most ``width`` characters where it can (a flag stays with its value),
    each but the last ending in `` \\`` so that the lines, pasted, run as one command."""
    import shlex

    words = [shlex.quote(w) for w in shlex.split(cmd)]
    units: list[str] = []
    for w in words:  # "--flag value" is one unit
        if units and units[-1].startswith("--") and " " not in units[-1] and not w.startswith("--"):
            units[-1] += " " + w
        else:
            units.append(w)
    lines, cur = [], indent
    for u in units:
        if cur.strip() and len(cur) + 1 + len(u) + 2 > width:
            lines.append(cur + " \\")
            cur = indent * 2 + u
        else:
            cur = f"{cur} {u}" if cur.strip() else cur + u
    lines.append(cur)
    return lines


def print_max_micro_batch(best: int, est: MemoryEstimate | None, setup: TrainingSetup, lang: str = "en") -> None:
    con = Console()
    from trainmem.memory.search import MICRO_BATCH_CAP
    if lang == "zh":
        if best == 0 or est is None:
            con.print(f"[red]{setup.gpu} 上 micro-batch 为 1 也放不下。[/red]")
            return
        capped = f"（已到搜索上限 {MICRO_BATCH_CAP:,}，更大的 micro-batch 也可能放得下）" if best >= MICRO_BATCH_CAP else ""
        con.print(f"{setup.gpu} 上（序列长度 {setup.seq_len}）能放下的最大 micro-batch：[bold]{best}[/bold]{capped}；"
                  f"设备总占用（nvidia-smi）{est.device_total_bytes / GiB:.2f} GiB / {est.gpu_memory_bytes / GiB:.1f} GiB。")
        return
    if best == 0 or est is None:
        con.print(f"[red]even micro-batch 1 does not fit on {setup.gpu}[/red]")
        return
    capped = f" (the search's cap, {MICRO_BATCH_CAP:,}: larger micro-batches may fit too)" if best >= MICRO_BATCH_CAP else ""
    con.print(f"largest micro-batch that fits ({setup.gpu}, seq {setup.seq_len}): [bold]{best}[/bold]{capped} — "
              f"device total (nvidia-smi) {est.device_total_bytes / GiB:.2f} GiB / {est.gpu_memory_bytes / GiB:.1f} GiB")
