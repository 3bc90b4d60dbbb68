"""The rules on constructed evidence: each names its cause, with the fixes ``trainmem compare`` computes for the run,
and stays silent when its evidence is absent."""

from __future__ import annotations

from functools import lru_cache

import pytest
from hypothesis import given, settings, strategies as st

from trainmem.api import build
from trainmem.doctor.case import CAUSES, Evidence, Expected
from trainmem.doctor.fixes import EXPANDABLE
from trainmem.doctor.frames import Where
from trainmem.doctor.nvsmi import GPUMemory, GPUProcess, NvidiaSmi
from trainmem.doctor.oom import OOMReport
from trainmem.doctor.rules import RULES, THRESHOLD, diagnose
from trainmem.doctor.steplog import StepLog, StepRecord
from trainmem.memory import estimate
from trainmem.units import GiB, MiB


@lru_cache(maxsize=None)
def _exp(model: str, **flags: object) -> Expected:
    spec, setup = build(model, **flags)
    return Expected(spec=spec, setup=setup, estimate=estimate(spec, setup))


def _log(values: list[int], rank: int = 0, peak_extra: int = 0) -> StepLog:
    recs = tuple(StepRecord(step=i, allocated_bytes=v, rank=rank, peak_allocated_bytes=v + peak_extra)
                 for i, v in enumerate(values))
    return StepLog(records=recs, ranks=(rank,))


def test_no_evidence_no_finding() -> None:
    assert all(rule(Evidence(), None) is None for rule in RULES)
    assert [f.cause for f in diagnose(Evidence(), None)] == ["none"]


def test_static_overflow_predicted_with_sharding_fixes_from_compare() -> None:
    """llama-2-7b with AdamW on 8 GPUs, plain DDP: 16 B/param ≈ 100 GiB of model states on an 80 GB GPU. The fixes
    are compare's sharding rows, with compare's own saves and slowdowns."""
    exp = _exp("llama-2-7b", gpus=8)
    f = next(x for x in diagnose(Evidence(), exp) if x.cause == "static_overflow")
    rows = {o["technique"]: o for o in exp.compare()["options"]}
    assert f.fixes and f.expected_bytes == exp.estimate.static_bytes
    from_compare = [x for x in f.fixes if x.action.split(" (--")[0] in rows]
    assert from_compare and f.fixes[:len(from_compare)] == tuple(from_compare)  # compare's rows, then the others
    for fix in from_compare:
        tech = fix.action.split(" (--")[0]
        assert fix.saves_bytes == rows[tech]["saves_bytes"] and fix.slowdown_pct == rows[tech]["slowdown_pct"]
        assert fix.fits == rows[tech]["fits"]
        assert rows[tech]["setup"]["engine"] != "torch" or rows[tech]["setup"]["zero"] != 0
    order = [o["technique"] for o in exp.compare()["options"]]
    assert [order.index(x.action.split(" (--")[0]) for x in from_compare] == sorted(
        order.index(x.action.split(" (--")[0]) for x in from_compare)  # compare's order: those that fit first
    assert all(x.action.startswith(("quantized base", "a bigger GPU", "more GPUs")) for x in f.fixes[len(from_compare):])


def test_static_overflow_at_load_without_estimate() -> None:
    ev = Evidence(oom=OOMReport(form="truncated", era="unknown", line="", tried_bytes=112 * MiB),
                  where=Where(phase="model_load", location="modeling.py:400 set_module_tensor_to_device"))
    f = diagnose(ev, None)[0]
    assert f.cause == "static_overflow" and f.likelihood >= 0.9 and f.fixes == ()


def test_activation_overflow_fixes_are_compare_rows() -> None:
    exp = _exp("llama-3.1-8b", micro_batch=8, seq_len=4096)
    ev = Evidence(where=Where(phase="forward", module="lm_head", location="modeling_llama.py:837 forward"))
    f = next(x for x in diagnose(ev, exp) if x.cause == "activation_overflow")
    saves = [x.saves_bytes for x in f.fixes]
    assert saves and all(s > 0 for s in saves)
    rows = {o["technique"]: o["saves_bytes"] for o in exp.compare()["options"]}
    from_compare = [x for x in f.fixes if x.action.split(" (--")[0] in rows]
    assert from_compare and all(rows[x.action.split(" (--")[0]] == x.saves_bytes for x in from_compare)
    assert all(x.action.startswith(("shorter or truncated sequences", "quantized base", "a bigger GPU"))
               for x in f.fixes[len(from_compare):])


