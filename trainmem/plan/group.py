"""One GPU type's search (:class:`GroupSearch`) and the request it serves (:class:`PlanRequest`): the frontier
of configurations ordered by optimistic, then exact, speed, bounded and estimated on demand. The whole search
and how it stays exact: :mod:`trainmem.plan.search`; mixed pools (:mod:`trainmem.plan.mixed`) and staged
pipelines (:mod:`trainmem.plan.stages`) build on this module, so that none of them imports the entry point.
"""

from __future__ import annotations

import heapq
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace

from trainmem.errors import ConfigError, TrainmemError
from trainmem.hardware.cluster import Cluster, GPUGroup
from trainmem.memory.estimate import MemoryEstimate, estimate
from trainmem.memory.overhead import CUDA_CONTEXT_BYTES, cuda_only_allocated_bytes
from trainmem.model.spec import ModelSpec
from trainmem.perf import StepTime, microbatch_seconds, step_time
from trainmem.perf.step import step_overhead_seconds
from trainmem.plan.refusal import needed_bytes, pins_text
from trainmem.plan.bounds import logits_bytes, resident_bytes, stage_layer_params, states_lower_bound_bytes
from trainmem.plan.result import GroupShare, Plan
from trainmem.plan.space import (ENGINES, KNOB_KEYS, Knobs, SpaceLimits, configurations, engine_precision,
                                 knob_stage_layers, recompute_rank, savers, with_knobs)
from trainmem.plan.view import SetupView
from trainmem.setup import RECIPES, TrainingSetup, make_setup, validate_for_model

__all__ = ["PlanRequest", "GroupSearch", "single_group_plans", "fits_with_margin", "resolve_request", "engine_neutral_extras",
           "RECIPE_NAMES", "node_host_memory"]


#: Setup extras that only Megatron runs: the other engines' configurations are searched without them.
_MEGATRON_ONLY = ("grad_reduce_16bit", "fp8_params", "megatron_deepspeed")


def engine_neutral_extras(extra: Mapping[str, object], precision: str) -> dict[str, object]:
    """The setup extras a request's model can be validated with on any engine (``trainmem estimate``'s
    validation); the Megatron-only ones are checked here on a Megatron setup of the request's precision (one
    line on a bad combination, e.g. ``--fp8-params`` without fp8)."""
    only = {k: v for k, v in extra.items() if k in _MEGATRON_ONLY and v}
    if only:
        make_setup(engine="megatron", precision="fp8" if precision == "fp8" else "mixed-bf16", zero=1, **only)
    return {k: v for k, v in extra.items() if k not in _MEGATRON_ONLY and k != "async_tp"}


@dataclass(frozen=True)
class PlanRequest:
    spec: ModelSpec
    cluster: Cluster
    global_batch: int
    seq_len: int
    precision: str = "bf16"
    """A family (bf16, fp16, fp32) each engine runs as its own recipe, fp8 (megatron, fsdp2), or one recipe
    by the estimator's name (amp-bf16, mixed-bf16, amp-fp16, mixed-fp16: the engines that run it,
    ``trainmem.setup.RECIPES``)."""
    margin: float = 0.05
    """Safety margin on the reserved memory (0.05 = 5 %)."""
    top: int = 5
    fixed: Mapping[str, object] = field(default_factory=dict)
    engines: tuple[str, ...] = ENGINES
    setup_extra: Mapping[str, object] = field(default_factory=dict)
    """Other setup fields applied to every candidate (optimizer, attn, lora_rank, lora_targets, qlora)."""
    host_memory_bytes: int | None = None
    """Host RAM per node (``--host-memory``): a plan whose ranks on one node put more there (offloaded states,
    :attr:`~trainmem.memory.estimate.MemoryEstimate.host_memory_bytes` per rank) is refused. None: the node's own
    (the cluster spec's ``host_memory``, else the catalog default per GPU type: :func:`node_host_memory`)."""

    @property
    def pins(self) -> dict[str, object]:
        """The setup fields ``--fix`` pins beyond the knobs (sp, megatron_deepspeed, stage_layers, …)."""
        return {k: v for k, v in self.fixed.items() if k not in KNOB_KEYS}


