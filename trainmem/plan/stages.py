"""Pipeline stages on different GPU types (issue 8, item 5): uneven stages by memory and speed.

A *staged* plan runs one pipeline whose stages sit on different GPU types of a mixed pool. Its space:

- the types it uses (two or more) in order of memory, largest first: stage 0 keeps the most micro-batches
  in flight under 1F1B (``min(pp, grad_accum)``; the last stage one), so the largest memory goes first;
- every stage runs on ``w = dp·tp·cp`` GPUs of one type and type *i* holds ``s_i`` consecutive stages
  with all its GPUs (``count_i = s_i·w``; ``pp = Σ s_i``), so a stage never spans two types, tensor
  parallelism stays inside a node of one type (``tp`` divides every type's node size) and the pipeline
  runs in rank order (Megatron-LM and torchtitan both make ``pp`` the outermost dimension of the rank
  grid: ranks ``[j·w, (j+1)·w)`` are stage ``j``);
- every stage of type *i* holds ``n_i`` decoder layers, ``Σ s_i·n_i = num_layers``, as the engines
  express it: Megatron-LM core_v0.19.0 only lets the first and the last stage differ
  (``--decoder-first-pipeline-num-layers`` / ``--decoder-last-pipeline-num-layers``; the other stages
  split the rest evenly, ``megatron/core/transformer/transformer_block.py`` ``get_num_layers_to_build``),
  torchtitan 0.2.2 takes any split (``[parallelism] module_fqns_per_model_part``);
- one micro-batch and accumulation for all (a pipeline feeds every stage the same micro-batches), the
  engine, ZeRO stage and recompute as in the rest of the space; no offload, no interleaving, no LoRA,
  no fp8 (not modelled here).

The layer counts are chosen by speed and memory: per-micro-batch stage times come from the performance
model on each stage's own type (:func:`trainmem.perf.step.stage_seconds`), the slowest stage sets the
pace (the step is ``(grad_accum + pp − 1)`` of its micro-batches, the perf model's 1F1B with its bubble),
so the split minimises the slowest stage; each stage must fit its own GPU by the estimator's figure for
that stage (:func:`stage_estimate`; a refusal lowers that type's layer limit — memory grows with the
layers — and the split is chosen again). Candidates are visited in order of an upper bound on their
speed (the continuous balance of the layers over the stages' per-layer times, with the exact pipeline
sends), and the visit stops once ``top`` plans beat every bound left, so the best staged plan is the best
of this space under that split rule."""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Protocol

from trainmem.errors import TrainmemError
from trainmem.export.megatron import megatron_split
from trainmem.memory.states import layers_alike, stage_layers, stage_ranges
from trainmem.memory.estimate import MemoryEstimate, estimate
from trainmem.model.spec import ModelSpec
from trainmem.perf import StepTime, grad_sync_seconds, optimizer_seconds
from trainmem.perf.collectives import p2p_seconds
from trainmem.perf.device import device_of, mfu_peak_flops_per_s
from trainmem.perf.flops import model_flops_per_token
from trainmem.perf.step import stage_seconds, step_overhead_seconds
from trainmem.plan.bounds import resident_bytes, states_lower_bound_bytes
from trainmem.plan.result import GroupShare, Plan
from trainmem.plan.group import GroupSearch, PlanRequest, fits_with_margin
from trainmem.plan.space import Knobs, SpaceLimits, configurations, divisors, engine_precision, savers, with_knobs
from trainmem.setup import TrainingSetup

__all__ = ["StageLayout", "staged_plans", "stage_estimate", "stage_ranges", "megatron_split"]

_ENGINES = ("megatron", "fsdp2")
_PARTS = ("compute", "recompute", "tp_comm", "cp_comm", "ep_comm")


