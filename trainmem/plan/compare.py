"""What each technique of the article's trade-off table (§4.2) saves and costs, for this run.

Each option changes one thing of the user's setup and keeps the rest — the world size and the global
batch included — and reports the peak, the memory it saves, the predicted step-time change and
whether it fits. An option the engine cannot run for this setup is listed under ``not_applicable``
with the reason the estimator gives.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from trainmem.errors import TrainmemError
from trainmem.hardware.cluster import GPUGroup, parse_cluster
from trainmem.memory.estimate import estimate
from trainmem.memory.states import layers_of_stage
from trainmem.model.spec import ModelSpec
from trainmem.perf import step_time
from trainmem.plan.space import engine_precision
from trainmem.setup import FUSED_OPTIMIZERS, TrainingSetup, make_setup

__all__ = ["Option", "techniques", "compare"]

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
    yield from _model_parallel(s)


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
    if s.engine not in ("torch", "fsdp2"):
        return
    if s.optimizer in FUSED_OPTIMIZERS and s.optimizer_impl == "foreach":
        # torch's fused kernel: no list-wide temporary at the step (HF Trainer optim="adamw_torch_fused",
        # torchtitan implementation="fused", torch.optim.AdamW(..., fused=True))
        yield Option("fused optimizer (fused=True, adamw_torch_fused)", {"optimizer_impl": "fused"})
    if s.optimizer in ("adamw", "adam") and s.offload == "none":
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


def compare(spec: ModelSpec, s: TrainingSetup) -> dict:
    """The ``trainmem compare --json`` object."""
    group = _group(s)
    base_m, base_t = estimate(spec, s), step_time(spec, s, group)
    out = {"baseline": {"setup": _brief(s), "peak_allocated_bytes": base_m.peak_allocated_bytes,
                        "device_total_bytes": base_m.device_total_bytes, "fits": base_m.fits,
                        "step_seconds": base_t.step_seconds, "tokens_per_second": base_t.tokens_per_second},
           "options": [], "not_applicable": []}
    for opt in techniques(s, spec):
        try:
            s2 = _changed(s, opt.changes)
            m = estimate(spec, s2)
            t = step_time(spec, s2, group)
        except TrainmemError as e:
            out["not_applicable"].append({"technique": opt.technique, "reason": str(e)})
            continue
        gb_note = "" if s2.global_batch == s.global_batch else f"global batch {s2.global_batch}"
        out["options"].append({
            "technique": opt.technique, "setup": _brief(s2),
            "peak_allocated_bytes": m.peak_allocated_bytes, "device_total_bytes": m.device_total_bytes,
            "saves_bytes": base_m.peak_allocated_bytes - m.peak_allocated_bytes,
            "slowdown_pct": (t.step_seconds * s.global_batch / max(s2.global_batch, 1) / base_t.step_seconds - 1) * 100,
            "step_seconds": t.step_seconds, "fits": m.fits, "note": gb_note})
    return out


def _brief(s: TrainingSetup) -> dict:
    d = s.model_dump(mode="json", include=set(_SETUP_KEYS) | {"cp", "ep", "vpp", "gpus", "gpu", "seq_len", "optimizer",
                                                              "optimizer_impl"})
    return d
