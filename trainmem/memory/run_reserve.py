"""Reserved memory over a run of variable-length samples: the estimator's step replayed through the caching
allocator at each micro-batch's length.

``torch.cuda.max_memory_reserved()`` read at the end of a run (HF Trainer / TRL / ms-swift without packing: each
batch padded to its longest sample) is the peak over every step, and the steps differ in length. PyTorch's
caching allocator (``c10/cuda/CUDACachingAllocator.cpp``; the rules are :mod:`trainmem.trace.allocator`'s) gives a
request ≥ ``kMinLargeAlloc`` (10 MiB) that no cached block serves a segment of its own size (rounded to 2 MiB),
never merges blocks across segments and releases cached segments only when a ``cudaMalloc`` fails. A micro-batch
longer than every earlier one asks for logits, loss and activation blocks larger than the cached ones: new
segments, while the old ones stay cached. Reserved memory therefore climbs with each new longest sample until a
``cudaMalloc`` fails, when every fully free segment is released and the allocation retried.

What this module does: the step of :func:`trainmem.memory.estimate.estimate` is walked with every layer on its
own and its timeline calls recorded (``Timeline.events``); the sizes at any length come from walks at three
lengths (exact for sizes quadratic in the length, checked at a fourth; otherwise the step is walked at every
distinct length). The run — static model states first, then each micro-batch at its length (the walk's first,
second and, where the engine's boundary differs, last micro-batch sections; every other one repeats the second),
the optimizer step after each ``grad_accum`` micro-batches — goes through :class:`CachingAllocator` with the
GPU's memory (less the CUDA context and NCCL buffers) as the capacity. Three shortcuts, each exact for the large
pool: small-pool requests (≤ 1 MiB) are left out (that pool never serves nor is served by the large one), a
malloc freed by the very next call is one probe (``serves_from_cache``), and a section that already ran from the
same state without making a segment is not run again (:meth:`_Replayer.run_section`). The timeline's blocks are
the estimator's, not the real step's tensors: where a block stands for several tensors the replay makes fewer
segments than the real run would (tests/memory/test_run_reserve.py compares it with a traced step's replay).

The allocator simulator is trainmem's own: a replay is consistency with its rules, not a measurement.
"""

from __future__ import annotations

import math
import os
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from trainmem.errors import ConfigError
from trainmem.memory.sample_lengths import (LengthDistribution, kept_fraction, lognormal_parameters,
                                            parse_sample_lengths)
from trainmem.setup import TrainingSetup

__all__ = ["RunReserve", "LengthDistribution", "parse_sample_lengths", "micro_batch_lengths",
           "lognormal_parameters", "kept_fraction", "replay_run", "run_reserved", "DEFAULT_RUN_STEPS", "SAMPLE_SEED"]

Walk = Callable[[Any, TrainingSetup, int], list]
"""(spec, setup, stage) → the recorded timeline calls of one step (``Timeline.events``)."""
#: Micro-batches replayed when ``--sample-lengths`` is a distribution and ``--run-steps`` is not given.
DEFAULT_RUN_STEPS = 200
#: The fixed seed of the sampled lengths (``random.Random``): the same setup gives the same run.
SAMPLE_SEED = 0


def _read_lengths(path: str) -> list[int]:
    if not os.path.isfile(path):
        raise ConfigError(f"--sample-lengths {path}: no such file (give MEAN:STD[:MIN:MAX] or a file of lengths)")
    out = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            if not line.isdigit() or int(line) < 1:
                raise ConfigError(f"--sample-lengths {path}, line {n}: {line[:40]!r} is not a positive number of tokens")
            out.append(int(line))
    if not out:
        raise ConfigError(f"--sample-lengths {path}: the file holds no lengths")
    return out


