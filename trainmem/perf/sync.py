"""Exposed data-parallel communication per optimizer step, per engine: what each engine sends, when,
and what it overlaps with.

- torch (DDP): one bucketed all-reduce of the gradients per step (HF Trainer/Accelerate run the
  accumulation micro-batches under ``no_sync``), overlapped with the last micro-batch's backward except
  the last bucket (``bucket_cap_mb`` = 25 MiB, torch.nn.parallel.DistributedDataParallel).
- fsdp2 (torchtitan): every micro-batch all-gathers each unit's 16-bit parameters in the forward (and again
  in the backward with ``reshard_after_forward``, zero 3) and reduce-scatters fp32 gradients
  (``mixed_precision_reduce = "float32"``) — torchtitan's accumulation loop never disables gradient sync
  (torchtitan/trainer.py ``train_step``). Implicit prefetch overlaps the next unit's all-gather with this
  unit's compute: exposed = the first all-gather + Σ max(0, comm − compute) per unit + the last
  reduce-scatter. FSDP1 with ``BackwardPrefetch.BACKWARD_POST`` (Composer's default, ``backward_prefetch``
  in composer/trainer/dist_strategy.py) issues a unit's backward all-gather only after the next unit's gradient
  computation: "less overlap" (torch FSDP ``BackwardPrefetch`` docs) — each backward all-gather is exposed, the
  reduce-scatter still overlaps the next gradient computation (``backward_prefetch`` "post").
  Under pipeline parallelism torch.distributed.pipelining keeps parameters unsharded and
  defers the reduce-scatter to one ``perform_reduce_grad`` after the last backward (stage.py
  ``backward_maybe_with_nosync``).
- deepspeed: ``overlap_comm`` defaults to False for ZeRO-0/1/2 and True for ZeRO-3
  (deepspeed/runtime/zero/config.py ``overlap_comm_valid``): ZeRO-0 all-reduces and ZeRO-1 reduce-scatters
  the 16-bit gradients once per step, ZeRO-2 reduce-scatters every micro-batch, all exposed; ZeRO-1/2
  all-gather the updated 16-bit parameters after the step (exposed); ZeRO-3 prefetches parameters and
  overlaps like FSDP2.
- megatron: ``--overlap-grad-reduce`` and ``--overlap-param-gather`` (off by default in
  megatron/training/arguments.py, on in the published recipes, assumed on here): gradients (fp32 for bf16:
  ``accumulate_allreduce_grads_in_fp32``) are all-reduced (zero 0) or reduce-scattered (distributed
  optimizer, zero 1) in buckets of max(40M, 1M·dp) parameters during the last micro-batch's backward; the
  distributed optimizer's 16-bit parameter all-gather overlaps the next step's first forward. Only the
  first pipeline stage's reduction is on the critical path (Megatron turns bucketing off on the others).

Dense parameters sync over dp·cp ranks (stride tp); routed experts over the expert-data-parallel group
dp·cp/ep (stride tp·ep). Hidden traffic slows the compute it overlaps (trainmem.perf.overlap: 18.9 %, Lee
et al. 2025); that extra time is part of the exposed seconds returned here.
"""

from __future__ import annotations

from dataclasses import dataclass

from trainmem.hardware.cluster import Link
from trainmem.perf.collectives import allgather_affine, allreduce_affine, net_of, span
from trainmem.perf.overlap import contention_seconds, overlapped_seconds

__all__ = ["SyncInputs", "dp_sync_seconds", "DDP_BUCKET_BYTES", "megatron_bucket_params"]

#: torch DDP ``bucket_cap_mb`` default: 25 MiB.
DDP_BUCKET_BYTES = 25 * 1024**2


def megatron_bucket_params(dp: int) -> int:
    """Megatron DDP bucket: max(40,000,000, 1,000,000 · dp) parameters
    (megatron/core/distributed/distributed_data_parallel.py)."""
    return max(40_000_000, 1_000_000 * dp)


@dataclass(frozen=True, slots=True)
class SyncInputs:
    engine: str
    zero: int
    dp: int
    cp: int
    tp: int
    ep: int
    pp: int
    gpus_per_node: int
    dense_params: int
    """Trainable dense parameters of this rank's model shard (after tp/pp), before ZeRO/FSDP sharding."""
    expert_params: int
    units: int
    """FSDP/ZeRO-3 units on the stage (decoder layers)."""
    edge_params: int
    """Parameters outside the layers on this stage (embedding, final norm, LM head): FSDP2's own units."""
    fwd_mb: float
    """Forward seconds of one micro-batch on this stage (compute and TP/CP/EP comm)."""
    bwd_mb: float
    """Backward seconds (with recomputation)."""
    micro_batches: int
    param_bytes: int
    """Bytes of a parameter as all-gathered (16-bit param_dtype, or 4 for fp32)."""
    grad_bytes: int
    """Bytes of a gradient as reduced."""
    backward_prefetch: str = "pre"
    """FSDP's backward all-gather: ``pre`` (FSDP2, FSDP1 BACKWARD_PRE) prefetched under the current unit's
    gradient computation; ``post`` (FSDP1 BACKWARD_POST) issued after it, exposed."""


