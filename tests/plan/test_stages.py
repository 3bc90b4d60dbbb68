"""Pipeline stages on different GPU types: uneven layer counts chosen by memory and speed, every stage fits
its own GPU, the engines express the split (Megatron: first/last only; torchtitan: any), exports load."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.export.engines import megatron_script, require, torchtitan_job_config
from tests.export.test_megatron import validate
from trainmem.api import build
from trainmem.cli import main
from trainmem.hardware import parse_cluster
from trainmem.perf.step import stage_seconds
from trainmem.plan.search import GroupSearch, PlanRequest, fits_with_margin, plan
from trainmem.plan.stages import megatron_split, stage_estimate, stage_ranges

_POOL = "16xA100-SXM-80G,8xL40S-48G"


def _request(model: str, pool: str, gb: int, seq: int, **kw: object) -> PlanRequest:
    spec, _ = build(model, seq_len=seq)
    return PlanRequest(spec=spec, cluster=parse_cluster(pool), global_batch=gb, seq_len=seq, **kw)


@pytest.fixture(scope="module")
def staged():  # noqa: ANN201 - (request, best plan)
    req = _request("llama-3.1-8b", _POOL, 64, 4096, top=3)
    return req, plan(req).plans[0]


def _stage_setups(req: PlanRequest, p) -> list:  # noqa: ANN001
    """The validated setup of each stage's GPU type, in stage order."""
    by_type = {s.gpu: s.setup for s in p.shares}
    return [by_type[t] for t in p.layout.stage_types]


def test_stages_on_gpu_types_as_the_engines_express_them(staged) -> None:  # noqa: ANN001
    """16 A100 + 8 L40S, Llama-3.1-8B: one pipeline of three stages on 8 GPUs each (dp·tp·cp = 8), the two
    A100 nodes first (stage 0 keeps the most micro-batches in flight), the L40S node last; 32 layers."""
    req, p = staged
    lo = p.layout
    assert lo is not None and lo.stage_types == ("A100-SXM-80G", "A100-SXM-80G", "L40S-48G")
    assert sum(lo.layers_per_stage) == 32 and len(lo.layers_per_stage) == p.knobs.pp == 3
    k = p.knobs
    assert k.dp * k.tp * k.cp == 8 and p.gpus == 24 and p.dp == k.dp
    assert p.global_batch == k.dp * k.micro_batch * k.grad_accum == 64
    assert megatron_split(lo.layers_per_stage) is not None  # first/last may differ, the middle stage is even
    assert not p.runs_on.startswith("custom loop")
    d = p.to_dict()
    assert d["layers_per_stage"] == list(lo.layers_per_stage) and d["stage_types"] == list(lo.stage_types)
    assert d["per_gpu_type"]["A100-SXM-80G"]["pipeline_stages"] == [0, 1]
    assert d["per_gpu_type"]["L40S-48G"]["layers_per_stage"] == lo.layers[1]
    assert {"gpus", "micro_batch", "grad_accum", "peak_allocated_bytes"} <= set(d["per_gpu_type"]["L40S-48G"])


def test_every_stage_fits_its_own_gpu(staged) -> None:  # noqa: ANN001
    """Each stage, estimated on its own GPU type with its own layers, fits with the margin, and each type's
    share reports its most loaded stage."""
    req, p = staged
    lps = p.layout.layers_per_stage
    worst: dict[str, int] = {}
    for j, s in enumerate(_stage_setups(req, p)):
        est = stage_estimate(req.spec, s, lps, j)
        assert est.gpu == s.gpu and fits_with_margin(est, req.margin), (j, s.gpu)
        worst[s.gpu] = max(worst.get(s.gpu, 0), est.device_total_bytes)
    for share in p.shares:
        assert share.memory.device_total_bytes == worst[share.gpu]
        assert share.memory.gpu_memory_bytes == parse_cluster(f"1x{share.gpu}").groups[0].gpu.memory_bytes


