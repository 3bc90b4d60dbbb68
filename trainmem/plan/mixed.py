"""Mixed GPU pools: one model layout on every type, each type with its own micro-batch and accumulation.

The model is laid out the same way on every GPU (engine, tp, pp, vpp, cp, ep, ZeRO stage, offload,
recompute): tensor parallelism never spans two types (it stays in a node of one type). Data-parallel
replicas of all types together take the global batch: type *i* with ``dp_i`` replicas runs ``a_i``
micro-batches of ``m_i`` sequences, ``Σ dp_i·m_i·a_i = global batch`` exactly. ``m_i`` is the largest
micro-batch that fits the type's memory (capped by its share), and the ``a_i`` are chosen so that the
slowest type finishes first-last as early as possible (integer search). The step then waits for the
slowest type and synchronises gradients over the slowest link between types.

Stock engines give every rank the same micro-batch and accumulation (DeepSpeed's
``train_micro_batch_size_per_gpu``, Megatron's ``--micro-batch-size``, torchtitan's
``local_batch_size``): a plan with per-type values needs a training loop that feeds each rank its own
batch and weights its loss by its share of the tokens (``runs_on`` says so). The best plan that stock
engines run — the same ``m`` and ``a`` everywhere — is listed too, and so are the plans that leave
the slower types out.

One pipeline over several types — stages on different GPU types, with layer counts chosen by memory and
speed — is searched by :mod:`trainmem.plan.stages`.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from trainmem.perf import grad_sync_seconds
from trainmem.perf.device import device_of, mfu_peak_flops_per_s
from trainmem.plan.result import GroupShare, Plan
from trainmem.plan.group import GroupSearch, PlanRequest, single_group_plans
from trainmem.plan.space import Knobs, SpaceLimits, configurations, with_knobs
from trainmem.plan.stages import staged_plans

__all__ = ["mixed_plans"]

_CUSTOM = ("custom loop: per-rank micro-batch and accumulation (each rank its own batch, loss weighted by its "
           "token share), on {engine}")


def _structures(req: PlanRequest, searches: Sequence[GroupSearch]) -> list[Knobs]:
    """Layouts valid on every type: one representative Knobs (micro-batch 1) per structure + recompute."""
    per_group = []
    for gs in searches:
        lim = SpaceLimits(gpus=gs.group.count, gpus_per_node=gs.group.gpus_per_node,
                          global_batch=gs.group.count, seq_len=req.seq_len,
                          lora=bool(req.setup_extra.get("lora_rank")), fp8=gs.family == "fp8")
        fixed = {k: v for k, v in req.fixed.items() if k not in ("dp", "micro_batch", "grad_accum")}
        keys = {}
        for k in configurations(req.spec, lim, fixed, req.engines):
            if k.micro_batch == 1:
                keys[(k.engine, k.tp, k.pp, k.vpp, k.cp, k.ep, k.zero, k.offload, k.recompute)] = k
        per_group.append(keys)
    common = set(per_group[0]).intersection(*per_group[1:])
    return [per_group[0][c] for c in sorted(common)]


def _for_group(k: Knobs, gs: GroupSearch, mb: int, ga: int) -> Knobs:
    dp = gs.group.count // (k.tp * k.pp * k.cp)
    return with_knobs(k, dp=dp, micro_batch=mb, grad_accum=ga)


def _in_flight_accum(k: Knobs) -> int:
    """An accumulation count at which a pipeline stage holds all the micro-batches it can in flight, for
    checking a micro-batch's memory before the real accumulation is chosen."""
    return k.pp * k.vpp if k.pp > 1 else 1


def _max_micro_batch(gs: GroupSearch, k: Knobs, cap: int) -> int:
    """Largest power of two ≤ cap that fits this type (0 if none): the largest is tried first (it fits
    wherever memory is plentiful), then bisection (memory grows with the micro-batch)."""
    ga = _in_flight_accum(k)
    powers = [1 << i for i in range(cap.bit_length()) if 1 << i <= cap]

    def fits(mb: int) -> bool:
        kk = _for_group(k, gs, mb, ga)
        if gs.bounded_out(kk) or gs.implied_refused(kk):
            return False
        s = gs.setup(kk)
        return s is not None and gs.memory(kk, s) is not None

    if fits(powers[-1]):
        return powers[-1]
    lo, hi = -1, len(powers) - 1  # powers[hi] does not fit; powers[lo] fits (lo = -1: none known)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fits(powers[mid]):
            lo = mid
        else:
            hi = mid
    return powers[lo] if lo >= 0 else 0


