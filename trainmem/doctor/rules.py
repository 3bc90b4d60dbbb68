"""The doctor's rules: one small function per cause, evidence + estimate in, a :class:`Finding` or None out.

Each rule covers a row of the seed article's OOM checklist (§5.2) or a cause practitioners report, and writes
its evidence as sentences that put the observed bytes next to the expected ones (GiB = 2^30 B).

**Likelihood.** Each finding carries a likelihood in [0, 1] (``likelihood`` in the JSON), set by how directly
the evidence shows the cause, and findings are listed most likely first (ties: more bytes observed first):

* 0.8–0.97 — shown directly: another process on the job's GPU (nvidia-smi, or named by PID in the OOM message
  with the memory that would have made room), the traceback's phase naming the cause (an OOM while loading the
  model, in a DataLoader thread, a device→host pinned copy), a statistical test (the leak's Mann–Kendall
  p < 1e-3), the job's other ranks' contexts on one GPU, a request larger than the whole GPU (a shape bug, unless
  it is a model-state buffer's size), reserved-but-
  unallocated bytes that could have served the request (more, the larger they are against what is allocated);
* 0.6–0.8 — a quantitative signature: a baseline that exceeds the estimate by 2 or 4 B per parameter (closer,
  likelier), one request the size of a DeepSpeed ZeRO-1/2 flat model-state buffer (:data:`STATE_BUFFERS`: static
  memory, even when larger than the GPU), reserved above the step's *peak* allocated in a per-step log, a snapshot's free blocks that cannot
  serve its request, an OOM in a forward or backward with no estimate to say otherwise, the estimate predicting
  the overflow;
* below :data:`THRESHOLD` (0.6) — circumstantial: an OOM with no phase, an OOM in a forward the estimate says
  fits, memory used outside the allocator with no process named, a pipeline's stage spread.

When something failed (an OOM) and no cause reaches :data:`THRESHOLD`, the first finding is ``undetermined``: it
names the candidates with their likelihoods and the evidence that would decide (``--log``, ``--snapshot``,
``--nvidia-smi``, the whole traceback, MODEL and its setup flags); the candidates follow it. ``none`` is returned
alone when no rule fires, with what was checked.

**The job's own processes.** A process is one of the job's ranks (never "another process", never "stop process")
when nvidia-smi shows it as the largest process of another GPU the job runs on, when it is one of two or more
equal, context-sized (≤ 2 GiB) processes of the job's program on one GPU (pytorch/pytorch#49481), or when the
context-sized processes an OOM message lists number the job's ranks less one (the ranks: ``--gpus``, the
``--log`` ranks, the traceback's ``[rankN]:`` prefixes, the GPUs nvidia-smi shows running the job). The GPUs that
run the job are those whose largest process is the job's program (the program holding the most memory), or,
with no process list, those using ≥ 10 % of their memory (an idle GPU with a CUDA context is not a rank).
"""

from __future__ import annotations

from collections.abc import Callable
from statistics import median

from trainmem.doctor.case import Evidence, Expected, Finding, Fix, baseline, capacity_bytes, observed_peak
from trainmem.doctor.fixes import EXPANDABLE, RESUME_ACTION, SAVE_ACTION, extra_fixes, fits_after, memory_fixes, \
    speed_fixes
from trainmem.doctor.leak import leak_test
from trainmem.memory.overhead import CUDA_CONTEXT_BYTES
from trainmem.units import GiB, MiB, fmt_bytes

__all__ = ["RULES", "diagnose", "THRESHOLD", "LEAK_ACTION", "DUPLICATE_ACTION", "EVAL_ACTION", "DATALOADER_ACTION",
           "SET_DEVICE_ACTION", "PINNED_ACTION", "job_gpus", "world_size"]

THRESHOLD = 0.6
"""The likelihood a cause must reach to be named first; below it the doctor says ``undetermined``."""
NEAR_CAPACITY = 0.10
"""An estimate whose device total is within this share of the GPU predicts the overflow: the estimator's error on
published GPU measurements is a median 11.5 % and it under-predicts more often than not (signed median −9.8 %, 35
of 72 points more than 10 % low: docs/published.md, dev split, as of c1c2a05)."""
EXCESS = 0.25
"""An OOM message's allocated bytes this far above the estimate's peak show a step holding more than its flags
describe (longer sequences or a larger micro-batch than stated: the model states do not change with the data)."""
STATE_BUFFER_SPREAD = 0.02
"""How close (relative) one OOM request must be to a flat model-state buffer's size to be read as that buffer: the
buffer holds a parameter group (the weight-decay group: all but the norms and biases, < 0.1 % of an LLM's
parameters) padded to NCCL's alignment."""
STATE_BUFFER_MIN_BYTES = 512 * MiB
"""Smaller requests are not read as a model-state buffer (activation tensors of that size are common)."""
CONTEXT_MAX_BYTES = 2 * GiB
"""The most a process holding only a CUDA context (and NCCL's buffers) uses: 0.3–1 GiB per context in
pytorch/pytorch#49481 and #64130; a process above it is doing work of its own."""

LEAK_ACTION = "keep no tensors across steps: log loss.item(), store .detach().cpu() copies, keep metrics on the CPU"
DUPLICATE_ACTION = ("free the duplicate weights: load in the training dtype (torch_dtype=torch.bfloat16) and del "
                    "the fp32 model or state_dict; keep EMA copies on the CPU")
EVAL_ACTION = "wrap evaluation in torch.no_grad() (or torch.inference_mode())"
DATALOADER_ACTION = ("move batches to the GPU in the main process (pin_memory=True, .to(device, non_blocking=True)); "
                     "no CUDA in DataLoader workers or collate_fn")
SET_DEVICE_ACTION = ("call torch.cuda.set_device(local_rank) before any CUDA work; torch.load(..., "
                     "map_location='cpu')")
PINNED_ACTION = ("copy to the CPU without non_blocking=True (or in smaller pieces), set pin_memory=False in the "
                 "DataLoader; under WSL2 pinned memory is capped: raise memory= in .wslconfig")

g = fmt_bytes


def _where_sentence(ev: Evidence) -> str | None:
    w = ev.where
    if w is None or w.phase == "unknown":
        return None
    loc = w.location or "?"
    if w.phase == "forward":
        return f"raised in the forward of {w.module} ({loc})" if w.module else f"raised in the forward ({loc})"
    return {"model_load": f"raised while loading the model ({loc})", "loss": f"raised in the loss ({loc})",
            "backward": f"raised in the backward ({loc})", "optimizer_step": f"raised in the optimizer step ({loc})",
            "dataloader": f"raised in the DataLoader ({loc})"}[w.phase]


def _oom_sentences(ev: Evidence) -> list[str]:
    o = ev.oom
    if o is None or o.tried_bytes is None:
        return []
    out = [f"the OOM asked for {g(o.tried_bytes)} with {g(o.free_bytes)} free of {g(o.total_bytes)}"
           if o.free_bytes is not None and o.total_bytes is not None else f"the OOM asked for {g(o.tried_bytes)}"]
    if o.allocated_bytes is not None and o.unallocated_bytes is not None:
        out.append(f"PyTorch held {g(o.allocated_bytes)} allocated and {g(o.unallocated_bytes)} reserved but "
                   "unallocated")
    return out


