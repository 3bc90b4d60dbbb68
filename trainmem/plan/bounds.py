"""Cheap lower bounds on a configuration's per-GPU memory, to skip the estimator where it cannot fit.

Only what every step holds for sure is counted: the stored parameters (of the average pipeline stage —
the most loaded one holds at least that — or of stage 0 itself), the optimizer's master weights and
states, each divided by the degree the engine shards it over, and the gradient buffers that live
through the whole step (Megatron's persistent fp32 main-grad buffer, ``param_and_grad_buffer.py``;
DDP's bucket copy of every gradient, ``reducer.cpp``). Transient gradients, FSDP/ZeRO buffers and
temporaries are left out. The estimator's own figure is never below these (``tests/plan/test_plan.py``
checks it on random setups)."""

from __future__ import annotations

from trainmem.model.spec import ModelSpec
from trainmem.plan.space import Knobs

__all__ = ["states_lower_bound_bytes", "resident_bytes", "stage_layer_params", "local_layer_params", "logits_bytes"]

#: Optimizer state bytes per trainable fp32 element, the smallest of each optimizer's variants.
_STATE_BYTES = {"adamw": 8, "adam": 8, "sgd": 0, "sgd-momentum": 4, "adamw-8bit": 2, "adafactor": 0, "lion": 4,
                "paged-adamw": 0, "paged-adamw-8bit": 0, "hf-adafactor": 0}  # (paged states: managed memory, never an OOM)


_TOTALS: dict[int, tuple[ModelSpec, int, int]] = {}
_STAGE: dict[tuple, tuple[ModelSpec, int]] = {}


def _layer_totals(spec: ModelSpec) -> tuple[int, int]:
    """(dense, expert) parameters of all layers, memoised per spec object."""
    got = _TOTALS.get(id(spec))
    if got is None or got[0] is not spec:
        experts = sum(lp.experts for lp in spec.params.layers)
        got = (spec, sum(lp.total for lp in spec.params.layers) - experts, experts)
        _TOTALS[id(spec)] = got
    return got[1], got[2]


def local_layer_params(spec: ModelSpec, k: Knobs) -> int:
    """Layer parameters of one rank of the average pipeline stage (÷ tp; experts ÷ tp·ep)."""
    dense, experts = _layer_totals(spec)
    return dense // (k.tp * k.pp) + experts // (k.tp * k.ep * k.pp)


def stage_layer_params(spec: ModelSpec, k: Knobs, stage: int = 0) -> int:
    """Layer parameters of one rank of pipeline ``stage`` (the configuration's split,
    ``trainmem.plan.space.knob_stage_layers``), never above what ``rank_params`` counts for it."""
    key = (id(spec), k.engine, k.tp, k.pp, k.vpp, k.ep, stage)
    got = _STAGE.get(key)
    if got is None or got[0] is not spec:
        from trainmem.plan.space import knob_stage_layers
        layers = [spec.params.layers[i] for i in knob_stage_layers(spec, k, stage)]
        n = sum((lp.total - lp.experts) // k.tp + lp.experts // (k.tp * k.ep) for lp in layers)
        got = (spec, n)
        _STAGE[key] = got
    return got[1]


def _stored_bytes(k: Knobs, precision: str) -> int:
    return 4 if (precision == "fp32" or k.engine in ("torch", "fsdp2")) else 2


def _shard_degree(k: Knobs) -> int:
    shard = k.dp * k.cp if (k.engine == "fsdp2" or (k.engine == "deepspeed" and k.zero >= 1)
                            or (k.engine == "megatron" and k.zero == 1)) else 1
    if k.engine == "fsdp2" and k.tp > 1 and k.dp * k.cp == 1:
        shard = 1
    if k.engine == "deepspeed" and k.ep > 1:
        shard = max(1, shard // k.ep)  # experts shard over dp / ep
    return shard


def states_lower_bound_bytes(spec: ModelSpec, k: Knobs, precision: str, optimizer: str,
                             lora: bool = False, qlora: bool = False, n: int | None = None,
                             fp8_params: bool = False) -> int:
    """Parameters + master weights + optimizer states of one rank, never above the estimate's; ``n`` the
    rank's layer parameters (default: the average stage's, :func:`local_layer_params`); ``fp8_params``:
    Megatron's ``--fp8-param-gather`` stores the layers' weights in 1 byte."""
    n = local_layer_params(spec, k) if n is None else n
    if lora:
        return n // 2 if qlora else 2 * n // 4  # the frozen base alone (NF4 ≥ 0.5 B; 16-bit, ÷ 4 slack for ZeRO-3)
    shard = _shard_degree(k)
    sixteen = precision not in ("fp32",)
    stored = 1 if (fp8_params and k.engine == "megatron") else _stored_bytes(k, precision)
    params_sharded = k.engine == "fsdp2" and shard > 1 or (k.engine == "deepspeed" and k.zero == 3)
    params = stored * n // (shard if params_sharded else 1)
    if k.offload == "optimizer+params":
        params = 0
    opt = 0
    if k.offload == "none":
        master = 4 if (sixteen and k.engine in ("deepspeed", "megatron")) else 0
        opt = (master + _STATE_BYTES.get(optimizer, 0)) * n // shard
    return params + opt


def resident_bytes(k: Knobs, precision: str, n: int, lora: bool = False, grad_16bit: bool = False) -> int:
    """Memory beside the model states that is alive together with a micro-batch's activations at the
    end of its forward, for ``n`` layer parameters: Megatron's fp32 main-grad buffer (4 B each, every
    recipe, allocated once; megatron-core ``param_and_grad_buffer.py``), DDP's bucket copy of the
    gradients at dp > 1 (``gradient_as_bucket_view=False``), and FSDP2's unsharded 16-bit layers under
    ``reshard_after_forward=False`` (zero 2: gathered in the forward, freed in the backward); 0 otherwise.
    ``grad_16bit``: Megatron's buffer in the 16-bit dtype (``grad_reduce_in_fp32=False``), 2 B each."""
    if lora:
        return 0
    if k.engine == "megatron":
        return (2 if grad_16bit else 4) * n
    if k.engine == "torch" and k.dp > 1:
        return _stored_bytes(k, precision) * n
    if k.engine == "fsdp2" and k.zero == 2 and _shard_degree(k) > 1:
        return (4 if precision == "fp32" else 2) * n
    return 0


def logits_bytes(spec: ModelSpec, k: Knobs, seq_len: int) -> int:
    """The logits of one micro-batch on the last stage, at 2 B per element (the least compute dtype;
    vocab-parallel under tensor parallelism, as Megatron and torchtitan's loss_parallel run it):
    allocated by the LM head while the micro-batch's activations are alive
    (``trainmem.memory.loss.loss_buffers``: ``logits_bytes`` = compute bytes × b·s/cp·V)."""
    vocab = spec.output_size // k.tp if (k.tp > 1 and k.engine in ("megatron", "fsdp2")) else spec.output_size
    return 2 * k.micro_batch * (seq_len // k.cp) * vocab