def _allocate(gb: int, dps: list[int], mbs: list[int], secs: list[float]) -> list[int] | None:
    """Accumulation counts ``a_i`` with ``Σ dp_i·m_i·a_i = gb`` minimising ``max_i a_i·secs_i``; the last
    type may lower its micro-batch to a divisor so that the sum is exact (returned through ``mbs``)."""
    best: tuple[float, list[int], list[int]] | None = None
    n = len(dps)
    units = [dps[i] * mbs[i] for i in range(n)]

    def rec(i: int, left: int, acc: list[int]) -> None:
        nonlocal best
        if i == n - 1:
            if left % dps[i]:
                return
            per = left // dps[i]
            m = max((d for d in range(min(mbs[i], per), 0, -1) if per % d == 0), default=0) if per else mbs[i]
            if per and not m:
                return
            a = per // m if per else 0
            t = max([acc[j] * secs[j] for j in range(n - 1)] + [a * secs[i] * (m / mbs[i]) if a else 0.0])
            if best is None or t < best[0]:
                best = (t, acc + [a], mbs[:-1] + [m if per else mbs[i]])
            return
        for a in range(left // units[i] + 1):
            rec(i + 1, left - a * units[i], acc + [a])

    rec(0, gb, [])
    if best is None or not any(best[1]):
        return None
    mbs[:] = best[2]
    return best[1]


def _combine(req: PlanRequest, searches: Sequence[GroupSearch], k: Knobs, mbs: list[int], gas: list[int],
             runs_on: str) -> Plan | None:
    shares, times = [], []
    for gs, mb, ga in zip(searches, mbs, gas):
        if ga == 0:
            continue
        kk = _for_group(k, gs, mb, ga)
        s = gs.setup(kk)
        est = gs.memory(kk, s) if s is not None else None
        if est is None:
            return None
        t = gs.time(s)
        shares.append(GroupShare(gpu=gs.group.gpu.name, gpus=gs.group.count, knobs=kk, setup=s, memory=est, time=t,
                                 host_memory_bytes=gs.host_bytes_per_node(est, kk.gpus)))
        times.append((gs, s, t))
    if len(shares) < 2:
        return None
    cross = _cross_link(req, [gs for gs, _, _ in times])
    sync = max(grad_sync_seconds(req.spec, s, gs.group, cross) for gs, s, _ in times)
    local = [t.step_seconds - t.breakdown.get("dp_comm", 0.0) for _, _, t in times]
    slow = max(range(len(times)), key=lambda i: local[i])
    breakdown = dict(times[slow][2].breakdown)
    breakdown["dp_comm"] = sync
    step = local[slow] + sync
    tokens = req.global_batch * req.seq_len
    flops = times[0][2].model_flops_per_step * tokens / max(times[0][2].tokens_per_step, 1)
    peak = sum(gs.group.count * mfu_peak_flops_per_s(device_of(gs.group.gpu), s.precision) for gs, s, _ in times)
    notes = (f"mixed pool: types wait for the slowest ({shares[slow].gpu}); gradients synchronised over {cross.name}",)
    return Plan(shares=tuple(shares), step_seconds=step, tokens_per_step=tokens, mfu=flops / (step * peak),
                time_breakdown=breakdown, runs_on=runs_on, notes=notes)


def _peak_flops(gs: GroupSearch) -> float:
    g = gs.group.gpu
    tf = g.fp8_tflops if gs.family == "fp8" and g.fp8_tflops else g.bf16_tflops
    return (tf or 0.0) * 1e12


def _mixed_for_structure(req: PlanRequest, searches: Sequence[GroupSearch], k: Knobs) -> list[Plan]:
    dps = [gs.group.count // (k.tp * k.pp * k.cp) for gs in searches]
    cap = max(1, req.global_batch // sum(dps))
    mbs = [_max_micro_batch(gs, k, cap) for gs in searches]
    if not all(mbs):
        return []
    secs = [searches[i].microbatch_seconds(_for_group(k, searches[i], mbs[i], 1)) for i in range(len(searches))]
    out = []
    custom_mbs = list(mbs)
    gas = _allocate(req.global_batch, dps, custom_mbs, secs) if _custom_loop_engine(k) else None
    if gas is not None:
        p = _combine(req, searches, k, custom_mbs, gas, _CUSTOM.format(engine=k.engine))
        if p is not None:
            out.append(p)
    uniform = _uniform(req, dps, min(mbs))
    if uniform is not None:
        m, a = uniform
        p = _combine(req, searches, k, [m] * len(searches), [a] * len(searches), k.engine)
        if p is not None:
            out.append(p)
    return out


def _uniform(req: PlanRequest, dps: list[int], mb_cap: int) -> tuple[int, int] | None:
    total = sum(dps)
    if req.global_batch % total:
        return None
    per = req.global_batch // total
    m = max(d for d in range(min(mb_cap, per), 0, -1) if per % d == 0)
    return m, per // m


def _rates(req: PlanRequest, gs: GroupSearch, k: Knobs, cap: int) -> dict[int, float]:
    """Micro-batch (powers of two ≤ cap, up to the first the memory bound refuses) → one replica's
    sequences per second on this type."""
    out, mb = {}, 1
    ga = _in_flight_accum(k)
    while mb <= cap:
        if mb > 1 and gs.bounded_out(_for_group(k, gs, mb, ga)):
            break  # this micro-batch cannot fit this type (nor any larger one): not a rate it can reach
        out[mb] = mb / gs.microbatch_seconds(_for_group(k, gs, mb, 1))
        mb *= 2
    return out


def _upper_bound(req: PlanRequest, searches: Sequence[GroupSearch], k: Knobs) -> float:
    """Tokens/s no whole-pool plan of this layout can beat (memory, bubble and synchronisation ignored).
    Per-type batches (custom loop): a step of ``a_i`` micro-batches of ``m_i`` takes at least
    ``a_i·t_i(m_i)``, so ``global batch ≤ Σ dp_i·m_i·T/t_i(m_i)``. One micro-batch for all (stock
    engines): every type runs the same ``a`` micro-batches of ``m``, so the slowest type sets ``T``."""
    dps = [gs.group.count // (k.tp * k.pp * k.cp) for gs in searches]
    cap = max(1, req.global_batch // sum(dps))
    rates = [_rates(req, gs, k, cap) for gs in searches]
    if _custom_loop_engine(k):
        seqs_per_s = sum(dp * max(r.values()) for dp, r in zip(dps, rates))
    else:  # one micro-batch for all: only those every type can hold
        common = set(rates[0]).intersection(*rates[1:])
        seqs_per_s = max(sum(dps) * min(r[m] for r in rates) for m in common)
    # per-step time no batch split avoids: the optimizer step and the offload traffic of the fastest
    # type, and the gradient synchronisation over the link between types (its least exposed value:
    # one micro-batch of the largest size each type can hold, the most backward to hide behind)
    fixed = min(_per_step_seconds(gs, k) for gs in searches)
    cross = _cross_link(req, searches)
    sync = min(grad_sync_seconds(req.spec, gs.view(_for_group(k, gs, max(r), 1)), gs.group, cross)
               for gs, r in zip(searches, rates))
    return req.global_batch * req.seq_len / (req.global_batch / seqs_per_s + fixed + sync)


def _cross_link(req: PlanRequest, searches: Sequence[GroupSearch]):  # noqa: ANN202 - a Link
    return req.cluster.cross_link or min((gs.group.inter for gs in searches), key=lambda l: l.effective_gbps)


def _per_step_seconds(gs: GroupSearch, k: Knobs) -> float:
    """The optimizer step and offload traffic of one step (memoised per structure: not recompute)."""
    key = ("per_step",) + k.structure()
    got = gs.memo.get(key)
    if got is None:
        b = gs.time_of(_for_group(k, gs, 1, 1)).breakdown
        got = gs.memo[key] = b.get("optimizer", 0.0) + b.get("offload", 0.0)
    return got


def _custom_loop_engine(k: Knobs) -> bool:
    """Per-rank batch sizes need the training loop in the user's hands: plain DDP or FSDP2 (torchtitan-
    style) loops can feed each rank its own batch; DeepSpeed (``train_micro_batch_size_per_gpu``) and
    Megatron (``--micro-batch-size``) fix one micro-batch for every rank."""
    return k.engine in ("torch", "fsdp2")


class _Found:
    """Plans found so far, and the speed a new plan must reach to enter the ``top`` (the floor that lets
    later searches stop early without changing the result)."""

    def __init__(self, top: int) -> None:
        self.top, self.plans, self.speeds = top, [], []  # type: ignore[var-annotated]

    def add(self, plans: Sequence[Plan]) -> None:
        self.plans.extend(plans)
        self.speeds = sorted(self.speeds + [p.tokens_per_second for p in plans], reverse=True)[:self.top]

    def floor(self) -> float:
        return self.speeds[-1] if len(self.speeds) >= self.top else 0.0


def _strength(gs: GroupSearch) -> float:
    return gs.group.count * _peak_flops(gs)


def mixed_plans(req: PlanRequest, searches: Sequence[GroupSearch]) -> tuple[list[Plan], dict]:
    """Plans over each type alone and over the whole pool. The strongest type alone is searched first,
    then one pipeline over the types (:func:`~trainmem.plan.stages.staged_plans`); same-layout layouts
    over the whole pool are visited in order of their upper bound and the visit stops once ``top``
    plans (of any kind) beat every bound left; the other types alone are searched last, each
    stopping below the speed the ``top``-th plan found so far already has (a plan slower than that
    cannot be in the answer). Also returns what is known of the best whole-pool plan (for "leaving the
    slower types out is faster"): the best one found and the bound no unvisited layout can exceed."""
    found = _Found(req.top)
    order = sorted(searches, key=_strength, reverse=True)
    found.add(single_group_plans(order[0], order[0].group.count, req.global_batch, req.top))
    staged = staged_plans(req, searches, found)  # one pipeline over the types, uneven stages
    best_whole, bound_left = _whole_pool(req, searches, found)
    if staged is not None and len(staged.shares) == len(searches) and (
            best_whole is None or staged.tokens_per_second > best_whole.tokens_per_second):
        best_whole = staged
    for gs in order[1:]:  # each other type alone (the others left out)
        found.add(single_group_plans(gs, gs.group.count, req.global_batch, req.top, floor=found.floor()))
    return found.plans, {"best_whole_pool": best_whole, "whole_pool_bound": bound_left}


def _whole_pool(req: PlanRequest, searches: Sequence[GroupSearch], found: _Found) -> tuple[Plan | None, float]:
    """Same-layout plans over every type, layouts in order of :func:`_upper_bound`: (the best one, the
    bound left when the visit stopped; 0 when every layout was visited). A layout enters with
    :func:`_sync_bound` (the per-step time no batch split avoids) and is bounded fully, and then
    visited, only when that key reaches the top: both are upper bounds, so the visit order and the stop
    are those of the full bound."""
    heap = [(-_sync_bound(req, searches, k), n, 0, k) for n, k in enumerate(_structures(req, searches))]
    heapq.heapify(heap)
    best_whole: Plan | None = None
    while heap:
        key, n, level, k = heapq.heappop(heap)
        if len(found.speeds) >= req.top and -key <= found.floor():
            return best_whole, -key
        if level == 0:
            if not any(gs.bounded_out(_for_group(k, gs, 1, 1)) for gs in searches):
                heapq.heappush(heap, (-_upper_bound(req, searches, k), n, 1, k))
            continue
        got = _mixed_for_structure(req, searches, k)
        found.add(got)
        for p in got:
            if best_whole is None or p.tokens_per_second > best_whole.tokens_per_second:
                best_whole = p
    return best_whole, 0.0


def _sync_bound(req: PlanRequest, searches: Sequence[GroupSearch], k: Knobs) -> float:
    """Tokens/s no whole-pool plan of this layout beats for its per-step time alone: the fastest type's
    optimizer step and offload, and the gradient synchronisation over the link between types at its
    least exposed (one micro-batch of the largest power of two the batch allows on each type: the most
    backward to hide behind), as in :func:`_upper_bound`."""
    dps = [gs.group.count // (k.tp * k.pp * k.cp) for gs in searches]
    cap = max(1, req.global_batch // sum(dps))
    mb = 1 << (cap.bit_length() - 1)
    fixed = min(_per_step_seconds(gs, k) for gs in searches)
    cross = _cross_link(req, searches)
    sync = min(grad_sync_seconds(req.spec, gs.view(_for_group(k, gs, mb, 1)), gs.group, cross) for gs in searches)
    return req.global_batch * req.seq_len / (fixed + sync)