def micro_batch_lengths(setup: TrainingSetup) -> tuple[list[int], str]:
    """Each micro-batch's padded length (tokens) for ``setup.sample_lengths``, and a one-line description.

    Samples longer than ``seq_len`` are dropped (ms-swift ``truncation_strategy='delete'``: swift/llm/utils/
    template.py ``encode`` returns no example, @ 4312aeb2; use a file of truncated lengths for a truncating
    loader); ``micro_batch`` kept samples make a micro-batch, padded to its longest (HF
    ``DataCollatorForSeq2Seq`` / ms-swift ``data_collate_fn`` pad to the batch's longest). A distribution is
    sampled with ``random.Random(SAMPLE_SEED)`` until ``run_steps`` micro-batches (default
    ``DEFAULT_RUN_STEPS``) are full; a file's lengths are taken in its order, all of them unless ``run_steps``."""
    spec = setup.sample_lengths
    assert spec is not None
    b, cap = setup.micro_batch, setup.seq_len
    dist = parse_sample_lengths(spec)
    if dist is None:
        kept = [n for n in _read_lengths(spec) if n <= cap]
        if len(kept) < b:
            raise ConfigError(f"--sample-lengths {spec}: fewer than --micro-batch {b} samples of at most "
                              f"--seq-len {cap} tokens")
        n_mb = len(kept) // b if setup.run_steps is None else min(setup.run_steps, len(kept) // b)
        out = [max(kept[i * b:(i + 1) * b]) for i in range(n_mb)]
        return out, (f"sample lengths from {os.path.basename(spec)} in its order: {len(kept)} of at most {cap} "
                     f"tokens kept, {n_mb} micro-batches of {b}")
    mu, sigma = lognormal_parameters(dist.mean, dist.std)
    hi = dist.hi if dist.hi is not None else math.inf
    if cap < dist.lo:
        raise ConfigError(f"--sample-lengths {spec}: every sample is longer than --seq-len {cap} (MIN {dist.lo})")
    rng = random.Random(SAMPLE_SEED)
    n_mb = setup.run_steps or DEFAULT_RUN_STEPS
    need, kept, drawn = n_mb * b, [], 0
    while len(kept) < need:
        x = round(rng.lognormvariate(mu, sigma))
        if not dist.lo <= x <= hi:
            continue  # (truncated to [MIN, MAX]: drawn again)
        drawn += 1
        if x <= cap:
            kept.append(x)
        if drawn > 1000 * need and len(kept) < need:
            raise ConfigError(f"--sample-lengths {spec}: almost every sample is longer than --seq-len {cap}")
    out = [max(kept[i * b:(i + 1) * b]) for i in range(n_mb)]
    rng_note = f"[{dist.lo}, {dist.hi}]" if dist.hi is not None else f">= {dist.lo}"
    return out, (f"sample lengths log-normal with mean {dist.mean:g} and std {dist.std:g} tokens (sigma² = "
                 f"ln(1 + std²/mean²)), truncated to {rng_note}, seed {SAMPLE_SEED}; samples over --seq-len {cap} "
                 f"dropped ({drawn - len(kept)} of {drawn}); {n_mb} micro-batches of {b}, each padded to its longest")


# -- the step's events at a length -------------------------------------------------------------------------

def _walk_events(walk: Walk, spec, setup: TrainingSetup, stage: int, length: int) -> list[tuple]:
    """The timeline calls of the estimator's step at ``length`` tokens: ``walk(spec, setup, stage)``
    (:func:`trainmem.memory.estimate.record_step_events`, handed in by the caller: the import graph stays one-way)."""
    return walk(spec, setup.model_copy(update={"seq_len": length, "sample_lengths": None, "run_steps": None}), stage)


def _shape(ev: list[tuple]) -> list[tuple]:
    return [e if e[0] != "a" else ("a", e[1], e[3], e[4]) for e in ev]


