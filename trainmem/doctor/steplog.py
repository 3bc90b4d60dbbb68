"""Parse per-step memory logs: the monitor's JSONL (:mod:`trainmem.doctor.monitor`) or a CSV
``step,allocated_bytes,reserved_bytes[,rank][,peak_allocated_bytes,...]``.

JSONL: one object per line; ``{"kind": "step", "step", "rank", "phase", "allocated_bytes", "reserved_bytes",
"active_bytes", "peak_allocated_bytes", "peak_reserved_bytes", "step_seconds"}`` (only ``step`` and
``allocated_bytes`` are required), ``{"kind": "meta", ...}`` written once per rank, ``{"kind": "oom", "message":
...}`` when the monitor saw an out-of-memory error. A last line cut by a crash is skipped (a process killed
mid-write leaves one); any other bad line is refused with its line number.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass, field

from trainmem.errors import ConfigError

__all__ = ["StepRecord", "StepLog", "parse_steplog", "merge_logs"]

_INT_FIELDS = ("allocated_bytes", "reserved_bytes", "active_bytes", "peak_allocated_bytes", "peak_reserved_bytes")


@dataclass(frozen=True, slots=True)
class StepRecord:
    step: int
    allocated_bytes: int
    """``torch.cuda.memory_allocated()`` at the end of the step (after ``zero_grad``)."""
    reserved_bytes: int | None = None
    rank: int = 0
    phase: str = "train"
    active_bytes: int | None = None
    peak_allocated_bytes: int | None = None
    """``max_memory_allocated()`` over the step (the monitor resets the peak each step)."""
    peak_reserved_bytes: int | None = None
    step_seconds: float | None = None


@dataclass(frozen=True, slots=True)
class StepLog:
    records: tuple[StepRecord, ...]
    ooms: tuple[str, ...] = ()
    meta: tuple[dict, ...] = ()
    skipped_last_line: bool = False
    capacity_bytes: int | None = None
    """The device's memory, when the monitor recorded it."""
    ranks: tuple[int, ...] = field(default=())

    def by_rank(self, rank: int, phase: str | None = "train") -> list[StepRecord]:
        return [r for r in self.records if r.rank == rank and (phase is None or r.phase == phase)]


def _int(v: object, what: str, where: str) -> int | None:
    if v is None or v == "":
        return None
    if isinstance(v, bool):
        raise ConfigError(f"{where}: {what} is not a number of bytes")
    try:
        n = int(float(v)) if isinstance(v, str) else int(v)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        raise ConfigError(f"{where}: {what} is not a number of bytes") from None
    if n < 0 or n > 2**62:
        raise ConfigError(f"{where}: {what} is out of range")
    return n


def _record(d: dict, where: str) -> StepRecord:
    if "step" not in d or "allocated_bytes" not in d:
        raise ConfigError(f"{where}: not a step record (needs step and allocated_bytes)")
    vals = {k: _int(d.get(k), k, where) for k in _INT_FIELDS}
    step = _int(d.get("step"), "step", where)
    secs = d.get("step_seconds")
    try:
        seconds = None if secs in (None, "") else float(secs)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ConfigError(f"{where}: step_seconds is not a number") from None
    return StepRecord(step=step or 0, allocated_bytes=vals["allocated_bytes"] or 0,
                      reserved_bytes=vals["reserved_bytes"], rank=_int(d.get("rank"), "rank", where) or 0,
                      phase=str(d.get("phase") or "train"), active_bytes=vals["active_bytes"],
                      peak_allocated_bytes=vals["peak_allocated_bytes"],
                      peak_reserved_bytes=vals["peak_reserved_bytes"], step_seconds=seconds)


def _jsonl(text: str, name: str) -> StepLog:
    recs, ooms, meta = [], [], []
    lines = [ln for ln in text.splitlines() if ln.strip()]
    skipped = False
    for i, ln in enumerate(lines, 1):
        try:
            d = json.loads(ln)
        except (ValueError, RecursionError):
            if i == len(lines) and i > 1:
                skipped = True  # the line a crash cut short
                continue
            raise ConfigError(f"--log {name}: line {i} is not JSON") from None
        if not isinstance(d, dict):
            raise ConfigError(f"--log {name}: line {i} is not a JSON object")
        kind = d.get("kind", "step")
        if kind == "meta":
            meta.append(d)
        elif kind == "oom":
            ooms.append(str(d.get("message", ""))[:4000])
        elif kind == "step":
            recs.append(_record(d, f"--log {name} line {i}"))
    cap = next((m.get("capacity_bytes") for m in meta if isinstance(m.get("capacity_bytes"), int)), None)
    return StepLog(records=tuple(recs), ooms=tuple(ooms), meta=tuple(meta), skipped_last_line=skipped,
                   capacity_bytes=cap)


def _csv(text: str, name: str) -> StepLog:
    try:
        return _csv_records(text, name)
    except csv.Error as e:
        raise ConfigError(f"--log {name}: not a readable CSV ({str(e)[:60]})") from None


def _csv_records(text: str, name: str) -> StepLog:
    reader = csv.DictReader(io.StringIO(text, newline=""))
    cols = [c.strip() for c in (reader.fieldnames or [])]
    if not {"step", "allocated_bytes"} <= set(cols):
        found = ", ".join(cols[:6])[:120]
        raise ConfigError(f"--log {name}: a CSV log needs the columns step, allocated_bytes, reserved_bytes "
                          f"(found: {found})")
    recs = []
    for i, row in enumerate(reader, 2):
        row = {(k or "").strip(): (v or "").strip() for k, v in row.items() if k is not None}
        if not any(row.values()):
            continue
        recs.append(_record(row, f"--log {name} line {i}"))
    return StepLog(records=tuple(recs))


def parse_steplog(text: str, name: str = "-") -> StepLog:
    """The records of one log file (JSONL when its first line is a JSON object, else CSV)."""
    first = text.lstrip()[:1]
    log = _jsonl(text, name) if first == "{" else _csv(text, name)
    if not log.records:
        raise ConfigError(f"--log {name}: no step records")
    ranks = tuple(sorted({r.rank for r in log.records}))
    return StepLog(records=log.records, ooms=log.ooms, meta=log.meta, skipped_last_line=log.skipped_last_line,
                   capacity_bytes=log.capacity_bytes, ranks=ranks)


def merge_logs(logs: list[StepLog]) -> StepLog:
    """One log of several files (one per rank, as the monitor writes them)."""
    recs = tuple(r for lg in logs for r in lg.records)
    caps = [lg.capacity_bytes for lg in logs if lg.capacity_bytes]
    return StepLog(records=recs, ooms=tuple(o for lg in logs for o in lg.ooms),
                   meta=tuple(m for lg in logs for m in lg.meta),
                   skipped_last_line=any(lg.skipped_last_line for lg in logs), capacity_bytes=max(caps) if caps else None,
                   ranks=tuple(sorted({r.rank for r in recs})))
