"""Plotly figures of an estimate, a comparison, a plan, a traced step and a per-step memory log.

Every function takes the JSON objects of the CLI (``trainmem estimate --json``, ``compare --json``,
``plan --json``, ``trace --json``; a doctor log as ``[{step, allocated_bytes, reserved_bytes}]``) and
returns a plotly figure as a plain dict (``{"data": [...], "layout": {...}}``): no plotly import at run
time, the same figure in the HTML report (``trainmem report``) and the web page (``trainmem serve``),
drawn there by the bundled plotly.js. Axes are in GiB (1024³ bytes). Labels go through
:func:`trainmem.report.i18n.tr` (Chinese entries in ``trainmem/report/zh/web.py``).

The iteration timeline is the estimator's own walk of one step (``timeline``: the allocated bytes at
the start of each phase, ``by_category`` per point, ``phase_max_bytes`` the highest point inside each
phase): the static categories stacked as the baseline, gradients, then the dynamic categories on top;
the peak is the estimate's ``breakdown_at_peak_bytes`` drawn inside its phase. Between two known points
the curve is a straight line (activations grow layer by layer in forward and shrink in backward).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from trainmem.report.i18n import t, tr
from trainmem.units import GiB

__all__ = ["TimelineSeries", "timeline_series", "timeline_figure", "breakdown_figure", "compare_figure",
           "plan_memory_figure", "plan_time_figure", "trace_figure", "monitor_figure", "linear_trend",
           "STACK_ORDER", "COLORS", "MAX_MICRO_BATCHES_DRAWN"]

#: Bottom to top: the static baseline (:data:`trainmem.report.table.STATIC_CATEGORIES`), gradients,
#: then what comes and goes inside a step.
STACK_ORDER = ("parameters", "master_weights", "optimizer_states", "gradients", "other", "activations",
               "temporaries", "communication_buffers")
_STATIC = ("parameters", "master_weights", "optimizer_states")
COLORS = {
    "parameters": "#3b6fb6", "master_weights": "#7f6bb8", "optimizer_states": "#6fa8dc",
    "gradients": "#4e9a5b", "other": "#9e9e9e", "activations": "#e8853d", "temporaries": "#d0454c",
    "communication_buffers": "#a6762e", "static": "#3b6fb6", "dynamic": "#e8853d",
}
_CAPACITY, _RESERVED, _DEVICE = "#c62828", "#6a1b9a", "#455a64"
#: Above this many micro-batches the identical middle ones are drawn once (a note says which).
MAX_MICRO_BATCHES_DRAWN = 12
#: The y axis reaches the GPU's memory unless that is more than this times what the step uses.
_ZOOM = 1.6
_MB = re.compile(r"^(forward|loss|backward) mb(\d+)$")
_FONT = {"family": "Noto Sans, Noto Sans CJK SC, DejaVu Sans, Arial, sans-serif", "size": 13}


def _gib(n: float) -> float:
    return round(n / GiB, 4)


@dataclass(frozen=True, slots=True)
class TimelineSeries:
    """What the timeline chart draws, in bytes (the drawing converts to GiB)."""

    labels: list[str]
    """Phase of each point (the English phase name; the last point, ``step end``, has no duration)."""
    x: list[float]
    """Position of each point: phase ``i`` spans ``[x_i, x_i + 1]``; the peak sits inside its phase."""
    stacks: dict[str, list[int]]
    """Bytes per stacked series (categories, or ``static``/``dynamic``) at each point."""
    phase_max: list[int] | None
    """Highest allocated inside each phase (transients included), one per phase start; None if unknown."""
    phase_x: list[float]
    """Positions of the phase starts (``phase_max`` applies from each to the next)."""
    peak_x: float
    peak_bytes: int
    peak_phase: str
    exact: bool
    """True: per-category values from the estimator; False: static baseline + the rest (exact totals)."""
    omitted: tuple[int, int] | None = None
    """Micro-batches (first, last) not drawn because they repeat the one before them exactly."""


def _points_exact(pts: list[dict]) -> bool:
    """The estimator's per-point categories and phase maxima are there and consistent."""
    return bool(pts) and all(
        isinstance(p.get("by_category"), dict) and sum(p["by_category"].values()) == p["allocated_bytes"]
        and p.get("phase_max_bytes", -1) >= p["allocated_bytes"] for p in pts)


