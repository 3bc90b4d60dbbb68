"""Read the doctor's inputs, build the run's estimate, apply the rules: the library side of ``trainmem doctor``."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from trainmem.doctor.case import Evidence, Expected, Finding
from trainmem.doctor.frames import Where, oom_frames, where
from trainmem.doctor.inputs import MAX_BINARY_BYTES, read_bytes, read_text
from trainmem.doctor.nvsmi import NvidiaSmi, parse_nvidia_smi
from trainmem.doctor.oom import OOMReport, parse_oom
from trainmem.doctor.rules import diagnose
from trainmem.doctor.snapshot import load_snapshot, summarise_snapshot
from trainmem.doctor.steplog import StepLog, merge_logs, parse_steplog
from trainmem.errors import ConfigError, TrainmemError
from trainmem.units import fmt_bytes

__all__ = ["DoctorInputs", "DoctorResult", "read_error", "other_error", "gather", "expected_for", "run_doctor"]

_OOM_AT = re.compile(r"out of memory|OutOfMemoryError|_ALLOC_FAILED", re.I)
_LAST_ERROR = re.compile(r"^\s*(?:\[\w+\]:\s*)?([\w.]*(?:Error|Exception)\b:?.*)$", re.M)
_TRACEBACK = re.compile(r"Traceback \(most recent call last\)")


@dataclass(slots=True)
class DoctorInputs:
    error: str | None = None
    logs: list[str] = field(default_factory=list)
    snapshot: str | None = None
    nvidia_smi: str | None = None
    config: str | None = None
    model: str | None = None
    flags: dict = field(default_factory=dict)
    """Setup fields given on the command line (None: not given)."""
    config_model: bool = True
    """Take any model the ``config`` names when ``model`` is None (False: only a catalog entry; the web page)."""


@dataclass(slots=True)
class DoctorResult:
    findings: list[Finding]
    notes: list[str]
    evidence: Evidence
    expected: Expected | None


def other_error(text: str) -> str | None:
    """The last exception line of a traceback that holds no out-of-memory error (None: no exception in it)."""
    if parse_oom(text) is not None:
        return None
    errs = _LAST_ERROR.findall(text)
    if not errs and not _TRACEBACK.search(text):
        return None
    lines = text.strip().splitlines()
    return (errs[-1].strip() if errs else lines[-1].strip())[:120].replace("`", "'")


def read_error(text: str, name: str) -> tuple[OOMReport, Where]:
    """The OOM report and where it was raised, from a message or a whole traceback."""
    oom = parse_oom(text)
    if oom is None:
        errs = _LAST_ERROR.findall(text)
        lines = text.strip().splitlines()
        last = (errs[-1].strip() if errs else lines[-1] if lines else "")[:120].replace("`", "'")
        raise ConfigError(f"--error {name}: no CUDA out-of-memory error in it (its error: `{last}`); this is not a "
                          "memory problem")
    m = _OOM_AT.search(text)
    frames = oom_frames(text, m.start() if m else None)
    return oom, where(frames, text)


def _logs(paths: list[str]) -> StepLog | None:
    if not paths:
        return None
    return merge_logs([parse_steplog(read_text(p, "--log", "a per-step log (JSONL or CSV)"), p) for p in paths])


def gather(inp: DoctorInputs, config_kind: str = "") -> Evidence:
    """The evidence of the input files (``config_kind``: the format ``--config`` was read as)."""
    oom = wh = None
    not_oom = ""
    if inp.error is not None:
        text = read_text(inp.error, "--error", "an error message or traceback")
        other = other_error(text)
        if other is not None:
            not_oom = other  # a crash that is not a memory problem: the doctor says so (``none``)
        else:
            oom, wh = read_error(text, inp.error)
    log = _logs(inp.logs)
    if oom is None and log is not None and log.ooms:
        oom, wh = read_error(log.ooms[-1], "--log")
    smi: NvidiaSmi | None = None
    if inp.nvidia_smi is not None:
        smi = parse_nvidia_smi(read_text(inp.nvidia_smi, "--nvidia-smi", "nvidia-smi output"))
    snap = None
    if inp.snapshot is not None:
        snap = summarise_snapshot(load_snapshot(read_bytes(inp.snapshot, "--snapshot", MAX_BINARY_BYTES), inp.snapshot))
    return Evidence(oom=oom, where=wh, nvsmi=smi, log=log, snapshot=snap, config_kind=config_kind,
                    other_error=not_oom)


def _observed_gpu(ev: Evidence) -> tuple[int | None, str]:
    if ev.oom is not None and ev.oom.total_bytes:
        return ev.oom.total_bytes, "the OOM message"
    if ev.log is not None and ev.log.capacity_bytes:
        return ev.log.capacity_bytes, "the monitor's log"
    if ev.nvsmi is not None and ev.nvsmi.gpus:
        return max(x.total_bytes for x in ev.nvsmi.gpus), "nvidia-smi's output"
    return None, ""


def _gpu_name(ev: Evidence) -> str | None:
    if ev.nvsmi is None or not ev.nvsmi.gpus:
        return None
    from trainmem.hardware import get_gpu
    try:
        return get_gpu(ev.nvsmi.gpus[0].name).name
    except TrainmemError:
        return None




def precision_fields(fields: dict, notes: list[str]) -> dict:
    """``fields`` with the precision every command takes when the flags leave it to the GPU or name a family the
    engine has no recipe of (:func:`trainmem.api.precision_notes`); its note appended to ``notes``."""
    from trainmem.api import precision_notes

    out = dict(fields)
    notes += precision_notes(out)
    return out


def expected_for(model: str | None, fields: dict, ev: Evidence, notes: list[str]) -> Expected | None:
    """The estimate of the run; the GPU's memory (and name) taken from the evidence when no flag gives them."""
    if model is None:
        return None
    from trainmem.api import build
    from trainmem.memory import estimate
    fields = {k: v for k, v in fields.items() if v is not None}
    cap, src = _observed_gpu(ev)
    auto: dict = {}
    if cap and "gpu_memory" not in fields:
        auto["gpu_memory"] = cap
        notes.append(f"GPU memory {fmt_bytes(cap)} from {src} (give --gpu-memory to change it)")
    name = _gpu_name(ev) if "gpu" not in fields else None
    if name:
        auto["gpu"] = name
    # the precision note for the text's notes; build() fills the same precision and states it in the setup's
    # notes, so --json's assumptions carry it as estimate --json's do (not pre-filled here for that reason)
    precision = precision_fields({**fields, **auto}, notes).get("precision")
    try:
        spec, setup = build(model, **{**fields, **auto})
        est = estimate(spec, setup)
    except TrainmemError:
        if "gpu" not in auto:
            raise
        if precision is not None:  # the observed GPU's recipe, kept without its name
            fields["precision"] = precision
        spec, setup = build(model, **{**fields, **{k: v for k, v in auto.items() if k != "gpu"}})
        est = estimate(spec, setup)
    known = bool(cap) or "gpu" in fields or "gpu_memory" in fields
    return Expected(spec=spec, setup=setup, estimate=est, notes=notes, gpu_known=known)


