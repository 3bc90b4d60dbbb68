"""HTML of an estimate, a comparison, a plan and a doctor's findings: fragments for the web page
(``trainmem serve``) and whole self-contained documents for ``trainmem report`` / ``--report``.

A document embeds plotly.js (:mod:`trainmem.report.plotlyjs`) and its figures as JSON, and loads
nothing from the network: no ``src``/``href`` points outside the file. Every figure comes from
:mod:`trainmem.report.charts`; every label goes through :func:`trainmem.report.i18n.tr` (Chinese in
``trainmem/report/zh/web.py``). All inputs are the CLI's JSON objects.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from html import escape
from pathlib import Path

from trainmem.report import charts
from trainmem.report.i18n import t, tr
from trainmem.units import GB, GiB

__all__ = ["estimate_summary", "fix_paragraph", "estimate_section", "compare_section", "plan_section", "trace_section", "doctor_section",
           "estimate_figures", "compare_figures", "plan_figures", "doctor_figures", "document",
           "estimate_report_html", "plan_report_html", "doctor_report_html", "write_report", "CAUSE_NAMES",
           "STATIC_CATEGORIES"]

#: The flat baseline (the same as the estimate table's "static" rows).
STATIC_CATEGORIES = ("parameters", "master_weights", "optimizer_states")

#: The doctor's cause IDs (``trainmem doctor --json``), as a reader names them.
CAUSE_NAMES = {
    "static_overflow": "model states do not fit (static memory)",
    "activation_overflow": "activations do not fit",
    "leak": "memory grows across steps (leak)",
    "fragmentation": "fragmentation (reserved much above allocated)",
    "duplicate_fp32_copy": "a duplicate FP32 copy of the weights",
    "eval_without_no_grad": "evaluation without torch.no_grad()",
    "rank_imbalance": "one rank holds more than the others",
    "dataloader_memory": "data loader memory (pin_memory, worker copies)",
    "other_process": "another process on the GPU",
    "offload_bottleneck": "offload or ZeRO-3 communication bottleneck",
    "none": "no problem found",
}


def _e(text: object) -> str:
    return escape(str(text), quote=True)


def _gib(n: int | float) -> str:
    return f"{n / GiB:,.2f}"


def _table(headers: list[str], rows: list[list[str]], cls: str = "", testid: str = "") -> str:
    """A table; cells are already HTML (escape text before); a cell that is a number (with a sign, a unit,
    ``a / b`` or ``a×b``: :func:`is_number_cell`) is right-aligned, text is not, even when it starts with a
    digit ("8-bit AdamW")."""
    head = "".join(f"<th>{h}</th>" for h in headers)
    body = []
    for row in rows:
        cells = "".join(f'<td class="num">{c}</td>' if is_number_cell(c) else f"<td>{c}</td>" for c in row)
        body.append(f"<tr>{cells}</tr>")
    tid = f' data-testid="{_e(testid)}"' if testid else ""
    return f'<table class="{_e(cls)}"{tid}><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


_NUMBER = re.compile(r"[+\-−]?[\d,]*\.?\d+(?:e[+\-]?\d+)?(?:\s*(?:%|s|GiB|GB|MiB))?"
                     r"(?:\s*[/×]\s*[\d,]*\.?\d+(?:\s*(?:%|s|GiB|GB|MiB))?)?")


def is_number_cell(cell: str) -> bool:
    """True for a cell that shows a number: ``74.64``, ``+26.77``, ``-0.4 %``, ``1.032 s``, ``53.2 / 79.2``,
    ``2×4``."""
    return _NUMBER.fullmatch(cell.strip()) is not None


def _list(items: list[str], lang: str, cls: str = "notes") -> str:
    return f'<ul class="{cls}">' + "".join(f"<li>{_e(tr(a, lang))}</li>" for a in items) + "</ul>"


# --------------------------------------------------------------------------- estimate

def _verdict(est: dict, lang: str) -> str:
    mem = est["gpu_memory_bytes"] / GiB
    gpu = est["gpu"] + (" with --gpu-memory" if (est.get("setup") or {}).get("gpu_memory") else "")
    if est["fits"]:
        text = f"fits on {gpu} ({mem:.1f} GiB): headroom {est['headroom_bytes'] / GiB:.2f} GiB; " \
               f"the peak is during {est['peak_phase']}"
    else:
        text = f"does NOT fit on {gpu} ({mem:.1f} GiB): {-est['headroom_bytes'] / GiB:.2f} GiB short; " \
               f"the peak is during {est['peak_phase']}"
    cls = "fits" if est["fits"] else "nofit"
    return f'<p class="verdict {cls}" data-testid="verdict">{_e(tr(text, lang))}</p>'


def _key_numbers(est: dict, lang: str) -> str:
    items = [("peak_allocated", est["peak_allocated_bytes"], "peak"), ("peak_reserved", est["peak_reserved_bytes"], "reserved"),
             ("device_total", est["device_total_bytes"], "device-total"), ("static_total", est["static_bytes"], "static")]
    cells = "".join(f'<div class="kpi"><div class="kpi-v" data-testid="{tid}">{_gib(v)} GiB</div>'
                    f'<div class="kpi-l">{_e(t(k, lang))}</div></div>' for k, v, tid in items)
    return f'<div class="kpis">{cells}</div>'


def _estimate_table(est: dict, lang: str) -> str:
    peak = max(est["peak_allocated_bytes"], 1)
    rows = []
    for cat in charts.STACK_ORDER:
        n = est["breakdown_at_peak_bytes"].get(cat, 0)
        if not n:
            continue
        kind = t("static", lang) if cat in STATIC_CATEGORIES else t("dynamic", lang)
        swatch = f'<span class="sw" style="background:{charts.COLORS[cat]}"></span>'
        rows.append([swatch + _e(t(cat, lang)), _e(kind), _gib(n), f"{n / GB:,.2f}", f"{100 * n / peak:.1f} %"])
    for key, field in (("peak_allocated", "peak_allocated_bytes"), ("peak_reserved", "peak_reserved_bytes"),
                       ("device_total", "device_total_bytes"), ("static_total", "static_bytes"),
                       ("host", "host_memory_bytes")):
        n = est.get(field, 0)
        if n or field != "host_memory_bytes":
            rows.append([f"<b>{_e(t(key, lang))}</b>", "", _gib(n), f"{n / GB:,.2f}",
                         "100 %" if field == "peak_allocated_bytes" else ""])
    headers = [_e(t("category", lang)), _e(t("kind", lang)), "GiB", "GB", _e(t("share", lang))]
    return _table(headers, rows, "estimate", "estimate-table")


def _setup_table(est: dict, lang: str) -> str:
    """The model, the GPU and every setup field (as the estimate's ``setup`` holds them), in a grid."""
    head = [(tr("model", lang), est["model"]),
            (tr("parameters (trainable)", lang), f"{est['n_params']:,} ({est['n_trainable_params']:,})"),
            (tr("GPU", lang), f"{est['gpu']} · {_gib(est['gpu_memory_bytes'])} GiB")]
    cells = [f'<div class="kv wide"><span class="k">{_e(k)}</span> <b>{_e(v)}</b></div>' for k, v in head]
    for k, v in est.get("setup", {}).items():
        if k == "gpu":
            continue
        shown = "—" if v is None else (", ".join(map(str, v)) if isinstance(v, list) else str(v).lower() if isinstance(v, bool) else str(v))
        cells.append(f'<div class="kv"><code>{_e(k)}</code> <b>{_e(shown)}</b></div>')
    return f'<div class="setup-grid" data-testid="setup-table">{"".join(cells)}</div>'


def _explain_tables(explain: dict, lang: str) -> str:
    rows = [[_e(t(ln["category"], lang)), _gib(ln["bytes"]), f"<code>{_e(tr(ln['formula'], lang))}</code>",
             _e(tr(ln["source"], lang))] for ln in explain.get("lines", [])]
    out = [f"<h3>{_e(t('explain_title', lang))}</h3>",
           _table([_e(t("category", lang)), "GiB", _e(t("formula", lang)), _e(t("source", lang))], rows, "explain")]
    acc = [[_e(tr(a["name"], lang)), _gib(a["bytes"]), _e(tr(a["why"], lang))] for a in explain.get("accountings", [])]
    if acc:
        out += [f"<h3>{_e(t('acc_title', lang))}</h3>",
                _table([_e(t("accounting", lang)), "GiB", _e(t("why", lang))], acc, "accountings")]
    return "".join(out)


def fix_paragraph(fix: dict | None, model: str, given: dict, lang: str = "en") -> str:
    """For a run that does not fit: the cheapest fix that fits (:func:`trainmem.plan.compare.cheapest_fix`) and
    the command that runs it."""
    from trainmem.report.table import fix_lines
    head, cmd = fix_lines(fix, model, given, lang)
    code = f'<br><code data-testid="fix-command">{_e(cmd)}</code>' if cmd else ""
    return f'<p class="fix" data-testid="fix">{_e(head)}{code}</p>'


def estimate_summary(est: dict, lang: str = "en", fix: str = "") -> str:
    """The verdict (fits or not, the peak's phase), ``fix`` (:func:`fix_paragraph`) and the four key figures."""
    return _verdict(est, lang) + fix + _key_numbers(est, lang)


def estimate_section(est: dict, lang: str = "en", explain: dict | None = None, with_setup: bool = True,
                     with_summary: bool = True) -> str:
    """The estimate as HTML: verdict, key numbers, the setup, the table, the assumptions (and the formulas)."""
    parts = [estimate_summary(est, lang)] if with_summary else []
    if with_setup:
        parts += [f"<h3>{_e(tr('Setup', lang))}</h3>", _setup_table(est, lang)]
    parts += [f"<h3>{_e(tr('Memory at the peak', lang))}</h3>", _estimate_table(est, lang),
              f"<h3>{_e(t('assumptions', lang))}</h3>", _list(est.get("assumptions", []), lang)]
    if explain:
        parts.append(_explain_tables(explain, lang))
    return "".join(parts)


def estimate_figures(est: dict, lang: str = "en") -> dict[str, dict]:
    return {"timeline": charts.timeline_figure(est, lang), "breakdown": charts.breakdown_figure(est, lang)}


# --------------------------------------------------------------------------- compare

def compare_section(cmp: dict, lang: str = "en") -> str:
    """Each technique's peak, saving, step-time change and fit; then what does not apply, and why."""
    base = cmp["baseline"]
    head = tr(f"baseline: peak {base['peak_allocated_bytes'] / GiB:.2f} GiB allocated, "
              f"{base['tokens_per_second']:,.0f} tokens/s", lang)
    rows = []
    for o in cmp["options"]:
        fits = tr("yes", lang) if o["fits"] else tr("no", lang)
        rows.append([_e(tr(o["technique"], lang)), _gib(o["peak_allocated_bytes"]), f"{o['saves_bytes'] / GiB:+,.2f}",
                     f"{o['slowdown_pct']:+.1f} %", f'<span class="{"fits" if o["fits"] else "nofit"}">{_e(fits)}</span>',
                     _e(tr(o["note"], lang)) if o.get("note") else ""])
    headers = [_e(tr(h, lang)) for h in ("technique", "peak GiB", "saves GiB", "step time", "fits", "note")]
    out = [f'<p class="baseline" data-testid="compare-baseline">{_e(head)}</p>',
           _table(headers, rows, "compare", "compare-table")]
    if cmp.get("not_applicable"):
        out.append(f"<h3>{_e(tr('Not applicable to this setup', lang))}</h3>")
        colon = "：" if lang == "zh" else ": "
        out.append('<ul class="notes">' + "".join(f"<li><b>{_e(tr(n['technique'], lang))}</b>{colon}"
                                                 f"{_e(tr(n['reason'], lang))}</li>" for n in cmp["not_applicable"])
                   + "</ul>")
    return "".join(out)


def compare_figures(cmp: dict, lang: str = "en") -> dict[str, dict]:
    return {"compare": charts.compare_figure(cmp, lang)} if cmp.get("options") else {}


# --------------------------------------------------------------------------- plan

def _plan_rows(plan: dict) -> list[list[str]]:
    rows = []
    for i, p in enumerate(plan["plans"]):
        layout = " ".join(f"{k}={p[k]}" for k in ("dp", "tp", "pp", "vpp", "cp", "ep") if k == "dp" or p.get(k, 1) > 1)
        knobs = f"zero={p['zero']} recompute={p['recompute']} offload={p['offload']}"
        rows.append([str(i + 1), _e(p["engine"]), _e(layout), f"{p['micro_batch']}×{p['grad_accum']}", _e(knobs),
                     _e(p["precision"]), _gib(p["device_total_bytes"]), f"{p['tokens_per_second']:,.0f}",
                     f"{100 * p['mfu']:.1f} %", f"{p['step_seconds']:.3f}", _e(p["runs_on"])])
    return rows


def plan_section(plan: dict, lang: str = "en") -> str:
    """The planner's plans, best first, with why the first wins and the search's assumptions."""
    headers = ["#"] + [_e(tr(h, lang)) for h in ("engine", "layout", "mb × ga", "knobs", "precision",
                                                  "GiB per GPU", "tokens/s", "MFU", "s per step", "runs on")]
    out = []
    if not plan["plans"]:
        out.append(f'<p class="nofit" data-testid="plan-none">{_e(tr("no configuration fits", lang))}</p>')
    else:
        out.append(_table(headers, _plan_rows(plan), "plans", "plan-table"))
    if plan.get("why"):
        out.append(f'<p class="why">{_e(tr(plan["why"], lang))}</p>')
    stats = tr(f"searched {plan.get('evaluated', 0):,} configurations, estimated the memory of "
               f"{plan.get('estimated', 0):,}, in {plan.get('search_seconds', 0.0):.2f} s", lang)
    out.append(f'<p class="dim">{_e(stats)}</p>')
    if plan.get("assumptions"):
        out += [f"<h3>{_e(t('assumptions', lang))}</h3>", _list(plan["assumptions"], lang)]
    if plan["plans"] and plan["plans"][0].get("notes"):
        out += [f"<h3>{_e(tr('How the step time is modelled (plan 1)', lang))}</h3>", _list(plan["plans"][0]["notes"], lang)]
    return "".join(out)


def plan_figures(plan: dict, lang: str = "en") -> dict[str, dict]:
    if not plan.get("plans"):
        return {}
    return {"plan-memory": charts.plan_memory_figure(plan, lang), "plan-time": charts.plan_time_figure(plan, lang)}


# --------------------------------------------------------------------------- trace

def trace_section(trace: dict, lang: str = "en") -> str:
    rows = [[_e(t(c, lang)), _gib(trace["breakdown_at_peak_bytes"].get(c, 0)), _gib(trace["category_peak_bytes"].get(c, 0))]
            for c in charts.STACK_ORDER if trace["category_peak_bytes"].get(c, 0)]
    head = tr(f"traced peak {trace['peak_allocated_bytes'] / GiB:.2f} GiB during {trace['peak_phase']} "
              f"in {trace.get('peak_module', '')}", lang)
    return (f'<p data-testid="trace-peak">{_e(head)}</p>'
            + _table([_e(t("category", lang)), _e(tr("at the traced peak GiB", lang)), _e(t("max_over_step", lang))],
                     rows, "trace") + _list(list(trace.get("emulations", [])) + list(trace.get("notes", [])), lang))


# --------------------------------------------------------------------------- doctor

def _cause_name(cause: str) -> str:
    """The doctor's own title of a cause (``trainmem.doctor.report.CAUSE_TITLES``), else :data:`CAUSE_NAMES`."""
    try:
        from trainmem.doctor.report import CAUSE_TITLES
    except ImportError:
        CAUSE_TITLES = {}  # noqa: N806
    return CAUSE_TITLES.get(cause) or CAUSE_NAMES.get(cause, cause)


def _finding(f: dict, lang: str) -> str:
    cause = f.get("cause", "none")
    name = _cause_name(cause)
    nums = []
    if f.get("expected_bytes") is not None:
        nums.append(tr(f"expected {f['expected_bytes'] / GiB:.2f} GiB", lang))
    if f.get("observed_bytes") is not None:
        nums.append(tr(f"observed {f['observed_bytes'] / GiB:.2f} GiB", lang))
    fixes = f.get("fixes") or []
    rows = [[_e(tr(x["action"], lang)), f"{x['saves_bytes'] / GiB:+,.2f}", f"{x['slowdown_pct']:+.1f} %"] for x in fixes]
    table = _table([_e(tr(h, lang)) for h in ("fix", "saves GiB", "step time")], rows, "fixes") if rows else ""
    return (f'<div class="finding" data-testid="finding" data-cause="{_e(cause)}"><h3>{_e(tr(name, lang))} '
            f'<code>{_e(cause)}</code></h3><p>{_e(tr(f.get("evidence", ""), lang))}</p>'
            + (f'<p class="dim">{_e(" · ".join(nums))}</p>' if nums else "") + table + "</div>")


def doctor_section(findings: dict, lang: str = "en") -> str:
    """The doctor's findings, most likely first, each with its evidence and ranked fixes."""
    items = findings.get("findings", [])
    return "".join(_finding(f, lang) for f in items) or f"<p>{_e(tr(CAUSE_NAMES['none'], lang))}</p>"


def doctor_figures(steps: list[dict] | None, lang: str = "en", expected_bytes: int | None = None) -> dict[str, dict]:
    return {"monitor": charts.monitor_figure(steps, lang, expected_bytes)} if steps else {}


# --------------------------------------------------------------------------- documents

_CSS = """
body{font-family:"Noto Sans","Noto Sans CJK SC","DejaVu Sans",Arial,sans-serif;margin:0;color:#212121;background:#fafafa}
main{max-width:1240px;margin:0 auto;padding:16px 20px 40px}
h1{font-size:24px;margin:8px 0 4px}h2{font-size:20px;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}
h3{font-size:16px;margin:18px 0 6px}
table{border-collapse:collapse;margin:6px 0 10px;background:white;font-size:14px}
th,td{border:1px solid #e0e0e0;padding:4px 8px;text-align:left;vertical-align:top}th{background:#f3f3f3}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.chart{background:white;border:1px solid #e0e0e0;margin:10px 0;min-height:300px}
.verdict{font-size:17px;font-weight:600}.fits{color:#2e7d32}.nofit{color:#c62828}
.kpis{display:flex;gap:12px;flex-wrap:wrap;margin:8px 0}.kpi{background:white;border:1px solid #e0e0e0;padding:8px 14px}
.kpi-v{font-size:20px;font-weight:600;font-variant-numeric:tabular-nums}.kpi-l{font-size:12px;color:#555}
.sw{display:inline-block;width:10px;height:10px;margin-right:6px;border-radius:2px}
.notes li{margin:2px 0;font-size:14px}.dim{color:#666;font-size:13px}nav a{margin-right:14px}
code{font-size:12px}.setup-grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(190px,1fr));gap:4px 10px;
background:white;border:1px solid #e0e0e0;padding:8px 10px;font-size:14px}.kv.wide{grid-column:span 2}.kv .k{color:#555}
.kv code{color:#555}.finding{background:white;border:1px solid #e0e0e0;padding:6px 14px;margin:10px 0}
"""

_INIT = """
(function(){var figs=JSON.parse(document.getElementById('trainmem-figures').textContent);
var svg={name:'svg',title:'SVG',icon:Plotly.Icons.disk,click:function(gd){Plotly.downloadImage(gd,{format:'svg',filename:gd.id})}};
var cfg={responsive:true,displaylogo:false,modeBarButtonsToAdd:[svg],toImageButtonOptions:{format:'png',scale:2}};
Object.keys(figs).forEach(function(id){var el=document.getElementById('fig-'+id);if(el){Plotly.newPlot(el,figs[id].data,figs[id].layout,cfg);}});
document.body.setAttribute('data-charts-ready',String(Object.keys(figs).length));})();
"""


def _json_script(obj: object) -> str:
    text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    return text.replace("</", "<\\/").replace("<!--", "<\\!--")


def chart_div(fig_id: str) -> str:
    return f'<div class="chart" id="fig-{_e(fig_id)}" data-testid="chart-{_e(fig_id)}"></div>'


def document(title: str, sections: list[tuple[str, str, str]], figures: dict[str, dict], lang: str = "en") -> str:
    """A whole self-contained HTML document: ``sections`` are (anchor, heading, html) with the charts'
    ``<div>`` in their html (:func:`chart_div`), ``figures`` the plotly figures by id."""
    from importlib.metadata import PackageNotFoundError, version

    from trainmem.report.plotlyjs import plotly_js
    try:
        made_by = f"trainmem {version('trainmem')}"
    except PackageNotFoundError:  # pragma: no cover - a source tree that was never installed
        made_by = "trainmem"
    nav = "".join(f'<a href="#{_e(a)}">{_e(h)}</a>' for a, h, _ in sections)
    body = "".join(f'<section id="{_e(a)}"><h2>{_e(h)}</h2>{html}</section>' for a, h, html in sections)
    return (f'<!DOCTYPE html><html lang="{"zh-CN" if lang == "zh" else "en"}"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1"><title>{_e(title)}</title>'
            f"<style>{_CSS}</style><script>{plotly_js()}</script></head><body><main>"
            f'<h1>{_e(title)}</h1><p class="dim">{_e(tr(f"made by {made_by}; open it offline, nothing is loaded from the network", lang))}</p>'
            f"<nav>{nav}</nav>{body}</main>"
            f'<script type="application/json" id="trainmem-figures">{_json_script(figures)}</script>'
            f"<script>{_INIT}</script></body></html>")


def estimate_report_html(est: dict, lang: str = "en", *, explain: dict | None = None, compare: dict | None = None,
                         plan: dict | None = None, plan_note: str = "", trace: dict | None = None) -> str:
    """The ``trainmem report`` document: setup, estimate, every chart, assumptions and formulas, and
    (when given) the what-if comparison, the planner's plans for the same GPUs and a traced step."""
    figures = estimate_figures(est, lang)
    sections = [("estimate", tr("Estimate", lang), estimate_section(est, lang)),
                ("timeline", tr("Memory over one step", lang),
                 chart_div("timeline") + f'<p class="dim">{_e(tr(_TIMELINE_NOTE, lang))}</p>' + chart_div("breakdown"))]
    if trace is not None:
        figures["trace"] = charts.trace_figure(est, trace, lang)
        sections.append(("trace", tr("Traced step", lang), chart_div("trace") + trace_section(trace, lang)))
    if compare is not None:
        figures.update(compare_figures(compare, lang))
        sections.append(("compare", tr("What each technique saves and costs", lang),
                         (chart_div("compare") if compare.get("options") else "") + compare_section(compare, lang)))
    if plan is not None or plan_note:
        body = f'<p class="dim">{_e(tr(plan_note, lang))}</p>' if plan_note else ""
        if plan is not None:
            figures.update(plan_figures(plan, lang))
            body += "".join(chart_div(k) for k in plan_figures(plan, lang)) if plan.get("plans") else ""
            body += plan_section(plan, lang)
        sections.append(("plan", tr("Fastest plans on the same GPUs", lang), body))
    if explain:
        sections.append(("formulas", tr("Formulas and sources", lang), _explain_tables(explain, lang)))
    title = tr(f"trainmem report — {est['model']} on {est['gpu']}", lang)
    return document(title, sections, figures, lang)


_TIMELINE_NOTE = ("The estimator's walk of one steady optimizer step on the most loaded GPU: each point is the "
                  "memory allocated at the start of a phase, the dotted step line the highest point inside the "
                  "phase; the peak is drawn with its breakdown inside its phase (its position there is schematic).")


def plan_report_html(req, result, lang: str = "en") -> str:  # noqa: ANN001 - PlanRequest, PlanResult
    """The ``trainmem plan --report`` document (``req``: :class:`trainmem.plan.search.PlanRequest`,
    ``result``: :class:`trainmem.plan.result.PlanResult`, or None when only sizing ran)."""
    plan = result.to_dict() if result is not None else {"plans": [], "search_seconds": 0.0}
    groups = ", ".join(f"{g.count}×{g.gpu.name}" for g in req.cluster.groups)
    rows = [[_e(tr("model", lang)), _e(req.spec.name)], [_e(tr("GPUs", lang)), _e(groups)],
            [_e(tr("global batch (sequences)", lang)), f"{req.global_batch:,}"],
            [_e(tr("sequence length", lang)), f"{req.seq_len:,}"], [_e(tr("precision", lang)), _e(req.precision)],
            [_e(tr("margin on reserved memory", lang)), f"{100 * req.margin:.0f} %"]]
    figures = plan_figures(plan, lang)
    sections = [("setup", tr("Setup", lang), _table([_e(tr("setting", lang)), _e(tr("value", lang))], rows, "setup")),
                ("plans", tr("Plans", lang), "".join(chart_div(k) for k in figures) + plan_section(plan, lang))]
    return document(tr(f"trainmem plan — {req.spec.name}", lang), sections, figures, lang)


def doctor_report_html(findings_json: dict, lang: str = "en", steps: list[dict] | None = None,
                       expected_bytes: int | None = None) -> str:
    """The ``trainmem doctor --report`` document: the findings (the ``doctor --json`` object) and, when a
    per-step log is given (``[{step, allocated_bytes, reserved_bytes[, rank]}]``), its curve and trend."""
    figures = doctor_figures(steps, lang, expected_bytes)
    sections = [("findings", tr("Findings", lang), doctor_section(findings_json, lang))]
    if figures:
        sections.append(("monitor", tr("Memory per training step", lang), chart_div("monitor")))
    return document(tr("trainmem doctor", lang), sections, figures, lang)


def _umask() -> int:
    """The process's umask, read without changing it where Linux says it (/proc/self/status, "Umask:"; a
    web server writes from threads), else by setting and restoring it."""
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_report(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` to ``path`` atomically (a temporary file in the same folder, then a rename): an
    error leaves no half-written file. Returns the path written."""
    from trainmem.errors import ConfigError

    out = Path(path)
    folder = out.parent if str(out.parent) else Path(".")
    if not folder.is_dir():
        raise ConfigError(f"-o {str(out)!r}: the folder {str(folder)!r} does not exist")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=folder)
    except OSError as exc:
        raise ConfigError(f"-o {str(out)!r}: cannot write there ({exc.strerror})") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            os.fchmod(fh.fileno(), 0o666 & ~_umask())  # mkstemp's 0600 -> what open() makes (0644, umask 022)
            fh.write(text)
        os.replace(tmp, out)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise ConfigError(f"-o {str(out)!r}: cannot write there ({exc.strerror or exc})") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return out
