"""Why ``--fix`` has no plan: the exact rule and numbers, never "no configuration fits" for one not evaluated.

Three kinds of answer, in the order they are checked:

1. **before the search** (:func:`check_pins`): a pinned value that the model or the pool rules out for every
   configuration — the estimator's own model check (``trainmem.setup.validate_for_model``: "tp(3) does not
   divide num_attention_heads(32)") and the pool's and the batch's arithmetic ("tp(3) × pp(1) × cp(1) = 3 does
   not divide the pool's 8 GPUs"), all the reasons that apply, in one line;
2. **no configuration left to evaluate** (:func:`why_nothing`): every configuration with the pins was dropped
   by a pool or batch rule (``configurations(why=…)``) or refused by the estimator's validation (its message);
3. **evaluated, none fits**: one configuration (every knob pinned or derived) is estimated and its need is
   set against the GPU ("needs 91.30 GiB > 79.19 GiB …; largest at the peak: activations 48.00 GiB"); of several,
   the one that missed by the least is named with the same numbers, or the planner's memory floor when
   every one was bounded out before an estimate.

The module takes the search's objects duck-typed (a ``PlanRequest`` and a ``GroupSearch``) and imports
nothing of :mod:`trainmem.plan.search`, which imports it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from trainmem.errors import ConfigError
from trainmem.memory.estimate import MemoryEstimate
from trainmem.plan.space import KNOB_KEYS, Knobs, recompute_fields
from trainmem.plan.view import SetupView
from trainmem.setup import validate_for_model

if TYPE_CHECKING:
    from trainmem.model.spec import ModelSpec

__all__ = ["needed_bytes", "pins_text", "check_pins", "pinned_knobs", "memory_refusal", "host_refusal", "knobs_text",
           "why_nothing"]


def needed_bytes(est: MemoryEstimate, margin: float) -> int:
    """What a configuration needs per GPU: the device total plus ``margin`` of the reserved memory."""
    return est.device_total_bytes + int(margin * est.peak_reserved_bytes)


def pins_text(fixed: Mapping[str, object]) -> str:
    """``--fix``'s pins as the user writes them (``tp=3,sp=false,stage_layers=9/10/10/11``)."""
    def one(v: object) -> str:
        if isinstance(v, bool):
            return str(v).lower()
        return "/".join(map(str, v)) if isinstance(v, tuple) else str(v)
    return ",".join(f"{k}={one(v)}" for k, v in fixed.items())


def _gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB"


def _model_reason(spec: "ModelSpec", fixed: Mapping[str, object], extra: Mapping[str, object], seq_len: int) -> str | None:
    """The estimator's model check on the pinned values alone (the others at their defaults, which no model
    rule refuses): a reason that holds for every configuration with these pins."""
    f: dict[str, object] = {k: v for k, v in extra.items()}
    # (not vpp: Megatron's account-for-embedding/loss split may run a count pp·vpp does not divide)
    f.update({k: v for k, v in fixed.items() if k in KNOB_KEYS and k not in ("recompute", "dp", "micro_batch",
                                                                             "grad_accum", "vpp")})
    if "recompute" in fixed:
        f.update(recompute_fields(str(fixed["recompute"])))
    f["seq_len"] = seq_len
    try:
        validate_for_model(SetupView(**f), spec)  # type: ignore[arg-type]
    except ConfigError as err:
        tp, kv = int(f.get("tp", 1)), spec.num_kv_heads  # type: ignore[call-overload]
        if str(err).startswith(f"tp({tp}) does not divide num_attention_heads") and tp > 1 and kv % tp and tp % kv:
            return f"{err}, nor is it a divisor or a multiple of num_key_value_heads({kv})"
        return str(err)
    return None