#: Recipes by the estimator's own names (``--precision amp-bf16``): the engines whose RECIPES hold them run them.
RECIPE_NAMES = ("amp-bf16", "amp-fp16", "mixed-bf16", "mixed-fp16")
_FAMILIES = ("bf16", "fp16", "fp32", "fp8")


def node_host_memory(req: PlanRequest, group: GPUGroup) -> tuple[int | None, str]:
    """The host RAM of one node that offload plans are checked against, and where it comes from:
    ``--host-memory`` wins over the cluster spec's ``host_memory``, which wins over the catalog default of the GPU
    type (``gpus.json`` ``host_memory_gib``). (None, "") where none is known: not checked."""
    if req.host_memory_bytes is not None:
        return req.host_memory_bytes, "--host-memory"
    return group.host_memory_bytes, group.host_memory_from


def host_memory_assumption(req: PlanRequest, group: GPUGroup) -> str:
    """The plan's assumption line on the node's host RAM (what offload plans are checked against)."""
    cap, source = node_host_memory(req, group)
    if cap is None:
        return f"{group.gpu.name}: host RAM per node unknown: offload plans are not checked against it"
    return (f"{group.gpu.name}: {cap / 2**30:,.0f} GiB host RAM per node ({source}); plans whose ranks on a node "
            "offload more there are refused (offloaded states only: pinned buffers, the data loader and the "
            "processes are not counted)")


def fits_with_margin(est: MemoryEstimate, margin: float) -> bool:
    return needed_bytes(est, margin) <= est.gpu_memory_bytes


def _precision_family(req: PlanRequest, group: GPUGroup) -> str:
    if req.precision == "bf16" and not group.gpu.bf16:
        return "fp16"
    return req.precision


def resolve_request(req: PlanRequest) -> PlanRequest:
    """The request as the search runs it: a recipe name (``amp-bf16``) keeps the engines that run it, and the
    setup fields ``--fix`` pins apply to every configuration (a Megatron-only pin, e.g. ``megatron_deepspeed``,
    keeps the Megatron engine; ``async_tp`` torchtitan's). With ``engine`` pinned nothing is dropped here: the
    estimator's validation says why a pinned engine cannot run them."""
    engines, pins = tuple(req.engines), req.pins
    if "engine" not in req.fixed:
        if req.precision in RECIPE_NAMES:
            engines = tuple(e for e in engines if req.precision in RECIPES[e])
        if any(pins.get(k) for k in _MEGATRON_ONLY):
            engines = tuple(e for e in engines if e == "megatron")
        if pins.get("async_tp") or pins.get("fsdp_version") == 1:  # (FSDP1 runs as --engine fsdp2 --fsdp-version 1)
            engines = tuple(e for e in engines if e == "fsdp2")
        if not engines:
            runs = [e for e in ENGINES if req.precision in RECIPES[e]] if req.precision in RECIPE_NAMES else []
            pins = f" with the pins {pins_text(req.fixed)}" if req.fixed else ""
            raise ConfigError(f"--precision {req.precision} is a recipe of {', '.join(runs)}; the engines searched "
                              f"({', '.join(req.engines)}) do not run it{pins}" if req.precision in RECIPE_NAMES and
                              not set(runs) & set(req.engines) else
                              f"--fix {pins_text(req.fixed)}: none of the engines searched ({', '.join(req.engines)}) "
                              "runs these pins")
    if engines == tuple(req.engines) and not pins:
        return req
    return replace(req, engines=engines, setup_extra={**req.setup_extra, **pins})