def _needed(ev: Evidence) -> int | None:
    o = ev.oom
    if o is None or o.tried_bytes is None or o.allocated_bytes is None:
        return None
    return o.allocated_bytes + o.tried_bytes


def _usable(cap: int, exp: Expected | None) -> int:
    """What the allocator can get of ``cap``: less the CUDA context and NCCL the estimate counts."""
    e = exp.estimate if exp is not None else None
    return cap - (e.device_total_bytes - e.peak_reserved_bytes if e is not None else CUDA_CONTEXT_BYTES)


def _bound(cap: int | None, exp: Expected | None) -> int | None:
    """The capacity a "does not fit" judgement uses: the GPU's, or with the GPU unknown (not given, not in the
    evidence) the largest catalog GPU's: what overflows that overflows on any one GPU; "fits" is never judged then."""
    if cap is not None or exp is None:
        return cap
    return _max_gpu_bytes()


def _unknown_gpu(ev: Evidence, exp: Expected | None) -> bool:
    return exp is not None and capacity_bytes(ev, exp) is None


def _est_sentence(exp: Expected, cap: int | None) -> str:
    e, s = exp.estimate, exp.setup
    on = f" on a {g(cap)} GPU" if cap else " on a GPU not given (--gpu)"
    return (f"estimate ({s.engine}, {s.precision}, micro-batch {s.micro_batch} × {s.seq_len} tokens, {s.gpus} GPU): "
            f"peak {g(e.peak_allocated_bytes)} in {e.peak_phase}, model states {g(e.static_bytes)}, activations "
            f"{g(e.breakdown_at_peak_bytes.get('activations', 0))} at the peak{on}")


def _ev_fix(action: str, freed_bytes: int, ev: Evidence, exp: Expected | None) -> Fix:
    """A fix that is not a setup change: it frees ``freed_bytes`` the estimate does not count, no step-time change."""
    return Fix(action, freed_bytes, 0.0, fits_after(ev, exp, freed_bytes))


def _over(exp: Expected | None, cap: int | None) -> bool:
    """The estimate's device total is above the GPU less :data:`NEAR_CAPACITY`: the estimate predicts the OOM."""
    return exp is not None and cap is not None and exp.estimate.device_total_bytes > (1 - NEAR_CAPACITY) * cap


def _near_sentence(exp: Expected, cap: int) -> str | None:
    e = exp.estimate
    if e.device_total_bytes > cap or not _over(exp, cap):
        return None
    return (f"the estimate ({g(e.device_total_bytes)} with CUDA context and NCCL) is within {NEAR_CAPACITY:.0%} of the "
            f"{g(cap)} GPU: inside the estimator's error on published measurements (more often low than high, "
            "docs/published.md), an overflow is expected")


def _fixes(exp: Expected | None, static_only: bool = False, cap: int | None = None,
           longer_than_stated: bool = False, held_over_bytes: int = 0) -> tuple[Fix, ...]:
    """``compare``'s options for the run, then the relevant fixes it has no row for (:func:`extra_fixes`)."""
    if exp is None:
        return ()
    extra = extra_fixes(exp, _over(exp, cap), longer_than_stated, held_over_bytes)
    if static_only:
        extra = [f for f in extra if not f.action.startswith("shorter")]
    return (*memory_fixes(exp, static_only=static_only), *extra)


STATE_BUFFERS = (
    (2, False, "the 16-bit flat copy of all the rank's parameters (2 B each), built at initialisation"),
    (4, True, "the rank's fp32 master-weight partition (4 B per parameter over the data-parallel ranks; Adam's exp_avg "
              "and exp_avg_sq are the same size)"),
    (2, True, "the rank's 16-bit gradient partition (2 B per parameter over the data-parallel ranks)"),
)
"""DeepSpeed ZeRO-1/2's flat model-state buffers, (bytes per parameter, divided over the data-parallel ranks, what):
``DeepSpeedZeroOptimizer`` (runtime/zero/stage_1_and_2.py) flattens each parameter group into one 16-bit tensor
(``bit16_groups_flat``), clones the rank's partition of it to fp32 in one allocation
(``single_partition_of_fp32_groups``: ``...[partition_id].to(device).clone().float()``) that the optimizer's states
are ``zeros_like`` of, and under ZeRO-2 keeps the rank's gradients in one 16-bit partition (``grads_in_partition``)."""


def _state_buffer(ev: Evidence, exp: Expected | None) -> str | None:
    """The OOM's one request is a flat model-state buffer of :data:`STATE_BUFFERS` (within
    :data:`STATE_BUFFER_SPREAD`), not raised in a forward or the loss: static memory, whatever its size against the
    GPU. Full fine-tuning on DeepSpeed ZeRO-1/2 only (LoRA flattens the adapters; ZeRO-3 flattens sub-groups)."""
    o, w = ev.oom, ev.where
    if exp is None or o is None or o.tried_bytes is None or o.tried_bytes < STATE_BUFFER_MIN_BYTES:
        return None
    s = exp.setup
    if s.engine != "deepspeed" or s.zero not in (1, 2) or s.lora_rank or (w is not None and w.phase in (
            "forward", "loss")):
        return None
    from trainmem.memory.states import rank_params
    n = rank_params(exp.spec, s, exp.estimate.stage).total
    for per, over_dp, what in STATE_BUFFERS:
        size = per * n / (s.dp if over_dp else 1)
        if (not over_dp or s.zero == 2 or per == 4) and abs(o.tried_bytes - size) <= STATE_BUFFER_SPREAD * size:
            return (f"the {g(o.tried_bytes)} request is {what}: a flat model-state buffer of DeepSpeed "
                    f"ZeRO-{s.zero} (stage_1_and_2.py), static memory, not activations nor a shape bug")
    return None


def static_overflow(ev: Evidence, exp: Expected | None) -> Finding | None:
    """Parameters + gradients + optimizer states do not fit (article: OOM right at load → ZeRO-2/3, offload)."""
    if _setup_only(ev):
        return None  # nothing observed: predicted_overflow's
    w, cap, e = ev.where, _bound(capacity_bytes(ev, exp), exp), (exp.estimate if exp else None)
    at_load = w is not None and w.phase == "model_load" and w.checkpoint != "resume"
    at_opt = w is not None and w.phase == "optimizer_step"
    too_big = e is not None and cap is not None and e.static_bytes > _usable(cap, exp)
    opt_peak = e is not None and e.peak_phase == "optimizer step" and _over(exp, cap)
    no_phase_opt = opt_peak and ev.oom is not None and (w is None or (w.phase == "unknown" and not w.checkpoint))
    buf = _state_buffer(ev, exp)
    if not (at_load or too_big or at_opt or no_phase_opt or buf):
        return None
    sentences = [s for s in (_where_sentence(ev), *_oom_sentences(ev), buf) if s]
    if no_phase_opt and not too_big:
        sentences.append(f"the estimate peaks in the optimizer step at {g(e.peak_allocated_bytes)} "
                         f"({g(e.device_total_bytes)} with CUDA context and NCCL) on the {g(cap)} GPU: the model states "
                         "and the update's temporaries overflow, not the activations")
    if at_opt and e is not None and not (opt_peak or too_big):
        sentences.append("raised in the optimizer step while the estimate fits: the optimizer's states and the "
                         "update's temporaries take more than estimated (check --optimizer, --precision, --zero)")
    if e is not None:
        sentences.append(f"estimate: model states (parameters, gradients, optimizer states) {g(e.static_bytes)} "
                         f"between steps against {g(_usable(cap, exp))} usable" if cap else
                         f"estimate: model states {g(e.static_bytes)} between steps")
        if at_load and not too_big:
            sentences.append("the model states fit: loading needs more than training holds (load in the training "
                             "dtype, torch_dtype=torch.bfloat16, straight to the GPU) or another process holds memory")
    else:
        sentences.append("no estimate: give MODEL and its flags to size the model states")
    like = 0.95 if (at_load and (too_big or e is None)) else 0.8 if at_load else 0.9 if (too_big and ev.oom) else \
        0.85 if (at_opt and opt_peak) else 0.7
    if w is not None and w.from_text and like > 0.75:
        like = 0.75  # the phase read from a code line, not from a frame
    if buf:
        like = max(like, 0.8)  # the request's size is a model-state buffer's: a quantitative signature
    fixes = _fixes(exp, static_only=True, cap=capacity_bytes(ev, exp) or _default_cap(exp))
    if exp is not None and not fixes:
        sentences.append(f"no sharding or offload option applies to the {exp.setup.engine} engine on "
                         f"{exp.setup.gpus} GPU (trainmem compare)")
    return Finding("static_overflow", tuple(sentences), e.static_bytes if e else None, _needed(ev) or (
        baseline(ev.log) if ev.log else None), fixes, like)


