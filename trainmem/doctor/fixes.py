"""Fixes with the memory each saves, the step-time change and whether the run then fits, computed for this run.

The setup changes come from :func:`trainmem.plan.compare.compare` (the article's trade-off table, §4.2, each
row estimated on this model and setup: ``saves_bytes`` = baseline peak allocated − the option's, ``slowdown_pct``
from the performance model at the same global batch, ``fits`` and the order — fitting options first, cheapest step
time first — as ``compare`` gives them). The fixes ``compare`` has no row for are estimated here the same way, each
offered only when the evidence or the setup makes it relevant (:func:`extra_fixes`): shorter or truncated
sequences, a quantized (QLoRA) base, the smallest bigger GPU of the catalog that fits the setup unchanged, the fewest
more GPUs of the same type over which ZeRO shards the model states so that the run fits. The fixes
that are not setup changes carry the bytes the evidence shows they would free (a leak's growth, another process's
memory, a stale copy, the reserved-but-unallocated bytes expandable segments can reuse), and a 0 % step-time change:
none of them adds work to a step.
"""

from __future__ import annotations

import re

from trainmem.doctor.case import Evidence, Expected, Fix
from trainmem.errors import TrainmemError
from trainmem.units import fmt_bytes

__all__ = ["memory_fixes", "speed_fixes", "extra_fixes", "shorter_seq_fix", "qlora_fix", "bigger_gpu_fix",
           "more_gpus_fix", "flags_of", "fits_after", "EXPANDABLE", "NOT_COMPARED", "RESUME_ACTION", "SAVE_ACTION"]

EXPANDABLE = "set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
RESUME_ACTION = ("free the stale copy: load the checkpoint on the CPU (torch.load(..., map_location='cpu'); "
                 "transformers >= 4.27 loads optimizer.pt so, PR #22159) and del it after load_state_dict")
SAVE_ACTION = ("free the stale copy: build what is saved on the CPU before saving (model.to('cpu') or the state "
               "dict offloaded to the CPU; save the adapters alone, no deepcopy or merge_and_unload on the GPU)")
NOT_COMPARED = "step time not compared: the run's GPU type is not known"
_FLAG = {"engine": "--engine", "zero": "--zero", "precision": "--precision", "offload": "--offload",
         "micro_batch": "--micro-batch", "grad_accum": "--grad-accum", "recompute": "--recompute", "tp": "--tp",
         "pp": "--pp", "dp": "--dp", "cp": "--cp", "ep": "--ep", "vpp": "--vpp"}
_MIN_SEQ_LEN = 512
"""Sequences shorter than this are not halved further: the fix would change the task, not the memory."""
SEQ_SHARE = 0.25
"""Dynamic memory (activations, logits) must be at least this share of the estimated peak for shorter sequences
to be offered (below it, halving them saves little)."""
BASE_SHARE = 0.30
"""The frozen base weights must be at least this share of the estimated peak for a 4-bit base to be offered."""
MIN_SAVING = 0.02
"""A fix that frees less than this share of the estimated peak and does not make the run fit is not offered (halving
the sequences can move the peak to the optimizer step and save almost nothing)."""
_NOT_CUDA = re.compile(r"^(?:MI\d|Ascend)")
"""Catalog GPUs a CUDA job does not move to by changing one flag (ROCm, Ascend)."""


def flags_of(base: dict, new: dict) -> str:
    """The command-line flags that turn the ``base`` setup (compare's brief dict) into ``new``."""
    parts = [f"{_FLAG[k]} {new[k]}" for k in _FLAG if k in new and new.get(k) != base.get(k)]
    return " ".join(parts)


def _action(technique: str, flags: str) -> str:
    return f"{technique} ({flags})" if flags else technique


def fits_after(ev: Evidence, exp: Expected | None, freed_bytes: int) -> bool:
    """Whether the run fits once ``freed_bytes`` that the estimate does not count are freed: the estimate's verdict
    for the run as described when there is one, else whether the freed bytes and the free memory cover the OOM's
    request (False when nothing says)."""
    if exp is not None:
        return bool(exp.estimate.fits)
    o = ev.oom
    if o is not None and o.tried_bytes is not None and o.free_bytes is not None:
        return o.free_bytes + max(0, freed_bytes) >= o.tried_bytes
    return False


