"""The doctor's data: what was observed (:class:`Evidence`), what the estimator expects for the run
(:class:`Expected`), and what a rule concludes (:class:`Finding`, :class:`Fix`).

The observations the rules share are derived here, each a small function of the evidence:
:func:`capacity_bytes` (the device's memory), :func:`baseline` (allocated between steps, from a per-step log),
:func:`observed_peak` (the most allocated seen).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from statistics import median
from typing import TYPE_CHECKING, Any

from trainmem.doctor.frames import Where
from trainmem.doctor.nvsmi import NvidiaSmi
from trainmem.doctor.oom import OOMReport
from trainmem.doctor.snapshot import SnapshotSummary
from trainmem.doctor.steplog import StepLog

if TYPE_CHECKING:
    from trainmem.memory.estimate import MemoryEstimate
    from trainmem.model.spec import ModelSpec
    from trainmem.setup import TrainingSetup

__all__ = ["CAUSES", "Evidence", "Expected", "Fix", "Finding", "capacity_bytes", "baseline", "observed_peak",
           "warmup_steps"]

CAUSES = ("static_overflow", "activation_overflow", "leak", "fragmentation", "duplicate_fp32_copy",
          "eval_without_no_grad", "rank_imbalance", "dataloader_memory", "other_process", "offload_bottleneck",
          "host_pinned_memory", "undetermined", "none")
"""``undetermined``: something failed but no cause reaches :data:`trainmem.doctor.rules.THRESHOLD`; ``none``:
nothing failed and no rule matched."""


@dataclass(frozen=True, slots=True)
class Evidence:
    """Everything the user gave, parsed (None: not given)."""

    oom: OOMReport | None = None
    where: Where | None = None
    nvsmi: NvidiaSmi | None = None
    log: StepLog | None = None
    snapshot: SnapshotSummary | None = None
    config_kind: str = ""
    other_error: str = ""
    """``--error`` held a traceback whose error is not an out-of-memory one: its last exception line."""

    @property
    def given(self) -> tuple[str, ...]:
        return tuple(k for k, v in (("error", self.oom or self.other_error or None), ("nvidia-smi", self.nvsmi), ("log", self.log),
                                    ("snapshot", self.snapshot), ("config", self.config_kind or None)) if v is not None)


@dataclass(slots=True)
class Expected:
    """The estimate of the run (and, on demand, ``trainmem compare`` and the step time)."""

    spec: "ModelSpec"
    setup: "TrainingSetup"
    estimate: "MemoryEstimate"
    notes: list[str] = field(default_factory=list)
    _compare: dict | None = None
    _compares: dict = field(default_factory=dict)
    gpu_known: bool = True
    """The GPU was given (``--gpu``, ``--gpu-memory``, the config) or read from the evidence (the OOM message's total
    capacity, the monitor's log, nvidia-smi); False: the estimate ran on the default GPU, which no fit judgement uses."""

    def compare(self) -> dict:
        if self._compare is None:
            from trainmem.plan.compare import compare
            self._compare = compare(self.spec, self.setup)
        return self._compare

    def compare_of(self, setup: "TrainingSetup") -> dict:
        """``compare`` of another setup of the same model (memoised by its fields)."""
        key = setup.model_dump_json()
        if key not in self._compares:
            from trainmem.plan.compare import compare
            self._compares[key] = compare(self.spec, setup)
        return self._compares[key]

    def step_time(self) -> Any:
        from trainmem.hardware.cluster import parse_cluster
        from trainmem.perf import step_time
        group = parse_cluster(f"{self.setup.gpus}x{self.setup.gpu}").groups[0]
        return step_time(self.spec, self.setup, group)


@dataclass(frozen=True, slots=True)
class Fix:
    action: str
    saves_bytes: int
    slowdown_pct: float
    fits: bool = False
    """The run is expected to fit once the fix is applied: ``compare``'s verdict for a setup change (device total
    plus the margin within the GPU), the estimate's for the run as described when the fix removes memory the
    estimate does not count (a leak, a stale copy, another process), else whether the freed bytes cover the
    OOM's request."""

    def to_dict(self) -> dict:
        return {"action": self.action, "saves_bytes": int(self.saves_bytes), "slowdown_pct": float(self.slowdown_pct),
                "fits": bool(self.fits)}


@dataclass(frozen=True, slots=True)
class Finding:
    cause: str
    evidence: tuple[str, ...]
    """Sentences, each with the observed numbers next to the expected ones."""
    expected_bytes: int | None
    observed_bytes: int | None
    fixes: tuple[Fix, ...]
    likelihood: float
    """In [0, 1]: how strongly the evidence points at this cause (see :mod:`trainmem.doctor.rules`)."""

    def to_dict(self, translate: Any = None, sep: str = "; ") -> dict:
        tr = translate or (lambda s: s)
        return {"cause": self.cause, "evidence": sep.join(tr(s) for s in self.evidence),
                "expected_bytes": self.expected_bytes, "observed_bytes": self.observed_bytes,
                "fixes": [{**f.to_dict(), "action": tr(f.action)} for f in self.fixes],
                "likelihood": round(float(self.likelihood), 3)}


def capacity_bytes(ev: Evidence, exp: Expected | None) -> int | None:
    """The device's memory: the OOM message's, the monitor's, nvidia-smi's (largest GPU), else the estimate's when
    the GPU was given (None when it was not: the estimate's default GPU is not the run's)."""
    if ev.oom is not None and ev.oom.total_bytes:
        return ev.oom.total_bytes
    if ev.log is not None and ev.log.capacity_bytes:
        return ev.log.capacity_bytes
    if ev.nvsmi is not None and ev.nvsmi.gpus:
        return max(g.total_bytes for g in ev.nvsmi.gpus)
    return exp.estimate.gpu_memory_bytes if exp is not None and exp.gpu_known else None


def warmup_steps(n: int) -> int:
    """Steps dropped from the start of a log: max(5, 10 %) (optimizer states appear at step 1)."""
    return max(5, n // 10)


def baseline(log: StepLog, rank: int | None = None) -> int | None:
    """Median allocated between steps after the warm-up (of ``rank``, default the most loaded rank)."""
    ranks = [rank] if rank is not None else list(log.ranks)
    best = None
    for r in ranks:
        vals = [x.allocated_bytes for x in log.by_rank(r)]
        if not vals:
            continue
        vals = vals[warmup_steps(len(vals)):] or vals
        b = int(median(vals))
        best = b if best is None else max(best, b)
    return best


def observed_peak(ev: Evidence) -> int | None:
    """The most allocated the evidence shows: a log's per-step peak, the OOM's allocated + request, a snapshot's."""
    cands = []
    if ev.log is not None:
        cands += [r.peak_allocated_bytes or r.allocated_bytes for r in ev.log.records]
    if ev.oom is not None and ev.oom.allocated_bytes is not None and ev.oom.tried_bytes is not None:
        cands.append(ev.oom.allocated_bytes + ev.oom.tried_bytes)
    if ev.snapshot is not None:
        cands.append(ev.snapshot.peak_bytes)
    return max(cands) if cands else None