def test_fragmentation_fix_saves_observed_minus_expected() -> None:
    exp = _exp("llama-3.2-1b", micro_batch=4)
    o = OOMReport(form="unallocated", era="torch ≥ 2.2", line="", tried_bytes=8 * GiB, total_bytes=80 * GiB,
                  free_bytes=1 * GiB, allocated_bytes=60 * GiB, unallocated_bytes=18 * GiB)
    f = next(x for x in diagnose(Evidence(oom=o), exp) if x.cause == "fragmentation")
    slack = exp.estimate.peak_reserved_bytes - exp.estimate.peak_allocated_bytes
    assert f.fixes[0].action == EXPANDABLE and f.fixes[0].saves_bytes == 18 * GiB - slack
    assert (f.expected_bytes, f.observed_bytes) == (slack, 18 * GiB)


def test_this_process_in_a_container_is_not_another_process() -> None:
    """NVML lists this process as "Process N" when the PID namespaces differ: the one holding PyTorch's reserve."""
    o = OOMReport(form="unallocated", era="torch 2.1", line="", tried_bytes=496 * MiB, device=0, total_bytes=15 * GiB,
                  free_bytes=235 * MiB, allocated_bytes=14 * GiB, unallocated_bytes=330 * MiB,
                  other_processes=((20398, 14 * GiB + 500 * MiB), (777, 300 * MiB)))
    f = diagnose(Evidence(oom=o), None)[0]
    assert f.cause == "other_process" and f.likelihood == 0.85  # 300 MiB + 235 MiB free ≥ the 496 MiB asked
    assert [(x.action, x.saves_bytes) for x in f.fixes] == [("stop process 777 on GPU 0", 300 * MiB)]


@pytest.mark.parametrize("k", [4, 2])
def test_duplicate_copy_of_the_weights(k: int) -> None:
    exp = _exp("qwen2.5-0.5b", micro_batch=2)
    extra = k * exp.spec.n_params
    f = diagnose(Evidence(log=_log([exp.estimate.static_bytes + extra] * 60)), exp)[0]
    assert f.cause == "duplicate_fp32_copy" and f.fixes[0].saves_bytes == extra
    assert (" fp32 " in f.evidence[0]) == (k == 4)


def test_leak_and_its_fix_is_the_growth() -> None:
    f = diagnose(Evidence(log=_log([10 * GiB + 4 * MiB * i for i in range(200)])), None)[0]
    assert f.cause == "leak" and f.fixes[0].saves_bytes == pytest.approx(4 * MiB * 179, rel=0.02)


def test_rank_imbalance_from_log_and_from_foreign_contexts() -> None:
    recs = tuple(StepRecord(step=i, allocated_bytes=10 * GiB + (3 * GiB if r == 5 else 0), rank=r)
                 for r in range(8) for i in range(30))
    f = diagnose(Evidence(log=StepLog(records=recs, ranks=tuple(range(8)))), None)[0]
    assert f.cause == "rank_imbalance" and f.observed_bytes - f.expected_bytes == 3 * GiB
    procs = (GPUProcess(0, 100, "python", 60 * GiB), GPUProcess(0, 101, "python", 500 * MiB),
             GPUProcess(0, 102, "python", 500 * MiB), GPUProcess(1, 101, "python", 60 * GiB),
             GPUProcess(2, 102, "python", 60 * GiB))
    smi = NvidiaSmi(gpus=tuple(GPUMemory(i, "H100", 61 * GiB, 80 * GiB) for i in range(3)), processes=procs, form="table")
    f = diagnose(Evidence(nvsmi=smi), None)[0]
    assert f.cause == "rank_imbalance" and f.likelihood == 0.9 and f.observed_bytes == 1000 * MiB


def test_offload_bottleneck_fixes_are_faster_and_fit() -> None:
    exp = _exp("llama-2-7b", engine="deepspeed", zero=3, offload="optimizer+params", gpus=8, micro_batch=2)
    f = diagnose(Evidence(log=_log([exp.estimate.static_bytes] * 60)), exp)[0]
    assert f.cause == "offload_bottleneck" and f.fixes and all(x.slowdown_pct < 0 for x in f.fixes)


def test_healthy_log_against_its_estimate_is_none() -> None:
    exp = _exp("llama-3.1-8b", engine="fsdp2", gpus=8, micro_batch=2)
    f = diagnose(Evidence(log=_log([exp.estimate.static_bytes] * 100)), exp)
    assert [x.cause for x in f] == ["none"]


_SIZES = st.integers(0, 200 * GiB)


@settings(max_examples=200, deadline=None)
@given(_SIZES, st.integers(1, 200 * GiB), _SIZES, _SIZES, _SIZES, st.sampled_from(
    ["model_load", "forward", "loss", "backward", "optimizer_step", "dataloader", "unknown"]), st.booleans())
