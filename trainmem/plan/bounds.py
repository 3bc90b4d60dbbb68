"""A cheap lower bound on a configuration's per-GPU memory, to skip the estimator where it cannot fit.

Only what every step holds for sure is counted: the stored parameters of the average pipeline stage
(the most loaded one holds at least that) and the optimizer's master weights and states, each
divided by the degree the engine shards it over; gradients, activations and buffers are left out. The
estimator's own figure is never below this (``tests/plan/test_plan.py`` checks it on random setups)."""

from __future__ import annotations

from trainmem.model.spec import ModelSpec
from trainmem.plan.space import Knobs

__all__ = ["states_lower_bound_bytes"]

#: Optimizer state bytes per trainable fp32 element, the smallest of each optimizer's variants.
_STATE_BYTES = {"adamw": 8, "adam": 8, "sgd": 0, "sgd-momentum": 4, "adamw-8bit": 2, "adafactor": 0, "lion": 4}


_TOTALS: dict[int, tuple[ModelSpec, int, int]] = {}


def _layer_totals(spec: ModelSpec) -> tuple[int, int]:
    """(dense, expert) parameters of all layers, memoised per spec object."""
    got = _TOTALS.get(id(spec))
    if got is None or got[0] is not spec:
        experts = sum(lp.experts for lp in spec.params.layers)
        got = (spec, sum(lp.total for lp in spec.params.layers) - experts, experts)
        _TOTALS[id(spec)] = got
    return got[1], got[2]


def _local_layer_params(spec: ModelSpec, k: Knobs) -> int:
    dense, experts = _layer_totals(spec)
    return dense // (k.tp * k.pp) + experts // (k.tp * k.ep * k.pp)


def states_lower_bound_bytes(spec: ModelSpec, k: Knobs, precision: str, optimizer: str,
                             lora: bool = False, qlora: bool = False) -> int:
    """Parameters + master weights + optimizer states of one rank, never above the estimate's."""
    n = _local_layer_params(spec, k)
    if lora:
        return n // 2 if qlora else 2 * n // 4  # the frozen base alone (NF4 ≥ 0.5 B; 16-bit, ÷ 4 slack for ZeRO-3)
    shard = k.dp * k.cp if (k.engine == "fsdp2" or (k.engine == "deepspeed" and k.zero >= 1)
                            or (k.engine == "megatron" and k.zero == 1)) else 1
    if k.engine == "fsdp2" and k.tp > 1 and k.dp * k.cp == 1:
        shard = 1
    if k.engine == "deepspeed" and k.ep > 1:
        shard = max(1, shard // k.ep)  # experts shard over dp / ep
    sixteen = precision not in ("fp32",)
    stored = 4 if (precision == "fp32" or k.engine in ("torch", "fsdp2")) else 2
    params_sharded = k.engine == "fsdp2" and shard > 1 or (k.engine == "deepspeed" and k.zero == 3)
    params = stored * n // (shard if params_sharded else 1)
    if k.offload == "optimizer+params":
        params = 0
    opt = 0
    if k.offload == "none":
        master = 4 if (sixteen and k.engine in ("deepspeed", "megatron")) else 0
        opt = (master + _STATE_BYTES.get(optimizer, 0)) * n // shard
    return params + opt