@dataclass(frozen=True, slots=True)
class StageLayout:
    """Where the pipeline stages of a staged plan run: ``types[i]`` holds ``stages[i]`` consecutive stages
    of ``layers[i]`` decoder layers each."""

    types: tuple[str, ...]
    stages: tuple[int, ...]
    layers: tuple[int, ...]
    stage_seconds: tuple[float, ...]
    """One micro-batch's forward + backward on each stage (the slowest sets the pace)."""
    even_seconds: float = 0.0
    """The slowest stage of the engines' even split on the same placement (time only; 0: not computed)."""

    @property
    def layers_per_stage(self) -> tuple[int, ...]:
        return tuple(n for n, s in zip(self.layers, self.stages) for _ in range(s))

    @property
    def stage_types(self) -> tuple[str, ...]:
        return tuple(t for t, s in zip(self.types, self.stages) for _ in range(s))

    def stages_of(self, i: int) -> range:
        start = sum(self.stages[:i])
        return range(start, start + self.stages[i])

    def words(self) -> str:
        """``stages 0–1 on A100-SXM-80G (15 layers each), stage 2 on RTX-3090-24G (2 layers)``."""
        out = []
        for i, t in enumerate(self.types):
            r, n = self.stages_of(i), self.layers[i]
            where = f"stage {r.start}" if len(r) == 1 else f"stages {r.start}–{r.stop - 1}"
            out.append(f"{where} on {t} ({n} layer{'s' if n != 1 else ''}{' each' if len(r) > 1 else ''})")
        return ", ".join(out)


# --------------------------------------------------------------------------- one stage for the estimator
def stage_estimate(spec: ModelSpec, setup: TrainingSetup, layers_per_stage: Sequence[int], stage: int) -> MemoryEstimate:
    """The estimator's peak of pipeline ``stage`` of an uneven split (``setup.pp == len(layers_per_stage)``):
    the setup with that split as its ``stage_layers``."""
    return estimate(spec, setup.model_copy(update={"stage_layers": tuple(layers_per_stage)}), stages=(stage,))


# --------------------------------------------------------------------------- the space
@dataclass(frozen=True, slots=True)
class _Candidate:
    groups: tuple[int, ...]
    """Indices of the pool's GPU groups, in pipeline order."""
    stages: tuple[int, ...]
    knobs: Knobs
    """The pipeline's knobs (``pp`` = Σ stages, ``dp`` per stage; ``gpus`` = the pipeline's)."""

    def first_stage(self, i: int) -> int:
        return sum(self.stages[:i])


class FoundPlans(Protocol):
    speeds: list[float]

    def add(self, plans: Sequence[Plan]) -> None: ...

    def floor(self) -> float: ...


def _eligible(req: PlanRequest, searches: Sequence[GroupSearch]) -> bool:
    x = req.setup_extra
    return (not x.get("lora_rank") and not x.get("qlora") and req.precision != "fp8"
            and any(e in _ENGINES for e in req.engines))


