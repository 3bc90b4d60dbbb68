"""benchmarks/plan_vs_published.py: the mapping runs on every point, and the accuracy against the published,
measured throughput stays where it was measured (issue 8, "Published runs reproduced").

The pinned figures are the ones docs/performance.md reports (calibration: SUSTAINED_FRACTION 0.84,
STEP_OVERHEAD_SECONDS 0.10 s, fitted on the held-in points only). A change of the model that moves them by
more than the margin fails here and must update the doc, the figures and this file together.
"""

from __future__ import annotations

import importlib.util
import math
import sys
import time
from pathlib import Path

import pytest

from trainmem.perf import calibration as cal

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("plan_vs_published", ROOT / "benchmarks" / "plan_vs_published.py")
bench = importlib.util.module_from_spec(_spec)
sys.modules["plan_vs_published"] = bench
_spec.loader.exec_module(bench)

POINTS = [p for p in bench.load_points()] if bench.DATA.exists() else []
needs_points = pytest.mark.skipif(not POINTS, reason="benchmarks/published_throughput.json not present")

#: Measured with the constants above (docs/performance.md), all points (--all), no planner.
HELD_IN_MEDIAN, HELD_OUT_MEDIAN = 0.049, 0.059
HELD_IN_COUNT, HELD_OUT_COUNT = 15, 29
MARGIN = 0.02


@pytest.fixture(scope="module")
def rows():
    start = time.perf_counter()
    out = [bench.evaluate(p) for p in POINTS]
    assert time.perf_counter() - start < 20.0
    return out


def _stat(rows, split: str) -> tuple[int, float, float]:
    got = [(by, k, n, med, mx) for sp, by, k, n, med, mx, _ in bench.summary(rows) if sp == split and by == "all"]
    assert len(got) == 1
    return got[0][2], got[0][3], got[0][4]


@needs_points
def test_every_complete_point_is_predicted(rows):
    complete = [r for r in rows if r.complete]
    assert complete
    for r in complete:
        assert not r.skipped, (r.id, r.skipped)
        assert r.measured and r.predicted and math.isfinite(r.error), r.id
        assert abs(r.error) < 0.5, (r.id, r.error)  # a regression net; the targets are pinned below


@needs_points
def test_held_out_accuracy_is_pinned(rows):
    """Held out (never seen by the calibration): median |error| within 2 points of the measured 5.9 %, and
    inside the issue's 10 % target."""
    n, med, _ = _stat(rows, "held-out")
    assert n == HELD_OUT_COUNT
    assert med <= HELD_OUT_MEDIAN + MARGIN
    assert med <= bench.TARGET_MEDIAN


@needs_points
def test_held_in_accuracy_is_pinned(rows):
    n, med, _ = _stat(rows, "held-in")
    assert n == HELD_IN_COUNT
    assert med <= HELD_IN_MEDIAN + MARGIN


@needs_points
def test_the_model_is_no_longer_systematically_optimistic(rows):
    """Before the sustained-clock, fixed-GEMM-cost, contention and TP-overlap terms the signed median over
    the published points was +22 %; now it is within ±10 % on each split."""
    for split in ("held-in", "held-out"):
        signed = [sg for sp, by, _, _, _, _, sg in bench.summary(rows) if sp == split and by == "all"][0]
        assert abs(signed) < 0.10, (split, signed)


@needs_points
def test_excluded_points_say_why_and_stay_out_of_the_statistics(rows):
    excluded = [r for r in rows if r.excluded]
    assert {r.id for r in excluded} >= set(bench.EXCLUDED)
    assert all(len(r.excluded) > 20 for r in excluded)
    counted = sum(n for sp, by, _, n, *_ in bench.summary(rows) if sp == "all" and by == "all")
    assert counted == sum(1 for r in rows if r.counted) == HELD_IN_COUNT + HELD_OUT_COUNT
    assert not any(r.counted for r in excluded)


@needs_points
def test_split_is_by_source():
    ids = [p["id"] for p in POINTS]
    held = [i for i in ids if cal.is_held_in(i)]
    assert held and all(i.startswith(("mcore-h100-", "tt-")) for i in held)
    assert not any(cal.is_held_in(i) for i in ids if i.startswith(("megatron-a100", "nemo", "mbridge", "lf-",
                                                                     "bloom", "mtnlg", "llama3")))


@needs_points
def test_calibrated_constants_are_the_held_in_optimum():
    """The constants in calibration.py are the held-in optimum of the grid search (checked on its
    neighbourhood, to stay fast)."""
    f, o, _ = bench.calibrate(POINTS, sustained=(0.83, 0.84, 0.85), overheads=(0.09, 0.10, 0.11))
    assert (f, o) == (cal.SUSTAINED_FRACTION, cal.STEP_OVERHEAD_SECONDS)


@needs_points
def test_triton_factor_is_the_optimum_on_the_foundry_rows():
    """TRITON_ATTENTION_FACTOR is the fit's optimum over llm-foundry's H100 rows of 760M-13B at >= 4k tokens
    (neighbourhood), inside the range its sources allow (0.34-0.80), and none of those rows is a point."""
    f, score = bench.calibrate_triton((cal.TRITON_ATTENTION_FACTOR - 0.02, cal.TRITON_ATTENTION_FACTOR,
                                       cal.TRITON_ATTENTION_FACTOR + 0.02))
    assert f == cal.TRITON_ATTENTION_FACTOR and 0.34 <= f <= 0.80 and score < 0.04
    assert not {p["id"] for p in bench.triton_fit_points()} & {p["id"] for p in POINTS}


@needs_points
def test_every_foundry_row_within_ten_percent():
    """The 26 rows of llm-foundry's H100 BF16 table beside the points (the 21 fitted ones and the 30B rows at
    1k-4k, left out of the fit, with BACKWARD_POST's exposed all-gathers) are each within 10 %."""
    rows = [bench.evaluate(p, with_memory=False) for p in bench.foundry_row_points()]
    assert len(rows) == 26 and max(abs(r.error) for r in rows) < 0.10


@needs_points
def test_report_renders(capsys):
    assert bench.main(["--all", "--markdown"]) == 0
    out = capsys.readouterr().out
    assert "| split | by | group | points |" in out and "targets:" in out
    assert "| held-out | all | all |" in out and "Excluded from the statistics" in out
