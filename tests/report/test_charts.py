"""The charts draw the estimator's numbers exactly: stacked categories that sum to each timeline
point, the peak with its breakdown, the GPU's limits, the compare/plan/trace/monitor figures; every
figure is a valid plotly figure with GiB axes; labels translate."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainmem.api import build
from trainmem.memory import estimate
from trainmem.report import charts
from trainmem.report.charts import (STACK_ORDER, breakdown_figure, compare_figure, linear_trend, monitor_figure,
                                    plan_memory_figure, plan_time_figure, timeline_figure, timeline_series,
                                    trace_figure)
from trainmem.units import GiB

SETUPS = {
    "fsdp2-8b": ("llama-3.1-8b", {"engine": "fsdp2", "gpus": 8, "seq_len": 4096, "micro_batch": 2, "grad_accum": 2}),
    "ds-zero2": ("llama-2-7b", {"engine": "deepspeed", "zero": 2, "gpus": 8, "grad_accum": 3}),
    "megatron-pp": ("llama-3.1-8b", {"engine": "megatron", "gpus": 8, "tp": 2, "pp": 2, "grad_accum": 4}),
    "lora": ("llama-3.1-8b", {"lora_rank": 16, "recompute": "full"}),
    "torch-ga8": ("llama-3.2-1b", {"grad_accum": 8, "micro_batch": 2}),
}


def _est(key: str) -> dict:
    model, fields = SETUPS[key]
    spec, ts = build(model, **fields)
    return estimate(spec, ts).to_dict()


@pytest.fixture(scope="module")
def ests() -> dict[str, dict]:
    return {k: _est(k) for k in SETUPS}


def _totals(ts) -> list[int]:
    return [sum(v[i] for v in ts.stacks.values()) for i in range(len(ts.x))]


@pytest.mark.parametrize("key", list(SETUPS))
def test_stacks_sum_to_every_point_and_to_the_peak(ests, key: str) -> None:
    est = ests[key]
    ts = timeline_series(est)
    totals = _totals(ts)
    cuda = est["cuda_only_bytes"]
    phase_totals = [t for t, x in zip(totals, ts.x) if x in ts.phase_x]
    assert phase_totals == [p["allocated_bytes"] + cuda for p in est["timeline"]]
    peak_i = ts.x.index(ts.peak_x)
    assert totals[peak_i] == est["peak_allocated_bytes"]
    assert ts.labels[peak_i] == est["peak_phase"]
    j = [p["phase"] for p in est["timeline"]].index(est["peak_phase"])
    assert j < ts.peak_x < j + 1
    if ts.exact:
        assert {c: ts.stacks[c][peak_i] for c in STACK_ORDER} == est["breakdown_at_peak_bytes"]
        assert all(m >= p["allocated_bytes"] + cuda for m, p in zip(ts.phase_max, est["timeline"]))
        assert max(ts.phase_max) == est["peak_allocated_bytes"]


def test_the_seed_picture_flat_baseline_with_waves(ests) -> None:
    """Llama-3.1-8B, FSDP2 on 8 GPUs, 2 micro-batches: the optimizer states are one flat band, the
    parameters stay between their shard and shard + gathered units, and the activations rise from 0
    in each forward and are back to 0 at the next micro-batch and after the step."""
    ts = timeline_series(ests["fsdp2-8b"])
    assert ts.exact
    opt = ts.stacks["optimizer_states"]
    assert len(set(opt)) == 1 and opt[0] == 8_030_261_248  # AdamW, 2 fp32 states of 8.03 B params / 8
    params = ts.stacks["parameters"]
    assert min(params) == 8_030_261_248 // 2 and max(params) < 1.7 * min(params)
    act = dict(zip(ts.labels, ts.stacks["activations"]))
    for mb in (0, 1):
        assert act[f"forward mb{mb}"] == 0 and act[f"loss mb{mb}"] > 40 * GiB
    assert act["optimizer step"] == act["step end"] == 0


def test_timeline_figure_marks_peak_limits_and_axes(ests) -> None:
    est = ests["fsdp2-8b"]
    fig = timeline_figure(est)
    names = [d["name"] for d in fig["data"]]
    stacked = [d for d in fig["data"] if d.get("stackgroup")]
    assert [d["name"] for d in stacked] == ["parameters", "optimizer states", "gradients",
                                            "other (cuBLAS workspace, buffers)", "activations (+ logits/loss)",
                                            "temporaries", "communication buffers"]
    assert {d["legendgroup"] for d in stacked[:2]} == {"static"}
    by_name = dict(zip(names, fig["data"]))
    assert by_name["GPU memory (H100-SXM-80G)"]["y"] == [round(est["gpu_memory_bytes"] / GiB, 4)] * 2
    assert by_name["peak reserved (max_memory_reserved)"]["y"][0] == round(est["peak_reserved_bytes"] / GiB, 4)
    assert by_name["device total (nvidia-smi)"]["y"][0] == round(est["device_total_bytes"] / GiB, 4)
    assert by_name["highest point in each phase"]["line"]["shape"] == "hv"
    assert fig["layout"]["annotations"][0]["text"] == "peak 78.38 GiB — backward mb1"
    assert "GiB" in fig["layout"]["yaxis"]["title"]["text"]
    assert fig["layout"]["xaxis"]["ticktext"][:3] == ["step start", "forward mb0", "loss mb0"]
    assert fig["layout"]["yaxis"]["range"][1] > est["device_total_bytes"] / GiB


def test_without_per_category_points_the_totals_stay_exact(ests) -> None:
    est = dict(ests["fsdp2-8b"])
    est["timeline"] = [{"phase": p["phase"], "allocated_bytes": p["allocated_bytes"]} for p in est["timeline"]]
    ts = timeline_series(est)
    assert not ts.exact and set(ts.stacks) == {"static", "dynamic"} and ts.phase_max is None
    assert [t for t, x in zip(_totals(ts), ts.x) if x in ts.phase_x] == \
        [p["allocated_bytes"] + est["cuda_only_bytes"] for p in est["timeline"]]
    assert max(_totals(ts)) == est["peak_allocated_bytes"]
    fig = timeline_figure(est)
    assert any("not available" in a["text"] for a in fig["layout"]["annotations"])


def test_many_micro_batches_are_drawn_once() -> None:
    spec, ts = build("llama-3.2-1b", grad_accum=40)
    est = estimate(spec, ts).to_dict()
    series = timeline_series(est)
    assert series.omitted == (3, 37)
    assert "forward mb2" in series.labels and "forward mb38" in series.labels and "forward mb20" not in series.labels
    fig = timeline_figure(est)
    assert any("micro-batches 3–37" in a["text"] for a in fig["layout"]["annotations"])
    assert max(_totals(series)) == est["peak_allocated_bytes"]


def test_breakdown_figure(ests) -> None:
    est = ests["fsdp2-8b"]
    fig = breakdown_figure(est)
    at_peak, own = fig["data"]
    assert at_peak["x"] == [round(est["breakdown_at_peak_bytes"][c] / GiB, 4) for c in STACK_ORDER
                            if est["breakdown_at_peak_bytes"][c] or est["category_peak_bytes"][c]]
    assert at_peak["text"][at_peak["y"].index("activations (+ logits/loss)")] == "53.20 GiB · 67.9 %"
    assert all(o >= a for o, a in zip(own["x"], at_peak["x"]))
    assert "GiB" in fig["layout"]["xaxis"]["title"]["text"]


def test_compare_figure() -> None:
    from trainmem.plan.compare import compare
    spec, ts = build("llama-3.1-8b", engine="fsdp2", gpus=8, seq_len=4096, micro_batch=2, grad_accum=2)
    cmp = compare(spec, ts)
    cmp["options"][0]["fits"] = False  # one bar of each colour
    fig = compare_figure(cmp)
    saves = {y: x for d in fig["data"] if d["xaxis"] == "x" for y, x in zip(d["y"], d["x"])}
    slow = {y: x for d in fig["data"] if d["xaxis"] == "x2" for y, x in zip(d["y"], d["x"])}
    for o in cmp["options"]:
        assert saves[o["technique"]] == round(o["saves_bytes"] / GiB, 4)
        assert slow[o["technique"]] == round(o["slowdown_pct"], 2)
    assert {d["name"] for d in fig["data"]} == {"fits on the GPU", "does not fit"}
    assert "GiB" in fig["layout"]["xaxis"]["title"]["text"] and "%" in fig["layout"]["xaxis2"]["title"]["text"]


def _plan() -> dict:
    from trainmem.plan.search import plan
    from trainmem.plan_cli import _request
    return plan(_request("llama-3.2-1b", "8xH100-SXM-80G", 64, 2048, "bf16", 5.0, 3, None, {})).to_dict()


def test_plan_figures() -> None:
    p = _plan()
    mem, tim = plan_memory_figure(p), plan_time_figure(p)
    points = [d for d in mem["data"] if d["mode"] == "markers+text"]
    assert len(points) == len(p["plans"])
    assert [d["y"][0] for d in points] == [round(x["tokens_per_second"], 1) for x in p["plans"]]
    assert [d["x"][0] for d in points] == [round(x["device_total_bytes"] / GiB, 4) for x in p["plans"]]
    for i, plan in enumerate(p["plans"]):
        parts = [d["x"][i] for d in tim["data"]]
        assert sum(parts) == pytest.approx(sum(plan["time_breakdown"].values()), abs=1e-3)


def test_trace_curve_sits_in_its_phases(ests) -> None:
    est = ests["fsdp2-8b"]
    phases = [p["phase"] for p in est["timeline"]]
    trace = {"peak_allocated_bytes": 80 * GiB,
             "timeline": [["forward[0]", 12 * GiB], ["forward[0]", 40 * GiB], ["loss[0]", 60 * GiB],
                          ["backward[1]", 70 * GiB], ["optimizer.step", 15 * GiB], ["zero_grad", 11 * GiB]]}
    fig = trace_figure(est, trace)
    line = next(d for d in fig["data"] if d["name"] == "trace: allocated")
    i = phases.index("forward mb0")
    assert line["x"][:2] == [i, i + 0.5] and line["x"][2] == phases.index("loss mb0")
    assert line["x"][3] == phases.index("backward mb1") and line["x"][4] == phases.index("optimizer step")
    assert line["y"][1] == 40.0
    assert "80.00 GiB traced" in fig["layout"]["title"]["text"]


def test_linear_trend_by_hand() -> None:
    assert linear_trend([0, 1, 2, 3], [1, 3, 5, 7]) == (2.0, 1.0)
    assert linear_trend([1, 2, 3], [4, 4, 4]) == (0.0, 4.0)
    assert linear_trend([5], [9]) == (0.0, 9)
    assert linear_trend([2, 2], [1, 3]) == (0.0, 2.0)
    slope, icpt = linear_trend([0, 1, 2], [0, 1, 5])  # Σ(x-1)(y-2) / Σ(x-1)² = (2 + 0 + 3) / 2
    assert slope == 2.5 and icpt == pytest.approx(2 - 2.5)


@settings(max_examples=200, deadline=None)
@given(st.integers(-10**6, 10**6), st.integers(0, 10**10), st.integers(2, 60))
def test_linear_trend_recovers_a_line(a: int, b: int, n: int) -> None:
    xs = list(range(n))
    slope, icpt = linear_trend(xs, [a * x + b for x in xs])
    assert slope == pytest.approx(a, abs=1e-6 * max(1, abs(a))) and icpt == pytest.approx(b, rel=1e-9, abs=1e-3)


def test_monitor_figure_ranks_and_trend() -> None:
    steps = [{"step": s, "allocated_bytes": GiB + s * 2**20, "reserved_bytes": 2 * GiB, "rank": r}
             for s in range(10) for r in (0, 1)]
    fig = monitor_figure(steps, expected_bytes=GiB)
    names = [d["name"] for d in fig["data"]]
    assert "allocated (rank 0)" in names and "reserved (rank 1)" in names
    assert "trend of allocated (rank 1): +1.000 MiB per step" in names and "expected by the estimate" in names
    one = monitor_figure([s for s in steps if s["rank"] == 0])
    assert [d["name"] for d in one["data"]] == ["allocated", "reserved", "trend of allocated: +1.000 MiB per step"]
    assert "GiB" in fig["layout"]["yaxis"]["title"]["text"]


def test_every_figure_is_valid_plotly(ests) -> None:
    go = pytest.importorskip("plotly.graph_objects")
    from trainmem.plan.compare import compare

    spec, ts = build("llama-2-7b", engine="deepspeed", zero=2, gpus=8)
    figs = [timeline_figure(e) for e in ests.values()] + [breakdown_figure(ests["lora"]),
                                                          compare_figure(compare(spec, ts))]
    p = _plan()
    figs += [plan_memory_figure(p), plan_time_figure(p),
             monitor_figure([{"step": 1, "allocated_bytes": 1, "reserved_bytes": 2}, {"step": 2, "allocated_bytes": 3}]),
             trace_figure(ests["fsdp2-8b"], {"peak_allocated_bytes": 1, "timeline": [["forward[0]", 1]]})]
    for fig in figs:
        go.Figure(fig)  # raises on any property plotly does not know


def test_chinese_labels(ests) -> None:
    from tests.report.test_zh import assert_chinese
    from trainmem.plan.compare import compare

    spec, ts = build("llama-3.1-8b", engine="fsdp2", gpus=8)
    figs = [timeline_figure(ests["fsdp2-8b"], "zh"), breakdown_figure(ests["ds-zero2"], "zh"),
            compare_figure(compare(spec, ts), "zh"), plan_memory_figure(_plan(), "zh"), plan_time_figure(_plan(), "zh"),
            monitor_figure([{"step": s, "allocated_bytes": s, "rank": s % 2} for s in range(4)], "zh", 3)]
    texts = []
    for fig in figs:
        lay = fig["layout"]
        texts += [lay["title"]["text"], *(a["text"] for a in lay.get("annotations", []))]
        texts += [lay[ax]["title"]["text"] for ax in ("xaxis", "yaxis", "xaxis2") if ax in lay and lay[ax]["title"]["text"]]
        texts += lay["xaxis"].get("ticktext", [])
        texts += [d["name"] for d in fig["data"] if not d["name"].startswith("#")]
        texts += [d["legendgrouptitle"]["text"] for d in fig["data"] if "legendgrouptitle" in d]
    assert_chinese("\n".join(texts))
    assert charts.timeline_figure(ests["fsdp2-8b"], "zh")["layout"]["annotations"][0]["text"] == \
        "峰值 78.38 GiB — micro-batch 1 的反向传播"