def _placements(req: PlanRequest, searches: Sequence[GroupSearch]) -> Iterator[tuple[tuple[int, ...], tuple[int, ...], int]]:
    """(groups in pipeline order, stages per group, GPUs per stage) of every placement."""
    order = sorted(range(len(searches)), key=lambda i: (-searches[i].group.gpu.memory_bytes,
                                                        -searches[i].group.gpu.bf16_tflops, i))
    layers = req.spec.num_layers
    for size in range(2, len(order) + 1):
        for groups in combinations(order, size):
            if len({searches[i].family for i in groups}) > 1:
                continue  # one precision recipe for the whole pipeline
            counts = [searches[i].group.count for i in groups]
            for w in divisors(math.gcd(*counts)):
                stages = tuple(c // w for c in counts)
                if 2 <= sum(stages) <= layers:
                    yield groups, stages, w


def _candidates(req: PlanRequest, searches: Sequence[GroupSearch]) -> Iterator[_Candidate]:
    fixed = {k: v for k, v in req.fixed.items()}
    if fixed.get("vpp", 1) != 1 or fixed.get("offload", "none") != "none":
        return
    engines = tuple(e for e in req.engines if e in _ENGINES)
    for groups, stages, w in _placements(req, searches):
        pp = sum(stages)
        if fixed.get("pp", pp) != pp:
            continue
        gpn = math.gcd(*(searches[i].group.gpus_per_node for i in groups))
        lim = SpaceLimits(gpus=w * pp, gpus_per_node=gpn, global_batch=req.global_batch, seq_len=req.seq_len)
        root = {**fixed, "pp": pp, "vpp": 1, "offload": "none", "recompute": fixed.get("recompute", "none")}
        for k in configurations(req.spec, lim, root, engines):
            yield _Candidate(groups, stages, k)


def _savers(c: _Candidate, fixed: Mapping[str, object]) -> list[_Candidate]:
    """More recompute (the next step of it): slower per layer, less memory; visited only when memory
    limited ``c`` (no offload in this space)."""
    return [_Candidate(c.groups, c.stages, k) for k in savers(c.knobs, {**fixed, "offload": "none"})]


# --------------------------------------------------------------------------- stage times on one type
class _TypeTimes:
    """Per-micro-batch pieces of a stage on one GPU type for one set of knobs (breakdown key → seconds):
    a dense layer, a MoE layer and (on first use) what stage 0 adds (embedding) and what the last stage
    adds (head, loss); and their totals."""

    def __init__(self, gs: GroupSearch, k: Knobs, edges: dict[tuple, tuple[dict[str, float], dict[str, float]]],
                 edge_key: tuple) -> None:
        spec, grp = gs.req.spec, gs.group
        self._gs, self._k, self._edges, self._edge_key = gs, k, edges, edge_key
        view = gs.view(with_knobs(k, pp=max(k.pp, 3)))  # stage 1 of ≥ 3 is neither first nor last
        self.dense = stage_seconds(spec, view, grp, 1, 1, 0)
        self.moe = stage_seconds(spec, view, grp, 1, 0, 1) if spec.is_moe else self.dense
        self.dense_t, self.moe_t = sum(self.dense.values()), sum(self.moe.values())
        self.lam = min(self.dense_t, self.moe_t)
        """The least time one layer takes on this type."""
        self._first: dict[str, float] | None = None
        self._last: dict[str, float] | None = None

    def _load_edges(self) -> None:
        got = self._edges.get(self._edge_key)
        if got is None:
            got = self._edges[self._edge_key] = _edges(self._gs, self._k)
        self._first, self._last = got
        self.first_t, self.last_t = sum(got[0].values()), sum(got[1].values())

    @property
    def first(self) -> dict[str, float]:
        if self._first is None:
            self._load_edges()
        return self._first  # type: ignore[return-value]

    @property
    def last(self) -> dict[str, float]:
        if self._last is None:
            self._load_edges()
        return self._last  # type: ignore[return-value]

    def edge_totals(self) -> tuple[float, float]:
        if self._first is None:
            self._load_edges()
        return self.first_t, self.last_t

    def total(self, n_dense: int, n_moe: int, first: bool, last: bool) -> float:
        f, la = self.edge_totals()
        return n_dense * self.dense_t + n_moe * self.moe_t + (f if first else 0.0) + (la if last else 0.0)

    def parts(self, n_dense: int, n_moe: int, first: bool, last: bool) -> dict[str, float]:
        out = {p: n_dense * self.dense[p] + n_moe * self.moe[p] for p in _PARTS}
        for flag, e in ((first, self.first), (last, self.last)):
            if flag:
                for p in _PARTS:
                    out[p] += e[p]
        return out


def _edges(gs: GroupSearch, k: Knobs) -> tuple[dict[str, float], dict[str, float]]:
    """(stage 0's embedding, the last stage's head and loss) on one type: they do not depend on recompute."""
    spec, grp = gs.req.spec, gs.group
    view = gs.view(with_knobs(k, pp=max(k.pp, 3), recompute="none"))
    return stage_seconds(spec, view, grp, 0, 0, 0), stage_seconds(spec, view, grp, view.pp - 1, 0, 0)


class _Staged:
    """The staged search over one request: memoised stage times, memory limits and estimates."""

    def __init__(self, req: PlanRequest, searches: Sequence[GroupSearch]) -> None:
        self.req, self.searches = req, searches
        spec = req.spec
        self.moe_prefix = [0]
        moe = set(spec.moe_layer_indices)
        for i in range(spec.num_layers):
            self.moe_prefix.append(self.moe_prefix[-1] + (i in moe))
        self.uniform = layers_alike(spec)
        self._times: dict[tuple, _TypeTimes] = {}
        self._edges: dict[tuple, tuple[dict[str, float], dict[str, float]]] = {}
        self._hops: dict[tuple, float] = {}
        self._sync: dict[tuple, tuple[float, float]] = {}
        self._fit: dict[tuple, MemoryEstimate | None] = {}
        self._limit: dict[tuple, int] = {}
        self.overhead = step_overhead_seconds()

    # -- building blocks ------------------------------------------------------------------------
    def times(self, gi: int, k: Knobs) -> _TypeTimes:
        key = (gi, k.engine, k.tp, k.cp, k.ep, k.recompute, k.micro_batch)
        got = self._times.get(key)
        if got is None:
            got = self._times[key] = _TypeTimes(self.searches[gi], k, self._edges, key[:5] + key[6:])
        return got

    def counts(self, r: range) -> tuple[int, int]:
        n_moe = self.moe_prefix[r.stop] - self.moe_prefix[r.start]
        return len(r) - n_moe, n_moe

    def link(self, a: int, b: int):  # noqa: ANN201 - a Link
        """The link between two groups of the pool (the cluster's cross link, else the slower inter link)."""
        c = self.req.cluster
        if c.cross_link is not None:
            return c.cross_link
        return min((self.searches[a].group.inter, self.searches[b].group.inter), key=lambda l: l.effective_gbps)

    def hop(self, c: _Candidate) -> float:
        """The slowest pipeline send of one micro-batch's activations (b·s/cp·h, 16-bit, ÷ tp: as the perf
        model sends them): between types over their link, inside a type over its inter-node link when its
        stages span nodes, else over NVLink/PCIe."""
        k = c.knobs
        key = (c.groups, c.stages, k.micro_batch, k.cp, k.tp, k.dp)
        got = self._hops.get(key)
        if got is None:
            nbytes = k.micro_batch * (self.req.seq_len // k.cp) * self.req.spec.hidden_size * 2 / k.tp
            w = k.dp * k.tp * k.cp
            links = [self.link(a, b) for a, b in zip(c.groups, c.groups[1:])]
            for gi, s in zip(c.groups, c.stages):
                g = self.searches[gi].group
                if s > 1:
                    links.append(g.inter if s * w > g.gpus_per_node else g.intra)
            got = self._hops[key] = max(p2p_seconds(nbytes, link) for link in links)
        return got

    def _speed(self, c: _Candidate, slowest: float) -> float:
        """Tokens/s of a step paced by ``slowest`` with the pipeline sends and the per-step overhead only
        (every other part ≥ 0): the bound of both keys."""
        k = c.knobs
        step = (k.grad_accum + k.pp - 1) * slowest + 2 * k.grad_accum * self.hop(c) + self.overhead
        return self.req.global_batch * self.req.seq_len / step

    # -- the bounds -----------------------------------------------------------------------------
    def bound(self, c: _Candidate) -> float:
        """Tokens/s no split of ``c`` can beat: with ``T`` the slowest stage, each stage ``j`` holds at most
        ``T/λ_j`` layers (``λ`` its type's fastest layer), so ``T ≥ L / Σ 1/λ_j``; the step takes
        ``(grad_accum + pp − 1)·T`` plus the pipeline sends and the per-step overhead."""
        k = c.knobs
        inv = sum(s / self.times(gi, k).lam for gi, s in zip(c.groups, c.stages))
        return self._speed(c, self.req.spec.num_layers / inv)

    def pace_bound(self, c: _Candidate) -> float:
        """Tokens/s of the split with the fastest pace that the engine expresses, memory aside, with the
        sends and the overhead only (tighter than :meth:`bound`, never below what ``c`` reaches)."""
        best = self.best_split(c, [self.req.spec.num_layers] * len(c.groups))
        return 0.0 if best is None else self._speed(c, self.slowest(c, best))

    def split_bound(self, c: _Candidate) -> float:
        """Tokens/s of the fastest split the engine expresses, memory aside, by the whole step (the
        slowest stage's pace, the sends, the slowest type's data-parallel sync and optimizer step):
        splits are tried in order of their pace until the pace alone leaves no room under the best
        step found. Never below what the candidate reaches, and tighter than :meth:`pace_bound`."""
        k = c.knobs
        paced = sorted((self.slowest(c, split), split)
                       for split in self.splits(c, [self.req.spec.num_layers] * len(c.groups)))
        if not paced:
            return 0.0
        fixed = 2 * k.grad_accum * self.hop(c) + self.overhead
        step = math.inf
        for pace, split in paced:
            if (k.grad_accum + k.pp - 1) * pace + fixed >= step:
                break
            step = min(step, self.full_step(c, split))
        return self.req.global_batch * self.req.seq_len / step

    def full_step(self, c: _Candidate, split: Sequence[int]) -> float:
        """The plan's step for ``split`` (see :meth:`plan`)."""
        k = c.knobs
        sync, opt = self.sync_and_optimizer(c, split)
        return (k.grad_accum + k.pp - 1) * self.slowest(c, split) + 2 * k.grad_accum * self.hop(c) + sync + opt

    def sync_and_optimizer(self, c: _Candidate, split: Sequence[int]) -> tuple[float, float]:
        """The slowest type's data-parallel sync and optimizer step: each type's for its first stage (the
        perf model's, on that stage's model; the stages sync at once and the step waits for the last)."""
        lps = [n for n, s in zip(split, c.stages) for _ in range(s)]
        sync = opt = 0.0
        for i, gi in enumerate(c.groups):
            key = (gi, c.knobs, tuple(lps), c.first_stage(i))
            got = self._sync.get(key)
            if got is None:
                gs = self.searches[gi]
                view = gs.view(c.knobs).replace(stage_layers=tuple(lps))
                j = c.first_stage(i)
                got = self._sync[key] = (grad_sync_seconds(self.req.spec, view, gs.group, stage=j),
                                         optimizer_seconds(self.req.spec, view, gs.group, stage=j))
            sync, opt = max(sync, got[0]), max(opt, got[1])
        return sync, opt

    # -- the split ------------------------------------------------------------------------------
    def stage_times(self, c: _Candidate, split: Sequence[int]) -> list[dict[str, float]]:
        """Breakdown of one micro-batch on every stage for per-type layer counts ``split``."""
        lps = [n for n, s in zip(split, c.stages) for _ in range(s)]
        owner = [i for i, s in enumerate(c.stages) for _ in range(s)]
        out = []
        for j, r in enumerate(stage_ranges(lps)):
            nd, nm = self.counts(r)
            out.append(self.times(c.groups[owner[j]], c.knobs).parts(nd, nm, j == 0, j == len(lps) - 1))
        return out

    def slowest(self, c: _Candidate, split: Sequence[int]) -> float:
        """The slowest stage's micro-batch under ``split``."""
        k, last = c.knobs, len(c.groups) - 1
        if self.uniform:  # every stage of a type alike but for the embedding (stage 0) and the head (last)
            moe = bool(self.req.spec.moe_layer_indices)
            out = 0.0
            for i, (gi, s, n) in enumerate(zip(c.groups, c.stages, split)):
                t = self.times(gi, k)
                layers = n * (t.moe_t if moe else t.dense_t)
                first_t, last_t = t.edge_totals()
                ends = [first_t if i == 0 else 0.0, last_t if i == last else 0.0]
                out = max(out, layers + (max(ends) if s > 1 else sum(ends)))
            return out
        return max(sum(t.values()) for t in self.stage_times(c, split))

    def splits(self, c: _Candidate, limits: Sequence[int]) -> Iterator[tuple[int, ...]]:
        """Every per-type layer count within ``limits`` that covers the model (and that Megatron can
        express, for Megatron)."""
        L, s = self.req.spec.num_layers, c.stages

        def rec(i: int, left: int, acc: tuple[int, ...]) -> Iterator[tuple[int, ...]]:
            if i == len(s) - 1:
                if left % s[i] == 0 and 1 <= left // s[i] <= limits[i]:
                    yield acc + (left // s[i],)
                return
            for n in range(1, min(limits[i], (left - sum(s[i + 1:])) // s[i]) + 1):
                yield from rec(i + 1, left - n * s[i], acc + (n,))

        for split in rec(0, L, ()):
            if c.knobs.engine != "megatron" or megatron_split([n for n, m in zip(split, s) for _ in range(m)]):
                yield split

    def best_split(self, c: _Candidate, limits: Sequence[int]) -> tuple[int, ...] | None:
        best = None
        for split in self.splits(c, limits):
            key = (self.slowest(c, split), split)
            if best is None or key < best:
                best = key
        return None if best is None else best[1]

    # -- memory ---------------------------------------------------------------------------------
    def checked_stages(self, c: _Candidate, i: int) -> list[int]:
        """The stages of group ``i`` that bound its memory: its first (the most micro-batches in flight;
        stage 0 also the embedding) and, for the last group, the last stage (head and logits); every one
        of its stages when the model's layers differ (a later stage may hold heavier ones)."""
        first = c.first_stage(i)
        if not self.uniform:
            return list(range(first, first + c.stages[i]))
        out = [first]
        if i == len(c.groups) - 1 and c.stages[i] > 1:
            out.append(c.knobs.pp - 1)
        return out

    def layer_limit(self, c: _Candidate, i: int) -> int:
        """The most layers a stage of group ``i`` can hold by the memory lower bound (states, resident
        gradients and the in-flight activations of that many layers must fit with the margin)."""
        k, gs = c.knobs, self.searches[c.groups[i]]
        key = (c.groups[i], k, c.first_stage(i), i == len(c.groups) - 1)
        got = self._limit.get(key)
        if got is None:
            got = self._limit[key] = self._layer_limit(c, i, gs)
        return got

    def _layer_limit(self, c: _Candidate, i: int, gs: GroupSearch) -> int:
        """(Any ``n`` layers hold at least the ``n`` smallest layers' parameters and activations, wherever
        the split puts them.)"""
        k, spec, x = c.knobs, self.req.spec, self.req.setup_extra
        prec = engine_precision(k.engine, gs.family)
        opt, grad16 = str(x.get("optimizer", "adamw")), bool(x.get("grad_reduce_16bit"))
        params = sorted((lp.total - lp.experts) // k.tp + lp.experts // (k.tp * k.ep) for lp in spec.params.layers)
        kept = sorted(gs._saved_per_layer(k))  # noqa: SLF001 - the estimator's own per-layer activations
        in_flight = min(k.pp - c.first_stage(i), k.grad_accum)
        n_params = act = 0
        for n in range(1, spec.num_layers + 1):
            n_params += params[n - 1]
            act += kept[n - 1]
            need = (states_lower_bound_bytes(spec, k, prec, opt, n=n_params) + resident_bytes(k, prec, n_params, False, grad16)
                    + int(0.98 * act) * k.micro_batch * in_flight)
            if gs._over(need):  # noqa: SLF001
                return n - 1
        return spec.num_layers

    def fits(self, c: _Candidate, split: Sequence[int], i: int) -> list[MemoryEstimate] | None:
        """The estimates of group ``i``'s checked stages under ``split`` (None if one does not fit)."""
        gs = self.searches[c.groups[i]]
        lps = tuple(n for n, s in zip(split, c.stages) for _ in range(s))
        out = []
        for j in self.checked_stages(c, i):
            key = (c.groups[i], c.knobs, j, stage_ranges(lps)[j], len(lps))
            if key not in self._fit:
                self._fit[key] = self._estimate(gs, c.knobs, lps, j)
            est = self._fit[key]
            if est is None:
                return None
            out.append(est)
        return out

    def _estimate(self, gs: GroupSearch, k: Knobs, lps: tuple[int, ...], j: int) -> MemoryEstimate | None:
        s = gs.setup(k)
        if s is None:
            return None
        gs.estimated += 1
        try:
            est = stage_estimate(self.req.spec, s, lps, j)
        except TrainmemError:
            return None
        return est if fits_with_margin(est, self.req.margin) else None

    # -- a candidate ----------------------------------------------------------------------------
    def evaluate(self, c: _Candidate) -> tuple[Plan | None, bool]:
        """The fastest split of ``c`` whose every stage fits its GPU, as a plan (None if none fits), and
        whether memory limited it: the best split by speed is checked type by type; a type whose stage
        does not fit gets one layer less as its limit, and the split is chosen again."""
        L = self.req.spec.num_layers
        limits = [self.layer_limit(c, i) for i in range(len(c.groups))]
        limited = any(n < L for n in limits)
        while True:
            split = self.best_split(c, limits)
            if split is None:
                return None, True
            ests = []
            for i in range(len(c.groups)):
                got = self.fits(c, split, i)
                if got is None:
                    limits[i], limited = split[i] - 1, True
                    break
                ests.append(max(got, key=lambda e: e.device_total_bytes))
            else:
                return self.plan(c, split, ests), limited

    def plan(self, c: _Candidate, split: tuple[int, ...], ests: list[MemoryEstimate]) -> Plan:
        """The plan of a split that fits: the step on the slowest stage's pace, plus the pipeline sends,
        the slowest type's data-parallel sync and optimizer step."""
        k, req = c.knobs, self.req
        times = self.stage_times(c, split)
        totals = [sum(t.values()) for t in times]
        slow = max(range(len(times)), key=lambda j: totals[j])
        sync, opt = self.sync_and_optimizer(c, split)
        breakdown = {p: k.grad_accum * times[slow][p] for p in _PARTS}
        breakdown.update(bubble=(k.pp - 1) * totals[slow], pp_comm=2 * k.grad_accum * self.hop(c), dp_comm=sync,
                         offload=0.0, optimizer=opt)
        step = sum(breakdown.values())
        tokens = req.global_batch * req.seq_len
        flops = model_flops_per_token(req.spec, req.seq_len) * tokens
        peak = sum(self.searches[gi].group.count
                   * mfu_peak_flops_per_s(device_of(self.searches[gi].group.gpu), self.searches[gi].family)
                   for gi in c.groups)
        t = StepTime(step, tokens, tokens / step, tokens / step / k.gpus, flops / (step * peak), flops, totals[slow],
                     breakdown, ())
        layout = StageLayout(types=tuple(self.searches[gi].group.gpu.name for gi in c.groups), stages=c.stages,
                             layers=split, stage_seconds=tuple(totals), even_seconds=self._even_seconds(c))
        shares = tuple(GroupShare(gpu=self.searches[gi].group.gpu.name, gpus=self.searches[gi].group.count, knobs=k,
                                  setup=self.searches[gi].setup(k), memory=est, time=t)  # type: ignore[arg-type]
                       for gi, est in zip(c.groups, ests))
        note = (f"pipeline stages on GPU types: {layout.words()}; the slowest stage ({layout.stage_types[slow]}, "
                f"{totals[slow]:.3f} s per micro-batch) sets the pace")
        return Plan(shares=shares, step_seconds=step, tokens_per_step=tokens, mfu=t.mfu, time_breakdown=breakdown,
                    runs_on=_runs_on(k.engine, layout), notes=(note,), layout=layout)

    def _even_seconds(self, c: _Candidate) -> float:
        """The slowest stage of the even split (remainder to the first stages) on this placement."""
        L, pp = self.req.spec.num_layers, c.knobs.pp
        owner = [i for i, s in enumerate(c.stages) for _ in range(s)]
        return max(self.times(c.groups[owner[j]], c.knobs).total(*self.counts(stage_layers(L, pp, j)), j == 0, j == pp - 1)
                   for j in range(pp))


def _runs_on(engine: str, layout: StageLayout) -> str:
    order = " then ".join(f"{t} ({s} stage{'s' if s > 1 else ''})" for t, s in zip(layout.types, layout.stages))
    how = ("--decoder-first/last-pipeline-num-layers" if engine == "megatron"
           else "torchtitan module_fqns_per_model_part")
    return f"{engine} with uneven pipeline stages ({how}); ranks in stage order: {order}"


def staged_plans(req: PlanRequest, searches: Sequence[GroupSearch], found: FoundPlans) -> Plan | None:
    """Staged plans of a mixed pool, added to ``found``; returns the best one (None if none).

    Candidates that differ only in the ZeRO stage share their bounds and are visited together; they start
    with the least recompute, and one with more recompute (slower per layer, less memory) enters only
    when memory limited the split of the one before (as the savers of the single-type search). They
    leave a heap by :meth:`_Staged.bound`; at the top a family's members are re-keyed by the tighter
    :meth:`_Staged.pace_bound`, then by :meth:`_Staged.split_bound`, and at the top again each is
    evaluated (memory, the plan). No key is below what a candidate reaches, so the visit can stop once ``top`` plans beat the best key
    left: no candidate left could enter the answer."""
    if not _eligible(req, searches):
        return None
    st = _Staged(req, searches)
    families: dict[tuple, list[_Candidate]] = {}
    for c in _candidates(req, searches):
        families.setdefault((c.groups, c.stages, with_knobs(c.knobs, zero=0)), []).append(c)
    heap = [(-st.bound(f[0]), n, 0, f) for n, f in enumerate(families.values())]
    heapq.heapify(heap)
    count = len(heap)
    best: Plan | None = None
    while heap:
        key, n, level, item = heapq.heappop(heap)
        if len(found.speeds) >= req.top and -key <= found.floor():
            break
        if level < 3:  # a family → its members by their pace → by their whole step → evaluated
            for c in (item if level == 0 else [item]):
                count += 1
                heapq.heappush(heap, (-(st.pace_bound(c) if level == 0 else st.split_bound(c)), count,
                                      level + 1, c))
            continue
        p, limited = st.evaluate(item)
        if p is not None:
            found.add([p])
            if best is None or p.tokens_per_second > best.tokens_per_second:
                best = p
        if limited:  # more recompute may fit a faster split
            for v in _savers(item, req.fixed):
                count += 1
                heapq.heappush(heap, (-st.bound(v), count, 0, [v]))
    return best