def _max_gpu_bytes() -> int:
    from trainmem.hardware import list_gpus
    return max(x.memory_bytes for x in list_gpus())


def activation_overflow(ev: Evidence, exp: Expected | None) -> Finding | None:
    """The step's dynamic memory overflows (article: OOM when the batch grows → recompute, accumulation)."""
    if _setup_only(ev):
        return None  # nothing observed: predicted_overflow's
    known = capacity_bytes(ev, exp)
    w, o, cap, e = ev.where, ev.oom, _bound(known, exp), (exp.estimate if exp else None)
    dyn = w is not None and w.phase in ("forward", "loss", "backward")
    shape_bug = o is not None and o.tried_bytes is not None and o.tried_bytes > (cap or _max_gpu_bytes()) \
        and _state_buffer(ev, exp) is None  # a model-state buffer larger than the GPU is static_overflow's
    ran = ev.log is not None and not ev.log.ooms and o is None  # a log of steps that ran, no OOM: not predicted
    pred = e is not None and cap is not None and e.static_bytes <= _usable(cap, exp) and _over(exp, cap) \
        and e.peak_phase != "optimizer step" and not ran  # an optimizer-step peak is static_overflow's
    unexplained = o is not None and (w is None or (w.phase == "unknown" and not w.pinned and not w.checkpoint))
    excess = unexplained and e is not None and o.allocated_bytes is not None \
        and o.allocated_bytes > (1 + EXCESS) * e.peak_allocated_bytes and e.static_bytes < o.allocated_bytes
    if not (dyn or shape_bug or pred or unexplained):
        return None
    sentences = [s for s in (_where_sentence(ev), *_oom_sentences(ev)) if s]
    if shape_bug:
        sentences.append(f"a single {g(o.tried_bytes)} tensor is larger than the whole GPU: a shape bug, not a "
                         "memory setting (run micro-batch 1 with a short sequence first)")
        return Finding("activation_overflow", tuple(sentences), e.peak_allocated_bytes if e else None,
                       o.tried_bytes, (), 0.97)
    static_big = e is not None and cap is not None and e.static_bytes > _usable(cap, exp)
    if e is not None:
        sentences.append(_est_sentence(exp, known))
        near = _near_sentence(exp, cap) if known is not None and pred else None
        if known is None and pred:
            sentences.append(f"the GPU is not given (--gpu): the estimate ({g(e.device_total_bytes)} with CUDA context "
                             f"and NCCL) is above {1 - NEAR_CAPACITY:.0%} of the largest catalog GPU's {g(cap)}: it "
                             "overflows on any one GPU")
        elif near:
            sentences.append(near)
        elif excess:
            sentences.append(f"PyTorch held {g(o.allocated_bytes)} allocated, {g(o.allocated_bytes - e.peak_allocated_bytes)}"
                             f" over the estimate's peak of {g(e.peak_allocated_bytes)}: the step holds more dynamic "
                             "memory than its flags describe (sequences longer than --seq-len, a larger micro-batch); "
                             "the model states do not change with the data")
        elif known is None and (dyn or unexplained):
            sentences.append(_unknown_gpu_sentence(exp))
        elif cap is not None and e.device_total_bytes <= cap and (dyn or unexplained):
            sentences.append(f"the estimate fits ({g(e.device_total_bytes)} with CUDA context and NCCL): the run "
                             "uses more than its flags describe (check --micro-batch, --seq-len, --recompute)")
    if unexplained and not dyn:
        sentences += _unexplained_sentences(o, cap)
    full = o is not None and o.allocated_bytes is not None and known is not None and o.allocated_bytes >= 0.8 * known
    like = 0.9 if (dyn and pred) else 0.7 if (dyn and e is None) else 0.7 if pred else 0.6 if excess else \
        0.5 if static_big else 0.5 if (dyn or full) else 0.4
    return Finding("activation_overflow", tuple(sentences), e.peak_allocated_bytes if e else None,
                   _needed(ev) or observed_peak(ev), _fixes(exp, cap=known or _default_cap(exp),
                                                            longer_than_stated=excess, held_over_bytes=(
                       o.allocated_bytes - e.peak_allocated_bytes if excess else 0)), like)


def _default_cap(exp: Expected | None) -> int | None:
    """The estimate's own GPU (the default one when none was given): what ``compare``'s ``fits`` is judged on."""
    return exp.estimate.gpu_memory_bytes if exp is not None else None


def _unknown_gpu_sentence(exp: Expected) -> str:
    e = exp.estimate
    return (f"the GPU is not given and the evidence does not show it: the estimate ({g(e.device_total_bytes)} with "
            f"CUDA context and NCCL) is not judged against the default {exp.setup.gpu}, --gpu decides whether it fits")


def _setup_only(ev: Evidence) -> bool:
    """Nothing observed of a run (no OOM, no traceback, no per-step log, no snapshot): only its setup."""
    return ev.oom is None and ev.where is None and ev.log is None and ev.snapshot is None and not ev.other_error


