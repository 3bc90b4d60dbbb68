"""benchmarks/plan_vs_published.py runs on every complete published point (a smoke test of the mapping;
the accuracy itself is reported by the script, not asserted against the issue's targets)."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("plan_vs_published", ROOT / "benchmarks" / "plan_vs_published.py")
bench = importlib.util.module_from_spec(_spec)
sys.modules["plan_vs_published"] = bench
_spec.loader.exec_module(bench)

POINTS = [p for p in bench.load_points()] if bench.DATA.exists() else []


@pytest.mark.skipif(not POINTS, reason="benchmarks/published_throughput.json not present")
def test_every_complete_point_is_predicted():
    rows = [bench.evaluate(p) for p in POINTS if p.get("complete")]
    assert rows
    for r in rows:
        assert not r.skipped, (r.id, r.skipped)
        assert r.measured and r.predicted and math.isfinite(r.error), r.id
        assert abs(r.error) < 1.0, (r.id, r.error)  # within a factor of two: a regression net, not the target


@pytest.mark.skipif(not POINTS, reason="benchmarks/published_throughput.json not present")
def test_report_renders(capsys):
    assert bench.main(["--markdown"]) == 0
    out = capsys.readouterr().out
    assert "| engine | points |" in out and "targets:" in out
