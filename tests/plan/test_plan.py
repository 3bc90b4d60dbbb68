"""The planner: valid space, exact best plan, fits by the estimator's own numbers, mixed pools, sizing."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trainmem.api import build
from trainmem.errors import ConfigError
from trainmem.hardware import parse_cluster
from trainmem.memory import estimate
from trainmem.model.hf import spec_from_hf_config
from trainmem.plan.bounds import states_lower_bound_bytes
from trainmem.plan.search import GroupSearch, PlanRequest, fits_with_margin, plan
from trainmem.plan.space import SpaceLimits, configurations, engine_precision, parse_fix
from trainmem.setup import make_setup

_SMALL = dict(model_type="llama", hidden_size=512, intermediate_size=1376, num_hidden_layers=4,
              num_attention_heads=8, num_key_value_heads=4, vocab_size=8192, max_position_embeddings=4096)


def _spec(**over: object):
    return spec_from_hf_config({**_SMALL, **over}, name="small-llama")


def _request(spec, pool: str, gb: int, seq: int, **kw: object) -> PlanRequest:
    return PlanRequest(spec=spec, cluster=parse_cluster(pool), global_batch=gb, seq_len=seq, **kw)


# --------------------------------------------------------------------------- the space
@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(gpus=st.sampled_from([1, 2, 4, 6, 8, 16]), gb=st.sampled_from([8, 12, 32, 64]),
       layers=st.sampled_from([3, 4, 6]), kv=st.sampled_from([1, 2, 8]))
def test_every_configuration_is_a_valid_setup_with_the_global_batch(gpus: int, gb: int, layers: int, kv: int) -> None:
    """configurations() lists only what the estimator validates, and preserves the global batch."""
    spec = _spec(num_hidden_layers=layers, num_key_value_heads=kv)
    lim = SpaceLimits(gpus=gpus, gpus_per_node=8, global_batch=gb, seq_len=1024)
    n = 0
    for k in configurations(spec, lim):
        n += 1
        assert k.micro_batch * k.grad_accum * k.dp == gb
        assert k.gpus == gpus and 8 % k.tp == 0
        s = make_setup(**k.setup_fields(spec), seq_len=1024, precision=engine_precision(k.engine, "bf16"))
        estimate(spec, s)  # validates against the model too
        if n > 300:
            break


def test_fix_parsing() -> None:
    assert parse_fix("engine=megatron, tp=2,recompute=full") == {"engine": "megatron", "tp": 2, "recompute": "full"}
    for bad in ("tp", "tpx=2", "tp=-1", "engine=jax", "recompute=some", "offload=disk", "tp=two"):
        with pytest.raises(ConfigError):
            parse_fix(bad)


# --------------------------------------------------------------------------- bound and exactness
@settings(max_examples=40, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(gpus=st.sampled_from([1, 2, 4, 8]), gb=st.sampled_from([8, 16]), seq=st.sampled_from([512, 2048]))
def test_lower_bound_never_above_the_estimate(gpus: int, gb: int, seq: int) -> None:
    spec = _spec()
    for k in list(configurations(spec, SpaceLimits(gpus=gpus, gpus_per_node=8, global_batch=gb, seq_len=seq)))[::7]:
        prec = engine_precision(k.engine, "bf16")
        s = make_setup(**k.setup_fields(spec), seq_len=seq, precision=prec)
        assert states_lower_bound_bytes(spec, k, prec, "adamw") <= estimate(spec, s).peak_allocated_bytes


@settings(max_examples=16, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(pool=st.sampled_from(["4xRTX-4090-24G", "8xA100-SXM-40G", "2xH100-SXM-80G", "8xRTX-3090-24G"]),
       gb=st.sampled_from([8, 16, 32]), seq=st.sampled_from([1024, 4096]), margin=st.sampled_from([0.0, 0.05, 0.2]),
       model=st.sampled_from(["qwen2.5-0.5b", "llama-3.2-1b", "qwen1.5-moe-a2.7b", "llama-3.1-8b"]))
def test_the_bound_never_drops_a_configuration_that_fits(pool: str, gb: int, seq: int, margin: float, model: str) -> None:
    """bounded_out (model states, resident gradient buffers, the in-flight micro-batches' activations and the
    last stage's logits, with the margin) refuses only what the estimate refuses."""
    spec, _ = build(model, seq_len=seq)
    req = _request(spec, pool, gb, seq, margin=margin)
    gs = GroupSearch(req, req.cluster.groups[0])
    lim = SpaceLimits(gpus=req.cluster.total_gpus, gpus_per_node=8, global_batch=gb, seq_len=seq)
    for k in list(configurations(spec, lim))[::7]:
        s = gs.setup(k)
        if s is not None and gs.bounded_out(k):
            assert not fits_with_margin(estimate(spec, s), margin), k


@settings(max_examples=12, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(pool=st.sampled_from(["8xH100-SXM-80G", "16xA100-SXM-40G", "4xRTX-4090-24G"]), gb=st.sampled_from([16, 64]),
       seq=st.sampled_from([2048, 8192]), model=st.sampled_from(["llama-3.2-1b", "qwen1.5-moe-a2.7b", "llama-3.1-8b"]))
def test_the_optimistic_speed_is_never_below_the_predicted_one(pool: str, gb: int, seq: int, model: str) -> None:
    """The search's lazy order is exact only if a configuration's optimistic key (grad_accum + bubble micro-
    batches of the slowest stage + the host overhead) never undercuts trainmem.perf's own step time."""
    spec, _ = build(model, seq_len=seq)
    req = _request(spec, pool, gb, seq)
    gs = GroupSearch(req, req.cluster.groups[0])
    lim = SpaceLimits(gpus=req.cluster.total_gpus, gpus_per_node=req.cluster.groups[0].gpus_per_node,
                      global_batch=gb, seq_len=seq)
    for k in list(configurations(spec, lim))[::11]:
        assert gs.optimistic_tokens_per_second(k) >= gs.time_of(k).tokens_per_second * (1 - 1e-12), k


def _brute_force_best(req: PlanRequest, group_index: int = 0) -> float:
    group = req.cluster.groups[group_index]
    gs = GroupSearch(req, group)
    best = 0.0
    lim = SpaceLimits(gpus=group.count, gpus_per_node=group.gpus_per_node,
                      global_batch=req.global_batch, seq_len=req.seq_len)
    for k in configurations(req.spec, lim):
        s = gs.setup(k)
        if s is None:
            continue
        if fits_with_margin(estimate(req.spec, s), req.margin):
            best = max(best, gs.time(s).tokens_per_second)
    return best


@pytest.mark.parametrize("pool, gb, seq, gpu_memory", [
    ("4xH100-SXM-80G", 16, 2048, None),
    ("8xA100-SXM-40G", 32, 4096, None),
    ("2xRTX-4090-24G", 8, 2048, None),
])
def test_best_plan_is_the_best_of_the_whole_space(pool: str, gb: int, seq: int, gpu_memory: object) -> None:
    """The pruned search returns what estimating every configuration would: the fastest that fits."""
    spec, _ = build("qwen2.5-0.5b", seq_len=seq)
    req = _request(spec, pool, gb, seq, top=1)
    got = plan(req).plans[0]
    assert got.tokens_per_second == pytest.approx(_brute_force_best(req), rel=1e-9)


def _brute_force_mixed(req: PlanRequest) -> float:
    """The fastest plan of a mixed pool without the search's bounds: every configuration of each type alone
    estimated, every same-layout structure over the whole pool, every staged candidate (all recompute)."""
    from dataclasses import replace

    from trainmem.plan.mixed import _mixed_for_structure, _structures
    from trainmem.plan.stages import _candidates, _Staged
    best = max(_brute_force_best(req, i) for i in range(len(req.cluster.groups)))
    searches = [GroupSearch(req, g) for g in req.cluster.groups]
    for k in _structures(req, searches):
        best = max([best] + [p.tokens_per_second for p in _mixed_for_structure(req, searches, k)])
    st = _Staged(req, searches)
    for rc in ("none", "selective", "full"):
        for c in _candidates(replace(req, fixed={"recompute": rc}), searches):
            p, _ = st.evaluate(c)
            if p is not None:
                best = max(best, p.tokens_per_second)
    return best


@pytest.mark.parametrize("pool, gb, seq", [
    ("4xA100-SXM-80G,4xRTX-4090-24G", 8, 2048),  # the A100s alone win
    ("2xH100-SXM-80G,2xA100-SXM-40G", 32, 2048),  # one pipeline over both types wins
    ("2xRTX-4090-24G,2xRTX-3090-24G", 16, 4096),  # the same, on 24 GB cards
])
def test_mixed_pool_best_plan_is_the_best_of_the_whole_space(pool: str, gb: int, seq: int) -> None:
    """Mixed pools: the bounded search (each type alone, same-layout plans over the pool, one pipeline over
    the types with uneven stages) returns the fastest plan that building every one of them finds."""
    spec, _ = build("qwen2.5-0.5b", seq_len=seq)
    req = _request(spec, pool, gb, seq, top=1)
    got = plan(req).plans[0]
    assert got.tokens_per_second == pytest.approx(_brute_force_mixed(req), rel=1e-9)


def test_memory_pressure_forces_the_search_to_refuse_the_fastest() -> None:
    """Llama-3.1-8B on 2 × 24 GB: the fastest plans (no recompute, large micro-batches) do not fit, the
    one returned does, and it is still the best of the space."""
    spec, _ = build("llama-3.2-1b", seq_len=4096)
    req = _request(spec, "2xRTX-4090-24G", 16, 4096, top=1)
    r = plan(req)
    assert r.estimated >= 2
    assert r.plans[0].tokens_per_second == pytest.approx(_brute_force_best(req), rel=1e-9)


# --------------------------------------------------------------------------- every plan fits
@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(layers=st.sampled_from([2, 4, 8]), hidden=st.sampled_from([256, 1024, 2048]),
       pool=st.sampled_from(["1xA100-SXM-80G", "4xH100-SXM-80G", "8xRTX-3090-24G", "16xA100-SXM-40G",
                             "4xA100-SXM-80G,2xRTX-4090-24G"]),
       gb=st.sampled_from([8, 16, 48]), seq=st.sampled_from([1024, 4096]), margin=st.sampled_from([0.0, 0.1]))
def test_every_plan_fits_with_the_margin(layers: int, hidden: int, pool: str, gb: int, seq: int, margin: float) -> None:
    spec = _spec(num_hidden_layers=layers, hidden_size=hidden, intermediate_size=hidden * 3,
                 num_attention_heads=hidden // 64, num_key_value_heads=hidden // 128)
    try:
        r = plan(_request(spec, pool, gb, seq, margin=margin, top=3))
    except ConfigError:
        return  # nothing fits (or no data-parallel degree divides the batch): said in one line
    for p in r.plans:
        if p.layout is not None:  # one pipeline over the types: each stage on its own GPU
            from trainmem.plan.stages import stage_estimate
            by_type = {s.gpu: s for s in p.shares}
            for j, t in enumerate(p.layout.stage_types):
                est = stage_estimate(spec, by_type[t].setup, p.layout.layers_per_stage, j)
                assert fits_with_margin(est, margin) and est.device_total_bytes <= by_type[t].memory.device_total_bytes
        else:
            for s in p.shares:
                est = estimate(spec, s.setup)
                assert est.peak_allocated_bytes == s.memory.peak_allocated_bytes
                assert fits_with_margin(est, margin)
        assert p.global_batch == gb
    speeds = [p.tokens_per_second for p in r.plans]
    assert speeds == sorted(speeds, reverse=True)


# --------------------------------------------------------------------------- contract
_PLAN_KEYS = {"gpus", "dp", "tp", "pp", "vpp", "cp", "ep", "engine", "zero", "recompute", "offload", "micro_batch",
              "grad_accum", "per_gpu_type", "peak_allocated_bytes", "peak_reserved_bytes", "step_seconds",
              "tokens_per_second", "tokens_per_second_per_gpu", "mfu", "time_breakdown"}


def test_json_contract_keys() -> None:
    spec, _ = build("llama-3.2-1b", seq_len=2048)
    d = plan(_request(spec, "8xH100-SXM-80G", 64, 2048, top=3)).to_dict()
    assert isinstance(d["search_seconds"], float)
    assert d["plans"] and all(_PLAN_KEYS <= set(p) for p in d["plans"])
    for p in d["plans"]:
        for t in p["per_gpu_type"].values():
            assert {"gpus", "micro_batch", "grad_accum", "peak_allocated_bytes"} <= set(t)
        assert sum(p["time_breakdown"].values()) == pytest.approx(p["step_seconds"], rel=1e-6)


def test_all_knobs_fixed_evaluates_one_configuration_or_says_why() -> None:
    spec, _ = build("llama-3.1-8b", seq_len=4096)
    fix = parse_fix("engine=fsdp2,dp=8,tp=1,pp=1,vpp=1,cp=1,ep=1,zero=3,recompute=full,offload=none,"
                    "micro_batch=1,grad_accum=4")
    r = plan(_request(spec, "8xH100-SXM-80G", 32, 4096, fixed=fix))
    assert len(r.plans) == 1 and r.plans[0].knobs.zero == 3
    bad = parse_fix("engine=torch,dp=8,tp=1,pp=1,vpp=1,cp=1,ep=1,zero=0,recompute=none,offload=none,"
                    "micro_batch=4,grad_accum=1")
    with pytest.raises(ConfigError, match="GiB"):
        plan(_request(spec, "8xH100-SXM-80G", 32, 4096, fixed=bad))


# --------------------------------------------------------------------------- mixed pools
def test_mixed_pool_preserves_the_batch_and_each_type_fits_its_own_memory() -> None:
    from trainmem.plan.mixed import mixed_plans
    spec, _ = build("qwen2.5-1.5b", seq_len=2048)
    req = _request(spec, "8xA100-SXM-80G,8xA100-SXM-40G", 96, 2048, top=10)
    plans, info = mixed_plans(req, [GroupSearch(req, g) for g in req.cluster.groups])
    assert info["best_whole_pool"] is not None
    whole = [p for p in plans if len(p.shares) == 2 and p.layout is None]
    assert whole, "plans over both types"
    for p in whole:
        assert sum(s.knobs.dp * s.knobs.micro_batch * s.knobs.grad_accum for s in p.shares) == 96 == p.global_batch
        for s in p.shares:
            assert s.memory.gpu_memory_bytes == parse_cluster(f"1x{s.gpu}").groups[0].gpu.memory_bytes
            assert fits_with_margin(estimate(spec, s.setup), 0.05)
            assert s.setup.tp <= 8 and s.gpus % (s.setup.tp * s.setup.pp * s.setup.cp) == 0
        per_type = len({(s.knobs.micro_batch, s.knobs.grad_accum) for s in p.shares}) > 1
        assert p.runs_on.startswith("custom loop") == per_type
        if per_type:
            assert p.knobs.engine in ("torch", "fsdp2")  # DeepSpeed and Megatron fix one micro-batch for all ranks


def test_leaving_the_slow_type_out_is_said() -> None:
    """Over a 25 GbE link shared by four 3090s, synchronising a 1.5B model's gradients costs more than the
    3090s add: the best plan uses the A100s alone and the result says so."""
    spec, _ = build("qwen2.5-1.5b", seq_len=2048)
    r = plan(_request(spec, "8xA100-SXM-80G,4xRTX-3090-24G", 96, 2048, top=3))
    assert {s.gpu for s in r.plans[0].shares} == {"A100-SXM-80G"}
    assert r.extra["left_out"].startswith("leaving RTX-3090-24G out is faster")


# --------------------------------------------------------------------------- sizing
def test_min_gpus_is_minimal() -> None:
    from trainmem.plan.sizing import min_gpus
    spec, _ = build("llama-3.1-8b", seq_len=4096)
    req = _request(spec, "1xRTX-4090-24G", 16, 4096)
    got = min_gpus(req, "RTX-4090-24G")
    assert got.result.plans
    if got.gpus > 1:
        with pytest.raises(ConfigError):
            plan(_request(spec, f"{got.gpus - 1}xRTX-4090-24G", 16, 4096))


def test_megatron_selective_refusal_does_not_imply_no_recompute_refused() -> None:
    """Megatron's selective recompute can hold more than no recompute (fused attention keeps nothing s²; the
    checkpoint's v view keeps the fused qkv buffer), so refusing it must not rule out recompute none."""
    from trainmem.plan.space import Knobs
    spec, _ = build("llama-3.1-8b", seq_len=4096)
    none_ = estimate(spec, make_setup(engine="megatron", gpus=8, tp=2, zero=1, seq_len=4096, micro_batch=2))
    sel = estimate(spec, make_setup(engine="megatron", gpus=8, tp=2, zero=1, seq_len=4096, micro_batch=2,
                                    recompute="selective"))
    assert sel.peak_allocated_bytes > none_.peak_allocated_bytes  # the premise, from the estimator itself
    req = PlanRequest(spec=spec, cluster=parse_cluster("8xH100-SXM-80G"), global_batch=64, seq_len=4096)
    gs = GroupSearch(req, req.cluster.groups[0])
    k = Knobs(engine="megatron", dp=4, tp=2, pp=1, vpp=1, cp=1, ep=1, zero=1, recompute="selective", offload="none",
              micro_batch=2, grad_accum=8)
    gs._refuse(k)  # noqa: SLF001
    from dataclasses import replace
    assert gs.implied_refused(replace(k, micro_batch=4))
    assert not gs.implied_refused(replace(k, recompute="none"))
    f = replace(k, engine="fsdp2", zero=3)
    gs._refuse(f)  # noqa: SLF001
    assert gs.implied_refused(replace(f, recompute="none"))  # torch/fsdp2: monotonic (tests/memory/test_properties.py)


# --------------------------------------------------------------------------- block recompute
def test_block_recompute_levels_are_searched_under_megatron_only() -> None:
    """Megatron without interleaving gets block-N levels (a quarter, half, three quarters of a stage's layers)
    between none and full; the ladder from none forks into selective and the block levels, both ending in full."""
    from trainmem.plan.space import Knobs, block_levels, recompute_fields, savers
    assert block_levels(16) == ("block-4", "block-8", "block-12")
    assert block_levels(3) == ("block-1", "block-2") and block_levels(1) == ()
    assert recompute_fields("block-8") == {"recompute": "full", "recompute_layers": 8}
    spec, _ = build("llama-3.2-1b", seq_len=2048)  # 16 layers
    lim = SpaceLimits(gpus=4, gpus_per_node=4, global_batch=8, seq_len=2048)
    by_engine: dict[str, set[str]] = {}
    for k in configurations(spec, lim):
        by_engine.setdefault(k.engine, set()).add(k.recompute)
        if k.recompute.startswith("block-"):
            assert k.engine == "megatron" and k.vpp == 1
    assert {"block-4", "block-8", "block-12", "block-2", "block-6"} <= by_engine["megatron"]  # pp 1 and pp 2
    assert all(not r.startswith("block-") for e, rs in by_engine.items() if e != "megatron" for r in rs)
    k = Knobs("megatron", 4, 1, 1, 1, 1, 1, 1, "none", "none", 1, 2)
    def more(k: Knobs, fixed: dict) -> list[str]:  # (the recompute savers; offload ones aside)
        return [v.recompute for v in savers(k, fixed, spec) if v.offload == k.offload]

    assert more(k, {}) == ["selective", "block-4"]
    assert more(with_recompute(k, "block-4"), {}) == ["block-8"]
    assert more(with_recompute(k, "block-12"), {}) == ["full"]
    assert more(with_recompute(k, "selective"), {}) == ["full"]
    assert more(k, {"recompute": "none"}) == []


def with_recompute(k, r: str):  # noqa: ANN001, ANN201
    from dataclasses import replace
    return replace(k, recompute=r)


def test_a_block_recompute_plan_wins_and_is_the_best_of_the_space() -> None:
    """Llama-3.2-1B under Megatron on 2 × 24 GB at 4096 tokens, no context parallelism: no recompute does not
    fit at dp 2, recomputing every layer is slower than recomputing a quarter of them; the search's best equals
    estimating every configuration of that space, and its JSON says recompute full with 4 layers per stage."""
    spec, _ = build("llama-3.2-1b", seq_len=4096)
    fixed = {"engine": "megatron", "cp": 1}
    req = _request(spec, "2xRTX-4090-24G", 16, 4096, top=1, fixed=fixed)
    got = plan(req).plans[0]
    group = req.cluster.groups[0]
    gs = GroupSearch(req, group)
    lim = SpaceLimits(gpus=2, gpus_per_node=group.gpus_per_node, global_batch=16, seq_len=4096)
    best, best_k = 0.0, None
    for k in configurations(spec, lim, fixed, ("megatron",)):
        s = gs.setup(k)
        if s is not None and fits_with_margin(estimate(spec, s), req.margin):
            t = gs.time(s).tokens_per_second
            if t > best:
                best, best_k = t, k
    assert got.tokens_per_second == pytest.approx(best, rel=1e-9)
    assert best_k is not None and best_k.recompute.startswith("block-")
    d = got.to_dict()
    assert (d["recompute"], d["recompute_layers"]) == ("full", int(best_k.recompute[6:]))
