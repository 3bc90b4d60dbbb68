"""What the planner returns: plans (best first) in the ``trainmem plan --json`` contract."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from trainmem.memory.estimate import MemoryEstimate
from trainmem.perf import StepTime
from trainmem.plan.space import Knobs, recompute_fields
from trainmem.setup import TrainingSetup

if TYPE_CHECKING:
    from trainmem.plan.stages import StageLayout

__all__ = ["GroupShare", "Plan", "PlanResult"]


@dataclass(frozen=True, slots=True)
class GroupShare:
    """One GPU type's part of a plan: its own micro-batch and accumulation (mixed pools)."""

    gpu: str
    gpus: int
    knobs: Knobs
    setup: TrainingSetup
    memory: MemoryEstimate
    time: StepTime
    host_memory_bytes: int = 0
    """Host RAM one node of this type needs: each rank's offloaded states × the ranks on a node (0 without
    offload; ``GroupSearch.host_bytes_per_node``), what the node's host RAM was checked against."""

    def to_dict(self) -> dict:
        return {"gpus": self.gpus, "dp": self.knobs.dp, "micro_batch": self.knobs.micro_batch,
                "grad_accum": self.knobs.grad_accum, "host_memory_bytes": self.host_memory_bytes,
                "peak_allocated_bytes": self.memory.peak_allocated_bytes,
                "peak_reserved_bytes": self.memory.peak_reserved_bytes,
                "device_total_bytes": self.memory.device_total_bytes,
                "gpu_memory_bytes": self.memory.gpu_memory_bytes,
                "step_seconds": self.time.step_seconds}


def _recompute_keys(recompute: str) -> dict[str, object]:
    """``recompute`` as the setup names it (none/selective/full) and ``recompute_layers``: block recompute's
    layers per stage (``block-N`` knobs), None when every layer (or none) is recomputed."""
    f = recompute_fields(recompute)
    return {"recompute": f["recompute"], "recompute_layers": f.get("recompute_layers")}


@dataclass(frozen=True, slots=True)
class Plan:
    shares: tuple[GroupShare, ...]
    """One per GPU type the plan uses (one for a single-type pool)."""
    step_seconds: float
    tokens_per_step: int
    mfu: float
    time_breakdown: dict[str, float]
    runs_on: str
    """Which stock engine runs it as it is, or what a custom loop must do (mixed pools)."""
    notes: tuple[str, ...] = ()
    layout: StageLayout | None = None
    """Pipeline stages on different GPU types (mixed pools): one pipeline over the shares' types, each
    share its stages; None when every type runs whole replicas of one layout."""

    @property
    def knobs(self) -> Knobs:
        """The shared structure; micro-batch/accumulation of the first (largest) type."""
        return self.shares[0].knobs

    @property
    def gpus(self) -> int:
        return sum(s.gpus for s in self.shares)

    @property
    def dp(self) -> int:
        """Data-parallel replicas: of every type together, or of the one pipeline across the types."""
        if self.layout is not None:
            return self.shares[0].knobs.dp
        return sum(s.knobs.dp for s in self.shares)

    @property
    def global_batch(self) -> int:
        """Sequences per optimizer step (Σ over the types of dp·micro_batch·grad_accum; one pipeline: its own)."""
        if self.layout is not None:
            k = self.shares[0].knobs
            return k.dp * k.micro_batch * k.grad_accum
        return sum(s.knobs.dp * s.knobs.micro_batch * s.knobs.grad_accum for s in self.shares)

    @property
    def tokens_per_second(self) -> float:
        return self.tokens_per_step / self.step_seconds

    @property
    def most_loaded(self) -> GroupShare:
        return max(self.shares, key=lambda s: s.memory.device_total_bytes / s.memory.gpu_memory_bytes)

    def key(self) -> tuple:
        return tuple((s.gpu, s.knobs) for s in self.shares)

    def to_dict(self) -> dict:
        k, m = self.knobs, self.most_loaded.memory
        return {
            "gpus": self.gpus, "dp": self.dp, "tp": k.tp, "pp": k.pp, "vpp": k.vpp, "cp": k.cp, "ep": k.ep,
            "engine": k.engine, "zero": k.zero, **_recompute_keys(k.recompute), "offload": k.offload,
            "micro_batch": k.micro_batch, "grad_accum": k.grad_accum,
            "precision": self.shares[0].setup.precision, "sp": self.shares[0].setup.sp,
            **({"megatron_deepspeed": True} if self.shares[0].setup.megatron_deepspeed else {}),
            "per_gpu_type": self._per_gpu_type(),
            "peak_allocated_bytes": m.peak_allocated_bytes, "peak_reserved_bytes": m.peak_reserved_bytes,
            "device_total_bytes": m.device_total_bytes, "gpu_memory_bytes": m.gpu_memory_bytes,
            "host_memory_bytes": max(s.host_memory_bytes for s in self.shares),
            "step_seconds": self.step_seconds, "tokens_per_step": self.tokens_per_step,
            "tokens_per_second": self.tokens_per_second,
            "tokens_per_second_per_gpu": self.tokens_per_second / self.gpus,
            "mfu": self.mfu, "time_breakdown": dict(self.time_breakdown), "runs_on": self.runs_on,
            "notes": list(self.notes),
            **self._layout_dict(),
        }

    def _per_gpu_type(self) -> dict[str, dict]:
        out = {s.gpu: s.to_dict() for s in self.shares}
        if self.layout is not None:  # which stages each type holds, and their layers
            for i, t in enumerate(self.layout.types):
                r = self.layout.stages_of(i)
                out[t].update(pipeline_stages=list(r), layers_per_stage=self.layout.layers[i])
        return out

    def _layout_dict(self) -> dict:
        if self.layout is None:
            split = self.shares[0].setup.stage_layers
            return {"layers_per_stage": list(split)} if split else {}
        lo = self.layout
        return {"layers_per_stage": list(lo.layers_per_stage), "stage_types": list(lo.stage_types),
                "stage_seconds": list(lo.stage_seconds), "even_split_stage_seconds": lo.even_seconds}


@dataclass(slots=True)
class PlanResult:
    plans: list[Plan]
    search_seconds: float
    evaluated: int
    """Configurations whose step time was predicted."""
    estimated: int
    """Configurations whose memory was estimated (the rest were bounded or implied)."""
    why: str = ""
    """One sentence on why the best plan beats the next."""
    assumptions: list[str] = field(default_factory=list)
    extra: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        d = {"search_seconds": self.search_seconds, "evaluated": self.evaluated, "estimated": self.estimated,
             "why": self.why, "assumptions": list(self.assumptions), "plans": [p.to_dict() for p in self.plans]}
        d.update(self.extra)
        return d
