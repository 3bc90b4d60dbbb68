"""The planner: the fastest configurations that fit, over the whole valid space.

How it stays exact and fast (no sampling):

1. every valid configuration of the pool (:func:`trainmem.plan.space.configurations`) is bounded
   from below in memory (:func:`~trainmem.plan.bounds.states_lower_bound_bytes`, a few integer
   operations) and the ones that cannot fit are dropped;
2. the step time of each survivor is predicted (:func:`trainmem.perf.step_time`, pure arithmetic);
3. candidates are visited fastest first and their memory is estimated
   (:func:`trainmem.memory.estimate`, memoised). A configuration that does not fit proves that the
   same structure with a larger micro-batch, or with less recompute, does not fit either (memory
   grows with both: ``tests/memory/test_properties.py``), so those are skipped without estimating;
4. the search stops when ``top`` plans of distinct strategies fit: every faster configuration was
   either estimated and refused or implied refused, so the first plan is the best of the whole space.

"Fits" means the estimate's ``device_total_bytes`` (reserved + CUDA context + NCCL) with
``margin`` added on the reserved part stays within the GPU's memory.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

from trainmem.errors import ConfigError, TrainmemError
from trainmem.hardware.cluster import Cluster, GPUGroup
from trainmem.memory.estimate import MemoryEstimate, estimate
from trainmem.model.spec import ModelSpec
from trainmem.perf import StepTime, step_time
from trainmem.plan.bounds import states_lower_bound_bytes
from trainmem.plan.result import GroupShare, Plan, PlanResult
from trainmem.plan.space import (ENGINES, KNOB_KEYS, Knobs, SpaceLimits, configurations, engine_precision, is_root,
                                 savers)
from trainmem.plan.view import SetupView
from trainmem.setup import TrainingSetup, make_setup

__all__ = ["PlanRequest", "GroupSearch", "plan", "fits_with_margin"]

_RECOMPUTE_RANK = {"none": 0, "selective": 1, "full": 2}


@dataclass(frozen=True)
class PlanRequest:
    spec: ModelSpec
    cluster: Cluster
    global_batch: int
    seq_len: int
    precision: str = "bf16"
    """A family (bf16, fp16, fp32) each engine runs as its own recipe, or fp8 (megatron, fsdp2)."""
    margin: float = 0.05
    """Safety margin on the reserved memory (0.05 = 5 %)."""
    top: int = 5
    fixed: Mapping[str, object] = field(default_factory=dict)
    engines: tuple[str, ...] = ENGINES
    setup_extra: Mapping[str, object] = field(default_factory=dict)
    """Other setup fields applied to every candidate (optimizer, attn, lora_rank, lora_targets, qlora)."""


def fits_with_margin(est: MemoryEstimate, margin: float) -> bool:
    return est.device_total_bytes + int(margin * est.peak_reserved_bytes) <= est.gpu_memory_bytes


def _precision_family(req: PlanRequest, group: GPUGroup) -> str:
    if req.precision == "bf16" and not group.gpu.bf16:
        return "fp16"
    return req.precision


class GroupSearch:
    """The searches over one GPU type: memoised estimates and step times, and the refusal cache."""

    def __init__(self, req: PlanRequest, group: GPUGroup) -> None:
        self.req, self.group = req, group
        self.family = _precision_family(req, group)
        self.memory_budget = group.gpu.memory_bytes
        self._est: dict[Knobs, MemoryEstimate | None] = {}
        self._refused: dict[tuple, list[tuple[int, int]]] = {}
        self._time: dict[Knobs, StepTime] = {}
        self._bound: dict[tuple, int] = {}
        self._act: dict[tuple, int] = {}
        self._layer_act: dict[tuple, list[int]] = {}
        self.evaluated = 0
        self.estimated = 0

    # -- building blocks ------------------------------------------------------------------------
    def fields(self, k: Knobs) -> dict[str, object]:
        return {**k.setup_fields(), **self.req.setup_extra, "seq_len": self.req.seq_len,
                "gpu": self.group.gpu.name, "precision": engine_precision(k.engine, self.family)}

    def setup(self, k: Knobs) -> TrainingSetup | None:
        """The validated setup (None if the estimator's validation refuses the configuration)."""
        try:
            return make_setup(**self.fields(k))
        except ConfigError:
            return None

    def time_of(self, k: Knobs) -> StepTime:
        """Predicted step time, from an unvalidated :class:`~trainmem.plan.view.SetupView` (memoised)."""
        t = self._time.get(k)
        if t is None:
            t = self.time(self.view(k))
            self._time[k] = t
        return t

    def view(self, k: Knobs) -> SetupView:
        f = self.fields(k)
        three_d = k.engine in ("megatron", "fsdp2") and k.tp > 1
        f.update(sp=three_d, loss_parallel=three_d)
        return SetupView(**f)

    def time(self, setup: TrainingSetup | SetupView) -> StepTime:
        self.evaluated += 1
        return step_time(self.req.spec, setup, self.group)

    def implied_refused(self, k: Knobs) -> bool:
        r = _RECOMPUTE_RANK[k.recompute]
        return any(r <= r0 and k.micro_batch >= m0 for r0, m0 in self._refused.get(k.structure(), ()))

    def memory(self, k: Knobs, setup: TrainingSetup) -> MemoryEstimate | None:
        """The estimate if it fits with the margin, else None (and the refusal is remembered)."""
        if k in self._est:
            return self._est[k]
        self.estimated += 1
        try:
            est = estimate(self.req.spec, setup)
        except TrainmemError:
            est = None
        ok = est if est is not None and fits_with_margin(est, self.req.margin) else None
        self._est[k] = ok
        if ok is None:
            self._refused.setdefault(k.structure(), []).append((_RECOMPUTE_RANK[k.recompute], k.micro_batch))
            self._check_floor(k)
        return ok

    def _check_floor(self, k: Knobs) -> None:
        """After a refusal, try the structure's least memory (full recompute, micro-batch 1): if that
        does not fit either, no variant of the structure does, and one estimate rules them all out."""
        floor = replace(k, recompute="full", micro_batch=1, grad_accum=k.micro_batch * k.grad_accum)
        if floor == k or floor in self._est:
            return
        s = self.setup(floor)
        if s is not None:
            self.memory(floor, s)

    def bounded_out(self, k: Knobs) -> bool:
        """True if the configuration cannot fit: its model states plus one micro-batch's activations
        of its pipeline stage already exceed the GPU (both never above what the estimator counts)."""
        key = (k.engine, k.tp, k.pp, k.ep, k.dp, k.cp, k.zero, k.offload)
        lb = self._bound.get(key)
        if lb is None:
            x = self.req.setup_extra
            lb = states_lower_bound_bytes(self.req.spec, k, engine_precision(k.engine, self.family),
                                          str(x.get("optimizer", "adamw")), bool(x.get("lora_rank")), bool(x.get("qlora")))
            self._bound[key] = lb
        if lb > self.memory_budget:
            return True
        return lb + k.micro_batch * self._activations_per_sequence(k) > self.memory_budget

    def _activations_per_sequence(self, k: Knobs) -> int:
        """What the layers of stage 0 keep through one sequence's forward under ``k.recompute``
        (``StepPlan.saved_eff``, linear in the micro-batch), less 2 % for per-allocation rounding. At
        the end of a micro-batch's forward all of it is alive beside the model states, on every
        schedule (1F1B runs at least one whole forward before that micro-batch's backward)."""
        key = (k.engine, k.tp, k.cp, k.ep, k.recompute, k.pp)
        got = self._act.get(key)
        if got is None:
            from trainmem.memory.states import stage_layers
            per_layer = self._saved_per_layer(k)
            got = int(sum(per_layer[i] for i in stage_layers(len(per_layer), k.pp, 0)) * 0.98)
            self._act[key] = got
        return got

    def _saved_per_layer(self, k: Knobs) -> list[int]:
        """Each layer's kept bytes for one sequence, from the estimator's own step plan of the whole
        model (pp = 1; a layer keeps the same whatever stage it is on)."""
        key = (k.engine, k.tp, k.cp, k.ep, k.recompute)
        got = self._layer_act.get(key)
        if got is None:
            got = [0] * self.req.spec.num_layers
            s = self.setup(replace(k, micro_batch=1, grad_accum=1, pp=1, vpp=1, dp=k.dp * k.pp))
            if s is not None:
                from trainmem.memory.plan import kept_per_layer
                got = kept_per_layer(self.req.spec, s)
            self._layer_act[key] = got
        return got

    # -- the search -----------------------------------------------------------------------------
    def roots(self, gpus: int, global_batch: int, fixed: Mapping[str, object]) -> list[Knobs]:
        """Every valid configuration's root (least recompute, no offload) for this pool size."""
        lim = SpaceLimits(gpus=gpus, gpus_per_node=self.group.gpus_per_node, global_batch=global_batch,
                          seq_len=self.req.seq_len, lora=bool(self.req.setup_extra.get("lora_rank")),
                          fp8=self.family == "fp8")
        return [k for k in configurations(self.req.spec, lim, fixed, self.req.engines) if is_root(k, fixed)]

    def best(self, gpus: int, global_batch: int, fixed: Mapping[str, object], top: int,
             distinct: bool = True) -> list[tuple[StepTime, Knobs, TrainingSetup, MemoryEstimate]]:
        """The ``top`` fastest configurations that fit, one per strategy (structure + recompute) when
        ``distinct``, fastest first.

        Candidates come out of a heap ordered by predicted speed. It starts with the roots; a
        configuration that memory refuses (bounded out, implied, or estimated) puts its savers (more
        recompute, offload) in the heap — they are slower than it, so the heap's order stays exact.
        A saver of a configuration that fits is never faster than it and is not listed."""
        heap: list[tuple[float, int, Knobs]] = []
        pushed: set[Knobs] = set()
        found, seen = [], set()

        def push(k: Knobs) -> None:
            if k in pushed:
                return
            pushed.add(k)
            if self.bounded_out(k):
                for v in savers(k, fixed):
                    push(v)
                return
            heapq.heappush(heap, (-self.time_of(k).tokens_per_second, len(pushed), k))

        for k in self.roots(gpus, global_batch, fixed):
            push(k)
        while heap and len(found) < top:
            _, _, k = heapq.heappop(heap)
            tag = (k.structure(), k.recompute)
            if distinct and tag in seen:
                continue
            s = None if self.implied_refused(k) else self.setup(k)
            est = self.memory(k, s) if s is not None else None
            if est is None:
                for v in savers(k, fixed):
                    push(v)
                continue
            found.append((self.time_of(k), k, s, est))
            seen.add(tag)
        return found


def single_group_plans(gs: GroupSearch, gpus: int, global_batch: int, top: int) -> list[Plan]:
    req = gs.req
    out = []
    for t, k, s, est in gs.best(gpus, global_batch, req.fixed, top):
        share = GroupShare(gpu=gs.group.gpu.name, gpus=k.gpus, knobs=k, setup=s, memory=est, time=t)
        out.append(Plan(shares=(share,), step_seconds=t.step_seconds, tokens_per_step=t.tokens_per_step,
                        mfu=t.mfu, time_breakdown=dict(t.breakdown), runs_on=k.engine, notes=t.notes))
    return out


def plan(req: PlanRequest) -> PlanResult:
    """Search the pool; plans best first (see the module docstring)."""
    _check_request(req)
    t0 = time.perf_counter()
    searches = [GroupSearch(req, g) for g in req.cluster.groups]
    plans: list[Plan] = []
    whole: dict = {}
    if not req.cluster.is_mixed:
        plans = single_group_plans(searches[0], req.cluster.total_gpus, req.global_batch, req.top)
    else:
        from trainmem.plan.mixed import mixed_plans
        plans, whole = mixed_plans(req, searches)
    # fastest first; equal speed (6 significant digits): the plan that leaves more memory free first
    plans.sort(key=lambda p: p.most_loaded.memory.device_total_bytes / p.most_loaded.memory.gpu_memory_bytes)
    plans.sort(key=lambda p: -float(f"{p.tokens_per_second:.6g}"))
    plans = plans[:req.top]
    result = PlanResult(plans=plans, search_seconds=time.perf_counter() - t0,
                        evaluated=sum(s.evaluated for s in searches), estimated=sum(s.estimated for s in searches),
                        assumptions=_assumptions(req, searches))
    if not plans:
        raise ConfigError(_why_refused(req, searches[0]) if _all_fixed(req) else _nothing_fits(req))
    from trainmem.plan.explain import left_out, why_best
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
    if req.precision not in ("bf16", "fp16", "fp32", "fp8"):
        raise ConfigError(f"--precision {req.precision}: the planner takes bf16, fp16, fp32 or fp8 "
                          "(each engine runs its own recipe of it)")
    for g in req.cluster.groups:
        if req.precision == "fp8" and not g.gpu.fp8_tflops:
            raise ConfigError(f"--precision fp8: {g.gpu.name} has no fp8 tensor cores")


def _all_fixed(req: PlanRequest) -> bool:
    return not req.cluster.is_mixed and all(k in req.fixed for k in KNOB_KEYS)


def _why_refused(req: PlanRequest, gs: GroupSearch) -> str:
    """The one configuration of a fully fixed request: the validation's reason, or the memory it needs."""
    f = req.fixed
    k = Knobs(**{key: f[key] for key in KNOB_KEYS})  # type: ignore[arg-type]
    if k.gpus != req.cluster.total_gpus:
        return f"--fix: dp·tp·pp·cp = {k.gpus} but the pool has {req.cluster.total_gpus} GPUs"
    if k.micro_batch * k.grad_accum * k.dp != req.global_batch:
        return (f"--fix: micro_batch({k.micro_batch}) × grad_accum({k.grad_accum}) × dp({k.dp}) = "
                f"{k.micro_batch * k.grad_accum * k.dp}, not the global batch {req.global_batch}")
    s = make_setup(**gs.fields(k))  # raises the estimator's own one-line reason
    est = estimate(req.spec, s)
    need = (est.device_total_bytes + int(req.margin * est.peak_reserved_bytes)) / 2**30
    return (f"--fix: this configuration needs {need:.2f} GiB per GPU with the {req.margin * 100:g} % margin; "
            f"{gs.group.gpu.name} has {est.gpu_memory_bytes / 2**30:.2f} GiB")


def _nothing_fits(req: PlanRequest) -> str:
    pool = req.cluster.spec or f"{req.cluster.total_gpus} GPUs"
    what = f" (knobs fixed: {' '.join(f'{k}={v}' for k, v in req.fixed.items())})" if req.fixed else ""
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
    out.extend(req.cluster.notes)
    return out