def _collapse(pts: list[dict], exact: bool) -> tuple[list[dict], tuple[int, int] | None]:
    """Drop the middle micro-batches when there are many and they repeat micro-batch 2 exactly (their
    totals, and their categories and phase maxima when ``exact``)."""
    mbs = sorted({int(m.group(2)) for p in pts if (m := _MB.match(p["phase"]))})
    if len(mbs) <= MAX_MICRO_BATCHES_DRAWN or mbs != list(range(len(mbs))):
        return pts, None
    first, last = 3, len(mbs) - 3
    ref = {m.group(1): p for p in pts if (m := _MB.match(p["phase"])) and int(m.group(2)) == 2}
    keep, dropped = [], False
    for p in pts:
        m = _MB.match(p["phase"])
        if m and first <= int(m.group(2)) <= last:
            r = ref.get(m.group(1))
            keys = ("allocated_bytes", "by_category", "phase_max_bytes") if exact else ("allocated_bytes",)
            if r is None or any(p.get(k) != r.get(k) for k in keys):
                return pts, None
            dropped = True
            continue
        keep.append(p)
    return (keep, (first, last)) if dropped else (pts, None)


def _peak_breakdown(est: dict, exact: bool, static: int) -> dict[str, int]:
    peak = est["peak_allocated_bytes"]
    if exact:
        return {c: int(est["breakdown_at_peak_bytes"].get(c, 0)) for c in STACK_ORDER}
    base = min(static, peak)
    return {"static": base, "dynamic": peak - base}


def timeline_series(est: dict) -> TimelineSeries:
    """The points of the timeline chart from an estimate's JSON (``cuda_only_bytes``, allocated from the
    first matmul on and kept, is added to ``other`` at every point, as the estimate adds it to the peak)."""
    cuda = int(est.get("cuda_only_bytes", 0))
    exact = _points_exact(est["timeline"])
    pts, omitted = _collapse(list(est["timeline"]), exact)
    static = int(est["static_bytes"])
    stacks: dict[str, list[int]] = {c: [] for c in (STACK_ORDER if exact else ("static", "dynamic"))}
    labels, x = [], []
    for i, p in enumerate(pts):
        total = p["allocated_bytes"] + cuda
        if exact:
            for c in STACK_ORDER:
                stacks[c].append(int(p["by_category"].get(c, 0)) + (cuda if c == "other" else 0))
        else:
            base = min(static, total)
            stacks["static"].append(base)
            stacks["dynamic"].append(total - base)
        labels.append(p["phase"])
        x.append(float(i))
    phase_x = list(x)
    j = next((i for i, p in enumerate(pts) if p["phase"] == est["peak_phase"]), None)
    peak_x = float(len(pts) - 1) if j is None else (j + 0.5 if j < len(pts) - 1 else float(j))
    pos = next(i for i, xv in enumerate(x + [float("inf")]) if xv > peak_x)
    for c, v in _peak_breakdown(est, exact, static).items():
        stacks[c].insert(pos, v)
    labels.insert(pos, est["peak_phase"])
    x.insert(pos, peak_x)
    phase_max = [p["phase_max_bytes"] + cuda for p in pts] if exact else None
    return TimelineSeries(labels=labels, x=x, stacks=stacks, phase_max=phase_max, phase_x=phase_x,
                          peak_x=peak_x, peak_bytes=int(est["peak_allocated_bytes"]), peak_phase=est["peak_phase"],
                          exact=exact, omitted=omitted)


def _series_name(key: str, lang: str) -> str:
    if key == "static":
        return tr("static between steps", lang)
    if key == "dynamic":
        return tr("dynamic (allocated − static)", lang)
    return t(key, lang)