def _pool_reasons(fixed: Mapping[str, object], gpus: int, global_batch: int) -> list[str]:
    """The pool's and the batch's arithmetic on the pinned degrees, where it rules every configuration out."""
    out = []
    deg = {k: int(fixed[k]) for k in ("tp", "pp", "cp") if k in fixed}  # type: ignore[call-overload]
    prod = 1
    for v in deg.values():
        prod *= v
    named = " × ".join(f"{k}({v})" for k, v in deg.items())
    if deg and gpus % prod:
        out.append(f"{named}{f' = {prod}' if len(deg) > 1 else ''} does not divide the pool's {gpus} GPUs")
        return out
    dp = int(fixed["dp"]) if "dp" in fixed else (gpus // prod if len(deg) == 3 else None)  # type: ignore[call-overload]
    if "dp" in fixed and len(deg) == 3 and dp * prod != gpus:
        out.append(f"dp({dp}) × {named} = {dp * prod}, not the pool's {gpus} GPUs")
        return out
    if "dp" in fixed and gpus % (dp * prod):
        out.append(f"dp({dp}){' × ' + named if deg else ''} = {dp * prod} does not divide the pool's {gpus} GPUs")
        return out
    if dp is not None and global_batch % dp:
        out.append(f"the global batch {global_batch} is not divisible by dp({dp})")
    elif dp is not None:
        per = global_batch // dp
        mb, ga = fixed.get("micro_batch"), fixed.get("grad_accum")
        if mb is not None and ga is not None and int(mb) * int(ga) != per:  # type: ignore[call-overload]
            out.append(f"micro_batch({mb}) × grad_accum({ga}) × dp({dp}) = {int(mb) * int(ga) * dp}, "  # type: ignore[call-overload]
                       f"not the global batch {global_batch}")
        elif mb is not None and per % int(mb):  # type: ignore[call-overload]
            out.append(f"micro_batch({mb}) does not divide the {per} sequences per replica "
                       f"(global batch {global_batch} / dp({dp}))")
    return out


def check_pins(req: Any) -> None:
    """Raise the one line that says why no configuration can have ``req.fixed``'s pins, if a model, pool or
    batch rule says so for all of them (single GPU type pools; a mixed pool splits dp and the batch per type)."""
    if not req.fixed:
        return
    reasons = []
    model = _model_reason(req.spec, req.fixed, {**req.setup_extra, **req.pins}, req.seq_len)
    if model:
        reasons.append(model)
    if not req.cluster.is_mixed:
        reasons += _pool_reasons(req.fixed, req.cluster.total_gpus, req.global_batch)
    elif model is None:
        return
    if reasons:
        raise ConfigError(f"--fix {pins_text(req.fixed)}: {'; '.join(reasons)}")


def pinned_knobs(req: Any) -> Knobs | None:
    """The one configuration the pins determine (dp and grad_accum follow from the others; ep is 1 for a dense
    model and vpp 1 without a pipeline), or None."""
    f = dict(req.fixed)
    if not req.spec.is_moe:
        f.setdefault("ep", 1)
    if f.get("pp") == 1:
        f.setdefault("vpp", 1)
    need = ("engine", "tp", "pp", "vpp", "cp", "ep", "zero", "recompute", "offload", "micro_batch")
    if req.cluster.is_mixed or not all(k in f for k in need):
        return None
    n = req.cluster.total_gpus
    f.setdefault("dp", n // (f["tp"] * f["pp"] * f["cp"]))
    if f["dp"] * f["micro_batch"]:
        f.setdefault("grad_accum", max(1, req.global_batch // (f["dp"] * f["micro_batch"])))
    return Knobs(**{key: f[key] for key in KNOB_KEYS})  # type: ignore[arg-type]


def memory_refusal(est: MemoryEstimate, margin: float, gpu: str) -> str:
    """"needs X GiB > Y GiB of GPU (device total + margin); largest at the peak: CATEGORY Z GiB"."""
    big = max(est.breakdown_at_peak_bytes.items(), key=lambda kv: kv[1], default=("", 0))
    largest = f"; largest at the peak: {big[0].replace('_', ' ')} {_gib(big[1])}" if big[1] else ""
    return (f"needs {_gib(needed_bytes(est, margin))} per GPU > {_gib(est.gpu_memory_bytes)} of {gpu} "
            f"(device total {_gib(est.device_total_bytes)} + {margin * 100:g} % margin of the reserved "
            f"{_gib(est.peak_reserved_bytes)}){largest}")


def host_refusal(need: int, cap: int, source: str) -> str:
    """"needs X GiB host RAM per node, the node has Y GiB (where Y comes from; ...)"."""
    return (f"needs {need / 2**30:.1f} GiB host RAM per node, the node has {cap / 2**30:.1f} GiB ({source}; "
            "--host-memory SIZE or a cluster spec's [host_memory=SIZE] if it has more)")


def knobs_text(k: Knobs) -> str:
    parts = [k.engine] + [f"{n}{v}" for n, v in (("tp", k.tp), ("pp", k.pp), ("vpp", k.vpp), ("cp", k.cp), ("ep", k.ep))
                          if v > 1]
    parts += [f"dp{k.dp}", f"zero{k.zero}", f"recompute {k.recompute}"]
    if k.offload != "none":
        parts.append(f"offload {k.offload}")
    return " ".join(parts) + f" mb{k.micro_batch}×ga{k.grad_accum}"


def why_nothing(req: Any, gs: Any) -> str:
    """After a search with pins that found no plan (single GPU type): why, with the numbers (see the module
    docstring). ``gs`` is the type's ``GroupSearch``."""
    head = f"--fix {pins_text(req.fixed)} on {req.cluster.spec or req.cluster.total_gpus}"
    k = pinned_knobs(req)
    if k is not None:
        reason = gs.refusal(k)
        if reason is not None:
            return f"{head}: {reason}"
        from trainmem.memory.estimate import estimate
        est = estimate(req.spec, gs.setup(k))
        host = gs.host_bytes_per_node(est, k.gpus)
        if needed_bytes(est, req.margin) <= est.gpu_memory_bytes and gs.host_cap is not None and host > gs.host_cap:
            return f"{head}: {knobs_text(k)} fits the GPU but {host_refusal(host, gs.host_cap, gs.host_from)}"
        return f"{head}: {knobs_text(k)} does not fit: {memory_refusal(est, req.margin, gs.group.gpu.name)}"
    if not gs.valid_roots:
        rules = list(gs.why.values())
        if gs.invalid:  # the estimator's most frequent reason first
            rules += [m for m, _ in sorted(gs.invalid.items(), key=lambda kv: -kv[1])[:2]]
        return f"{head}: no configuration with these pins is valid: {'; '.join(rules) or 'none is in the space'}"
    if gs.host_refused is not None:
        need, kh = gs.host_refused
        return (f"{head}: the configurations with these pins that fit the GPU offload to the host; the least of them, "
                f"{knobs_text(kh)}, {host_refusal(need, gs.host_cap, gs.host_from)}")
    if gs.closest is not None:
        _, kc, est = gs.closest
        return (f"{head}: none of the configurations with these pins fits; the closest, {knobs_text(kc)}, "
                f"{memory_refusal(est, req.margin, gs.group.gpu.name)}")
    return (f"{head}: none of the configurations with these pins fits: the least memory any of them can use (model "
            f"states and in-flight activations, the planner's floor) needs {_gib(gs.least_bound)} per GPU with the "
            f"{req.margin * 100:g} % margin > {_gib(gs.memory_budget)} of {gs.group.gpu.name}")
