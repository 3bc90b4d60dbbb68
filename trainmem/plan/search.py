"""The planner: the fastest configurations that fit, over the whole valid space.

How it stays exact and fast (no sampling):

1. every valid configuration's root (least recompute, no offload) of the pool
   (:func:`trainmem.plan.space.configurations`) enters a frontier with an *optimistic* speed: its step
   takes at least ``grad_accum`` + the 1F1B bubble's micro-batches of the slowest stage plus the host
   overhead (:meth:`GroupSearch.optimistic_tokens_per_second`, arithmetic on a micro-batch time memoised
   over ZeRO stage, offload and interleaving; roots that share it enter as one family);
2. only when a candidate reaches the top of the frontier is it bounded in memory
   (:meth:`GroupSearch.bounded_out`: model states, resident gradient buffers, the in-flight micro-batches'
   activations and the logits, with the margin and the CUDA context: a few integer operations) and timed
   exactly (:func:`trainmem.perf.step_time`); it re-enters with its exact speed. No optimistic key is
   below the exact one (``tests/plan`` checks it), so candidates leave in exact order of predicted speed;
3. a candidate at the top with its exact speed has its memory estimated
   (:func:`trainmem.memory.estimate`, memoised). A configuration that does not fit proves that the
   same structure with a larger micro-batch, or with less recompute, does not fit either (memory
   grows with both: ``tests/memory/test_properties.py``), so those are skipped without estimating; a
   refusal puts the configuration's savers (more recompute, offload — each slower) in the frontier;
4. the search stops when ``top`` plans of distinct strategies fit, or when nothing left can reach a
   ``floor`` a caller already holds ``top`` plans above (mixed pools): every faster configuration was
   either estimated and refused or implied refused, so the first plan is the best of the whole space.

"Fits" means the estimate's ``device_total_bytes`` (reserved + CUDA context + NCCL) with
``margin`` added on the reserved part stays within the GPU's memory.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from trainmem.errors import ConfigError
from trainmem.plan.group import (RECIPE_NAMES, _FAMILIES, GroupSearch, PlanRequest, engine_neutral_extras,
                                 fits_with_margin, host_memory_assumption, resolve_request, single_group_plans)
from trainmem.plan.mixed import mixed_plans
from trainmem.plan.explain import left_out, why_best
from trainmem.plan.refusal import check_pins, host_refusal, knobs_text, why_nothing
from trainmem.plan.result import Plan, PlanResult

__all__ = ["PlanRequest", "GroupSearch", "plan", "single_group_plans", "fits_with_margin", "resolve_request",
           "engine_neutral_extras", "RECIPE_NAMES"]


def plan(req: PlanRequest) -> PlanResult:
    """Search the pool; plans best first (see the module docstring)."""
    _check_request(req)
    req = resolve_request(req)
    check_pins(req)
    t0 = time.perf_counter()
    searches = [GroupSearch(req, g) for g in req.cluster.groups]
    plans: list[Plan] = []
    whole: dict = {}
    if not req.cluster.is_mixed:
        plans = single_group_plans(searches[0], req.cluster.total_gpus, req.global_batch, req.top)
    else:
        plans, whole = mixed_plans(req, searches)
    # fastest first; equal speed (6 significant digits): the plan that leaves more memory free first
    plans.sort(key=lambda p: p.most_loaded.memory.device_total_bytes / p.most_loaded.memory.gpu_memory_bytes)
    plans.sort(key=lambda p: -float(f"{p.tokens_per_second:.6g}"))
    plans = plans[:req.top]
    result = PlanResult(plans=plans, search_seconds=time.perf_counter() - t0,
                        evaluated=sum(s.evaluated for s in searches), estimated=sum(s.estimated for s in searches),
                        assumptions=_assumptions(req, searches))
    if not plans:
        raise ConfigError(why_nothing(req, searches[0]) if req.fixed and not req.cluster.is_mixed else
                          _nothing_fits(req, searches))
    result.why = why_best(plans)
    if req.cluster.is_mixed:
        note = left_out(req.cluster, plans[0], whole.get("best_whole_pool"), whole.get("whole_pool_bound", 0.0))
        if note:
            result.assumptions.insert(0, note)
            result.extra["left_out"] = note
    return result


def _check_request(req: PlanRequest) -> None:
    if req.global_batch < 1:
        raise ConfigError(f"--global-batch must be ≥ 1, got {req.global_batch}")
    if not 0 <= req.margin < 1:
        raise ConfigError(f"--margin must be in [0, 100) percent, got {req.margin * 100:g}")
    if req.top < 1:
        raise ConfigError(f"--top must be ≥ 1, got {req.top}")
    if req.precision not in _FAMILIES + RECIPE_NAMES:
        raise ConfigError(f"--precision {req.precision}: the planner takes bf16, fp16, fp32 or fp8 (each engine runs "
                          f"its own recipe of it) or a recipe: {', '.join(RECIPE_NAMES)}")
    for g in req.cluster.groups:
        if req.precision == "fp8" and not g.gpu.fp8_tflops:
            raise ConfigError(f"--precision fp8: {g.gpu.name} has no fp8 tensor cores")
        if req.precision in ("amp-bf16", "mixed-bf16") and not g.gpu.bf16:
            raise ConfigError(f"--precision {req.precision}: {g.gpu.name} has no bfloat16; use "
                              f"{req.precision.replace('bf16', 'fp16')} or --precision bf16 (fp16 recipes on it)")


def _nothing_fits(req: PlanRequest, searches: Iterable[GroupSearch] = ()) -> str:
    pool = req.cluster.spec or f"{req.cluster.total_gpus} GPUs"
    what = f" (knobs fixed: {' '.join(f'{k}={v}' for k, v in req.fixed.items())})" if req.fixed else ""
    host = [s for s in searches if s.host_refused is not None]
    if host and not req.cluster.is_mixed:  # (configurations fit the GPU; the node's host RAM refused them)
        gs = host[0]
        need, k = gs.host_refused  # type: ignore[misc]
        return (f"no configuration of {req.spec.name} fits {pool.replace(' ', '_')}{what}: the ones that fit the GPUs "
                f"offload to the host; the least of them, {knobs_text(k)}, {host_refusal(need, gs.host_cap, gs.host_from)}")
    return (f"no configuration of {req.spec.name} fits {pool.replace(' ', '_')}{what} at global batch {req.global_batch} × seq "
            f"{req.seq_len} with a {req.margin * 100:g} % margin (try --min-gpus, a smaller --seq-len, or "
            "another --global-batch that more data-parallel degrees divide)")


def _assumptions(req: PlanRequest, searches: Iterable[GroupSearch]) -> list[str]:
    out = [f"fits: device total (reserved + CUDA context + NCCL) + {req.margin * 100:g} % of reserved ≤ GPU memory",
           "global batch preserved exactly: micro_batch × grad_accum × dp = global batch (per GPU type in mixed pools)",
           "tensor parallelism inside one node; Megatron runs TP with --sequence-parallel, torchtitan with SequenceParallel"]
    for s in searches:
        if s.family != req.precision:
            out.append(f"{s.group.gpu.name} has no bfloat16: fp16 recipes on it")
    out.extend(host_memory_assumption(req, s.group) for s in searches)
    out.extend(req.cluster.notes)
    return out