def predicted_overflow(ev: Evidence, exp: Expected | None) -> Finding | None:
    """Only the setup is given and the estimate does not fit (or is within :data:`NEAR_CAPACITY` of) the GPU: the
    overflow is predicted, not observed. The part that overflows is read from the estimate's breakdown at its peak:
    ``static_overflow`` when the model states do not fit or the peak is the optimizer step (states + the update's
    temporaries), else ``activation_overflow``. Likelihood 0.65 over the GPU, 0.6 within the margin (a prediction:
    below what an observed OOM shows); with the GPU unknown, 0.65 only when even the largest catalog GPU is too
    small, else 0.45 (``undetermined`` then names --gpu as what decides)."""
    if exp is None or not _setup_only(ev):
        return None
    e, known = exp.estimate, capacity_bytes(ev, exp)
    cap = known if known is not None else e.gpu_memory_bytes
    if not _over(exp, cap):
        return None
    static = e.static_bytes > _usable(cap, exp) or e.peak_phase == "optimizer step"
    b = e.breakdown_at_peak_bytes
    states = sum(b.get(k, 0) for k in ("parameters", "master_weights", "gradients", "optimizer_states"))
    verdict = "does not fit" if e.device_total_bytes > cap else f"is within {NEAR_CAPACITY:.0%} of"
    gpu = f"the {g(cap)} GPU" if known is not None else f"the default {exp.setup.gpu} ({g(cap)})"
    peak = (f"at the estimate's peak ({e.peak_phase}): model states {g(states)}, activations "
            f"{g(b.get('activations', 0))}, temporaries {g(b.get('temporaries', 0))}")
    sentences = [f"predicted, not observed (no OOM given): the estimate ({g(e.device_total_bytes)} with CUDA context "
                 f"and NCCL) {verdict} {gpu}",
                 f"{peak}: the model states and the update overflow" if static else
                 f"{peak}: the step's dynamic memory overflows"]
    like = 0.65 if e.device_total_bytes > cap else 0.6
    if known is None:
        sentences.append(_unknown_gpu_sentence(exp))
        like = 0.65 if e.device_total_bytes > _max_gpu_bytes() else 0.45
    return Finding("static_overflow" if static else "activation_overflow", tuple(sentences),
                   e.static_bytes if static else e.peak_allocated_bytes, None, _fixes(exp, static_only=static, cap=cap), like)


def _unexplained_sentences(o, cap: int | None) -> list[str]:  # noqa: ANN001
    """What an OOM without a phase still says: a request the driver had room for, or a very large one."""
    out = ["the traceback does not say where it was raised (give the whole traceback with --error)"]
    if o.tried_bytes is not None and o.free_bytes is not None and o.free_bytes >= o.tried_bytes:
        out.append(f"the driver reported {g(o.free_bytes)} free, more than the {g(o.tried_bytes)} requested: the memory "
                   "was taken meanwhile (another process) or this process may use less (a memory fraction, MIG)")
    if o.tried_bytes is not None and cap and o.tried_bytes >= 0.5 * cap:
        out.append(f"one request of {g(o.tried_bytes)} is {o.tried_bytes / cap:.0%} of the GPU: check the tensor shapes "
                   "(attention scores or logits of a long sequence)")
    return out


def leak(ev: Evidence, exp: Expected | None) -> Finding | None:
    """Allocated memory grows across steps (article: fine at first, OOM after many steps)."""
    if ev.log is None:
        return None
    best = None
    for r in ev.log.ranks:
        recs = ev.log.by_rank(r)
        t = leak_test([x.step for x in recs], [x.allocated_bytes for x in recs])
        if t.leaking and (best is None or t.slope_bytes_per_step > best[1].slope_bytes_per_step):
            best = (r, t)
    if best is None:
        return None
    r, t = best
    sentences = [f"allocated after each step grows by {fmt_bytes(int(t.slope_bytes_per_step))}/step over steps "
                 f"{t.first_step}–{t.last_step} on rank {r} (Theil–Sen; Mann–Kendall p = {t.p_value:.1e}), "
                 f"{fmt_bytes(t.growth_bytes)} in all"]
    cap = capacity_bytes(ev, exp)
    peak = max((x.peak_allocated_bytes or x.allocated_bytes) for x in ev.log.by_rank(r))
    if cap and t.slope_bytes_per_step > 0 and cap > peak:
        sentences.append(f"at this rate the {g(cap)} GPU is full in about {int((cap - peak) / t.slope_bytes_per_step):,} "
                         "more steps")
    if exp is not None:
        sentences.append(f"the estimate keeps {g(exp.estimate.static_bytes)} between steps, flat")
    ended = bool(ev.log.ooms) or ev.oom is not None
    if ended:
        sentences.append("the run ended in an OOM")
    return Finding("leak", tuple(sentences), t.start_bytes, t.end_bytes,
                   (_ev_fix(LEAK_ACTION, max(0, t.growth_bytes), ev, exp),), 0.95 if ended else 0.9)


def _frag_from_oom(ev: Evidence, cap: int | None) -> tuple[float, int, str] | None:
    """Reserved but unallocated ≥ the request: the allocator had the bytes (after releasing its free segments,
    CUDACachingAllocator.cpp ``release_cached_blocks`` before raising) but in no block that could serve it."""
    o = ev.oom
    if o is None or o.unallocated_bytes is None or o.tried_bytes is None or o.unallocated_bytes < 64 * MiB:
        return None
    u, t = o.unallocated_bytes, o.tried_bytes
    if u < t:
        return None  # even as one block it could not have served the request: not the cause
    like = 0.4 + 0.55 * min(1.0, u / max(1, 0.25 * (o.allocated_bytes or u)))
    return like, u, (f"{g(u)} reserved but unallocated ≥ the {g(t)} requested: the cache held the bytes, not in "
                     "one block")


def _request(ev: Evidence) -> int | None:
    s = ev.snapshot
    if s is not None and s.oom_request_bytes is not None:
        return s.oom_request_bytes
    return ev.oom.tried_bytes if ev.oom is not None else None


def _frag_from_snapshot(ev: Evidence) -> tuple[float, int, str] | None:
    """Free blocks in partly used segments that add up to the request, none large enough to serve it. Without a
    request (no OOM in the trace or the message) free cached blocks are the cache doing its work."""
    s, req = ev.snapshot, _request(ev)
    if s is None or req is None or s.stranded_bytes < max(256 * MiB, 0.1 * s.reserved_bytes):
        return None
    if not s.largest_inactive_bytes < req <= s.stranded_bytes:
        return None
    return 0.85, s.stranded_bytes, (
        f"snapshot: {g(s.stranded_bytes)} free inside partly used segments of {g(s.reserved_bytes)} reserved; "
        f"largest free block {g(s.largest_inactive_bytes)}, smaller than the {g(req)} requested")


