"""Sort the storages of a traced step into the estimator's categories, at the peak and over time.

Roles come first, phases second:

1. ``parameters``: storages of parameters (FSDP2: the local shards, and the unsharded parameters
   while they are materialised);
2. ``gradients``: storages that were ever the ``.grad`` of a (local/sharded) parameter during the
   step, counted from their birth (a gradient being computed counts as a gradient);
3. ``optimizer_states``: tensors in ``optimizer.state`` (Adam's host-side ``step`` excluded);
4. ``other``: module buffers (rotary ``inv_freq`` ...);
5. ``communication_buffers``: born inside FSDP2's all-gather / reduce-scatter code;
6. ``activations``: born in a forward pass, the loss, or a recomputation in backward;
7. ``temporaries``: born in backward, the optimizer step or zero_grad;
8. ``other``: anything else (left over from before the step).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from trainmem.trace.result import CATEGORIES
from trainmem.trace.tracker import StorageLife

__all__ = ["Roles", "classify", "breakdown_at", "category_peaks"]

_ACT_PHASES = ("forward", "loss", "recompute")
_TEMP_PHASES = ("backward", "optimizer", "zero_grad", "scaler")


@dataclass
class Roles:
    """Storage keys (``StorageTracker`` keys) with a known role."""

    params: set[int] = field(default_factory=set)
    grads: set[int] = field(default_factory=set)
    states: set[int] = field(default_factory=set)
    buffers: set[int] = field(default_factory=set)


def classify(life: StorageLife, roles: Roles) -> str:
    k = life.key
    if k in roles.params:
        return "parameters"
    if k in roles.grads:
        return "gradients"
    if k in roles.states:
        return "optimizer_states"
    if k in roles.buffers:
        return "other"
    if life.tag == "comm":
        return "communication_buffers"
    if life.phase.startswith(_ACT_PHASES):
        return "activations"
    if life.phase.startswith(_TEMP_PHASES):
        return "temporaries"
    return "other"


def _alive_at(life: StorageLife, event: int) -> bool:
    return life.born <= event and (life.died is None or life.died > event)


def breakdown_at(lives: list[StorageLife], roles: Roles, event: int) -> tuple[dict[str, int], int]:
    """Bytes alive after ``event`` by category, and the amp weight copies among them."""
    out = dict.fromkeys(CATEGORIES, 0)
    amp = 0
    for life in lives:
        if life.nbytes and _alive_at(life, event):
            out[classify(life, roles)] += life.nbytes
            if life.tag == "amp_weight_copy":
                amp += life.nbytes
    return out, amp


def category_peaks(lives: list[StorageLife], roles: Roles, start: int, end: int) -> dict[str, int]:
    """Each category's maximum over the events ``start..end`` (a sweep over births and deaths)."""
    cur = dict.fromkeys(CATEGORIES, 0)
    deltas: list[tuple[int, int, str]] = []
    for life in lives:
        if not life.nbytes or life.born > end or (life.died is not None and life.died <= start):
            continue
        cat = classify(life, roles)
        if life.born <= start:
            cur[cat] += life.nbytes
        else:
            deltas.append((life.born, life.nbytes, cat))
        if life.died is not None and life.died <= end:
            deltas.append((life.died, -life.nbytes, cat))
    peaks = dict(cur)
    deltas.sort(key=lambda d: (d[0], d[1]))
    for _, n, cat in deltas:
        cur[cat] += n
        if cur[cat] > peaks[cat]:
            peaks[cat] = cur[cat]
    return peaks