def _stack_traces(ts: TimelineSeries, lang: str) -> list[dict]:
    out = []
    for key, ys in ts.stacks.items():
        if not any(ys):
            continue
        static = key in _STATIC or key == "static"
        group = "static" if static else "dynamic"
        name = _series_name(key, lang)
        out.append({
            "type": "scatter", "mode": "lines", "x": ts.x, "y": [_gib(v) for v in ys], "name": name,
            "stackgroup": "memory", "line": {"width": 0.5, "color": COLORS[key]}, "fillcolor": COLORS[key],
            "legendgroup": group,
            "legendgrouptitle": {"text": tr("static baseline" if static else "changes within the step", lang)},
            "hovertemplate": name + ": %{y:.2f} GiB<extra></extra>",
            "customdata": ts.labels,
        })
    return out


def _hline(y_bytes: int, name: str, color: str, dash: str, x0: float, x1: float) -> dict:
    return {"type": "scatter", "mode": "lines", "x": [x0, x1], "y": [_gib(y_bytes)] * 2, "name": name,
            "line": {"color": color, "dash": dash, "width": 2}, "legendgroup": "limits",
            "hovertemplate": f"{name}: %{{y:.2f}} GiB<extra></extra>"}


def _limit_traces(est: dict, x1: float, lang: str) -> list[dict]:
    return [
        _hline(est["gpu_memory_bytes"], tr(f"GPU memory ({est['gpu']})", lang),
               _CAPACITY, "dash", 0.0, x1),
        _hline(est["device_total_bytes"], t("device_total", lang), _DEVICE, "dashdot", 0.0, x1),
        _hline(est["peak_reserved_bytes"], t("peak_reserved", lang), _RESERVED, "dot", 0.0, x1),
    ]


def _phase_max_trace(ts: TimelineSeries, lang: str) -> dict | None:
    if ts.phase_max is None:
        return None
    x = ts.phase_x + [ts.phase_x[-1]]
    y = [_gib(v) for v in ts.phase_max] + [_gib(ts.phase_max[-1])]
    name = tr("highest point in each phase", lang)
    return {"type": "scatter", "mode": "lines", "x": x, "y": y, "name": name,
            "line": {"color": "#212121", "width": 1.2, "dash": "dot", "shape": "hv"}, "legendgroup": "limits",
            "hovertemplate": name + ": %{y:.2f} GiB<extra></extra>"}