class _Template:
    """One walk's calls as arrays (op, slot, stream + 256·count, the alloc a free or rename refers to) and its
    sections: the prefix (static states), each walked micro-batch (``forward mb{k}`` to the next), the tail
    (``optimizer step`` to the end)."""

    def __init__(self, ev: list[tuple], slots: dict[str, int]) -> None:
        import numpy as np

        n = len(ev)
        op, slot, aux, src = (np.zeros(n, np.int64) for _ in range(4))
        last: dict[str, int] = {}
        self.marks: list[tuple[int, str]] = []
        for i, e in enumerate(ev):
            kind = e[0]
            if kind == "a":
                op[i], slot[i], aux[i], src[i] = 1, slots.setdefault(e[1], len(slots)), e[4] + 256 * e[3], i
                last[e[1]] = i
            elif kind == "f":
                op[i], src[i] = 0, last.pop(e[1], -1)
                slot[i] = slots.get(e[1], -1)
            elif kind == "r":
                op[i], src[i] = 2, last.get(e[1], -1)
                slot[i], aux[i] = slots.setdefault(e[1], len(slots)), slots.setdefault(e[2], len(slots))
                if e[1] in last:
                    last[e[2]] = last.pop(e[1])
            else:
                op[i], src[i] = 3, -1
                self.marks.append((i, e[1]))
        self.op, self.slot, self.aux, self.src = op, slot, aux, src
        self.alloc_at = np.flatnonzero(op == 1)
        # a malloc freed by the very next call (a spike): replayed as one probe (op 4), see _Replayer.run
        nxt = np.append(src[1:], -1)
        self.spike = (op == 1) & (aux >= 256) & (aux < 512) & (nxt == np.arange(n)) & (np.append(op[1:], 3) == 0)
        starts = [(i, int(ph[len("forward mb"):])) for i, ph in self.marks if ph.startswith("forward mb")]
        opt = next(i for i, ph in self.marks if ph == "optimizer step")
        bounds = [i for i, _ in starts] + [opt]
        self.prefix = (0, starts[0][0])
        self.secs = {mb: (bounds[k], bounds[k + 1]) for k, (_, mb) in enumerate(starts)}
        self.tail = (opt, n)

    def compile(self, nbytes):
        """The sections as op lists at these alloc sizes (``nbytes[i]`` for event i): (op, slot, bytes or the new
        slot, stream + 256·count); zero-byte allocs and small-pool requests (≤ 1 MiB, ``get_pool``) and their frees
        are left out: the small pool's blocks never serve or are served by the large pool's, and its 2 MiB
        segments are not what a run of new lengths multiplies."""
        import numpy as np

        from trainmem.trace.allocator import K_SMALL_SIZE

        op = self.op
        big = (nbytes > K_SMALL_SIZE) & (self.aux >= 256)
        ref = np.where(self.src >= 0, self.src, 0)
        keep = ((op == 1) & big) | ((op == 0) & (self.src >= 0) & big[ref]) | ((op == 2) & (self.src >= 0))
        probe = self.spike & keep
        keep &= ~np.append(False, probe[:-1])  # (the spike's free: part of its probe)
        third = np.where(op == 2, self.aux, nbytes)
        rows = np.stack([np.where(probe, 4, op), self.slot, third, self.aux], axis=1)

        def part(a: int, b: int) -> list:
            return rows[a:b][keep[a:b]].tolist()

        return part(*self.prefix), {mb: part(*ab) for mb, ab in self.secs.items()}, part(*self.tail)


