"""benchmarks/plan_vs_published.py: the mapping runs on every point, and the accuracy against the published,
measured throughput stays where it was measured (issue 8, "Published runs reproduced").

The pinned figures are the ones docs/performance.md reports (calibration: SUSTAINED_FRACTION 0.84,
STEP_OVERHEAD_SECONDS 0.10 s, fitted on the held-in points only). A change of the model that moves them by
more than the margin fails here and must update the doc, the figures and this file together.

Splits: held-in (calibration), dev (the rest of published_throughput.json: not fitted on, but features were
added in answer to its misses — called "held-out" before issue 17) and held-out
(published_throughput_heldout.json, frozen before any estimate was run on it).
"""

from __future__ import annotations

import importlib.util
import json
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
HELDOUT = bench.load_heldout_points()
needs_points = pytest.mark.skipif(not POINTS, reason="benchmarks/published_throughput.json not present")
needs_heldout = pytest.mark.skipif(not HELDOUT, reason="benchmarks/published_throughput_heldout.json not present")

#: Measured with the constants above (docs/performance.md), all points (--all), no planner.
HELD_IN_MEDIAN, DEV_MEDIAN = 0.049, 0.059
HELD_IN_COUNT, DEV_COUNT = 15, 29
#: The frozen held-out set, run after each batch was committed (batch 1 eff328d: 22 counted, median 3.2 %;
#: batch 2 b76d5a3): 43 counted of 49, median 4.1 %, max 26.5 % (llm-foundry MPT-30B at 8k on 8 A100 80GB),
#: signed +3.5 %.
HELDOUT_MEDIAN, HELDOUT_MAX, HELDOUT_COUNT = 0.041, 0.265, 43
MARGIN = 0.02


@pytest.fixture(scope="module")
def rows():
    start = time.perf_counter()
    out = [bench.evaluate(p) for p in POINTS + HELDOUT]
    assert time.perf_counter() - start < 30.0
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
def test_dev_accuracy_is_pinned(rows):
    """Dev (never seen by the calibration, but modelled against): median |error| within 2 points of the measured
    5.9 %, and inside the issue's 10 % target."""
    n, med, _ = _stat(rows, "dev")
    assert n == DEV_COUNT
    assert med <= DEV_MEDIAN + MARGIN
    assert med <= bench.TARGET_MEDIAN


@needs_heldout
def test_held_out_accuracy_is_pinned(rows):
    """The frozen held-out set: median and max within 2 points of the first run's 4.1 % and 26.5 %."""
    n, med, mx = _stat(rows, "held-out")
    assert n == HELDOUT_COUNT
    assert med <= HELDOUT_MEDIAN + MARGIN and mx <= HELDOUT_MAX + MARGIN
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
    for split in ("held-in", "dev", "held-out"):
        signed = [sg for sp, by, _, _, _, _, sg in bench.summary(rows) if sp == split and by == "all"][0]
        assert abs(signed) < 0.10, (split, signed)


@needs_points
def test_excluded_points_say_why_and_stay_out_of_the_statistics(rows):
    excluded = [r for r in rows if r.excluded]
    assert {r.id for r in excluded} >= set(bench.EXCLUDED)
    assert all(len(r.excluded) > 20 for r in excluded)
    counted = sum(n for sp, by, _, n, *_ in bench.summary(rows) if sp == "all" and by == "all")
    assert counted == sum(1 for r in rows if r.counted) == HELD_IN_COUNT + DEV_COUNT + (HELDOUT_COUNT if HELDOUT else 0)
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
    assert "| dev | all | all |" in out and "Excluded from the statistics" in out
    if HELDOUT:
        assert "| held-out | all | all |" in out and "Held-out points off by more than 25 %" in out


# -- the frozen held-out set -------------------------------------------------------------------------
@needs_heldout
def test_held_out_set_is_frozen_and_apart():
    """Frozen (its date and the words in _about), none of its points held in, in the dev file, or among the
    llm-foundry rows the Triton factor is fitted on; every point says where it comes from."""
    data = json.loads(bench.HELDOUT.read_text())
    assert data["frozen"] == "2026-12-01" and "frozen 2026-12-01 before any estimate" in data["_about"]
    ids = [p["id"] for p in HELDOUT]
    assert len(ids) == len(set(ids)) >= 20
    assert not set(ids) & {p["id"] for p in POINTS}
    assert not set(ids) & {p["id"] for p in bench.foundry_row_points()}
    assert not any(cal.is_held_in(i) for i in ids) and all(bench.split_of(p) == "held-out" for p in HELDOUT)
    assert all(bench.split_of(p) in ("held-in", "dev") for p in POINTS)
    for p in HELDOUT:
        assert p["source"].startswith("https://github.com/") and "/blob/" in p["source"] and p["quote"], p["id"]
        assert p["source_group"] and ("missing" in p and (p["complete"] or p["missing"])), p["id"]
        assert p["batch"] in (1, 2), p["id"]