def test_any_oom_gives_ordered_findings(tried: int, total: int, free: int, alloc: int, unalloc: int, phase: str,
                                        in_eval: bool) -> None:
    """Whatever the numbers: known causes, likelihoods in [0, 1], most likely first, never 'none' for an OOM, and
    'undetermined' first exactly when no named cause reaches the threshold."""
    o = OOMReport(form="unallocated", era="torch ≥ 2.2", line="", tried_bytes=tried, total_bytes=total,
                  free_bytes=min(free, total), allocated_bytes=alloc, unallocated_bytes=unalloc)
    found = diagnose(Evidence(oom=o, where=Where(phase=phase, in_eval=in_eval, location="x.py:1 f")), None)
    assert all(f.cause in CAUSES and 0 <= f.likelihood <= 1 for f in found)
    named = [f for f in found if f.cause != "undetermined"]
    assert [f.likelihood for f in named] == sorted((f.likelihood for f in named), reverse=True)
    assert "none" not in [f.cause for f in found]
    assert (found[0].cause == "undetermined") == (not named or named[0].likelihood < THRESHOLD)


def _oom(**kw: object) -> OOMReport:
    base = dict(form="unallocated", era="torch ≥ 2.2", line="", tried_bytes=1 * GiB, device=0, total_bytes=80 * GiB,
                free_bytes=300 * MiB, allocated_bytes=76 * GiB, unallocated_bytes=500 * MiB,
                process_bytes=78 * GiB)
    return OOMReport(**{**base, **kw})


def test_one_sibling_rank_by_the_setups_rank_count_is_not_another_process() -> None:
    """A single 900 MiB process on GPU 0 of a 2-GPU job: the count of context-sized processes is the ranks less one,
    so it is the other rank's context — never "stop process" — while on a 1-GPU run it is another process."""
    o = _oom(other_processes=((4242, 900 * MiB),))
    ev = Evidence(oom=o, where=Where(phase="backward", location="graph.py:1 run_backward"))
    found = diagnose(ev, _exp("llama-3.2-1b", gpus=2, micro_batch=4))
    assert found[0].cause == "rank_imbalance"
    assert not any(x.action.startswith("stop process") for f in found for x in f.fixes)
    found = diagnose(ev, _exp("llama-3.2-1b", micro_batch=4))
    assert found[0].cause == "other_process" and found[0].fixes[0].action == "stop process 4242 on GPU 0"


def test_an_idle_gpu_is_not_a_rank_and_another_process_on_the_jobs_gpu_comes_first() -> None:
    procs = (GPUProcess(0, 100, "python", 48 * GiB), GPUProcess(0, 200, "jupyter-lab", 21 * GiB))
    smi = NvidiaSmi(gpus=(GPUMemory(0, "A100", 70 * GiB, 80 * GiB), GPUMemory(1, "A100", 1 * GiB, 80 * GiB)),
                    processes=procs, form="table")
    assert [f.cause for f in diagnose(Evidence(nvsmi=smi), None)] == ["other_process"]
    smi = NvidiaSmi(gpus=smi.gpus, processes=procs[:1], form="table")
    assert [f.cause for f in diagnose(Evidence(nvsmi=smi), None)] == ["none"]


def test_reserved_between_steps_is_not_fragmentation_but_reserved_over_the_peak_is() -> None:
    """Between steps the cache holds the freed activations (reserved − allocated 30 GiB): no finding without the
    peak column; with it, reserved 30 GiB above the step's peak is fragmentation."""
    recs = tuple(StepRecord(step=i, allocated_bytes=12 * GiB, reserved_bytes=42 * GiB) for i in range(60))
    assert [f.cause for f in diagnose(Evidence(log=StepLog(records=recs, ranks=(0,))), None)] == ["none"]
    recs = tuple(StepRecord(step=i, allocated_bytes=12 * GiB, reserved_bytes=72 * GiB, peak_allocated_bytes=42 * GiB)
                 for i in range(60))
    f = diagnose(Evidence(log=StepLog(records=recs, ranks=(0,))), None)[0]
    assert f.cause == "fragmentation" and f.observed_bytes == 30 * GiB


def test_undetermined_names_what_would_decide() -> None:
    f = diagnose(Evidence(oom=_oom(), where=Where(phase="unknown")), None)[0]
    assert f.cause == "undetermined" and f.fixes == ()
    assert any("--log" in s for s in f.evidence) and any("--snapshot" in s for s in f.evidence)
    assert any("MODEL" in s for s in f.evidence)