class GroupSearch:
    """The searches over one GPU type: memoised estimates and step times, and the refusal cache."""

    def __init__(self, req: PlanRequest, group: GPUGroup) -> None:
        self.req, self.group = req, group
        self.family = _precision_family(req, group)
        self.memory_budget = group.gpu.memory_bytes
        self._est: dict[Knobs, MemoryEstimate | None] = {}
        self._refused: dict[tuple, list[tuple[int, int]]] = {}
        self._time: dict[Knobs, StepTime] = {}
        self._mbs: dict[tuple, float] = {}
        self._bound: dict[tuple, tuple[int, int, int]] = {}
        self._act: dict[tuple, int] = {}
        self._layer_act: dict[tuple, list[int]] = {}
        self._fixed_bytes = cuda_only_allocated_bytes(group.gpu)
        self._overhead = step_overhead_seconds()
        self.memo: dict[tuple, object] = {}
        """Per-type values other modules derive once (mixed pools, pipeline stages)."""
        self.evaluated = 0
        self.estimated = 0
        self.pinned = frozenset(req.pins)
        """Setup fields ``--fix`` pins: applied as they are, never dropped for an engine."""
        self.invalid: dict[str, int] = {}
        """The estimator's reasons for pinned configurations it refuses (message → how many)."""
        self.why: dict[str, str] = {}
        """Pool and batch rules that dropped pinned shapes (:func:`~trainmem.plan.space.configurations`)."""
        self.valid_roots = 0
        self.closest: tuple[int, Knobs, MemoryEstimate] | None = None
        """The estimated configuration that missed by the least (bytes needed with the margin, …)."""
        self.least_bound = 0
        """The smallest memory floor of a configuration the bound dropped (bytes with the margin)."""
        self.host_cap, self.host_from = node_host_memory(req, group)
        """The node's host RAM offload plans are checked against, and where it comes from."""
        self.host_refused: tuple[int, Knobs] | None = None
        """Of the configurations that fit the GPU but not the node's host RAM, the one that needs the least there
        (host bytes per node, its knobs)."""

    # -- building blocks ------------------------------------------------------------------------
    def fields(self, k: Knobs) -> dict[str, object]:
        extra, pinned = self.req.setup_extra, self.pinned
        if k.engine != "megatron" and any(extra.get(key) for key in _MEGATRON_ONLY):
            extra = {key: v for key, v in extra.items() if key not in _MEGATRON_ONLY or key in pinned}
        prec = engine_precision(k.engine, self.family)
        if extra.get("fp8_params") and prec != "fp8" and "fp8_params" not in pinned:
            extra = {key: v for key, v in extra.items() if key != "fp8_params"}
        if extra.get("async_tp") and not (k.engine == "fsdp2" and k.tp > 1) and "async_tp" not in pinned:
            extra = {key: v for key, v in extra.items() if key != "async_tp"}  # (torchtitan's, with TP only)
        return {**k.setup_fields(self.req.spec), **extra, "seq_len": self.req.seq_len,
                "gpu": self.group.gpu.name, "precision": prec}

    def setup(self, k: Knobs) -> TrainingSetup | None:
        """The validated setup (None if the estimator's validation refuses the configuration)."""
        try:
            return make_setup(**self.fields(k))
        except ConfigError:
            return None

    def refusal(self, k: Knobs) -> str | None:
        """The estimator's own reason for refusing ``k`` (``make_setup`` and ``validate_for_model``), or None."""
        try:
            validate_for_model(make_setup(**self.fields(k)), self.req.spec)
        except ConfigError as err:
            return str(err)
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
        f.update(sp=bool(f["sp"]) if "sp" in self.pinned else three_d,
                 loss_parallel=three_d and not f.get("no_loss_parallel"))
        return SetupView(**f)

    def time(self, setup: TrainingSetup | SetupView) -> StepTime:
        self.evaluated += 1
        return step_time(self.req.spec, setup, self.group)

    def microbatch_seconds(self, k: Knobs) -> float:
        """One micro-batch's forward + backward on the slowest stage (``StepTime.microbatch_seconds``),
        memoised on what it depends on: not ZeRO, offload, interleaving or accumulation (the stage
        entry of :mod:`trainmem.perf.step` is keyed without them)."""
        key = (k.engine, k.dp, k.tp, k.pp, k.cp, k.ep, k.recompute, k.micro_batch)
        got = self._mbs.get(key)
        if got is None:
            hit = self._time.get(k)
            got = hit.microbatch_seconds if hit is not None else \
                microbatch_seconds(self.req.spec, self.view(k), self.group)
            self._mbs[key] = got
        return got

    def optimistic_tokens_per_second(self, k: Knobs) -> float:
        """Tokens/s that ``k`` cannot beat: its step takes at least ``grad_accum`` micro-batches on the
        slowest stage, the 1F1B bubble ``(pp - 1)/vpp`` of them and the per-step host overhead (every other
        part of the breakdown is ≥ 0; ``tests/plan`` checks the bound against :func:`step_time`)."""
        mbs = self.microbatch_seconds(k)
        step = (k.grad_accum + ((k.pp - 1) / k.vpp if k.pp > 1 else 0.0)) * mbs + self._overhead
        return k.micro_batch * k.grad_accum * k.dp * self.req.seq_len / step

    def implied_refused(self, k: Knobs) -> bool:
        """A refusal at (recompute r0, micro-batch m0) covers every larger micro-batch with less recompute, but
        Megatron's selective recompute is not below its no-recompute: with fused attention nothing s² is
        dropped and the checkpoint's v, a view of the fused qkv output, keeps that whole buffer
        (trainmem/memory/megatron_activations.py), so a selective refusal there covers selective only, and only a
        full refusal covers selective (block recompute, none ≥ block-N ≥ full, is not ordered against it)."""
        r = recompute_rank(k.recompute)
        sel, full = recompute_rank("selective"), recompute_rank("full")
        if k.engine == "megatron":
            return any((r == sel if r0 == sel else (r0 == full if r == sel else r <= r0)) and k.micro_batch >= m0
                       for r0, m0 in self._refused.get(k.structure(), ()))
        return any(r <= r0 and k.micro_batch >= m0 for r0, m0 in self._refused.get(k.structure(), ()))

    def memory(self, k: Knobs, setup: TrainingSetup) -> MemoryEstimate | None:
        """The estimate if it fits with the margin, else None (and the refusal is remembered)."""
        if k in self._est:
            return self._est[k]
        if self._floor_refuses(k):
            self._est[k] = None
            return None
        self.estimated += 1
        try:
            est = estimate(self.req.spec, setup)
        except TrainmemError:
            est = None
        gpu_ok = est is not None and fits_with_margin(est, self.req.margin)
        ok = est if gpu_ok and self.host_fits(est, k) else None  # type: ignore[arg-type]
        self._est[k] = ok
        if ok is None:
            self._refuse(k)
            if est is not None and not gpu_ok and (self.closest is None or
                                                   needed_bytes(est, self.req.margin) < self.closest[0]):
                self.closest = (needed_bytes(est, self.req.margin), k, est)
        return ok

    def host_bytes_per_node(self, est: MemoryEstimate, gpus: int) -> int:
        """Host RAM the ranks of one node need: each rank's offloaded states × the ranks a node holds."""
        return est.host_memory_bytes * min(self.group.gpus_per_node, gpus)

    def host_fits(self, est: MemoryEstimate, k: Knobs) -> bool:
        """The node's host RAM (:func:`node_host_memory`) holds what the plan offloads there (a refusal covers the
        same structure at any micro-batch or recompute: the offloaded states do not depend on them)."""
        if self.host_cap is None:
            return True
        need = self.host_bytes_per_node(est, k.gpus)
        if need <= self.host_cap:
            return True
        if self.host_refused is None or need < self.host_refused[0]:
            self.host_refused = (need, k)
        return False

    def _refuse(self, k: Knobs) -> None:
        self._refused.setdefault(k.structure(), []).append((recompute_rank(k.recompute), k.micro_batch))

    def _floor_refuses(self, k: Knobs) -> bool:
        """Before a third estimate of a structure that memory refused twice, its least memory (full
        recompute, micro-batch 1) is tried: if that does not fit either (bounded out, or estimated), no
        variant of the structure does, and the refusal covers them all (``implied_refused``)."""
        if len(self._refused.get(k.structure(), ())) < 3:
            return False
        floor = with_knobs(k, recompute="full", micro_batch=1, grad_accum=k.micro_batch * k.grad_accum)
        if floor == k:
            return False
        if floor not in self._est:
            if self.bounded_out(floor):
                self._est[floor] = None
                self._refuse(floor)
            else:
                s = self.setup(floor)
                if s is None:
                    return False
                self.memory(floor, s)
        return self._est[floor] is None

    # -- memory bounds --------------------------------------------------------------------------
    def bounded_out(self, k: Knobs) -> bool:
        """True if the configuration cannot fit with the margin (:meth:`_over`): the model states of the
        average stage already do not, or stage 0 does not hold its states, what stays resident beside
        them (:func:`~trainmem.plan.bounds.resident_bytes`) and the activations of the micro-batches it
        holds in flight (1F1B: ``min(pp, grad_accum)``, and ``(pp - 1)/(pp·vpp)`` more of each when
        interleaved, ``trainmem/memory/walk.py``; one without a pipeline), or the last stage its own
        with one micro-batch and its logits. Each part is never above what the estimator counts. (A pinned
        ``stage_layers`` is not the split the bound reads: nothing is dropped by it then.)"""
        if "stage_layers" in self.pinned:
            return False
        average, first, last = self._state_bounds(k)
        if self._over(max(average, first, last)):
            return True  # (the states alone: no need to look at the activations)
        in_flight = min(k.pp, k.grad_accum) if k.pp > 1 else 1
        interleave = 1 + (k.pp - 1) / (k.pp * k.vpp) if k.vpp > 1 else 1.0
        act0 = k.micro_batch * in_flight * interleave * self._activations_per_sequence(k, 0)
        logits = self._logits(k)
        if k.pp == 1:
            return self._over(first + act0 + logits)
        if self._over(first + act0):
            return True
        return self._over(last + k.micro_batch * self._activations_per_sequence(k, k.pp - 1) + logits)

    def _logits(self, k: Knobs) -> int:
        """The last stage's logits of one micro-batch (0 under a loss that does not build them whole)."""
        if self.req.setup_extra.get("loss", "hf") != "hf":
            return 0
        return logits_bytes(self.req.spec, k, self.req.seq_len)

    def _over(self, allocated: float) -> bool:
        """True if a step that allocates at least ``allocated`` bytes cannot fit with the margin: the
        estimate's device total is at least its peak (≥ ``allocated`` + the cuBLAS workspace) plus the
        CUDA context, and ``fits_with_margin`` adds ``margin`` × reserved (≥ peak)."""
        need = (1 + self.req.margin) * (allocated + self._fixed_bytes) + CUDA_CONTEXT_BYTES
        if need > self.memory_budget:
            self.least_bound = int(min(need, self.least_bound or need))
            return True
        return False

    def _state_bounds(self, k: Knobs) -> tuple[int, int, int]:
        """(states of the average stage's rank, states + resident memory of stage 0's rank, and of the
        last stage's)."""
        key = (k.engine, k.tp, k.pp, k.ep, k.dp, k.cp, k.zero, k.offload)
        got = self._bound.get(key)
        if got is None:
            x, spec = self.req.setup_extra, self.req.spec
            prec, lora = engine_precision(k.engine, self.family), bool(x.get("lora_rank"))
            opt, qlora, fp8w = str(x.get("optimizer", "adamw")), bool(x.get("qlora")), bool(x.get("fp8_params"))
            grad16 = bool(x.get("grad_reduce_16bit"))

            def stage(i: int) -> int:
                n = stage_layer_params(spec, k, i)
                return (states_lower_bound_bytes(spec, k, prec, opt, lora, qlora, n=n, fp8_params=fp8w)
                        + resident_bytes(k, prec, n, lora, grad16))

            first = stage(0)
            got = (states_lower_bound_bytes(spec, k, prec, opt, lora, qlora, fp8_params=fp8w), first,
                   stage(k.pp - 1) if k.pp > 1 else first)
            self._bound[key] = got
        return got

    def _activations_per_sequence(self, k: Knobs, stage: int) -> int:
        """What the layers of pipeline ``stage`` keep through one sequence's forward under
        ``k.recompute`` (``StepPlan.saved_eff``, linear in the micro-batch), less 2 % for per-allocation
        rounding. At the end of a micro-batch's forward all of it is alive beside the model states, on
        every schedule."""
        if self.req.setup_extra.get("offload_activations"):
            return 0  # (the layers' saved tensors are on the host: memory/act_offload.py; still a lower bound)
        key = (k.engine, k.tp, k.cp, k.ep, k.recompute, k.pp, stage)
        got = self._act.get(key)
        if got is None:
            per_layer = self._saved_per_layer(k)
            got = int(sum(per_layer[i] for i in knob_stage_layers(self.req.spec, k, stage)) * 0.98)
            self._act[key] = got
        return got

    def _saved_per_layer(self, k: Knobs) -> list[int]:
        """Each layer's kept bytes for one sequence, from the estimator's own step plan of the whole
        model (pp = 1; a layer keeps the same whatever stage it is on — except under block recompute, which
        checkpoints the first layers of each stage: there the configuration's own stages)."""
        block = k.recompute.startswith("block-")
        key = (k.engine, k.tp, k.cp, k.ep, k.recompute, k.pp if block else 1)
        got = self._layer_act.get(key)
        if got is None:
            got = [0] * self.req.spec.num_layers
            s = self.setup(with_knobs(k, micro_batch=1, grad_accum=1, vpp=1) if block else
                           with_knobs(k, micro_batch=1, grad_accum=1, pp=1, vpp=1, dp=k.dp * k.pp))
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
        root_fixed = {**fixed, "recompute": fixed.get("recompute", "none"), "offload": fixed.get("offload", "none")}
        roots = list(configurations(self.req.spec, lim, root_fixed, self.req.engines, self.why if fixed else None))
        if fixed:  # a pinned value may be outside the planner's space: the estimator validates each root
            valid = []
            for k in roots:
                reason = self.refusal(k)
                if reason is None:
                    valid.append(k)
                else:
                    self.invalid[reason] = self.invalid.get(reason, 0) + 1
            roots = valid
        self.valid_roots += len(roots)
        return roots

    def best(self, gpus: int, global_batch: int, fixed: Mapping[str, object], top: int,
             distinct: bool = True, floor: float = 0.0) -> list[tuple[StepTime, Knobs, TrainingSetup, MemoryEstimate]]:
        """The ``top`` fastest configurations that fit, one per strategy (structure + recompute) when
        ``distinct``, fastest first; none slower than ``floor`` tokens/s (the search stops there: a
        caller that already holds ``top`` plans at least that fast needs no slower one).

        Candidates come out of a :class:`_Frontier` in order of predicted speed. It starts with the
        roots; a configuration that memory refuses (bounded out, implied, or estimated) puts its savers
        (more recompute, offload) in it — they are slower than it, so the order stays exact. A saver of
        a configuration that fits is never faster than it and is not listed."""
        frontier = _Frontier(self, fixed)
        found, seen = [], set()
        frontier.push_roots(self.roots(gpus, global_batch, fixed))
        skip = (lambda k: (k.structure(), k.recompute) in seen) if distinct else (lambda k: False)
        while len(found) < top:
            k = frontier.pop(skip, floor)
            if k is None:
                break
            s = None if self.implied_refused(k) else self.setup(k)
            est = self.memory(k, s) if s is not None else None
            if est is None:
                frontier.push_savers(k)
                continue
            found.append((self.time_of(k), k, s, est))
            seen.add((k.structure(), k.recompute))
        return found