class _Sizer:
    """The step's sections at any length: each alloc's bytes quadratic in the length through walks at three
    lengths (solved in float64, rounded to whole bytes), checked at a fourth (every alloc's bytes equal a walk's);
    if the event order differs between the walks or the check fails, one walk per length."""

    def __init__(self, walk: Walk, spec, setup: TrainingSetup, stage: int, lengths: list[int]) -> None:
        import numpy as np

        self.walk, self.spec, self.setup, self.stage = walk, spec, setup, stage
        self.slots: dict[str, int] = {}
        self.cache: dict[int, tuple] = {}
        lo, hi = min(lengths), max(lengths)
        pts = sorted({lo, hi, (lo + hi) // 2})
        walks = {x: _walk_events(walk, spec, setup, stage, x) for x in pts}
        self.coef = None
        if len(pts) == 3 and _shape(walks[pts[0]]) == _shape(walks[pts[1]]) == _shape(walks[pts[2]]):
            self.template = _Template(walks[pts[0]], self.slots)
            at = self.template.alloc_at
            y = np.array([[walks[x][i][2] for i in at] for x in pts], dtype=np.float64)
            v = np.array([[1.0, x, float(x) * x] for x in pts])
            self.coef = np.linalg.solve(v, y)  # rows c0, c1, c2: bytes = c0 + c1·n + c2·n²
            probe = (lo + 3 * hi) // 4
            if probe not in pts:
                got = self._sizes(probe)[at]
                want = np.array([e[2] for e in _walk_events(walk, spec, setup, stage, probe) if e[0] == "a"])
                if len(want) != len(got) or not np.array_equal(got, want):
                    self.coef = None
        self.exact_fit = self.coef is not None
        if self.coef is None:
            self._walks = walks

    def _sizes(self, n: int):
        import numpy as np

        c = self.coef
        out = np.zeros(len(self.template.op), np.int64)
        out[self.template.alloc_at] = np.rint(c[0] + c[1] * n + c[2] * (float(n) * n)).astype(np.int64)
        return out

    def sections(self, n: int) -> tuple:
        got = self.cache.get(n)
        if got is None:
            import numpy as np

            if self.coef is not None:
                got = self.template.compile(self._sizes(n))
            else:
                ev = self._walks.get(n) or _walk_events(self.walk, self.spec, self.setup, self.stage, n)
                t = _Template(ev, self.slots)
                sizes = np.zeros(len(ev), np.int64)
                sizes[t.alloc_at] = [ev[i][2] for i in t.alloc_at]
                got = t.compile(sizes)
            self.cache[n] = got
        return got


# -- the replay -------------------------------------------------------------------------------------------

@dataclass(frozen=True, kw_only=True)
class RunReserve:
    """The replayed run's figures (bytes)."""

    peak_reserved_bytes: int
    """``max_memory_reserved()`` over the run: the replay's peak (at most ``capacity_bytes``)."""
    uniform_reserved_bytes: int
    """The same replay with every micro-batch at ``seq_len`` (what one repeated shape reserves)."""
    capacity_bytes: int
    n_micro_batches: int
    longest_tokens: int
    releases: int
    """Times a failed ``cudaMalloc`` released the cached segments (``release_cached_blocks``)."""
    oom_micro_batch: int | None = None
    """The micro-batch (0-based) whose allocation did not fit even after the release (-1: the static model states
    already); None: the run fits."""
    notes: list[str] = field(default_factory=list)


class _Replayer:
    def __init__(self, capacity: int) -> None:
        from trainmem.trace.allocator import AllocatorConfig, CachingAllocator

        self.alloc = CachingAllocator(AllocatorConfig(capacity_bytes=capacity))
        self.live: dict[int, list[int]] = {}
        self.releases = 0
        self.static: frozenset[int] | None = None
        self.clean: set[tuple[int, int]] = set()
        self.skipped = 0

    def run_static(self, ops: list) -> None:
        self.run(ops)
        self.static = frozenset(self.live)

    def run_section(self, ops: list) -> None:
        """A section, skipped when it is known to change nothing. Exact: when only the static blocks are live,
        every other block of every segment is free and merged (``free_block`` merges free neighbours), so the
        state is the set of segments; a section that ran from such a state, made no segment and left only the
        static blocks live restored that very state, and runs the same way from it again."""
        a = self.alloc
        canonical = self.live.keys() == self.static
        key = (a.n_device_allocs, a.reserved_bytes, id(ops))
        if canonical and key in self.clean:
            self.skipped += 1
            return
        self.run(ops)
        if canonical and self.live.keys() == self.static and (a.n_device_allocs, a.reserved_bytes) == key[:2]:
            self.clean.add(key)

    def run(self, ops: list) -> None:
        a, live = self.alloc, self.live
        malloc, free, serves = a.malloc, a.free, a.serves_from_cache
        for op, k, nb, aux in ops:
            if op == 1:
                if k in live:
                    raise AssertionError(f"run replay: slot {k} allocated twice")
                before = a.reserved_bytes
                st, count = aux & 255, aux >> 8
                live[k] = [malloc(nb, st)] if count == 1 else [malloc(nb, st) for _ in range(count)]
                if a.reserved_bytes < before:
                    self.releases += 1
            elif op == 4:  # malloc + its free at once: nothing changes unless no cached block serves it
                if not serves(nb, aux & 255):
                    before = a.reserved_bytes
                    free(malloc(nb, aux & 255))
                    if a.reserved_bytes < before:
                        self.releases += 1
            elif op == 0:
                for h in live.pop(k, ()):
                    free(h)
            elif k in live:
                live[nb] = live.pop(k)


def replay_run(sections, lengths: list[int], grad_accum: int, capacity: int) -> tuple[int, int, int | None]:
    """Replay the run: static states, then each micro-batch at its length, the optimizer step after every
    ``grad_accum`` micro-batches (and after the last). ``sections(n)``: the step's (prefix, {mb: section}, tail)
    op lists at length n (:meth:`_Sizer.sections`). Returns (peak reserved bytes, releases, the micro-batch that
    ran out of memory or None)."""
    from trainmem.trace.allocator import AllocatorOOM

    r = _Replayer(capacity)
    try:
        r.run_static(sections(lengths[0])[0])
    except AllocatorOOM:
        return r.alloc.peak_reserved_bytes, r.releases, -1
    m, k, pos = grad_accum, 0, 0
    try:
        while k < len(lengths):
            g = min(m, len(lengths) - k)
            for pos in range(g):
                _, secs, tail = sections(lengths[k + pos])
                if pos == 0:
                    sec = secs[0]
                elif pos == g - 1 and g == m and (m - 1) in secs:
                    sec = secs[m - 1]  # (the engine's boundary micro-batch: DeepSpeed reduces there)
                else:
                    sec = secs[min(1, max(secs))]
                r.run_section(sec)
            r.run_section(tail)
            k += g
    except AllocatorOOM:
        return r.alloc.peak_reserved_bytes, r.releases, k + pos
    return r.alloc.peak_reserved_bytes, r.releases, None


def run_reserved(walk: Walk, spec, setup: TrainingSetup, stage: int, capacity: int) -> RunReserve:
    """The run's reserved memory for ``setup.sample_lengths`` (see the module docstring); ``walk``: the estimator's
    recorded step (:func:`trainmem.memory.estimate.record_step_events`); ``stage``: the simulated rank's pipeline
    stage (device map: its GPU); ``capacity``: bytes the allocator can reserve."""
    lengths, desc = micro_batch_lengths(setup)
    sizer = _Sizer(walk, spec, setup, stage, lengths + [setup.seq_len])
    peak, releases, oom = replay_run(sizer.sections, lengths, setup.grad_accum, capacity)
    uniform, _, _ = replay_run(sizer.sections, [setup.seq_len] * min(len(lengths), 2 * setup.grad_accum),
                               setup.grad_accum, capacity)
    notes = [desc, "reserved over the run: the step replayed through the caching allocator at each micro-batch's "
             f"length (trainmem/trace/allocator.py rules; large pool), capacity {capacity / 2**30:.2f} GiB (the GPU "
             "less the CUDA context and NCCL buffers); cached segments are released only when a cudaMalloc fails"]
    if not sizer.exact_fit:
        notes.append("run replay: the step's sizes are not quadratic in the length; walked at each distinct length")
    if oom == -1:
        notes.append("run replay: the model states alone do not fit the capacity: the run runs out of memory")
    elif oom is not None:
        notes.append(f"run replay: micro-batch {oom} ({lengths[oom]} tokens) does not fit even after the cached "
                     "segments are released: the run runs out of memory")
    return RunReserve(peak_reserved_bytes=peak, uniform_reserved_bytes=uniform, capacity_bytes=capacity,
                      n_micro_batches=len(lengths), longest_tokens=max(lengths), releases=releases,
                      oom_micro_batch=oom, notes=notes)