def _frag_from_log(ev: Evidence, exp: Expected | None, cap: int | None) -> tuple[float, int, str] | None:
    """Reserved above the peak allocated (the monitor's ``peak_allocated_bytes``, reset each step): bytes the cache
    held that no step used at once. Reserved − allocated *between* steps is the cache holding the freed
    activations, normal for every run, and is not evidence: a log without the peak column says nothing here.

    The peak is the rank's highest so far, not the step's own: the caching allocator returns freed blocks to its
    pools and gives segments back only on a failed cudaMalloc or ``empty_cache()`` (c10/cuda/CUDACachingAllocator.cpp
    ``release_cached_blocks``), so after a long sequence a shorter step runs inside the segments the long one grew:
    reserved keeps the run's high-water mark (variable-length samples), which is the cache, not fragmentation."""
    if ev.log is None:
        return None
    gaps, high = [], {}
    for r in sorted(ev.log.records, key=lambda r: (r.rank, r.step)):
        reserved = r.peak_reserved_bytes or r.reserved_bytes
        if reserved and r.peak_allocated_bytes:
            high[r.rank] = max(high.get(r.rank, 0), r.peak_allocated_bytes)
            gaps.append(reserved - high[r.rank])
    if not gaps:
        return None
    o = int(median(sorted(gaps)[len(gaps) // 2:]))  # the upper half: the steps where the cache is widest
    if exp is not None:
        e = exp.estimate.peak_reserved_bytes - exp.estimate.peak_allocated_bytes
        floor = max(1 * GiB, 0.1 * (cap or 0))
    else:  # no estimate of the slack: healthy runs keep ~10 % of the peak (the estimate's own figure); ask 25 %
        e = 0
        floor = max(1 * GiB, 0.25 * median(r.peak_allocated_bytes for r in ev.log.records if r.peak_allocated_bytes))
    if o - e < floor:
        return None
    return 0.65, o, f"per-step log: reserved exceeds the highest step peak allocated so far by {g(o)} (estimate {g(e)})"


def fragmentation(ev: Evidence, exp: Expected | None) -> Finding | None:
    """Reserved − allocated large (→ expandable segments), from the OOM message, a snapshot or a log."""
    cap = capacity_bytes(ev, exp)
    hits = [h for h in (_frag_from_oom(ev, cap), _frag_from_snapshot(ev), _frag_from_log(ev, exp, cap)) if h]
    if not hits:
        return None
    like, observed, _ = max(hits)
    expected = exp.estimate.peak_reserved_bytes - exp.estimate.peak_allocated_bytes if exp else None
    sentences = [h[2] for h in sorted(hits, reverse=True)]
    if expected is not None:
        sentences.append(f"the estimate expects {g(expected)} of allocator slack at the peak")
    already = ev.snapshot is not None and ev.snapshot.expandable
    fixes = () if already else (_ev_fix(EXPANDABLE, max(0, observed - (expected or 0)), ev, exp),)
    if already:
        sentences.append("expandable segments are already on")
    return Finding("fragmentation", tuple(sentences), expected, observed, fixes, like)


def _local_params(exp: Expected) -> int:
    from trainmem.memory.states import rank_params
    s = exp.setup
    n = rank_params(exp.spec, s, exp.estimate.stage).total
    sharded = (s.engine == "deepspeed" and s.zero == 3) or (s.engine == "fsdp2" and s.fsdp_applied)
    return n // (s.fsdp_shard_degree if s.engine == "fsdp2" else s.dp) if sharded else n


def duplicate_fp32_copy(ev: Evidence, exp: Expected | None) -> Finding | None:
    """The baseline exceeds the estimate by 4 (or 2) B per parameter: a second copy of the weights."""
    if exp is None or ev.log is None:
        return None
    base = baseline(ev.log)
    p = _local_params(exp)
    if base is None or p <= 0:
        return None
    excess = base - exp.estimate.static_bytes
    for k, what in ((4, "an fp32 copy of the weights"), (2, "a 16-bit copy of the weights")):
        ratio = excess / (k * p)
        if 0.85 <= ratio <= 1.2:
            sentences = (f"between steps {g(base)} allocated against {g(exp.estimate.static_bytes)} estimated: "
                         f"{g(excess)} more, {ratio * k:.2f} B × {p:,} parameters ({what})",)
            return Finding("duplicate_fp32_copy", sentences, exp.estimate.static_bytes, base,
                           (_ev_fix(DUPLICATE_ACTION, excess, ev, exp),), 0.85 - abs(ratio - 1.0))
    return None


def _copy_bytes(kind: str, exp: Expected | None) -> int:
    """The stale copy's size by the estimate: a checkpoint's optimizer states (and master weights) at resume, a
    copy of the weights at save; 0 without an estimate."""
    if exp is None:
        return 0
    c = exp.estimate.category_peak_bytes
    if kind == "resume":
        return c.get("optimizer_states", 0) + c.get("master_weights", 0)
    return c.get("parameters", 0)


def stale_checkpoint_copy(ev: Evidence, exp: Expected | None) -> Finding | None:
    """An OOM raised while a checkpoint is saved or resumed (:func:`trainmem.doctor.frames.checkpoint_io`): a second
    copy next to the live tensors — a checkpoint deserialised onto the GPU (``torch.load`` to its saved device: HF
    Trainer's ``optimizer.pt`` before transformers 4.27, transformers #22123), a state dict gathered on the GPU, a
    ``deepcopy`` + ``merge_and_unload`` at save, bitsandbytes' 8-bit layout copy in ``_save_to_state_dict``."""
    w = ev.where
    if ev.oom is None or w is None or not w.checkpoint:
        return None
    copy = _copy_bytes(w.checkpoint, exp)
    if w.checkpoint == "resume":
        sentence = (f"raised while resuming from a checkpoint ({w.checkpoint_at}): the checkpoint's tensors are loaded "
                    "onto the GPU next to the live ones")
        what, action = "the optimizer states and master weights take", RESUME_ACTION
    else:
        sentence = (f"raised while saving a checkpoint ({w.checkpoint_at}): the copy made for saving (a state dict "
                    "gathered on the GPU, a deepcopy or merged model) sits next to the live weights")
        what, action = "a copy of the weights takes", SAVE_ACTION
    sentences = [sentence, *_oom_sentences(ev)]
    if copy:
        sentences.append(f"estimate: {what} {g(copy)}; training itself fits in {g(exp.estimate.device_total_bytes)}"
                         if exp.estimate.fits else f"estimate: {what} {g(copy)}")
    return Finding("duplicate_fp32_copy", tuple(sentences), copy or None, _needed(ev),
                   (_ev_fix(action, copy, ev, exp),), 0.8 if w.checkpoint_from_text else 0.85)


def _eval_from_log(ev: Evidence, exp: Expected | None) -> tuple[float, int, int, str] | None:
    log = ev.log
    if log is None:
        return None
    train = [r for r in log.records if r.phase == "train"]
    evals = [r for r in log.records if r.phase == "eval"]
    base = baseline(log)
    if not train or not evals or base is None:
        return None
    peak = lambda rs: max(r.peak_allocated_bytes or r.allocated_bytes for r in rs)  # noqa: E731
    extra_t, extra_e = peak(train) - base, peak(evals) - base
    if extra_t <= 0 or extra_e < 0.4 * extra_t:
        return None
    expected = exp.estimate.activation_bytes_per_layer if exp else 0
    return 0.8, extra_e, expected, (f"evaluation steps peak {g(extra_e)} above the between-step baseline, "
                                    f"{extra_e / extra_t:.0%} of the training step's {g(extra_t)}: activations are "
                                    "kept for a backward that never comes")


def eval_without_no_grad(ev: Evidence, exp: Expected | None) -> Finding | None:
    """Evaluation keeps activations (no ``torch.no_grad()``): from a log's eval steps, a snapshot, the frames."""
    hit = _eval_from_log(ev, exp)
    s, w = ev.snapshot, ev.where
    layer = exp.estimate.activation_bytes_per_layer if exp else 0
    if hit is None and s is not None and s.eval_activation_bytes >= max(256 * MiB, 2 * layer):
        hit = (0.75, s.eval_activation_bytes, layer,
               f"snapshot: {g(s.eval_activation_bytes)} of activations alive under an evaluation function")
    if hit is None and w is not None and w.in_eval and not w.no_grad and w.phase in ("forward", "loss"):
        hit = (0.55, _needed(ev) or 0, layer, f"raised in an evaluation forward ({w.location}) with no "
                                               "no_grad/inference_mode decorator on the stack")
    if hit is None:
        return None
    like, observed, expected, sentence = hit
    return Finding("eval_without_no_grad", (sentence,), expected or None, observed or None,
                   (_ev_fix(EVAL_ACTION, max(0, observed - expected), ev, exp),), like)


def dataloader_memory(ev: Evidence, exp: Expected | None) -> Finding | None:
    """The data path holds GPU memory (article: dataloader workers and pin_memory holding the GPU)."""
    w, s = ev.where, ev.snapshot
    if w is not None and w.phase == "dataloader":
        sentences = (f"raised in the DataLoader ({w.location}): batches are put on the GPU in a loader thread or "
                     "worker",)
        return Finding("dataloader_memory", sentences, None, _needed(ev),
                       (_ev_fix(DATALOADER_ACTION, (ev.oom.tried_bytes if ev.oom else None) or 0, ev, exp),), 0.85)
    if s is not None and s.by_category.get("dataloader", 0) >= 256 * MiB:
        b = s.by_category["dataloader"]
        return Finding("dataloader_memory", (f"snapshot: {g(b)} allocated from torch.utils.data frames",), None, b,
                       (_ev_fix(DATALOADER_ACTION, b, ev, exp),), 0.6)
    return None


def _job_name(smi) -> str | None:  # noqa: ANN001 - NvidiaSmi
    """The job's program: the process name holding the most memory over all GPUs."""
    by: dict[str, int] = {}
    for p in smi.processes:
        by[p.name] = by.get(p.name, 0) + p.used_bytes
    return max(by, key=by.get) if by and max(by.values()) > 0 else None


def _main_procs(ev: Evidence) -> dict[int, object]:
    """GPU → the job's process on it (its largest, when that is the job's program)."""
    smi = ev.nvsmi
    if smi is None:
        return {}
    name = _job_name(smi)
    out = {}
    for gi in sorted({p.gpu for p in smi.processes if p.gpu is not None}):
        top = max(smi.on_gpu(gi), key=lambda p: p.used_bytes)
        if top.name == name and top.used_bytes > 0:
            out[gi] = top
    return out


def job_gpus(ev: Evidence) -> set[int]:
    """The GPUs nvidia-smi shows running the job (see the module docstring), plus the OOM's device."""
    smi = ev.nvsmi
    out: set[int] = set()
    if smi is not None:
        if any(p.gpu is not None for p in smi.processes):
            out = set(_main_procs(ev))
        else:
            out = {x.index for x in smi.gpus if x.used_bytes >= 0.1 * x.total_bytes}
    if ev.oom is not None and ev.oom.device is not None and (smi is None or out):
        out.add(ev.oom.device)
    return out


def world_size(ev: Evidence, exp: Expected | None) -> int | None:
    """The job's number of ranks, from the most direct source: ``--log`` ranks, the traceback's ``[rankN]:``
    prefixes, nvidia-smi's GPUs running the job, the setup's ``--gpus``; None when nothing says (or 1)."""
    cands = []
    if ev.log is not None and len(ev.log.ranks) > 1:
        cands.append(len(ev.log.ranks))
    if ev.where is not None and ev.where.world_seen:
        cands.append(ev.where.world_seen)
    if ev.nvsmi is not None and len(_main_procs(ev)) > 1:
        cands.append(len(_main_procs(ev)))
    if exp is not None and exp.setup.gpus > 1:
        cands.append(exp.setup.gpus)
    return cands[0] if cands else None


def _foreign_contexts(ev: Evidence) -> list[tuple[int, list]]:
    """(gpu, processes) where processes that are the job's process of another GPU sit (other ranks' contexts)."""
    smi = ev.nvsmi
    if smi is None:
        return []
    main = _main_procs(ev)
    pids = {p.pid for p in main.values()}
    out = []
    for gi, top in main.items():
        foreign = [p for p in smi.on_gpu(gi) if p.pid != top.pid and p.pid in pids and p.used_bytes > 0]
        if sum(p.used_bytes for p in foreign) >= 256 * MiB:
            out.append((gi, foreign))
    return out


def _equal_contexts(sizes: list[int]) -> bool:
    """Two or more context-sized processes of one size (±10 %): CUDA contexts of one program."""
    return len(sizes) >= 2 and 0 < max(sizes) <= CONTEXT_MAX_BYTES and max(sizes) <= 1.1 * min(sizes)


def _sibling_contexts(ev: Evidence, exp: Expected | None) -> list[tuple[int, list]]:
    """(gpu, processes): context-sized processes of the job's program on one of its GPUs that are equal (two or
    more) or number the job's ranks less one — CUDA contexts that other ranks (or DataLoader workers) made on it
    (pytorch/pytorch#49481)."""
    smi = ev.nvsmi
    if smi is None:
        return []
    world = world_size(ev, exp)
    out = []
    for gi, top in _main_procs(ev).items():
        sibs = [p for p in smi.on_gpu(gi) if p.pid != top.pid and p.name == top.name
                and 0 < p.used_bytes <= CONTEXT_MAX_BYTES]
        sizes = [p.used_bytes for p in sibs]
        if sibs and (_equal_contexts(sizes) or (world is not None and len(sibs) == world - 1)) \
                and sum(sizes) >= 256 * MiB:
            out.append((gi, sibs))
    return out


def _oom_siblings(ev: Evidence, exp: Expected | None) -> list[tuple[int, int]]:
    """The (pid, bytes) an OOM message lists that are the job's own ranks (module docstring: the rule)."""
    o = ev.oom
    if o is None or not o.other_processes:
        return []
    me = _self_pid(o)
    listed = [(pid, b) for pid, b in o.other_processes if pid != me and b > 0]
    main = {p.pid for p in _main_procs(ev).values()}
    job = _job_name(ev.nvsmi) if ev.nvsmi is not None else None
    named = {p.pid for p in ev.nvsmi.processes if p.name == job} if ev.nvsmi is not None else set()
    small = [(pid, b) for pid, b in listed if b <= CONTEXT_MAX_BYTES]
    world = world_size(ev, exp)
    by_count = world is not None and len(small) == world - 1
    equal = _equal_contexts([b for _, b in small])
    return [(pid, b) for pid, b in listed if pid in main or (b <= CONTEXT_MAX_BYTES and (
        pid in named or by_count or equal))]


def _spread_floor(others: list[int]) -> float:
    """How much more than the others' median one rank must hold: 5 % of it, four robust standard deviations of
    the others (ranks doing the same work differ by noise only), and at least 1 GiB (a quarter of the median,
    for small runs)."""
    mid = median(others)
    mad = median([abs(v - mid) for v in others])
    return max(min(1 * GiB, 0.25 * mid), 0.05 * mid, 4 * 1.4826 * mad)


def _imbalance_from_log(ev: Evidence) -> tuple[str, int, int] | None:
    log = ev.log
    if log is None or len(log.ranks) < 2:
        return None
    peaks = {r: max((x.peak_allocated_bytes or x.allocated_bytes) for x in log.by_rank(r, None)) for r in log.ranks}
    return _outlier(peaks, "rank")


def _imbalance_from_smi(ev: Evidence) -> tuple[str, int, int] | None:
    """Per-GPU use among the GPUs that run the job (the job's process of each when processes are listed: the
    others are other_process's)."""
    smi = ev.nvsmi
    if smi is None:
        return None
    jobs = job_gpus(ev)
    main = _main_procs(ev)
    used = {x.index: x.used_bytes for x in smi.gpus if x.index in jobs}
    for gi, top in main.items():
        used[gi] = top.used_bytes
    if len(used) < 2:
        return None
    return _outlier(used, "GPU")


def _outlier(values: dict[int, int], what: str) -> tuple[str, int, int] | None:
    """The highest of several ranks' or GPUs' bytes when it stands out of the others' spread:
    (its name, its bytes, the others' median)."""
    top = max(values, key=values.get)
    rest = [v for k, v in values.items() if k != top]
    others = median(rest)
    if values[top] - others < _spread_floor(rest):
        return None
    return f"{what} {top}", values[top], int(others)


def rank_imbalance(ev: Evidence, exp: Expected | None) -> Finding | None:
    """One rank much higher than the others (article: parallel config, duplicated data caches), or the job's
    other ranks' CUDA contexts on one GPU (nvidia-smi, or the OOM message's process list)."""
    foreign = _foreign_contexts(ev)
    ctx = foreign or _sibling_contexts(ev, exp)
    if ctx:
        gi, procs = max(ctx, key=lambda c: sum(p.used_bytes for p in c[1]))
        total = sum(p.used_bytes for p in procs)
        each = g(int(median(p.used_bytes for p in procs)))
        sentence = (f"GPU {gi} holds {len(procs)} processes of other ranks ({g(total)} in all, {each} each): each "
                    f"rank made a CUDA context on GPU {gi}" if foreign else
                    f"GPU {gi} holds {len(procs)} more processes of the same program ({each} each, {g(total)} in "
                    "all): CUDA contexts of the other ranks (or of DataLoader workers)")
        return Finding("rank_imbalance", (sentence,), 0, total, (_ev_fix(SET_DEVICE_ACTION, total, ev, exp),),
                       0.9 if foreign else 0.8)
    sibs = _oom_siblings(ev, exp)
    if sibs and sum(b for _, b in sibs) >= 128 * MiB:
        o, total = ev.oom, sum(b for _, b in sibs)
        room = o.tried_bytes is not None and total + (o.free_bytes or 0) >= o.tried_bytes
        dev = "" if o.device is None else f" {o.device}"
        sentences = [f"the OOM message lists {len(sibs)} processes of this job's other ranks on GPU{dev} "
                     f"({g(total)} in all): CUDA contexts they made on it, not another program"]
        if room:
            sentences.append(f"without them the {g(o.tried_bytes)} requested would have fit")
        return Finding("rank_imbalance", tuple(sentences), 0, total, (_ev_fix(SET_DEVICE_ACTION, total, ev, exp),),
                       0.85 if room else 0.55)
    hit = _imbalance_from_log(ev) or _imbalance_from_smi(ev)
    if hit is None:
        return None
    who, top, others = hit
    verb = "peaks at" if who.startswith("rank") else "uses"
    sentences = [f"{who} {verb} {g(top)}, the others {g(others)} (median): {g(top - others)} more"]
    like = 0.75 if who.startswith("rank") else 0.6
    if exp is not None and exp.setup.pp > 1:
        sentences.append(f"with pp={exp.setup.pp} the pipeline stages hold different activations (1F1B): some "
                         "spread is expected")
        like = 0.5
    action = (f"even out {who}: check its data (sampler, sequence lengths, per-rank caches) and its parallel "
              "layout")
    return Finding("rank_imbalance", tuple(sentences), others, top, (_ev_fix(action, top - others, ev, exp),), like)


def _self_pid(o) -> int | None:  # noqa: ANN001
    """The listed process that is this one (in a container NVML shows it as "Process N")."""
    if o.process_bytes is not None or o.reserved_bytes is None:
        return None
    cands = [(b, pid) for pid, b in o.other_processes if b >= o.reserved_bytes]
    return min(cands)[1] if cands else None


def _other_from_oom(ev: Evidence, exp: Expected | None) -> tuple[float, list, int, str] | None:
    """(likelihood, [(pid, name, bytes, gpu)], expected bytes, sentence) from the OOM message."""
    o = ev.oom
    if o is None:
        return None
    me = _self_pid(o)
    sibs = {pid for pid, _ in _oom_siblings(ev, exp)}
    others = [(pid, "", b, o.device) for pid, b in o.other_processes if pid != me and pid not in sibs and b > 0]
    total = sum(x[2] for x in others)
    if others and total >= 128 * MiB:
        room = o.tried_bytes is not None and total + (o.free_bytes or 0) >= o.tried_bytes
        return (0.85 if room else 0.55), others, 0, (
            f"other processes hold {g(total)} of the GPU" + (f", enough for the {g(o.tried_bytes)} requested" if room
                                                             else ""))
    if o.total_bytes is None or o.free_bytes is None or o.reserved_bytes is None or o.process_bytes is not None:
        return None
    outside = o.total_bytes - o.free_bytes - o.reserved_bytes - sum(b for pid, b in o.other_processes if pid in sibs)
    expect = exp.estimate.device_total_bytes - exp.estimate.peak_reserved_bytes if exp else CUDA_CONTEXT_BYTES
    if outside - expect < max(1 * GiB, o.tried_bytes or 0):
        return None
    return 0.5, [(0, "", outside - expect, o.device)], expect, (
        f"{g(outside)} of the GPU is used outside this process's PyTorch allocator (about {g(expect)} expected for "
        "the CUDA context and NCCL)")


def _other_from_smi(ev: Evidence, exp: Expected | None) -> list[tuple[int, str, int, int | None]]:
    """(pid, name, bytes, gpu) of the processes on the job's GPUs that are neither its process there nor one of
    its ranks' contexts; processes on GPUs the job does not use are another job's business. Graphics-only
    processes (Type ``G``: the display server, the desktop, a browser) count only where something failed: on a
    run that fits, the display's framebuffer is no cause, and "stop Xorg" no advice."""
    smi = ev.nvsmi
    if smi is None:
        return []
    own = {p.pid for _, ps in (*_foreign_contexts(ev), *_sibling_contexts(ev, exp)) for p in ps}
    own |= {p.pid for p in _main_procs(ev).values()}
    jobs = job_gpus(ev)
    display_counts = _failed(ev)
    out = []
    for gi in sorted(jobs):
        procs = sorted(smi.on_gpu(gi), key=lambda p: -p.used_bytes)
        out += [(p.pid, p.name, p.used_bytes, gi) for p in procs if p.pid not in own and p.used_bytes >= 64 * MiB
                and (display_counts or p.type != "G")]
    return out


def other_process(ev: Evidence, exp: Expected | None) -> Finding | None:
    """Memory held by other processes on the job's GPU (article: a card that does not release its memory:
    leftover processes). nvidia-smi shows them directly; the OOM message names them by PID."""
    hit = _other_from_oom(ev, exp)
    smi = _other_from_smi(ev, exp)
    if hit is None and not smi:
        return None
    like, procs, expected, sentence = hit if hit else (0.0, [], 0, "")
    sentences = [sentence] if sentence else []
    if smi:
        job = _job_name(ev.nvsmi)
        listed = ", ".join(f"pid {pid} {g(b)} on GPU {gi}" for pid, _, b, gi in smi[:6])
        sentences.append(f"nvidia-smi: on the job's GPUs besides its own processes, {listed}")
        if any(name == job for _, name, _, _ in smi):
            sentences.append("some have the job's program name: if they are its DataLoader workers, they hold CUDA "
                             "contexts")
        big = sum(b for _, _, b, _ in smi) >= 1 * GiB
        like = max(like, 0.85 if big else 0.7)
        if ev.oom is not None and ev.oom.device in {gi for *_, gi in smi}:
            like = min(0.95, like + 0.05)
        procs = procs + [x for x in smi if x[0] not in {p[0] for p in procs}]
    job = _job_name(ev.nvsmi) if ev.nvsmi is not None else None
    fixes = tuple(_ev_fix(_stop(pid, name, gi, name == job), b, ev, exp)
                  for pid, name, b, gi in sorted(procs, key=lambda x: -x[2])[:6])
    return Finding("other_process", tuple(sentences), expected, sum(x[2] for x in procs) or None, fixes, like)


def _stop(pid: int, name: str, gpu: int | None, job_program: bool = False) -> str:
    if pid == 0:
        return "free the memory held outside PyTorch's allocator (other processes: nvidia-smi --query-compute-apps)"
    where = f" on GPU {gpu}" if gpu is not None else ""
    if job_program:
        return f"check process {pid} ({name}){where}: stop it unless it is this job's own (a DataLoader worker)"
    return f"stop process {pid} ({name}){where}" if name else f"stop process {pid}{where}"


def host_pinned_memory(ev: Evidence, exp: Expected | None) -> Finding | None:
    """Page-locked host memory ran out: a driver-level ``CUDA error: out of memory`` raised by a device→host copy
    with ``non_blocking=True`` or a ``pin_memory()`` (PyTorch's CachingHostAllocator: ``cudaHostAlloc``), not
    by the GPU's allocator (which would print "Tried to allocate"). WSL2 caps pinned memory (the CUDA on WSL
    user guide's known limitations)."""
    o, w = ev.oom, ev.where
    if o is None or w is None or not w.pinned or o.form not in ("driver", "unparsed"):
        return None
    sentences = [f"the CUDA error comes from a copy into pinned host memory ({w.pinned}): the host's page-locked "
                 "memory ran out, not the GPU's"]
    if w.wsl:
        sentences.append("the run is under WSL2, which caps pinned host memory (CUDA on WSL: known limitations)")
    return Finding("host_pinned_memory", tuple(sentences), None, None, (_ev_fix(PINNED_ACTION, 0, ev, exp),),
                   0.9 if w.wsl else 0.8)


def offload_bottleneck(ev: Evidence, exp: Expected | None) -> Finding | None:
    """Slow but stable (article: offload or ZeRO-3 communication → ZeRO-2, gradient checkpointing)."""
    if exp is None or ev.log is None or ev.oom is not None or ev.log.ooms:
        return None
    s = exp.setup
    if s.offload == "none" and not (s.zero == 3 and s.engine in ("deepspeed", "fsdp2") and s.dp > 1):
        return None
    recs = ev.log.by_rank(ev.log.ranks[0])
    t = leak_test([x.step for x in recs], [x.allocated_bytes for x in recs])
    if t.leaking or t.n_steps < 12:
        return None
    st = exp.step_time()
    slow = st.breakdown.get("offload", 0.0) + st.breakdown.get("dp_comm", 0.0)
    share = slow / st.step_seconds if st.step_seconds else 0.0
    if share < 0.25:
        return None
    sentences = [f"memory stable at {g(baseline(ev.log) or 0)} over {t.n_steps} steps (no trend)",
                 f"performance model: {st.step_seconds:.2f} s per step, of which {st.breakdown.get('offload', 0.0):.2f} s "
                 f"offload traffic and {st.breakdown.get('dp_comm', 0.0):.2f} s data-parallel communication "
                 f"({share:.0%})"]
    secs = [x.step_seconds for x in recs if x.step_seconds]
    if secs:
        sentences.append(f"observed median step {median(secs):.2f} s")
    return Finding("offload_bottleneck", tuple(sentences), exp.estimate.peak_allocated_bytes, observed_peak(ev),
                   tuple(speed_fixes(exp)), min(0.9, 0.4 + 0.5 * share))


RULES: tuple[Callable[[Evidence, Expected | None], Finding | None], ...] = (
    static_overflow, activation_overflow, predicted_overflow, leak, fragmentation, duplicate_fp32_copy, stale_checkpoint_copy,
    eval_without_no_grad,
    rank_imbalance, dataloader_memory, other_process, offload_bottleneck, host_pinned_memory)


def _none(ev: Evidence, exp: Expected | None) -> Finding:
    sentences = [f"checked: {', '.join(ev.given)}, no rule matched" if ev.given else
                 "checked: the estimate, no rule matched"]
    if ev.other_error:
        sentences.append(f"--error holds no CUDA out-of-memory error (its error: `{ev.other_error}`): not a memory "
                         "problem")
    if exp is not None:
        e = exp.estimate
        sentences.append(f"estimate: peak {g(e.peak_allocated_bytes)}, {g(e.device_total_bytes)} with CUDA context "
                         f"and NCCL, on {g(e.gpu_memory_bytes)}")
    if ev.log is not None:
        b = baseline(ev.log)
        sentences.append(f"per-step log: {len(ev.log.records)} records on {len(ev.log.ranks)} rank(s), no trend, "
                         f"between steps {g(b or 0)}")
    return Finding("none", tuple(sentences), exp.estimate.peak_allocated_bytes if exp else None, observed_peak(ev),
                   (), 1.0)


def _failed(ev: Evidence) -> bool:
    return ev.oom is not None or (ev.log is not None and bool(ev.log.ooms))


def _deciders(ev: Evidence, exp: Expected | None) -> list[str]:
    """The evidence not given that would decide, one sentence each."""
    out = []
    if _unknown_gpu(ev, exp):
        out.append("would decide: --gpu (or --gpu-memory), the GPU the run uses: the estimate is judged against it")
    if not _setup_only(ev) and (ev.where is None or ev.where.phase == "unknown"):
        out.append("would decide: the whole traceback (--error), to see in which phase it was raised")
    if exp is None:
        out.append("would decide: MODEL and its setup flags (--engine, --gpus, --micro-batch, --seq-len, --recompute), "
                   "to size what the run should use")
    if ev.log is None:
        out.append("would decide: --log, the monitor's per-step log (a leak, the step's peak, rank by rank)")
    if ev.snapshot is None:
        out.append("would decide: --snapshot, torch.cuda.memory._dump_snapshot() at the OOM (what was alive, "
                   "free blocks)")
    if ev.nvsmi is None:
        out.append("would decide: --nvidia-smi, the processes on the GPU")
    return out


def _undetermined(ev: Evidence, exp: Expected | None, found: list[Finding]) -> Finding:
    best = found[0].likelihood if found else 0.0
    sentences = [f"no cause reaches likelihood {THRESHOLD:.2f}"]
    if found:
        sentences.append("candidates: " + ", ".join(f"{f.cause} {f.likelihood:.2f}" for f in found[:4]))
    sentences += _oom_sentences(ev)
    sentences += _deciders(ev, exp)
    return Finding("undetermined", tuple(sentences), None, _needed(ev) or observed_peak(ev), (),
                   round(1.0 - best, 2))


def diagnose(ev: Evidence, exp: Expected | None) -> list[Finding]:
    """Every finding, most likely first; ``[none]`` when no rule fires and nothing failed; ``undetermined``
    first when no cause reaches :data:`THRESHOLD` (an OOM with no cause shown, or only weak signs)."""
    found = [f for rule in RULES if (f := rule(ev, exp)) is not None]
    found.sort(key=lambda f: (-f.likelihood, -(f.observed_bytes or 0)))
    if found and found[0].likelihood >= THRESHOLD:
        return found
    if found or _failed(ev):
        return [_undetermined(ev, exp, found), *found]
    return [_none(ev, exp)]