class _Frontier:
    """Candidates by predicted tokens/s, fastest first. A configuration enters with an optimistic key
    (:meth:`GroupSearch.optimistic_tokens_per_second`, arithmetic on a memoised micro-batch time) and
    is timed exactly, and bounded, only when that key reaches the top; it then re-enters with its exact
    speed. No key is below its exact value, so the configurations leave in exactly the order of their
    predicted speed, as if every one had been timed up front. The roots enter as families that share
    the micro-batch time (they differ in ZeRO stage and interleaving) under the family's best key, and
    are split when that key reaches the top."""

    _FAMILY, _OPTIMISTIC, _EXACT = 0, 1, 2

    def __init__(self, gs: GroupSearch, fixed: Mapping[str, object]) -> None:
        self.gs, self.fixed = gs, fixed
        self.heap: list[tuple[float, int, int, object]] = []
        self.pushed: set[Knobs] = set()
        self.count = 0

    def _add(self, key: float, kind: int, item: object) -> None:
        self.count += 1
        heapq.heappush(self.heap, (-key, self.count, kind, item))

    def push_roots(self, roots: Iterable[Knobs]) -> None:
        families: dict[tuple, list[Knobs]] = {}
        for k in roots:
            families.setdefault((k.engine, k.dp, k.tp, k.pp, k.cp, k.ep, k.recompute, k.micro_batch), []).append(k)
        for members in families.values():
            best = max(members, key=lambda k: k.vpp)  # the least bubble: the family's highest key
            self._add(self.gs.optimistic_tokens_per_second(best), self._FAMILY, members)

    def push(self, k: Knobs) -> None:
        if k not in self.pushed:
            self.pushed.add(k)
            self._add(self.gs.optimistic_tokens_per_second(k), self._OPTIMISTIC, k)

    def push_savers(self, k: Knobs) -> None:
        for v in savers(k, self.fixed, self.gs.req.spec):
            self.push(v)

    def pop(self, skip: Callable[[Knobs], bool], floor: float = 0.0) -> Knobs | None:
        """The fastest configuration left that the memory bound does not refuse (and ``skip`` does not
        drop); None when none is left or none can reach ``floor`` tokens/s. Bounded-out ones put their
        savers in."""
        heap, gs = self.heap, self.gs
        while heap and -heap[0][0] >= floor:
            _, n, kind, item = heapq.heappop(heap)
            if kind == self._FAMILY:
                for k in item:  # type: ignore[attr-defined]
                    self.push(k)
                continue
            k = item  # type: ignore[assignment]
            if skip(k):
                continue
            if kind == self._EXACT:
                return k
            if gs.bounded_out(k):
                self.push_savers(k)
                continue
            heapq.heappush(heap, (-gs.time_of(k).tokens_per_second, n, self._EXACT, k))
        return None


def single_group_plans(gs: GroupSearch, gpus: int, global_batch: int, top: int, floor: float = 0.0) -> list[Plan]:
    """The ``top`` fastest plans of one GPU type (none slower than ``floor`` tokens/s)."""
    req = gs.req
    out = []
    for t, k, s, est in gs.best(gpus, global_batch, req.fixed, top, floor=floor):
        share = GroupShare(gpu=gs.group.gpu.name, gpus=k.gpus, knobs=k, setup=s, memory=est, time=t,
                           host_memory_bytes=gs.host_bytes_per_node(est, k.gpus))
        out.append(Plan(shares=(share,), step_seconds=t.step_seconds, tokens_per_step=t.tokens_per_step,
                        mfu=t.mfu, time_breakdown=dict(t.breakdown), runs_on=k.engine, notes=t.notes))
    return out
