"""benchmarks/published.py and its data: well-formed points, expressible points build, the helpers are right."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest

from trainmem.api import build
from trainmem.setup import TrainingSetup

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("published", ROOT / "benchmarks" / "published.py")
published = importlib.util.module_from_spec(_spec)
sys.modules["published"] = published  # dataclasses look their module up
_spec.loader.exec_module(published)

POINTS = published.load_points()
KNOWN = set(TrainingSetup.model_fields)


@pytest.fixture(scope="module")
def rows() -> list:
    """``evaluate_all`` of every point, once for the module (~1 min on two cores): the README headline and the
    diagnosis check read the same rows (evaluate builds and estimates each point; nothing mutates a Row after)."""
    return published.evaluate_all(published.load_points())


def test_at_least_30_points_with_unique_ids():
    ids = [p["id"] for p in POINTS]
    assert len(ids) >= 30
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize("point", POINTS, ids=[p["id"] for p in POINTS])
def test_point_is_well_formed(point):
    src = point["source"]
    assert src["url"].startswith("https://"), "every point cites a source URL"
    assert point["quote"].strip(), "every point quotes its source"
    assert point["metric"] in published.METRICS
    m = point["measured"]
    assert m["unit"] in published.UNITS
    if "value" in m:
        assert m["value"] > 0
    else:
        assert 0 < m["low"] <= m["high"]
    assert isinstance(point["model"], str) and point["model"]
    assert isinstance(point["setup"], dict)
    assert isinstance(point.get("needs", []), list)


@pytest.mark.parametrize("point", [p for p in POINTS if not p.get("needs")], ids=[p["id"] for p in POINTS if not p.get("needs")])
def test_expressible_point_builds(point):
    kept, _missing = published.split_fields(point["setup"], KNOWN)
    build(published.model_ref(point["model"]), **kept)  # raises on a bad setup


def test_median_on_a_hand_example():
    assert published.median([3.0, 1.0, 2.0]) == 2.0
    assert published.median([4.0, 1.0, 3.0, 2.0]) == 2.5
    assert published.median([-0.1]) == -0.1
    assert math.isnan(published.median([]))


def test_relative_error_and_ranges():
    assert published.relative_error(110, 100, 100) == pytest.approx(0.10)
    assert published.relative_error(90, 100, 100) == pytest.approx(-0.10)
    assert published.relative_error(75, 72, 80) == 0.0          # inside a measured range
    assert published.relative_error(88, 72, 80) == pytest.approx(0.10)   # against the nearer bound
    assert published.relative_error(36, 72, 80) == pytest.approx(-0.5)


def test_units():
    assert published.measured_bytes({"value": 1.5, "unit": "GiB"}) == (3 * 2**29, 3 * 2**29)
    assert published.measured_bytes({"value": 19.77, "unit": "GB"}) == (19_770_000_000, 19_770_000_000)
    assert published.measured_bytes({"value": 14949, "unit": "MiB"})[0] == 14949 * 2**20
    assert published.measured_bytes({"low": 72, "high": 80, "unit": "GB"}) == (72 * 10**9, 80 * 10**9)


def test_missing_setup_fields_are_reported_not_fatal():
    kept, missing = published.split_fields({"seq_len": 512, "future_field": 3, "gpu_memory": None}, {"seq_len", "gpu_memory"})
    assert kept == {"seq_len": 512} and missing == ["future_field"]
    row = published.evaluate({"id": "x", "model": "llama-3.2-1b", "metric": "allocated", "setup": {"seq_len": 256, "future_field": 1},
                              "measured": {"value": 1, "unit": "GiB"}}, KNOWN)
    assert "needs future_field" in row.needs and not row.expressible and row.estimate is not None


def test_config_error_is_recorded():
    row = published.evaluate({"id": "bad", "model": "llama-3.2-1b", "metric": "reserved", "setup": {"tp": 3, "engine": "fsdp2", "gpus": 3},
                              "measured": {"value": 1, "unit": "GiB"}}, KNOWN)
    assert row.failure and row.estimate is None and not row.expressible


SPLITS = published.load_splits()


def test_splits_assign_every_source_to_exactly_one_split():
    assert set(SPLITS) == {"dev", "held_out"}
    dev, held = set(SPLITS["dev"]), set(SPLITS["held_out"])
    assert not dev & held, "a source is in both splits"
    repos = {p["source"]["repo"] for p in POINTS}
    assert repos <= dev | held, f"sources without a split: {sorted(repos - dev - held)}"
    assert len(repos) >= 8, "at least 8 independent sources"
    held_points = sum(published.split_of(p, SPLITS) == "held_out" for p in POINTS)
    assert held_points >= 15


def test_split_of_and_split_rows_on_a_hand_example():
    splits = {"dev": ["a/x"], "held_out": ["b/y"]}
    assert published.split_of({"source": {"repo": "a/x"}}, splits) == "dev"
    assert published.split_of({"source": {"repo": "b/y"}}, splits) == "held_out"
    assert published.split_of({"source": {"repo": "c/z"}}, splits) == "unassigned"
    rows = [published.Row(point={"id": i, "source": {"repo": r}}, low=1, high=1, estimate=1, error=e)
            for i, r, e in [("p1", "a/x", -0.2), ("p2", "b/y", 0.05), ("p3", "a/x", -0.05)]]
    parts = published.split_rows(rows, splits)
    assert [r.id for r in parts["dev"]] == ["p1", "p3"] and [r.id for r in parts["held_out"]] == ["p2"]
    assert [r.id for r in published.stats(parts["dev"])["under_10pct"]] == ["p1"]


def test_undeclared_unknown_model_is_a_failure_declared_one_is_not():
    pt = {"id": "x", "model": "no-such-model-xyz", "metric": "reserved", "setup": {}, "measured": {"value": 1, "unit": "GiB"}}
    assert published.evaluate(pt, KNOWN).failure
    row = published.evaluate(dict(pt, needs=["model not in catalog: X"]), KNOWN)
    assert row.failure is None and not row.expressible and row.estimate is None


def test_published_doc_counts_match_the_data():
    """docs/published.md is regenerated by the script: its point counts (which do not move with the estimator) match the data."""
    doc = (ROOT / "docs" / "published.md").read_text(encoding="utf-8")
    assert f"**Summary:** {len(POINTS)} points" in doc
    assert "## Dev and held-out" in doc
    for name in ("dev", "held_out"):
        n = sum(published.split_of(p, SPLITS) == name for p in POINTS)
        assert f"| {name} | {', '.join(SPLITS[name])} | {n} |" in doc


def test_readme_carries_the_scripts_headline(rows) -> None:
    """README's accuracy headline is the paragraph ``benchmarks/published.py --readme`` prints, verbatim."""
    import re
    from pathlib import Path

    para = published.readme_paragraph(rows, published.load_splits())
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    norm = lambda t: re.sub(r"\s+", " ", t)  # noqa: E731
    assert norm(para) in norm(readme), "README.md's published-measurements paragraph differs from the script's " \
                                       "(python benchmarks/published.py --readme)"


