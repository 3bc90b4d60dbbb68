"""The doctor's report: the ``--json`` object (the contract) and the plain-text report, in English or Chinese.

JSON: ``{"findings": [{"cause", "evidence", "expected_bytes", "observed_bytes", "fixes": [{"action",
"saves_bytes", "slowdown_pct", "fits"}], "likelihood"}], "setup", "assumptions"}`` (the last two with an estimate:
a MODEL), most likely first (``undetermined`` first when no cause reaches the threshold,
:data:`trainmem.doctor.rules.THRESHOLD`); with ``--lang zh`` the evidence and the actions are in
Chinese (the cause IDs never change).
"""

from __future__ import annotations

from trainmem.doctor.case import Expected, Finding
from trainmem.doctor.fixes import NOT_COMPARED
from trainmem.report.i18n import tr
from trainmem.units import fmt_bytes

__all__ = ["CAUSE_TITLES", "to_json", "render_text"]

CAUSE_TITLES = {
    "static_overflow": "static overflow: the model states do not fit",
    "activation_overflow": "activation overflow: the step's dynamic memory does not fit",
    "leak": "leak: memory grows from step to step",
    "fragmentation": "fragmentation: reserved memory the allocator cannot use",
    "duplicate_fp32_copy": "duplicate copy of the weights",
    "eval_without_no_grad": "evaluation without torch.no_grad()",
    "rank_imbalance": "one rank holds more than the others",
    "dataloader_memory": "the data loader holds GPU memory",
    "other_process": "other processes hold GPU memory",
    "offload_bottleneck": "slow but stable: offload or ZeRO-3 communication",
    "host_pinned_memory": "pinned (page-locked) host memory ran out, not the GPU's",
    "undetermined": "cannot tell: no cause reaches the threshold",
    "none": "no problem found",
}


def to_json(findings: list[Finding], lang: str = "en", expected: Expected | None = None) -> dict:
    """The ``--json`` object; with the run's estimate (``expected``), also the ``setup`` it validated and its
    ``assumptions`` (as ``trainmem estimate --json`` gives them: a ``--config`` / ``--from`` file's lines among them)."""
    sep = "；" if lang == "zh" else "; "
    out: dict = {"findings": [f.to_dict(lambda s: tr(s, lang), sep) for f in findings]}
    if expected is not None:
        out["setup"] = dict(expected.estimate.setup)
        out["assumptions"] = [tr(a, lang) for a in expected.estimate.assumptions]
    return out


def _bytes(n: int | None) -> str:
    return "n/a" if n is None else fmt_bytes(n)


def _finding_lines(i: int, f: Finding, lang: str) -> list[str]:
    t = lambda s: tr(s, lang)  # noqa: E731
    out = [t(f"{i}. {f.cause} — {CAUSE_TITLES[f.cause]} (likelihood {f.likelihood:.2f})")]
    out += [f"   - {t(s)}" for s in f.evidence]
    if f.cause != "none" or f.expected_bytes is not None or f.observed_bytes is not None:
        out.append("   " + t(f"expected {_bytes(f.expected_bytes)}, observed {_bytes(f.observed_bytes)}"))
    if f.fixes:
        out.append("   " + t("fixes (memory saved for this run, step-time change):"))
        for x in f.fixes:
            if x.saves_bytes == 0 and NOT_COMPARED in x.action:  # capacity, with no step time to compare
                out.append("     * " + t(x.action))
                continue
            if x.saves_bytes == 0:  # capacity, not savings (a bigger GPU), or bytes nothing sizes (no estimate)
                fit = ", fits" if x.fits else ""
                out.append("     * " + t(f"{t(x.action)}: step time {x.slowdown_pct:+.1f} %{fit}"))
                continue
            mem = f"saves {fmt_bytes(x.saves_bytes)}" if x.saves_bytes >= 0 else f"uses {fmt_bytes(-x.saves_bytes)} more"
            fit = ", fits" if x.fits else ""
            out.append("     * " + t(f"{t(x.action)}: {mem}, step time {x.slowdown_pct:+.1f} %{fit}"))
    return out


def render_text(findings: list[Finding], notes: list[str], lang: str = "en") -> str:
    lines = [tr("trainmem doctor: findings, most likely first", lang)]
    for i, f in enumerate(findings, 1):
        lines += _finding_lines(i, f, lang)
    if notes:
        lines.append(tr("notes:", lang))
        lines += [f"   - {tr(n, lang)}" for n in notes]
    return "\n".join(lines)