@needs_heldout
def test_held_out_fields_match_their_quoted_rows():
    """Each point's configuration and measurement are the ones of the table row it quotes (llm-foundry's
    20 columns: model, seq, GPUs, GPU, MFU, HFU, TFLOP, micro-batch, accumulation, global batch, ..., T/s/GPU,
    ..., activation checkpointing; fms-fsdp's 6: size, sharding, AC, batch, A100 and H100 tokens/s/GPU; Narayanan
    et al.'s 9: size, hidden, layers, params, model-parallel size, GPUs, batch, TFLOP/s, % of peak; dgxc's table
    header (TP, PP, CP, VP), its column (GPUs, GBS) and step time, whose tokens/s/GPU must match the table's
    tokens/s row within 1 %)."""
    import re
    lf = fms = meg = dg = 0
    for p in HELDOUT:
        cells = [c.strip() for c in p["quote"].strip().strip("|").split("|")]
        if p["id"].startswith("megatron-"):
            meg += 1
            assert (int(cells[1]), int(cells[2])) == (p["model"]["hidden"], p["model"]["layers"])
            assert (int(cells[4]), int(cells[5]), int(cells[6])) == (p["tp"] * p["pp"], p["gpus"], p["global_batch"])
            assert float(cells[7]) == p["measured"]["tflops_per_gpu"]["value"] and p["dp"] * p["tp"] * p["pp"] == p["gpus"]
            continue
        if p["id"].startswith("dgxc"):
            dg += 1
            knobs = dict(re.findall(r"\b(TP|PP|CP|VP|MBS)=(\d+)", cells[0]))
            assert (int(knobs["TP"]), int(knobs["PP"]), int(knobs.get("CP", 1))) == (p["tp"], p["pp"], p["cp"]), p["id"]
            assert int(knobs["MBS"]) == p["micro_batch"] and p["vpp"] == (int(knobs["VP"]) if "VP" in knobs else None) or p["doubt"]
            assert re.search(rf"\b{p['gpus']}x H100 GPUs", cells[1]) and re.search(rf"GBS[= ]{p['global_batch']}\b", cells[1])
            step = p["measured"]["step_seconds"]["value"]
            per_gpu = p["seq_len"] * p["global_batch"] / step / p["gpus"]
            assert p["derived"]["tokens_per_second_per_gpu"] == pytest.approx(per_gpu, abs=0.1)
            assert per_gpu == pytest.approx(p["measured"]["tokens_per_second"]["value"] / p["gpus"], rel=0.01), p["id"]
            continue
        tput = p["measured"]["tokens_per_second_per_gpu"]["value"]
        if p["id"].startswith("lf-"):
            lf += 1
            assert p["model"]["name"] == "MPT-" + cells[0] and int(cells[1]) == p["seq_len"] == p["model"]["seq_len"]
            assert int(cells[2]) == p["gpus"] and cells[3] == {"A100-SXM-80G": "a100_80gb", "A100-SXM-40G": "a100_40gb"}[p["gpu"]]
            assert (int(cells[7]), int(cells[9]), float(cells[12])) == (p["micro_batch"], p["global_batch"], tput)
            assert (cells[17] == "True") == p["recompute"].startswith("full"), p["id"]
        else:
            fms += 1
            assert p["id"].startswith("fms-") and cells[0] in p["id"] and int(cells[3]) == p["micro_batch"] == 2
            assert float(cells[4 if p["gpu"].startswith("A100") else 5]) == tput
            assert p["global_batch"] == 2 * p["gpus"] and (cells[1] == "HSDP") == bool(p.get("excluded"))
    assert (lf, fms, meg, dg) == (16, 8, 5, 20)


@needs_heldout
def test_fms_points_are_not_mapped_as_composer():
    """IBM's fms-fsdp is plain PyTorch FSDP1: none of llm-foundry's Composer mapping (Triton attention, fused
    cross-entropy, BACKWARD_POST); its stated network (400 Gb/s per 8-GPU node) is the cluster's inter link."""
    p = next(p for p in HELDOUT if p["id"] == "fms-a100-bf16-llama2-70b-128gpu")
    how: list[str] = []
    spec = bench.build_spec(p, how)
    gpu = bench.build_gpu(p["gpu"], [])
    s = bench.build_setup(p, spec, gpu, [], how)
    assert s.attn_kernel != "triton" and s.loss != "fused-ce" and s.backward_prefetch != "post"
    grp = bench.build_group(p, gpu, [], how)
    assert grp.inter.gbps == pytest.approx(50 / 8)


@needs_heldout
def test_performance_doc_shows_what_the_script_prints(rows):
    """docs/performance.md's summary table, its list of held-out points over 25 % and every row of its Points
    table are the script's own output (``--all --markdown``); a change of the model or of a point that is not
    regenerated into the doc fails here."""
    doc = (ROOT / "docs" / "performance.md").read_text(encoding="utf-8")
    assert "\n".join(bench._render_summary(rows, True)) in doc
    assert "\n".join(bench._over(rows)) in doc
    head, table = bench._table(rows, with_plans=False)
    doc_rows = {line.split(" | ")[0][2:]: line for line in doc.splitlines() if line.startswith("| ")}
    for r, cells in zip(rows, table):
        line = doc_rows.get(r.id)
        assert line is not None, r.id
        got = [c.strip() for c in line.strip().strip("|").split(" | ")]
        # the doc's Points table carries the planner's two columns before the flags (--with-plans)
        assert got[:9] == cells[:9] and got[-1] == cells[-1], (r.id, got, cells)