def test_dev_since_moves_a_held_out_point_to_dev_and_is_listed():
    """A held-out point that made someone add a feature (``dev_since``) counts as dev and is printed as such."""
    import io

    splits = {"dev": ["a/x"], "held_out": ["b/y"]}
    looked_at = {"id": "p2", "source": {"repo": "b/y"}, "dev_since": "2026-12-02: feature X added because it missed"}
    assert published.split_of(looked_at, splits) == "dev"
    assert published.split_of({"source": {"repo": "b/y"}}, splits) == "held_out"
    pt = {"id": "p2", "model": "llama-3.2-1b", "metric": "allocated", "setup": {"seq_len": 128},
          "measured": {"value": 5, "unit": "GiB"}, "source": {"repo": "b/y", "url": "https://x"}, "quote": "q",
          "dev_since": "2026-12-02: feature X"}
    rows = published.evaluate_all([pt])
    assert [r.id for r in published.turned_dev(rows)] == ["p2"]
    assert published.split_rows(rows, splits)["held_out"] == []
    out = io.StringIO()
    published.print_table(rows, out=out, splits=splits)
    assert "turned into development data (dev_since): 1" in out.getvalue()
    assert "(`dev_since`): 1." in published.readme_paragraph(rows, splits)


def test_every_expressible_point_under_minus_10_has_a_diagnosis(rows):
    missing = [r.id for r in rows if r.expressible and r.error < published.UNDER_BELOW and not r.point.get("diagnosis")]
    assert not missing, f"expressible points under -10 % without a diagnosis: {missing}"


def test_points_this_session_unlocked_are_expressible():
    """Yi-6B and Qwen-7B (Qwen1) are in the catalog and bitsandbytes < 0.43.2 is qlora_impl bnb-legacy: no point
    still declares them as needs."""
    for p in POINTS:
        for n in p.get("needs", []):
            assert not n.startswith(("model not in catalog: 01ai/Yi-6B", "model not in catalog: Qwen/Qwen-7B",
                                     "bitsandbytes < 0.43.2")), (p["id"], n)
    legacy = [p["id"] for p in POINTS if p["setup"].get("qlora_impl") == "bnb-legacy"]
    assert "litgpt-llama2-7b-qlora" in legacy and "swift-qwen7b-qlora-bnb" in legacy