_STATIC_KEYS = ("engine", "zero", "offload", "tp", "pp", "precision")


def memory_fixes(exp: Expected, top: int = 4, static_only: bool = False) -> list[Fix]:
    """The techniques that lower this run's peak, in ``compare``'s order (those that fit first, cheapest step time
    first; then the others, most memory saved first); ``static_only``: only those that shrink the model states
    (sharding, offload, model parallelism, precision), not the activations (accumulation, recomputation)."""
    cmp = exp.compare()
    base = cmp["baseline"]["setup"]
    opts = [o for o in cmp["options"] if o["saves_bytes"] > 0
            and (not static_only or any(o["setup"].get(k) != base.get(k) for k in _STATIC_KEYS))]
    return [Fix(_action(o["technique"], flags_of(base, o["setup"])), int(o["saves_bytes"]), float(o["slowdown_pct"]),
                bool(o["fits"])) for o in opts[:top]]


def _variant(exp: Expected, **changes: object):  # noqa: ANN202 - (TrainingSetup, MemoryEstimate) | None
    """The run with ``changes`` to its setup, validated and estimated (None: the estimator refuses it)."""
    from trainmem.memory import estimate
    from trainmem.setup import make_setup, validate_for_model
    fields = {**exp.setup.model_dump(exclude={"notes"}), **changes}
    for k in ("sp", "loss_parallel"):
        fields[k] = None if not fields.get(f"no_{k}") else fields[k]
    try:
        setup = make_setup(**fields)
        validate_for_model(setup, exp.spec)
        return setup, estimate(exp.spec, setup)
    except TrainmemError:
        return None


def _slowdown(exp: Expected, setup) -> float:  # noqa: ANN001 - TrainingSetup
    """Step-time change of ``setup`` against the run's, in percent (0.0 when the performance model refuses)."""
    from trainmem.hardware.cluster import parse_cluster
    from trainmem.perf import step_time
    try:
        base = exp.step_time().step_seconds
        new = step_time(exp.spec, setup, parse_cluster(f"{setup.gpus}x{setup.gpu}").groups[0]).step_seconds
    except TrainmemError:
        return 0.0
    return (new / base - 1.0) * 100.0 if base > 0 else 0.0


def _dynamic_share(exp: Expected) -> float:
    e = exp.estimate
    b = e.breakdown_at_peak_bytes
    dyn = b.get("activations", 0) + b.get("temporaries", 0)
    return dyn / e.peak_allocated_bytes if e.peak_allocated_bytes else 0.0


def _negligible(exp: Expected, saves: int, fits: bool) -> bool:
    return saves <= 0 or (not fits and saves < MIN_SAVING * exp.estimate.peak_allocated_bytes)


def _seq_action(n: int) -> str:
    return (f"shorter or truncated sequences (--seq-len {n}: cutoff_len / max_seq_length / max_length; truncate or "
            "drop the longest samples)")


