"""``trainmem validate``: preflight lines grouped by run, signed errors computed by hand, the published-points
format read back by benchmarks/published.py (its estimate is the line's prediction), and bad input in one line."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

import trainmem
from trainmem.cli import main

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import published  # noqa: E402

SETUP = dict(seq_len=512, micro_batch=2, precision="bf16", recompute="full", gpu="A100-SXM-80G")


def _line(measured=None, **setup):
    est = trainmem.estimate("qwen2.5-0.5b", **{**SETUP, **setup})
    return {"setup": est.setup, "model": est.model, "gpu": est.gpu, "fits": est.fits,
            "predicted": {"peak_allocated_bytes": est.peak_allocated_bytes,
                          "peak_reserved_bytes": est.peak_reserved_bytes,
                          "device_total_bytes": est.device_total_bytes},
            "measured": measured, "device": "cuda:0 NVIDIA A100-SXM4-80GB", "versions": {"trainmem": "0.1.0"}}, est


def _write(path: Path, lines: list[dict]) -> str:
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return str(path)


def test_signed_errors_per_run_by_hand(tmp_path, capsys) -> None:
    before, est = _line()
    after, _ = _line({"max_memory_allocated_bytes": 5 * 2**30, "max_memory_reserved_bytes": 6 * 2**30, "step": 2})
    rank1, _ = _line({"max_memory_allocated_bytes": 4 * 2**30, "max_memory_reserved_bytes": 7 * 2**30, "step": 2})
    other, est2 = _line(micro_batch=4)
    log = _write(tmp_path / "pf.jsonl", [before, after, rank1, other])
    assert main(["validate", log, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert len(out["runs"]) == 2 and out["measured_runs"] == 1
    run = out["runs"][0]
    assert run["measured"] == {"allocated": 5 * 2**30, "reserved": 7 * 2**30}  # the largest over the run's lines
    assert run["error"]["allocated"] == pytest.approx((est.peak_allocated_bytes - 5 * 2**30) / (5 * 2**30))
    assert run["error"]["reserved"] == pytest.approx((est.peak_reserved_bytes - 7 * 2**30) / (7 * 2**30))
    assert out["runs"][1]["error"] == {"allocated": None, "reserved": None}
    assert out["summary"]["reserved"]["runs"] == 1


def test_points_are_read_back_by_the_published_benchmark(tmp_path) -> None:
    meas = {"max_memory_allocated_bytes": 5 * 2**30, "max_memory_reserved_bytes": 6 * 2**30, "step": 2}
    line, est = _line(meas)
    log = _write(tmp_path / "pf.jsonl", [line])
    assert main(["validate", log, "--points", str(tmp_path / "points.json")]) == 0
    points = json.loads((tmp_path / "points.json").read_text())["points"]
    assert [p["metric"] for p in points] == ["allocated", "reserved"]
    rows = published.evaluate_all(points)
    assert [r.estimate for r in rows] == [est.peak_allocated_bytes, est.peak_reserved_bytes]
    assert rows[1].error == pytest.approx((est.peak_reserved_bytes - 6 * 2**30) / (6 * 2**30))
    assert (tmp_path / "points.json").stat().st_mode & 0o777 == 0o644


@pytest.mark.parametrize(("text", "msg"), [
    ("not json\n", "pf.jsonl:1: not JSON"),
    ('{"setup": {}}\n', "pf.jsonl:1: not a trainmem preflight line (no model, predicted, measured)"),
    ("\n", "no preflight lines"),
])
def test_bad_logs_are_one_line_and_exit_2(tmp_path, capsys, text, msg) -> None:
    (tmp_path / "pf.jsonl").write_text(text)
    assert main(["validate", str(tmp_path / "pf.jsonl"), "--points", str(tmp_path / "p.json")]) == 2
    err = capsys.readouterr().err
    assert msg in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "p.json").exists()  # nothing half-written
