"""Fixes with the memory each saves and the step-time change, computed for this run.

The setup changes come from :func:`trainmem.plan.compare.compare` (the article's trade-off table, §4.2, each
row estimated on this model and setup: ``saves_bytes`` = baseline peak allocated − the option's, ``slowdown_pct``
from the performance model at the same global batch). The fixes that are not setup changes carry the bytes the
evidence shows they would free (a leak's growth, another process's memory, the reserved-but-unallocated bytes
expandable segments can reuse), and a 0 % step-time change: none of them adds work to a step.
"""

from __future__ import annotations

from trainmem.doctor.case import Expected, Fix

__all__ = ["memory_fixes", "speed_fixes", "flags_of", "EXPANDABLE"]

EXPANDABLE = "set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"
_FLAG = {"engine": "--engine", "zero": "--zero", "precision": "--precision", "offload": "--offload",
         "micro_batch": "--micro-batch", "grad_accum": "--grad-accum", "recompute": "--recompute", "tp": "--tp",
         "pp": "--pp", "dp": "--dp", "cp": "--cp", "ep": "--ep", "vpp": "--vpp"}


def flags_of(base: dict, new: dict) -> str:
    """The command-line flags that turn the ``base`` setup (compare's brief dict) into ``new``."""
    parts = [f"{_FLAG[k]} {new[k]}" for k in _FLAG if k in new and new.get(k) != base.get(k)]
    return " ".join(parts)


def _action(technique: str, flags: str) -> str:
    return f"{technique} ({flags})" if flags else technique


_STATIC_KEYS = ("engine", "zero", "offload", "tp", "pp", "precision")


def memory_fixes(exp: Expected, top: int = 4, static_only: bool = False) -> list[Fix]:
    """The techniques that lower this run's peak, most bytes saved first (those that then fit first);
    ``static_only``: only those that shrink the model states (sharding, offload, model parallelism, precision),
    not the activations (accumulation, recomputation)."""
    cmp = exp.compare()
    base = cmp["baseline"]["setup"]
    opts = [o for o in cmp["options"] if o["saves_bytes"] > 0
            and (not static_only or any(o["setup"].get(k) != base.get(k) for k in _STATIC_KEYS))]
    opts.sort(key=lambda o: (not o["fits"], -o["saves_bytes"], o["slowdown_pct"]))
    return [Fix(_action(o["technique"], flags_of(base, o["setup"])), int(o["saves_bytes"]), float(o["slowdown_pct"]))
            for o in opts[:top]]


def _offload_off(exp: Expected) -> Fix | None:
    """Turning the current offload off, from ``compare`` of the same setup without offload."""
    s = exp.setup
    if s.offload == "none":
        return None
    from trainmem.errors import TrainmemError
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
            return Fix(_action("no offload", "--offload none"), -int(o["saves_bytes"]), speed)
    return None


def speed_fixes(exp: Expected, top: int = 3) -> list[Fix]:
    """Changes that make the step faster and still fit, fastest first (offload off among them)."""
    cmp = exp.compare()
    base = cmp["baseline"]["setup"]
    out = [Fix(_action(o["technique"], flags_of(base, o["setup"])), int(o["saves_bytes"]), float(o["slowdown_pct"]))
           for o in cmp["options"] if o["slowdown_pct"] < 0 and o["fits"]]
    off = _offload_off(exp)
    if off is not None and off.slowdown_pct < 0:
        out.append(off)
    out.sort(key=lambda f: f.slowdown_pct)
    return out[:top]