def run_doctor(inp: DoctorInputs) -> DoctorResult:
    if not (inp.error or inp.logs or inp.snapshot or inp.nvidia_smi or inp.config or inp.model):
        raise ConfigError("doctor: give at least one of --error, --log, --snapshot, --nvidia-smi, --config or a MODEL")
    flags = {k: v for k, v in inp.flags.items() if v is not None}
    model, kind = inp.model, ""
    if inp.config is not None:  # the --from reader and merge (doctor/launch.py): the setup estimate --from validates
        from trainmem.doctor.launch import read_launch_config
        cfg = read_launch_config(inp.config, flags, inp.model, any_model=inp.config_model)
        flags, model, kind = cfg.fields, cfg.model, cfg.kind
    ev = gather(inp, kind)
    notes: list[str] = list(flags.get("notes", ()))  # a config's assumption lines (--config, or --from's)
    exp = expected_for(model, flags, ev, notes)
    if exp is None:
        notes.append("no MODEL given: the rules that need the estimate (duplicate copy, offload, expected bytes) "
                     "are skipped")
    if ev.log is not None and ev.log.skipped_last_line:
        notes.append("the log's last line was cut (a crash mid-write); it was skipped")
    return DoctorResult(findings=diagnose(ev, exp), notes=notes, evidence=ev, expected=exp)