def _ticks(ts: TimelineSeries, lang: str) -> dict:
    phases = [lbl for lbl, xv in zip(ts.labels, ts.x) if xv in ts.phase_x]
    step = max(1, -(-len(phases) // 60))
    vals = ts.phase_x[::step]
    text = [tr(p, lang) for p in phases[::step]]
    return {"tickmode": "array", "tickvals": vals, "ticktext": text, "tickangle": -40}


def _timeline_annotations(ts: TimelineSeries, est: dict, lang: str) -> list[dict]:
    peak_text = tr(f"peak {ts.peak_bytes / GiB:.2f} GiB — {ts.peak_phase}", lang)
    notes = [{"x": ts.peak_x, "y": _gib(ts.peak_bytes), "text": peak_text, "showarrow": True, "arrowhead": 2,
              "ax": 0, "ay": -36, "bgcolor": "rgba(255,255,255,0.85)", "bordercolor": "#212121",
              "font": {"size": 13}}]
    if ts.omitted:
        first, last = ts.omitted
        text = tr(f"micro-batches {first}–{last} are the same as micro-batch 2 and are not drawn", lang)
        notes.append({"xref": "paper", "yref": "paper", "x": 0.0, "y": 1.0, "xanchor": "left", "yanchor": "bottom",
                      "text": text, "showarrow": False, "font": {"size": 11, "color": "#555"}})
    if not ts.exact:
        notes.append({"xref": "paper", "yref": "paper", "x": 1.0, "y": 1.0, "xanchor": "right", "yanchor": "bottom",
                      "text": tr("per-category values are not available for this timeline: static baseline and "
                                 "the rest are shown (totals exact)", lang),
                      "showarrow": False, "font": {"size": 11, "color": "#555"}})
    return notes


def _layout(title: str, xtitle: str, ytitle: str, **extra: object) -> dict:
    layout = {
        "title": {"text": title, "x": 0.01, "xanchor": "left", "font": {"size": 17}},
        "font": _FONT, "template": None, "paper_bgcolor": "white", "plot_bgcolor": "white",
        "xaxis": {"title": {"text": xtitle}, "gridcolor": "#eeeeee", "zeroline": False, "automargin": True},
        "yaxis": {"title": {"text": ytitle}, "gridcolor": "#e0e0e0", "zeroline": True, "zerolinecolor": "#bdbdbd",
                  "automargin": True, "rangemode": "tozero"},
        "legend": {"orientation": "v", "x": 1.01, "y": 1.0, "xanchor": "left", "groupclick": "toggleitem",
                   "font": {"size": 12}},
        "margin": {"l": 70, "r": 20, "t": 70, "b": 60}, "hovermode": "closest", "height": 560,
    }
    layout.update(extra)
    return layout


def timeline_figure(est: dict, lang: str = "en") -> dict:
    """Memory over one optimizer step: the stacked categories, the phase maxima, the peak, the GPU's limits."""
    ts = timeline_series(est)
    x1 = ts.phase_x[-1] if ts.phase_x else 1.0
    data = _stack_traces(ts, lang)
    pm = _phase_max_trace(ts, lang)
    if pm is not None:
        data.append(pm)
    data += _limit_traces(est, x1, lang)
    data.append({"type": "scatter", "mode": "markers", "x": [ts.peak_x], "y": [_gib(ts.peak_bytes)],
                 "name": tr("peak allocated", lang), "marker": {"color": "#212121", "size": 10, "symbol": "diamond"},
                 "legendgroup": "limits", "hovertemplate": "%{y:.2f} GiB<extra></extra>"})
    title = tr(f"Memory over one training step — {est['model']} on {est['gpu']}", lang)
    used = max(est["device_total_bytes"], ts.peak_bytes)
    top = max(used, min(est["gpu_memory_bytes"], int(_ZOOM * used)))
    notes = _timeline_annotations(ts, est, lang)
    if est["gpu_memory_bytes"] > top:  # a small run on a big GPU: keep the waves readable
        notes.append({"xref": "paper", "yref": "paper", "x": 1.0, "y": 1.0, "xanchor": "right", "yanchor": "top",
                      "showarrow": False, "font": {"size": 12, "color": _CAPACITY},
                      "text": tr(f"GPU memory {est['gpu_memory_bytes'] / GiB:.1f} GiB: above this chart", lang)})
    layout = _layout(title, tr("phase of the step (every micro-batch, then the optimizer)", lang),
                     tr("allocated memory (GiB)", lang), annotations=notes)
    layout["xaxis"].update(_ticks(ts, lang))
    layout["xaxis"]["range"] = [-0.2, x1 + 0.2]
    layout["yaxis"]["range"] = [0, _gib(top) * 1.12]
    layout["margin"]["b"] = 110
    return {"data": data, "layout": layout}


def breakdown_figure(est: dict, lang: str = "en") -> dict:
    """What is allocated at the peak, per category, beside each category's own maximum over the step."""
    cats = [c for c in STACK_ORDER if est["breakdown_at_peak_bytes"].get(c, 0) or est["category_peak_bytes"].get(c, 0)]
    names = [t(c, lang) for c in cats]
    peak = max(est["peak_allocated_bytes"], 1)
    at_peak = [est["breakdown_at_peak_bytes"].get(c, 0) for c in cats]
    own = [est["category_peak_bytes"].get(c, 0) + (est.get("cuda_only_bytes", 0) if c == "other" else 0) for c in cats]
    data = [
        {"type": "bar", "orientation": "h", "y": names, "x": [_gib(v) for v in at_peak],
         "name": tr(f"at the peak ({est['peak_phase']})", lang),
         "marker": {"color": [COLORS[c] for c in cats]},
         "text": [f"{v / GiB:.2f} GiB · {100 * v / peak:.1f} %" for v in at_peak], "textposition": "outside",
         "hovertemplate": "%{y}: %{x:.2f} GiB<extra></extra>", "cliponaxis": False},
        {"type": "bar", "orientation": "h", "y": names, "x": [_gib(v) for v in own],
         "name": tr("the category's own maximum over the step", lang),
         "marker": {"color": "rgba(0,0,0,0)", "line": {"color": [COLORS[c] for c in cats], "width": 2}},
         "hovertemplate": "%{y}: %{x:.2f} GiB<extra></extra>"},
    ]
    title = tr(f"Breakdown at the peak — {peak / GiB:.2f} GiB allocated", lang)
    layout = _layout(title, tr("memory (GiB)", lang), "", barmode="group", height=460)
    layout["yaxis"].update({"autorange": "reversed", "rangemode": None})
    layout["xaxis"]["range"] = [0, _gib(max(own + at_peak + [1])) * 1.3]
    layout["legend"] = {"orientation": "h", "x": 0, "y": -0.18, "font": {"size": 12}}
    return {"data": data, "layout": layout}


def compare_figure(cmp: dict, lang: str = "en") -> dict:
    """What each technique saves (GiB) and costs (step-time change, %), coloured by whether it fits."""
    opts = cmp["options"]
    names = [tr(o["technique"], lang) for o in opts]
    data = []
    for fits, color, label in ((True, "#2e7d32", "fits on the GPU"), (False, "#c62828", "does not fit")):
        idx = [i for i, o in enumerate(opts) if bool(o["fits"]) is fits]
        if not idx:
            continue
        ys = [names[i] for i in idx]
        saves = [opts[i]["saves_bytes"] for i in idx]
        slow = [opts[i]["slowdown_pct"] for i in idx]
        common = {"type": "bar", "orientation": "h", "y": ys, "marker": {"color": color}, "legendgroup": label,
                  "name": tr(label, lang), "cliponaxis": False, "textposition": "outside"}
        data.append({**common, "x": [_gib(v) for v in saves], "xaxis": "x", "yaxis": "y",
                     "text": [f"{v / GiB:+.2f} GiB" for v in saves],
                     "hovertemplate": "%{y}: %{x:.2f} GiB<extra></extra>"})
        data.append({**common, "x": [round(v, 2) for v in slow], "xaxis": "x2", "yaxis": "y", "showlegend": False,
                     "text": [f"{v:+.1f} %" for v in slow], "hovertemplate": "%{y}: %{x:.1f} %<extra></extra>"})
    base = cmp["baseline"]
    title = tr(f"What each technique saves and costs — baseline peak {base['peak_allocated_bytes'] / GiB:.2f} GiB", lang)
    layout = _layout(title, tr("memory saved at the peak (GiB)", lang), "", height=max(360, 130 + 34 * len(opts)))
    saves_all = [o["saves_bytes"] / GiB for o in opts] or [1.0]
    slow_all = [o["slowdown_pct"] for o in opts] or [1.0]
    layout["xaxis"].update({"domain": [0.0, 0.44], "range": _padded(saves_all)})
    layout["xaxis2"] = {"domain": [0.56, 1.0], "anchor": "y", "title": {"text": tr("step time change (%)", lang)},
                        "gridcolor": "#eeeeee", "zeroline": True, "zerolinecolor": "#9e9e9e", "automargin": True,
                        "range": _padded(slow_all)}
    layout["yaxis"].update({"autorange": "reversed", "rangemode": None})
    layout["barmode"] = "overlay"
    layout["legend"] = {"orientation": "h", "x": 0, "y": 1.0, "yanchor": "bottom", "font": {"size": 12}}
    layout["margin"]["t"] = 90
    return {"data": data, "layout": layout}


def _padded(values: list[float]) -> list[float]:
    """An axis range holding ``values`` and 0, with room for the bar labels."""
    lo, hi = min(0.0, *values), max(0.0, *values)
    span = (hi - lo) or 1.0
    return [round(lo - (0.28 * span if lo < 0 else 0), 3), round(hi + 0.28 * span, 3)]


def _plan_label(i: int, p: dict) -> str:
    par = " ".join(f"{k}{p[k]}" for k in ("tp", "pp", "cp", "ep") if p.get(k, 1) > 1)
    return f"#{i + 1} {p['engine']} dp{p['dp']} {par} zero{p['zero']} mb{p['micro_batch']}×ga{p['grad_accum']}" \
           + ("" if p["recompute"] == "none" else f" {p['recompute']}") \
           + ("" if p["offload"] == "none" else f" offload={p['offload']}")


_PLAN_SYMBOLS = ("circle", "diamond", "square", "triangle-up", "cross", "x", "star", "hexagon", "pentagon", "triangle-down")
_PLAN_COLORS = ("#3b6fb6", "#e8853d", "#4e9a5b", "#d0454c", "#7f6bb8", "#a6762e", "#e377c2", "#455a64", "#bcbd22",
                "#17becf")


def plan_memory_figure(plan: dict, lang: str = "en") -> dict:
    """The planner's top plans: memory per GPU (device total) against throughput (tokens/s), one
    legend entry per plan (its layout), the GPU's memory as a line."""
    plans = plan["plans"]
    data = []
    for i, p in enumerate(plans):
        label = " ".join(_plan_label(i, p).split())
        data.append({"type": "scatter", "mode": "markers+text", "x": [_gib(p["device_total_bytes"])],
                     "y": [round(p["tokens_per_second"], 1)], "text": [f"#{i + 1}"], "textposition": "top center",
                     "name": label, "marker": {"size": 14, "color": _PLAN_COLORS[i % 10], "symbol": _PLAN_SYMBOLS[i % 10],
                                               "line": {"color": "#212121", "width": 1}},
                     "hovertemplate": label + "<br>%{x:.2f} GiB · %{y:,.0f} tokens/s<extra></extra>"})
    if plans:
        cap = max(p["gpu_memory_bytes"] for p in plans)
        ys = [p["tokens_per_second"] for p in plans]
        lo, hi = min(ys), max(ys)
        pad = max((hi - lo) * 0.25, hi * 0.02)
        types = list(plans[0].get("per_gpu_type", {}))
        name = tr(f"GPU memory ({types[0]})" if len(types) == 1 else "GPU memory", lang)
        data.append({"type": "scatter", "mode": "lines", "x": [_gib(cap)] * 2, "y": [lo - pad, hi + pad], "name": name,
                     "line": {"color": _CAPACITY, "dash": "dash", "width": 2}, "hovertemplate": "%{x:.2f} GiB<extra></extra>"})
    layout = _layout(tr("Top plans: memory per GPU vs throughput", lang),
                     tr("device total per GPU, nvidia-smi (GiB)", lang), tr("throughput (tokens/s)", lang), height=460)
    layout["yaxis"]["rangemode"] = "normal"
    layout["legend"]["font"] = {"size": 12}
    return {"data": data, "layout": layout}


_TIME_PARTS = ("compute", "recompute", "tp_comm", "cp_comm", "ep_comm", "pp_comm", "dp_comm", "bubble", "offload",
               "optimizer")
_TIME_NAMES = {"compute": "compute", "recompute": "recompute", "tp_comm": "tensor-parallel communication",
               "cp_comm": "context-parallel communication", "ep_comm": "expert all-to-all",
               "pp_comm": "pipeline send/receive", "dp_comm": "data-parallel communication", "bubble": "pipeline bubble",
               "offload": "offload traffic", "optimizer": "optimizer step"}
_TIME_COLORS = ("#3b6fb6", "#6fa8dc", "#e8853d", "#f2b36b", "#a6762e", "#7f6bb8", "#4e9a5b", "#bdbdbd", "#d0454c",
                "#455a64")


def plan_time_figure(plan: dict, lang: str = "en") -> dict:
    """Where each top plan's step time goes (stacked seconds)."""
    plans = plan["plans"]
    ys = [" ".join(_plan_label(i, p).split()) for i, p in enumerate(plans)]
    data = []
    for part, color in zip(_TIME_PARTS, _TIME_COLORS):
        xs = [p["time_breakdown"].get(part, 0.0) for p in plans]
        if not any(xs):
            continue
        name = tr(_TIME_NAMES[part], lang)
        data.append({"type": "bar", "orientation": "h", "y": ys, "x": [round(v, 4) for v in xs], "name": name,
                     "marker": {"color": color}, "hovertemplate": name + ": %{x:.3f} s<extra></extra>"})
    layout = _layout(tr("Step time of the top plans, by part", lang), tr("seconds per optimizer step", lang), "",
                     barmode="stack", height=max(320, 150 + 40 * len(plans)))
    layout["legend"]["traceorder"] = "normal"
    layout["yaxis"].update({"autorange": "reversed", "rangemode": None})
    return {"data": data, "layout": layout}


_TRACE_PHASE = re.compile(r"^(forward|loss|backward)\[(\d+)\]$")


def _estimate_phase(trace_phase: str) -> str:
    m = _TRACE_PHASE.match(trace_phase)
    if m:
        return f"{m.group(1)} mb{m.group(2)}"
    return {"optimizer.step": "optimizer step"}.get(trace_phase, trace_phase)


def _trace_x(est_phases: list[str], trace_tl: list) -> tuple[list[float], list[float]]:
    """Place each traced point inside the estimate's phase of the same name (evenly in order)."""
    index = {p: i for i, p in enumerate(est_phases)}
    runs: list[tuple[str, list[int]]] = []
    for ph, n in trace_tl:
        name = _estimate_phase(ph)
        if runs and runs[-1][0] == name:
            runs[-1][1].append(n)
        else:
            runs.append((name, [n]))
    xs, ys, cursor = [], [], 0.0
    for name, vals in runs:
        start = float(index[name]) if name in index else cursor
        for k, v in enumerate(vals):
            xs.append(round(start + k / len(vals), 4))
            ys.append(_gib(v))
        cursor = start + 1.0
    return xs, ys


def trace_figure(est: dict, trace: dict, lang: str = "en") -> dict:
    """A traced step (``trainmem trace --json``) over the estimate's timeline, phase by phase (both
    without the cuBLAS workspace, which a CPU trace does not see)."""
    phases = [p["phase"] for p in est["timeline"]]
    ex = list(range(len(phases)))
    data = [{"type": "scatter", "mode": "lines", "x": ex, "y": [_gib(p["allocated_bytes"]) for p in est["timeline"]],
             "name": tr("estimate: allocated at each phase start", lang), "line": {"color": "#3b6fb6", "width": 3},
             "hovertemplate": "%{y:.2f} GiB<extra></extra>"}]
    if _points_exact(est["timeline"]):
        data.append({"type": "scatter", "mode": "lines", "x": ex + [ex[-1]],
                     "y": [_gib(p["phase_max_bytes"]) for p in est["timeline"]] + [_gib(est["timeline"][-1]["phase_max_bytes"])],
                     "name": tr("estimate: highest point inside each phase", lang),
                     "line": {"color": "#3b6fb6", "dash": "dot", "width": 1.5, "shape": "hv"},
                     "hovertemplate": "%{y:.2f} GiB<extra></extra>"})
    tx, ty = _trace_x(phases, trace["timeline"])
    data.append({"type": "scatter", "mode": "lines", "x": tx, "y": ty, "name": tr("trace: allocated", lang),
                 "line": {"color": "#e8853d", "width": 1.5}, "hovertemplate": "%{y:.2f} GiB<extra></extra>"})
    traced, estimated = trace["peak_allocated_bytes"] / GiB, (est["peak_allocated_bytes"] - est.get("cuda_only_bytes", 0)) / GiB
    title = tr(f"Traced step beside the estimate — peak {traced:.2f} GiB traced, {estimated:.2f} GiB estimated", lang)
    layout = _layout(title, tr("phase of the step (every micro-batch, then the optimizer)", lang),
                     tr("allocated memory (GiB)", lang))
    step = max(1, -(-len(phases) // 60))
    layout["xaxis"].update({"tickmode": "array", "tickvals": ex[::step], "tickangle": -40,
                            "ticktext": [tr(p, lang) for p in phases[::step]]})
    layout["margin"]["b"] = 110
    return {"data": data, "layout": layout}


def linear_trend(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Ordinary least-squares line ``y = slope·x + intercept`` through the points (slope 0 for < 2 points
    or a single x). Drawn over a per-step memory log to show its trend; the doctor's leak test is its own."""
    n = len(xs)
    if n < 2:
        return 0.0, (ys[0] if ys else 0.0)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        return 0.0, my
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    return slope, my - slope * mx


def _monitor_rank(rows: list[dict], r: int, many: bool, color: str, lang: str) -> list[dict]:
    """One rank's allocated and reserved curves and its allocated trend."""
    xs = [s["step"] for s in rows]
    tag = f" (rank {r})" if many else ""
    out = [{"type": "scatter", "mode": "lines+markers", "x": xs, "y": [_gib(s["allocated_bytes"]) for s in rows],
            "name": tr(f"allocated{tag}", lang), "marker": {"size": 4, "color": color}, "line": {"color": color},
            "hovertemplate": "%{x}: %{y:.3f} GiB<extra></extra>"}]
    if any(s.get("reserved_bytes") is not None for s in rows):
        out.append({"type": "scatter", "mode": "lines", "x": xs, "y": [_gib(s.get("reserved_bytes") or 0) for s in rows],
                    "name": tr(f"reserved{tag}", lang), "line": {"dash": "dot", "color": color},
                    "hovertemplate": "%{x}: %{y:.3f} GiB<extra></extra>"})
    if len(rows) >= 2:
        slope, icpt = linear_trend([float(x) for x in xs], [float(s["allocated_bytes"]) for s in rows])
        name = tr(f"trend of allocated{tag}: {slope / 2**20:+.3f} MiB per step", lang)
        out.append({"type": "scatter", "mode": "lines", "x": [xs[0], xs[-1]],
                    "y": [_gib(slope * xs[0] + icpt), _gib(slope * xs[-1] + icpt)], "name": name,
                    "line": {"color": color, "width": 3, "dash": "dash"}, "hovertemplate": "%{y:.3f} GiB<extra></extra>"})
    return out


def monitor_figure(steps: list[dict], lang: str = "en", expected_bytes: int | None = None) -> dict:
    """A per-step memory log (allocated, reserved per step; one colour per rank when ranks are given),
    with each rank's least-squares trend of the allocated memory and, if given, the estimate's expectation."""
    ranks = sorted({int(s.get("rank", 0) or 0) for s in steps})
    data = []
    for i, r in enumerate(ranks):
        rows = sorted((s for s in steps if int(s.get("rank", 0) or 0) == r), key=lambda s: s["step"])
        data += _monitor_rank(rows, r, len(ranks) > 1, _PLAN_COLORS[i % 10], lang)
    first = min((s["step"] for s in steps), default=0)
    last = max((s["step"] for s in steps), default=0)
    if expected_bytes is not None and steps:
        data.append(_hline(expected_bytes, tr("expected by the estimate", lang), "#2e7d32", "dashdot", first, last))
    layout = _layout(tr("Memory per training step", lang), tr("training step", lang), tr("memory (GiB)", lang),
                     height=460)
    layout["yaxis"]["rangemode"] = "normal"
    return {"data": data, "layout": layout}
