"""How many GPUs: the fewest on which a model trains at all, and the fewest that meet a deadline.

A plan that offloads is checked against the node's host RAM (``--host-memory``, else the catalog default of the
GPU type): the answer is the fewest GPUs whose plan fits both the GPUs and the host.

Both search pools of one GPU type, ``N×TYPE`` with the catalog's node size: every N up to one node,
then whole nodes. Fitting and throughput are not strictly monotone in N (divisibility of heads,
layers and the global batch), so the searches step over candidates in order instead of bisecting
blindly: whole nodes are visited by doubling until a pool qualifies, then the gap below it is
bisected over whole nodes and the result is confirmed by checking the node count just below it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from trainmem.errors import ConfigError, TrainmemError
from trainmem.hardware.cluster import parse_cluster
from trainmem.plan.result import PlanResult
from trainmem.plan.group import node_host_memory
from trainmem.plan.search import PlanRequest, plan

__all__ = ["Sized", "min_gpus", "gpus_for_deadline", "MAX_GPUS"]

MAX_GPUS = 131_072
"""The searches stop here (8× the largest published run, Llama 3's 16,384 H100s)."""


@dataclass(frozen=True, slots=True)
class Sized:
    gpus: int
    result: PlanResult
    gpus_per_node: int = 8
    node_host_memory_bytes: int | None = None
    """The node's host RAM the plan was checked against (``--host-memory``, else the catalog default)."""
    node_host_memory_from: str = ""
    """Where ``node_host_memory_bytes`` comes from (``--host-memory`` / ``catalog default for …``)."""

    @property
    def host_memory_bytes(self) -> int:
        """Host RAM per node the plan needs: each rank's offloaded states
        (``MemoryEstimate.host_memory_bytes``) × the ranks on a node (0 without offload). Pinned staging
        buffers, the data loader and the process itself are not counted."""
        m = self.result.plans[0].most_loaded.memory
        return m.host_memory_bytes * min(self.gpus_per_node, self.gpus)

    def to_dict(self) -> dict:
        return {"gpus": self.gpus, "plan": self.result.plans[0].to_dict(), "host_memory_bytes": self.host_memory_bytes,
                "node_host_memory_bytes": self.node_host_memory_bytes, "node_host_memory_from": self.node_host_memory_from}


def _attempt(req: PlanRequest, gpu: str, n: int) -> PlanResult | None:
    pool = parse_cluster(f"{n}x{gpu}")
    try:
        return plan(replace(req, cluster=pool, top=1))
    except TrainmemError:
        return None


def _first(req: PlanRequest, gpu: str, ok: Callable[[PlanResult], bool]) -> Sized | None:
    group = parse_cluster(f"1x{gpu}").groups[0]
    node = group.gpus_per_node
    cap, source = node_host_memory(req, group)

    def sized(n: int, r: PlanResult) -> Sized:
        return Sized(n, r, node, cap, source)

    for n in range(1, node + 1):
        r = _attempt(req, gpu, n)
        if r is not None and ok(r):
            return sized(n, r)
    lo, hi, found = 1, 2, None
    while hi * node <= MAX_GPUS:
        r = _attempt(req, gpu, hi * node)
        if r is not None and ok(r):
            found = sized(hi * node, r)
            break
        lo, hi = hi, hi * 2
    if found is None:
        return None
    while hi - lo > 1:  # nodes in (lo, hi]: the smallest that qualifies
        mid = (lo + hi) // 2
        r = _attempt(req, gpu, mid * node)
        if r is not None and ok(r):
            hi, found = mid, sized(mid * node, r)
        else:
            lo = mid
    return found


def min_gpus(req: PlanRequest, gpu: str) -> Sized:
    """The fewest GPUs of type ``gpu`` with a plan that fits (at the request's global batch)."""
    got = _first(req, gpu, lambda r: bool(r.plans))
    if got is None:
        raise ConfigError(f"{req.spec.name} fits on no pool of up to {MAX_GPUS:,} {gpu} at global batch "
                          f"{req.global_batch} × seq {req.seq_len}")
    return got


def gpus_for_deadline(req: PlanRequest, gpu: str, tokens: float, days: float) -> Sized:
    """The fewest GPUs of type ``gpu`` whose best plan trains ``tokens`` tokens within ``days`` days."""
    if tokens <= 0 or days <= 0:
        raise ConfigError(f"--tokens and --days must be positive, got {tokens:g} and {days:g}")
    need = tokens / (days * 86_400)
    got = _first(req, gpu, lambda r: r.plans[0].tokens_per_second >= need)
    if got is None:
        raise ConfigError(f"no pool of up to {MAX_GPUS:,} {gpu} trains {tokens:.3g} tokens in {days:g} days "
                          f"({need:,.0f} tokens/s needed)")
    return got