def test_uneven_stages_beat_the_even_split(staged) -> None:  # noqa: ANN001
    """Hand check of the balance: every stage's micro-batch, recomputed with the performance model on its own
    GPU type, is what the plan reports; the even split (11/11/10) leaves the L40S stage the slowest by far,
    and every split whose slowest stage would be faster than the chosen one does not fit some GPU."""
    req, p = staged
    lo, k = p.layout, p.knobs
    setups = _stage_setups(req, p)
    groups = {g.gpu.name: g for g in req.cluster.groups}

    def times(lps: tuple[int, ...]) -> list[float]:
        return [sum(stage_seconds(req.spec, s, groups[s.gpu], j, len(r)).values())
                for j, (s, r) in enumerate(zip(setups, stage_ranges(lps)))]

    assert times(lo.layers_per_stage) == pytest.approx(list(lo.stage_seconds), rel=1e-9)
    slowest = max(lo.stage_seconds)
    even = times((11, 11, 10))
    assert even.index(max(even)) == 2 and max(even) == pytest.approx(lo.even_seconds, rel=1e-9)
    assert max(even) > 1.15 * slowest
    # (ga + pp − 1) micro-batches of the slowest stage: the even split's pipeline is that much slower
    assert (k.grad_accum + 2) * (max(even) - slowest) > 0.1 * p.step_seconds
    for a in range(1, 16):  # every (a, a, 32 − 2a) split faster than the chosen one is refused by memory
        lps = (a, a, 32 - 2 * a)
        if lps != lo.layers_per_stage and max(times(lps)) < slowest:
            assert not all(fits_with_margin(stage_estimate(req.spec, s, lps, j), req.margin)
                           for j, s in enumerate(setups)), lps


def test_the_stage_model_is_the_even_split_when_the_split_is_even() -> None:
    """stage_estimate (the setup with the split as its stage_layers) reproduces the estimator's own stage of
    an even split."""
    from trainmem.memory.estimate import estimate
    req = _request("qwen2.5-0.5b", "4xA100-SXM-80G", 8, 2048)
    gs = GroupSearch(req, req.cluster.groups[0])
    from trainmem.plan.space import Knobs
    k = Knobs("megatron", 1, 1, 4, 1, 1, 1, 1, "none", "none", 1, 8)
    s = gs.setup(k)
    for j in (0, 3):
        want = estimate(req.spec, s, stages=(j,))
        got = stage_estimate(req.spec, s, (6, 6, 6, 6), j)
        assert got.peak_allocated_bytes == want.peak_allocated_bytes


def test_megatron_export_of_stages_loads(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    """megatron_args.sh of the staged plan: every flag is one of core_v0.19.0's parser, the uneven split is
    --decoder-first/last-pipeline-num-layers (the middle stage takes what is left, evenly), and the header
    says which ranks run on which GPU type."""
    out = tmp_path / "m"
    rc = main(["plan", "llama-3.1-8b", "--cluster", _POOL, "--global-batch", "64", "--seq-len", "4096",
               "--top", "3", "--export", "megatron", "-o", str(out), "--json"])
    d = json.loads(capsys.readouterr().out)
    assert rc == 0
    lps = d["export"]["plan"]["layers_per_stage"]
    text = (out / "megatron_args.sh").read_text()
    launcher, a = megatron_script(text)
    sizes = validate(launcher, a)
    assert sizes["world"] == 24 and int(a["--pipeline-model-parallel-size"][0]) == len(lps) == 3
    first, last = int(a["--decoder-first-pipeline-num-layers"][0]), int(a["--decoder-last-pipeline-num-layers"][0])
    assert [first, 32 - first - last, last] == lps
    assert "ranks 0-15 (stages 0-1): A100-SXM-80G" in text and "ranks 16-23 (stage 2): L40S-48G" in text


def test_torchtitan_export_of_stages_loads(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    """torchtitan.toml of a staged fsdp2 plan (8 H100 + 8 A100-40G): torchtitan 0.2.2's ConfigManager reads it,
    and module_fqns_per_model_part holds each stage's own layers."""
    require("torchtitan")
    out = tmp_path / "t"
    rc = main(["plan", "llama-3.1-8b", "--cluster", "8xH100-SXM-80G,8xA100-SXM-40G", "--global-batch", "64",
               "--seq-len", "4096", "--top", "2", "--export", "torchtitan", "-o", str(out), "--json"])
    d = json.loads(capsys.readouterr().out)
    assert rc == 0
    lps = d["export"]["plan"]["layers_per_stage"]
    assert lps and len(set(lps)) > 1
    cfg = torchtitan_job_config(out / "torchtitan.toml")
    parts = cfg.parallelism.module_fqns_per_model_part
    assert cfg.parallelism.pipeline_parallel_degree == len(lps) == len(parts)
    assert [sum(x.startswith("layers.") for x in part) for part in parts] == lps
    assert parts[0][0] == "tok_embeddings" and parts[-1][-2:] == ["norm", "output"]