def shorter_seq_fix(exp: Expected, longer_than_stated: bool = False, held_over_bytes: int = 0) -> Fix | None:
    """Half the sequence length (cutoff_len, max_seq_length, truncation of the longest samples), estimated: offered
    when the step's dynamic memory is at least :data:`SEQ_SHARE` of the peak and it frees :data:`MIN_SAVING` of it
    (or fits), or when the evidence shows the run holding more than its flags describe (sequences longer than
    ``--seq-len``: the saving estimated at the stated length is then a lower bound). Where the stated length is
    already below :data:`_MIN_SEQ_LEN` and the run holds ``held_over_bytes`` more than the estimate at it, the fix is
    to truncate to the stated length (the sequences run longer than stated: a cutoff not applied, data cached at an
    earlier, longer length), freeing what the run holds over the estimate."""
    s = exp.setup
    if s.seq_len < _MIN_SEQ_LEN:
        if longer_than_stated and held_over_bytes > 0:
            return Fix(_seq_action(s.seq_len), held_over_bytes, 0.0, bool(exp.estimate.fits))
        return None
    if not (longer_than_stated or _dynamic_share(exp) >= SEQ_SHARE):
        return None
    n = max(_MIN_SEQ_LEN // 2, s.seq_len // 2)
    got = _variant(exp, seq_len=n)
    if got is None:
        return None
    _, e2 = got
    saves = exp.estimate.peak_allocated_bytes - e2.peak_allocated_bytes
    if saves <= 0 or (not longer_than_stated and _negligible(exp, saves, e2.fits)):
        return None  # (sequences longer than stated: the estimate at the stated length is a lower bound)
    return Fix(_seq_action(n), saves, 0.0, bool(e2.fits))


def qlora_fix(exp: Expected) -> Fix | None:
    """A 4-bit (NF4) base under the LoRA adapters, estimated: offered for a LoRA run whose frozen 16-bit base is at
    least :data:`BASE_SHARE` of the peak."""
    s, e = exp.setup, exp.estimate
    params = e.breakdown_at_peak_bytes.get("parameters", 0)
    if not s.lora_rank or s.qlora or not e.peak_allocated_bytes or params < BASE_SHARE * e.peak_allocated_bytes:
        return None
    got = _variant(exp, qlora=True)
    if got is None:
        return None
    s2, e2 = got
    saves = e.peak_allocated_bytes - e2.peak_allocated_bytes
    if _negligible(exp, saves, e2.fits):
        return None
    return Fix("quantized base, QLoRA (--qlora: bitsandbytes load_in_4bit, LLaMA-Factory quantization_bit 4)", saves,
               _slowdown(exp, s2), bool(e2.fits))


def bigger_gpu_fix(exp: Expected) -> Fix | None:
    """The smallest catalog GPU with more memory than this one on which the setup fits unchanged (same number of
    GPUs; CUDA GPUs only), with the step-time change the performance model gives there."""
    from trainmem.hardware import list_gpus
    s, e = exp.setup, exp.estimate
    for gpu in sorted(list_gpus(), key=lambda g: (g.memory_bytes, g.name)):
        if gpu.memory_bytes <= e.gpu_memory_bytes or _NOT_CUDA.match(gpu.name):
            continue
        got = _variant(exp, gpu=gpu.name, gpu_memory=None)
        if got is None or not got[1].fits:
            continue
        s2, _ = got
        action = (f"a bigger GPU: {gpu.name} ({fmt_bytes(gpu.memory_bytes)}), the smallest in the catalog that fits "
                  f"this setup unchanged (--gpu {gpu.name})")
        if s.gpu_memory is not None:  # the run's GPU is known by its memory only: no step time to compare with
            return Fix(f"{action}; {NOT_COMPARED}", 0, 0.0, True)
        return Fix(action, 0, _slowdown(exp, s2), True)
    return None


MORE_GPUS = (2, 3, 4, 5, 6, 7, 8, 16, 32, 64)
"""GPU counts :func:`more_gpus_fix` tries: every count of one 8-GPU node, then whole nodes."""


def _sharded_variants(s) -> list[dict]:  # noqa: ANN001 - TrainingSetup
    """The setup changes that shard the model states over data-parallel GPUs, cheapest communication first: the
    run's own engine where it shards them fully (FSDP2, DeepSpeed ZeRO-3, Megatron's distributed optimizer, ``--zero
    1``, which shards the optimizer states and master weights over dp: megatron/core/optimizer/distrib_optimizer.py),
    Megatron with its distributed optimizer turned on, else DeepSpeed ZeRO-2 then ZeRO-3 (the engine's recipe of
    the run's precision family)."""
    if s.engine == "fsdp2" or (s.engine == "deepspeed" and s.zero == 3) or (s.engine == "megatron" and s.zero):
        return [{}]
    if s.engine == "megatron":
        return [{"zero": 1}]
    from trainmem.setup import engine_precision
    family = s.precision.split("-")[-1]
    ds = {"engine": "deepspeed", "precision": engine_precision("deepspeed", family)}
    return [{**ds, "zero": z} for z in (2, 3) if not (s.engine == "deepspeed" and z < (s.zero or 0))]


def more_gpus_fix(exp: Expected) -> Fix | None:
    """The fewest GPUs of the run's type (more than it has, :data:`MORE_GPUS`) over which the model states, sharded
    (:func:`_sharded_variants`; the micro-batch unchanged), fit: ZeRO partitions the optimizer states (stage 1),
    gradients (2) and parameters (3) over the data-parallel ranks (DeepSpeed runtime/zero/stage_1_and_2.py,
    stage3.py), so each GPU holds 1/dp of them. Offered for a run with one data-parallel replica per model-parallel
    group layout unchanged (tp, pp kept); the step-time change is at the same number of samples."""
    from trainmem.plan.compare import slowdown_pct
    s = exp.setup
    for n in (k for k in MORE_GPUS if k > s.gpus and k % (s.tp * s.pp * s.cp) == 0):
        for change in _sharded_variants(s):
            got = _variant(exp, gpus=n, dp=None, **change)
            if got is None or not got[1].fits:
                continue
            s2, e2 = got
            what = ("ZeRO-" + str(s2.zero) + " (DeepSpeed)" if s2.engine == "deepspeed" else s2.engine)
            flags = " ".join([f"--gpus {n}", *(f"{_FLAG[k]} {v}" for k, v in change.items() if k in _FLAG)])
            try:
                from trainmem.hardware.cluster import parse_cluster
                from trainmem.perf import step_time
                base = exp.step_time().step_seconds
                new = step_time(exp.spec, s2, parse_cluster(f"{s2.gpus}x{s2.gpu}").groups[0]).step_seconds
                slow = slowdown_pct(base, s.global_batch, new, s2.global_batch) if base > 0 else 0.0
            except TrainmemError:
                slow = 0.0
            saves = exp.estimate.peak_allocated_bytes - e2.peak_allocated_bytes
            return Fix(f"more GPUs: {n} × {s.gpu} with the model states sharded by {what} ({flags})", saves, slow, True)
    return None


def extra_fixes(exp: Expected, near_capacity: bool, longer_than_stated: bool = False,
                held_over_bytes: int = 0) -> list[Fix]:
    """The relevant fixes ``compare`` has no row for: shorter sequences, a quantized base, and — when the estimate
    does not fit or is within its error of the GPU (``near_capacity``) — the smallest bigger GPU that fits and the
    fewest more GPUs that fit with the model states sharded."""
    out = [f for f in (shorter_seq_fix(exp, longer_than_stated, held_over_bytes), qlora_fix(exp)) if f is not None]
    if near_capacity or not exp.estimate.fits:
        out += [f for f in (bigger_gpu_fix(exp), more_gpus_fix(exp)) if f is not None]
    return out


def _offload_off(exp: Expected) -> Fix | None:
    """Turning the current offload off, from ``compare`` of the same setup without offload."""
    s = exp.setup
    if s.offload == "none":
        return None
    from trainmem.setup import make_setup
    try:
        plain = make_setup(**{**s.model_dump(exclude={"notes"}), "offload": "none",
                              "sp": None if not s.no_sp else s.sp, "loss_parallel": None})
        cmp = exp.compare_of(plain)
    except TrainmemError:
        return None
    if not cmp["baseline"]["fits"]:
        return None
    for o in cmp["options"]:
        if o["setup"].get("offload") == s.offload and o["setup"].get("zero") == s.zero:
            speed = (1.0 / (1.0 + o["slowdown_pct"] / 100.0) - 1.0) * 100.0
            return Fix(_action("no offload", "--offload none"), -int(o["saves_bytes"]), speed, True)
    return None


def speed_fixes(exp: Expected, top: int = 3) -> list[Fix]:
    """Changes that make the step faster and still fit, fastest first (offload off among them)."""
    cmp = exp.compare()
    base = cmp["baseline"]["setup"]
    out = [Fix(_action(o["technique"], flags_of(base, o["setup"])), int(o["saves_bytes"]), float(o["slowdown_pct"]),
               bool(o["fits"]))
           for o in cmp["options"] if o["slowdown_pct"] < 0 and o["fits"]]
    off = _offload_off(exp)
    if off is not None and off.slowdown_pct < 0:
        out.append(off)
    out.sort(key=lambda f: f.slowdown_pct)
    return out[:top]
