"""What the planner returns: plans (best first) in the ``trainmem plan --json`` contract."""

from __future__ import annotations

from dataclasses import dataclass, field

from trainmem.memory.estimate import MemoryEstimate
from trainmem.perf import StepTime
from trainmem.plan.space import Knobs
from trainmem.setup import TrainingSetup

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

    def to_dict(self) -> dict:
        return {"gpus": self.gpus, "dp": self.knobs.dp, "micro_batch": self.knobs.micro_batch,
                "grad_accum": self.knobs.grad_accum,
                "peak_allocated_bytes": self.memory.peak_allocated_bytes,
                "peak_reserved_bytes": self.memory.peak_reserved_bytes,
                "device_total_bytes": self.memory.device_total_bytes,
                "gpu_memory_bytes": self.memory.gpu_memory_bytes,
                "step_seconds": self.time.step_seconds}


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

    @property
    def knobs(self) -> Knobs:
        """The shared structure; micro-batch/accumulation of the first (largest) type."""
        return self.shares[0].knobs

    @property
    def gpus(self) -> int:
        return sum(s.gpus for s in self.shares)

    @property
    def dp(self) -> int:
        return sum(s.knobs.dp for s in self.shares)

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
            "engine": k.engine, "zero": k.zero, "recompute": k.recompute, "offload": k.offload,
            "micro_batch": k.micro_batch, "grad_accum": k.grad_accum,
            "precision": self.shares[0].setup.precision,
            "per_gpu_type": {s.gpu: s.to_dict() for s in self.shares},
            "peak_allocated_bytes": m.peak_allocated_bytes, "peak_reserved_bytes": m.peak_reserved_bytes,
            "device_total_bytes": m.device_total_bytes, "gpu_memory_bytes": m.gpu_memory_bytes,
            "step_seconds": self.step_seconds, "tokens_per_step": self.tokens_per_step,
            "tokens_per_second": self.tokens_per_second,
            "tokens_per_second_per_gpu": self.tokens_per_second / self.gpus,
            "mfu": self.mfu, "time_breakdown": dict(self.time_breakdown), "runs_on": self.runs_on,
            "notes": list(self.notes),
        }


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
