"""What each technique of the article's trade-off table (§4.2) saves and costs, for this run.

Each option changes one thing of the user's setup and keeps the rest — the world size and the global
batch included — and reports the peak, the memory it saves, the predicted step-time change and
whether it fits (``fits``: the option's estimate, judged as ``trainmem estimate`` judges it: device total ≤ the
GPU's memory). The options that fit come first, cheapest step time first, then the others, most memory saved
first. An option the engine cannot run for this setup is listed under ``not_applicable`` with the reason the
estimator gives, and so is, for a run that does not fit, one that saves less than 1 % of the gap.
:func:`cheapest_fix` is the first option that fits, as the flags to add to the run's command line.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from trainmem.errors import TrainmemError
from trainmem.hardware.cluster import GPUGroup, parse_cluster
from trainmem.memory.estimate import MemoryEstimate, estimate
from trainmem.memory.states import layers_of_stage
from trainmem.model.spec import ModelSpec
from trainmem.perf import StepTime, step_time
from trainmem.plan.space import engine_precision
from trainmem.setup import FUSED_OPTIMIZERS, TrainingSetup, make_setup
from trainmem.units import GiB, MiB

__all__ = ["Option", "techniques", "compare", "cheapest_fix", "fix_fields", "cli_flags", "fix_command", "flag_of",
           "slowdown_pct", "relevant_saving_bytes"]

_SETUP_KEYS = ("engine", "precision", "micro_batch", "grad_accum", "recompute", "recompute_layers", "zero", "offload",
               "tp", "pp", "dp")


@dataclass(frozen=True, slots=True)
class Option:
    technique: str
    changes: dict[str, object]


def _group(setup: TrainingSetup) -> GPUGroup:
    return parse_cluster(f"{setup.gpus}x{setup.gpu}").groups[0]


def techniques(s: TrainingSetup, spec: ModelSpec | None = None) -> Iterator[Option]:
    """The trade-off table's rows that change something of ``s`` (with ``spec``: block recompute of half of
    each stage's layers too)."""
    for f in (2, 4):
        if s.micro_batch % f == 0:
            yield Option(f"gradient accumulation ×{f} (same global batch)",
                         {"micro_batch": s.micro_batch // f, "grad_accum": s.grad_accum * f})
    if s.precision == "fp32":
        for fam in ("bf16", "fp16"):
            yield Option(f"{fam} mixed precision", {"precision": engine_precision(s.engine, fam)})
    for r in ("selective", "full"):
        if (s.recompute, s.recompute_layers) != (r, None) and not (r == "selective" and s.engine == "deepspeed"):
            yield Option(f"{r} recompute", {"recompute": r, "recompute_layers": None})  # (HF: whole layers only)
    if spec is not None and s.engine != "deepspeed":
        n = len(layers_of_stage(spec, s, 0))
        if n > 1 and (s.recompute, s.recompute_layers) != ("full", n // 2):
            yield Option(f"full recompute of {n // 2} of {n} layers per stage (block)",
                         {"recompute": "full", "recompute_layers": n // 2})
    yield from _sharding(s)
    yield from _optimizer(s)
    yield from _offload(s)
    yield from _activation_memory(s)
    yield from _model_parallel(s)


def _activation_memory(s: TrainingSetup) -> Iterator[Option]:
    """Flags that shrink what the layers keep: activation offloading (torchtune/TRL ``OffloadActivations``, axolotl
    ``activation_offloading``; its host copies are timed) and LoRA without its dropout. (torch.compile and a chunked
    loss also keep less, but trainmem does not time compile and a loss is the framework's code, not a flag: not
    offered as fixes.) A row the estimator refuses for this run is listed under not_applicable with the reason."""
    if not s.offload_activations and s.engine in ("torch", "fsdp2") and s.pp == 1:
        yield Option("activation offloading to CPU (OffloadActivations)", {"offload_activations": True})
    if s.is_lora and s.lora_dropout:
        yield Option("LoRA without dropout (lora_dropout 0)", {"lora_dropout": 0.0})


def _sharding(s: TrainingSetup) -> Iterator[Option]:
    if s.engine == "deepspeed":
        for z in (1, 2, 3):
            if z != s.zero:
                yield Option(f"ZeRO-{z}", {"zero": z})
    elif s.engine == "torch" and s.gpus == 1:
        # one GPU: what still moves memory off it (ZeRO-Offload runs at world size 1)
        prec = engine_precision("deepspeed", "fp32" if s.precision == "fp32" else s.precision.split("-")[-1])
        yield Option("optimizer offload (ZeRO-Offload)",
                     {"engine": "deepspeed", "zero": 2, "offload": "optimizer", "precision": prec})
    elif s.engine == "torch" and s.gpus > 1:
        prec = engine_precision("deepspeed", "fp32" if s.precision == "fp32" else s.precision.split("-")[-1])
        for z in (1, 2, 3):
            yield Option(f"ZeRO-{z} (DeepSpeed)", {"engine": "deepspeed", "zero": z, "precision": prec})
        fprec = s.precision if s.precision in ("fp32", "amp-bf16", "amp-fp16") else "amp-bf16"
        yield Option("FSDP2 (ZeRO-3)", {"engine": "fsdp2", "zero": 3, "precision": fprec})
    elif s.engine == "fsdp2" and s.zero == 2:
        yield Option("FSDP2 reshard after forward (ZeRO-3)", {"zero": 3})
    elif s.engine == "megatron" and s.zero == 0 and s.dp > 1:
        yield Option("distributed optimizer (ZeRO-1)", {"zero": 1})


def _optimizer(s: TrainingSetup) -> Iterator[Option]:
    if s.engine not in ("torch", "fsdp2") or s.is_lora:
        return  # (LoRA: the optimizer holds the adapters' states only; a smaller optimizer saves next to nothing)
    if s.optimizer in FUSED_OPTIMIZERS and s.optimizer_impl == "foreach":
        # torch's fused kernel: no list-wide temporary at the step (HF Trainer optim="adamw_torch_fused",
        # torchtitan implementation="fused", torch.optim.AdamW(..., fused=True))
        yield Option("fused optimizer (fused=True, adamw_torch_fused)", {"optimizer_impl": "fused"})
    if s.optimizer in ("adamw", "adam") and s.offload == "none" and s.engine == "torch":
        # (not under FSDP2: bitsandbytes' 8-bit optimizers are not DTensor-aware — their state is allocated
        # zeros_like the DTensor and the kernel is handed DTensors, bitsandbytes issue #1633 "illegal memory
        # access with FSDP2", open in 2026; a fix users cannot run is not offered)
        yield Option("8-bit AdamW (bitsandbytes)", {"optimizer": "adamw-8bit", "optimizer_impl": "foreach"})


def _offload(s: TrainingSetup) -> Iterator[Option]:
    if s.offload != "none":
        return
    if s.engine == "deepspeed":
        yield Option("optimizer offload (ZeRO-Offload)", {"offload": "optimizer", "zero": max(s.zero, 2)})
        yield Option("optimizer + parameter offload (ZeRO-3 Offload)", {"offload": "optimizer+params", "zero": 3})
    elif s.engine == "fsdp2":
        yield Option("CPU offload (FSDP2 CPUOffloadPolicy)", {"offload": "optimizer+params"})
    elif s.engine == "megatron":
        yield Option("optimizer CPU offload", {"offload": "optimizer", "zero": 1})


def _model_parallel(s: TrainingSetup) -> Iterator[Option]:
    if s.engine not in ("megatron", "fsdp2"):
        return
    for t in (2, 4, 8):
        if t != s.tp and s.gpus % (t * s.pp * s.cp) == 0:
            yield Option(f"tensor parallel {t}", {"tp": t, "dp": None})
    for p in (2, 4):
        if p != s.pp and s.gpus % (s.tp * p * s.cp) == 0:
            yield Option(f"pipeline parallel {p}", {"pp": p, "dp": None, "grad_accum": max(s.grad_accum, 2 * p)})


def _changed(s: TrainingSetup, changes: dict[str, object]) -> TrainingSetup:
    fields = s.model_dump(exclude={"notes"})
    fields.update(changes)
    if "pp" in changes:  # another pipeline depth: the even split of its own (a given split was for this pp)
        fields["stage_layers"] = None
    if "pp" in changes and "grad_accum" in changes:  # keep the global batch: fewer dp ranks, more micro-batches
        dp_new = s.gpus // (int(fields["tp"]) * int(fields["pp"]) * s.cp)
        fields["grad_accum"] = max(1, s.global_batch // (dp_new * s.micro_batch))
    elif "tp" in changes:
        dp_new = s.gpus // (int(fields["tp"]) * s.pp * s.cp)
        fields["grad_accum"] = max(1, s.global_batch // (dp_new * s.micro_batch))
    for k in ("sp", "loss_parallel"):
        fields[k] = None if not fields.get(f"no_{k}") else fields[k]
    if fields.get("engine") == "megatron" and int(fields["tp"]) > 1:
        fields["sp"] = True
    if fields.get("engine") != s.engine:
        fields["zero"] = changes.get("zero")
    if fields.get("engine") in ("deepspeed", "megatron"):  # their own fused optimizers
        fields["optimizer_impl"] = "foreach"
    return make_setup(**fields)


@dataclass(frozen=True, slots=True)
class _Row:
    """One option evaluated: its setup, estimate and step time."""
    opt: Option
    setup: TrainingSetup
    memory: MemoryEstimate
    time: StepTime


def _evaluate(spec: ModelSpec, s: TrainingSetup) -> tuple[MemoryEstimate, StepTime, list[_Row], list[dict]]:
    """The baseline and every technique of ``s`` estimated (those the estimator refuses, with its reason)."""
    group = _group(s)
    base_m, base_t = estimate(spec, s), step_time(spec, s, group)
    rows: list[_Row] = []
    refused: list[dict] = []
    for opt in techniques(s, spec):
        try:
            s2 = _changed(s, opt.changes)
            rows.append(_Row(opt, s2, estimate(spec, s2), step_time(spec, s2, group)))
        except TrainmemError as e:
            refused.append({"technique": opt.technique, "reason": str(e)})
    return base_m, base_t, rows, refused


def slowdown_pct(base_step_seconds: float, base_global_batch: int, step_seconds: float, global_batch: int) -> float:
    """Step-time change in percent at the baseline's global batch (an option with another global batch is
    scaled to the same number of samples)."""
    return (step_seconds * base_global_batch / max(global_batch, 1) / base_step_seconds - 1) * 100


def relevant_saving_bytes(short_bytes: int) -> int:
    """Least device memory a fix must save to be offered for a run ``short_bytes`` over its GPU: 1 % of the gap
    (issue 18: "fixes that save < 1 % of the gap are dropped"); 0 for a run that fits."""
    return max(0, short_bytes) // 100


def _rank(base_m: MemoryEstimate, base: TrainingSetup, base_t: StepTime,
          rows: list[_Row]) -> tuple[list[_Row], list[dict]]:
    """The options that fit first, cheapest step time first; then the rest, most memory saved first. For a run
    that does not fit, a fix that saves less than 1 % of the gap is left out (listed with its reason)."""
    short = -base_m.headroom_bytes
    least = relevant_saving_bytes(short)
    kept, dropped = [], []
    for r in rows:
        saved = base_m.device_total_bytes - r.memory.device_total_bytes
        if short > 0 and not r.memory.fits and saved < least:
            dropped.append({"technique": r.opt.technique,
                            "reason": f"saves {saved / MiB:,.1f} MiB of device memory, under 1 % of the "
                                      f"{short / GiB:.2f} GiB the run is short"})
        else:
            kept.append(r)

    def key(r: _Row) -> tuple:
        slow = slowdown_pct(base_t.step_seconds, base.global_batch, r.time.step_seconds, r.setup.global_batch)
        saves = base_m.peak_allocated_bytes - r.memory.peak_allocated_bytes
        return (0, slow, -saves) if r.memory.fits else (1, -saves, slow)
    return sorted(kept, key=key), dropped


def compare(spec: ModelSpec, s: TrainingSetup) -> dict:
    """The ``trainmem compare --json`` object: the options that fit this GPU first, cheapest step time first."""
    base_m, base_t, rows, refused = _evaluate(spec, s)
    ranked, dropped = _rank(base_m, s, base_t, rows)
    out = {"baseline": {"setup": _brief(s), "peak_allocated_bytes": base_m.peak_allocated_bytes,
                        "device_total_bytes": base_m.device_total_bytes, "fits": base_m.fits,
                        "step_seconds": base_t.step_seconds, "tokens_per_second": base_t.tokens_per_second},
           "options": [], "not_applicable": refused + dropped}
    for r in ranked:
        s2, m, t = r.setup, r.memory, r.time
        gb_note = "" if s2.global_batch == s.global_batch else f"global batch {s2.global_batch}"
        out["options"].append({
            "technique": r.opt.technique, "setup": _brief(s2),
            "peak_allocated_bytes": m.peak_allocated_bytes, "device_total_bytes": m.device_total_bytes,
            "saves_bytes": base_m.peak_allocated_bytes - m.peak_allocated_bytes,
            "slowdown_pct": slowdown_pct(base_t.step_seconds, s.global_batch, t.step_seconds, s2.global_batch),
            "step_seconds": t.step_seconds, "fits": m.fits, "note": gb_note})
    return out


def flag_of(field: str) -> str:
    """The command-line flag of a setup field (cli_options.SETUP_OPTIONS spells every one so; a test checks)."""
    return "--" + field.replace("_", "-")


def _flag_value(value: object) -> str:
    if isinstance(value, (tuple, list)):
        return ",".join(map(str, value))
    return str(value)


def fix_fields(spec: ModelSpec, given: Mapping[str, object], target: TrainingSetup) -> dict[str, object] | None:
    """The setup fields to set on top of a command line that sets ``given`` (setup fields, unset = absent or None)
    so that it runs ``target``, or None when flags cannot say it (a field that would have to be unset again).
    Checked by rebuilding the setup from them, as the command line would."""
    from trainmem.api import build_spec
    from trainmem.cli_options import SETUP_FIELDS

    merged = {k: v for k, v in given.items() if k in SETUP_FIELDS and v is not None and v is not False}
    want = target.model_dump(exclude={"notes"})
    added: dict[str, object] = {}
    for _ in range(4):  # a flag set can change another field's default (engine -> zero): settle in a few rounds
        try:
            got = build_spec(spec, **merged)[1].model_dump(exclude={"notes"})
        except TrainmemError:
            return None
        diff = {k: want[k] for k in SETUP_FIELDS if got.get(k) != want.get(k)}
        if not diff:
            return added
        if any(v is None or v is False for v in diff.values()):
            return None  # a value no flag sets (an unset field, a boolean flag turned off)
        merged.update(diff)
        added.update(diff)
    return None


def cli_flags(fields: Mapping[str, object]) -> list[str]:
    """Setup fields as command-line arguments (unset and false ones left out)."""
    out: list[str] = []
    for k, v in fields.items():
        if v is None or v is False or k == "notes":  # notes: a --from file's assumption lines, not a flag
            continue
        out += [flag_of(k)] if v is True else [flag_of(k), _flag_value(v)]
    return out


def cheapest_fix(spec: ModelSpec, s: TrainingSetup, given: Mapping[str, object] | None = None,
                 base: MemoryEstimate | None = None) -> dict | None:
    """For a run that does not fit: the single change that makes it fit at the least step time — the first
    option :func:`compare` lists — with the flags and fields that apply it to the command line ``given`` (default:
    every field of ``s`` spelled out); None when the run fits. ``{"technique", "flags", "changes" (the setup
    fields the flags set), "peak_allocated_bytes", "device_total_bytes", "gpu_memory_bytes", "slowdown_pct",
    "step_seconds", "fits"}``; when no single change fits, the one that saves the most, with ``fits`` false (None
    if there is none). Lazily: every option is timed (the performance model, cheap), and memory is estimated in
    order of step time until an option fits (``base``: the run's estimate, when the caller has it)."""
    base = base if base is not None else estimate(spec, s)
    if base.fits:
        return None
    given = s.model_dump(exclude={"notes"}) if given is None else given
    group = _group(s)
    base_t = step_time(spec, s, group)
    timed: list[tuple[float, Option, TrainingSetup, StepTime]] = []
    for opt in techniques(s, spec):
        try:
            s2 = _changed(s, opt.changes)
            t = step_time(spec, s2, group)
        except TrainmemError:
            continue
        timed.append((slowdown_pct(base_t.step_seconds, s.global_batch, t.step_seconds, s2.global_batch), opt, s2, t))
    timed.sort(key=lambda x: x[0])
    rows: list[_Row] = []
    for i, (slow, opt, s2, t) in enumerate(timed):
        try:
            rows.append(_Row(opt, s2, estimate(spec, s2), t))
        except TrainmemError:
            continue
        tie = i + 1 < len(timed) and timed[i + 1][0] == slow  # (equal step time: compare puts the larger saving first)
        if not tie and any(r.memory.fits for r in rows):
            found = _first_with_flags(spec, given, [r for r in _rank(base, s, base_t, rows)[0] if r.memory.fits])
            if found is not None:
                return _fix_json(found[0], found[1], base_t, s)
    found = _first_with_flags(spec, given, _rank(base, s, base_t, rows)[0])
    return None if found is None else _fix_json(found[0], found[1], base_t, s)


def _first_with_flags(spec: ModelSpec, given: Mapping[str, object],
                      rows: list[_Row]) -> tuple[_Row, dict[str, object]] | None:
    for r in rows:
        fields = fix_fields(spec, given, r.setup)
        if fields is not None:
            return r, fields
    return None


def _fix_json(r: _Row, fields: dict[str, object], base_t: StepTime, s: TrainingSetup) -> dict:
    return {"technique": r.opt.technique, "flags": cli_flags(fields),
            "changes": {k: list(v) if isinstance(v, tuple) else v for k, v in fields.items()},
            "peak_allocated_bytes": r.memory.peak_allocated_bytes,
            "device_total_bytes": r.memory.device_total_bytes, "gpu_memory_bytes": r.memory.gpu_memory_bytes,
            "slowdown_pct": slowdown_pct(base_t.step_seconds, s.global_batch, r.time.step_seconds,
                                         r.setup.global_batch),
            "step_seconds": r.time.step_seconds, "fits": r.memory.fits}


def fix_command(command: str, model: str, given: Mapping[str, object], changes: Mapping[str, object]) -> str:
    """``trainmem COMMAND MODEL`` with the ``given`` setup flags, ``changes`` applied, quoted for a POSIX shell."""
    import shlex

    merged = {k: v for k, v in given.items() if v is not None and v is not False}
    merged.update(changes)
    return " ".join(shlex.quote(p) for p in ["trainmem", command, model] + cli_flags(merged))


def _brief(s: TrainingSetup) -> dict:
    return s.model_dump(mode="json", include=set(_SETUP_KEYS) | {"cp", "ep", "vpp", "gpus", "gpu", "seq_len",
                                                                 "optimizer", "optimizer_impl"})
