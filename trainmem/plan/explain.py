"""Words for plans: a short label per plan and one sentence on why the best beats the next."""

from __future__ import annotations

from collections.abc import Sequence

from trainmem.plan.result import Plan

__all__ = ["sized_label", "label", "why_best", "left_out", "PART_NAMES"]

#: The time-breakdown keys as a sentence names them.
PART_NAMES = {
    "compute": "compute", "recompute": "recompute", "tp_comm": "tensor-parallel communication",
    "cp_comm": "context-parallel communication", "ep_comm": "expert all-to-all",
    "pp_comm": "pipeline send/receive", "dp_comm": "data-parallel communication", "bubble": "pipeline bubble",
    "offload": "offload traffic", "optimizer": "optimizer step",
}


def sized_label(d: dict) -> str:
    """A plan's JSON object (``Plan.to_dict``) as one line that names every memory technique it uses:
    ``deepspeed dp2 ZeRO-3, offload optimizer+params, recompute full, mb1×ga16``."""
    e, z = d["engine"], d["zero"]
    shard = {"torch": "DDP", "deepspeed": f"ZeRO-{z}",
             "fsdp2": "FSDP2 " + ("reshard_after_forward" if z == 3 else "no reshard (ZeRO-2)"),
             "megatron": "distributed optimizer" if z == 1 else "no optimizer sharding"}[e]
    degrees = "".join(f" {n}{d[n]}" for n in ("tp", "pp", "vpp", "cp", "ep") if d.get(n, 1) > 1)
    rec = d["recompute"] + (f" ({d['recompute_layers']} layers per stage)" if d.get("recompute_layers") else "")
    return (f"{e}{degrees} dp{d['dp']} {shard}, offload {d['offload']}, recompute {rec}, "
            f"mb{d['micro_batch']}×ga{d['grad_accum']}")


def label(p: Plan) -> str:
    """``megatron tp2 pp4 vpp2 dp8 zero1 selective mb2×ga8`` (per type in mixed pools; a pipeline over
    GPU types: ``… mb1×ga16 stages A100-SXM-80G×2 (15 layers) + RTX-3090-24G×1 (2 layers)``)."""
    k = p.knobs
    parts = [k.engine]
    for name, v in (("tp", k.tp), ("pp", k.pp), ("vpp", k.vpp), ("cp", k.cp), ("ep", k.ep)):
        if v > 1:
            parts.append(f"{name}{v}")
    parts.append(f"dp{p.dp}")
    if k.engine != "torch":
        parts.append(f"zero{k.zero}")
    if k.recompute != "none":  # (block-N: full recompute of the first N layers of each stage)
        parts.append(k.recompute)
    if k.offload != "none":
        parts.append(f"offload {k.offload}")
    if len(p.shares) == 1:
        parts.append(f"mb{k.micro_batch}×ga{k.grad_accum}")
    elif p.layout is not None:
        lo = p.layout
        parts.append(f"mb{k.micro_batch}×ga{k.grad_accum} stages "
                     + " + ".join(f"{t}×{s} ({n} layers)" for t, s, n in zip(lo.types, lo.stages, lo.layers)))
    else:
        parts.append(" + ".join(f"{s.gpu} mb{s.knobs.micro_batch}×ga{s.knobs.grad_accum}" for s in p.shares))
    return " ".join(parts)


def why_best(plans: Sequence[Plan]) -> str:
    """One sentence: by how much the first plan is faster than the second and which part of the step
    makes the difference (the largest difference in the breakdown)."""
    if len(plans) < 2:
        return "only one configuration fits" + _stages_clause(plans[0])
    a, b = plans[0], plans[1]
    gain = (a.tokens_per_second / b.tokens_per_second - 1) * 100
    ma = a.most_loaded.memory.device_total_bytes / 2**30
    mb = b.most_loaded.memory.device_total_bytes / 2**30
    if gain < 0.05:
        return (f"{label(a)} and {label(b)} are predicted equally fast ({a.step_seconds:.3f} s per step); the first "
                f"needs {ma:.1f} GiB per GPU, the second {mb:.1f} GiB")
    keys = set(a.time_breakdown) | set(b.time_breakdown)
    diffs = {k: b.time_breakdown.get(k, 0.0) - a.time_breakdown.get(k, 0.0) for k in keys}
    part = max(diffs, key=lambda k: diffs[k])
    return (f"{label(a)} is {gain:.1f} % faster than {label(b)}: {diffs[part]:.3f} s less "
            f"{PART_NAMES.get(part, part)} per step ({ma:.1f} GiB vs {mb:.1f} GiB per GPU)" + _stages_clause(a))


def _stages_clause(p: Plan) -> str:
    """For a pipeline over GPU types: where its stages run and what the uneven split buys."""
    lo = p.layout
    if lo is None:
        return ""
    slow = max(lo.stage_seconds)
    out = f"; {lo.words()}: the slowest stage takes {slow:.3f} s per micro-batch"
    if lo.even_seconds > slow * 1.0005:
        out += f" (an even split of the layers: {lo.even_seconds:.3f} s)"
    return out


def left_out(cluster, best: Plan, best_whole: Plan | None, bound: float) -> str:  # noqa: ANN001
    """When the best plan leaves GPU types of the pool unused: by how much it beats using them all."""
    used = {s.gpu for s in best.shares}
    unused = [g.gpu.name for g in cluster.groups if g.gpu.name not in used]
    if not unused:
        return ""
    if best_whole is not None:
        return (f"leaving {', '.join(unused)} out is faster: the best plan over every type ({label(best_whole)}) "
                f"reaches {best_whole.tokens_per_second:,.0f} tokens/s, this one {best.tokens_per_second:,.0f}")
    return (f"leaving {', '.join(unused)} out is faster: no plan over every type fits"
            + (f" or beats {bound:,.0f} tokens/s" if bound else ""))