class _Net:
    """Affine costs (seconds per byte, latency) of the all-reduce and all-gather over the dense and the
    expert data-parallel groups, computed once per call."""

    __slots__ = ("ar", "ag", "ar_e", "ag_e")

    def __init__(self, x: SyncInputs, intra: Link, inter: Link) -> None:
        net = net_of(intra, inter)
        dense = span(x.dp * x.cp, x.tp, x.gpus_per_node)
        self.ar, self.ag = allreduce_affine(dense, net), allgather_affine(dense, net)
        if x.expert_params:
            expert = span(max(x.dp * x.cp // max(x.ep, 1), 1), x.tp * x.ep, x.gpus_per_node)
            self.ar_e, self.ag_e = allreduce_affine(expert, net), allgather_affine(expert, net)
        else:
            self.ar_e = self.ag_e = (0.0, 0.0)


def _t(coef: tuple[float, float], nbytes: float) -> float:
    return coef[0] * nbytes + coef[1] if nbytes > 0 else 0.0


_overlapped = overlapped_seconds


def _unit_overlap(x: SyncInputs, nt: _Net, gather_bwd: bool, reduce: bool) -> tuple[float, float]:
    """(forward, backward) exposed seconds of per-unit all-gathers / reduce-scatters with prefetch."""
    units = max(x.units, 1)
    pd, pe = x.param_bytes * x.dense_params / units, x.param_bytes * x.expert_params / units
    gd, ge = x.grad_bytes * x.dense_params / units, x.grad_bytes * x.expert_params / units
    ag = _t(nt.ag, pd) + _t(nt.ag_e, pe)
    rs = _t(nt.ag, gd) + _t(nt.ag_e, ge) if reduce else 0.0
    edge_ag = _t(nt.ag, x.param_bytes * x.edge_params)
    edge_rs = _t(nt.ag, x.grad_bytes * x.edge_params) if reduce else 0.0
    f_unit, b_unit = x.fwd_mb / units, x.bwd_mb / units
    fwd = edge_ag + ag + (units - 1) * (max(0.0, ag - f_unit) + contention_seconds(ag, f_unit))
    if gather_bwd and x.backward_prefetch == "post":  # the all-gather waits for the previous unit's backward
        bwd = units * (ag + max(0.0, rs - b_unit) + contention_seconds(rs, b_unit)) + max(edge_rs, rs)
        return fwd, bwd
    b_comm = (ag if gather_bwd else 0.0) + rs
    bwd = units * (max(0.0, b_comm - b_unit) + contention_seconds(b_comm, b_unit)) + max(edge_rs, rs)
    return fwd, bwd


def _fsdp2(x: SyncInputs, nt: _Net) -> float:
    if x.pp > 1:  # pipelining: gather once per step (overlapped like the forward), one reduce at the end
        fwd, _ = _unit_overlap(x, nt, False, False)
        rs = _t(nt.ag, x.grad_bytes * (x.dense_params + x.edge_params)) + _t(nt.ag_e, x.grad_bytes * x.expert_params)
        return fwd + rs
    fwd, bwd = _unit_overlap(x, nt, x.zero == 3, True)
    return x.micro_batches * (fwd + bwd)


def _deepspeed(x: SyncInputs, nt: _Net) -> float:
    g, p = x.grad_bytes, x.param_bytes
    total_d, total_e = x.dense_params + x.edge_params, x.expert_params
    if x.zero == 0:
        return _t(nt.ar, g * total_d) + _t(nt.ar_e, g * total_e)
    if x.zero == 3:
        fwd, bwd = _unit_overlap(x, nt, True, True)
        return x.micro_batches * (fwd + bwd)
    rs = _t(nt.ag, g * total_d) + _t(nt.ag_e, g * total_e)
    ag = _t(nt.ag, p * total_d) + _t(nt.ag_e, p * total_e)
    return (x.micro_batches if x.zero == 2 else 1) * rs + ag


def _megatron(x: SyncInputs, nt: _Net) -> float:
    g, p = x.grad_bytes, x.param_bytes
    total_d, total_e = x.dense_params + x.edge_params, x.expert_params
    bucket = min(megatron_bucket_params(x.dp * x.cp), total_d + total_e)
    if x.zero == 0:
        full = _t(nt.ar, g * total_d) + _t(nt.ar_e, g * total_e)
        return _overlapped(full, x.bwd_mb, _t(nt.ar, g * bucket))
    rs = _t(nt.ag, g * total_d) + _t(nt.ag_e, g * total_e)
    ag = _t(nt.ag, p * total_d) + _t(nt.ag_e, p * total_e)
    return _overlapped(rs, x.bwd_mb, _t(nt.ag, g * bucket)) + _overlapped(ag, x.fwd_mb, _t(nt.ag, p * bucket))


def _ddp(x: SyncInputs, nt: _Net) -> float:
    total = x.grad_bytes * (x.dense_params + x.edge_params)
    return _overlapped(_t(nt.ar, total), x.bwd_mb, _t(nt.ar, min(total, DDP_BUCKET_BYTES)))


_NETS: dict[tuple, tuple[Link, Link, _Net]] = {}


def _net(x: SyncInputs, intra: Link, inter: Link) -> _Net:
    key = (id(intra), id(inter), x.dp * x.cp, x.tp, x.ep, x.gpus_per_node, x.expert_params > 0)
    hit = _NETS.get(key)
    if hit is not None and hit[0] is intra and hit[1] is inter:
        return hit[2]
    nt = _Net(x, intra, inter)
    if len(_NETS) > 65536:
        _NETS.clear()
    _NETS[key] = (intra, inter, nt)
    return nt


def dp_sync_seconds(x: SyncInputs, intra: Link, inter: Link) -> float:
    """Exposed seconds per optimizer step of the data-parallel gradient/parameter traffic of ``x.engine``
    (module docstring); 0 without data parallelism."""
    if x.dp * x.cp <= 1 or (x.dense_params + x.expert_params + x.edge_params) == 0:
        return 0.0
    nt = _net(x, intra, inter)
    if x.engine == "fsdp2":
        return _fsdp2(x, nt)
    if x.engine == "deepspeed":
        return _deepspeed(x, nt)
    if x.engine == "megatron":
        return _megatron(x, nt)
    return _ddp(x, nt)
