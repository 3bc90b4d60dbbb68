"""``trainmem validate LOG...``: the preflight lines of users' runs, prediction against measurement.

Each line is one check written by :mod:`trainmem.integrations.preflight` (the HF and Lightning callbacks,
``trainmem.preflight``): ``{"setup", "model", "gpu", "predicted", "measured" | null, "device", "versions"}``. Lines
of one run (same model, GPU and setup) are one group; a group's measured figure is the largest measured line
(``torch.cuda.max_memory_allocated`` / ``max_memory_reserved`` of the first steady step, one line per rank or
run). The signed error is (predicted − measured) / measured: below zero is the under-prediction that costs an OOM.

:func:`to_points` writes the measured groups in the published-measurements format of
``benchmarks/published_points.json`` (one point per metric, ``allocated`` and ``reserved``, in bytes), so a user's
runs can become benchmark points (their source is the log file, which a maintainer replaces with a public URL).
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
import tempfile
from dataclasses import dataclass, field
from typing import Any

from trainmem.errors import ConfigError

__all__ = ["Group", "read_lines", "group_lines", "summary_json", "to_points", "write_points"]

_KEYS = ("setup", "model", "predicted", "measured")
#: setup keys that are not TrainingSetup fields (the estimate JSON's derived or display-only values).
_NOT_FIELDS = ("notes",)


@dataclass(slots=True)
class Group:
    """The lines of one run: its model, GPU and setup, its prediction, and its measured lines."""

    model: str
    gpu: str | None
    setup: dict[str, Any]
    predicted: dict[str, int]
    measured: list[dict[str, Any]] = field(default_factory=list)
    device: str | None = None
    versions: dict[str, Any] = field(default_factory=dict)
    where: list[str] = field(default_factory=list)
    """``file:line`` of every line of the group."""

    @property
    def key(self) -> str:
        """A short stable id of the run (model, GPU, setup)."""
        blob = json.dumps([self.model, self.gpu, self.setup], sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:10]

    def measured_bytes(self, metric: str) -> int | None:
        """The largest measured ``max_memory_<metric>_bytes`` of the group, None when nothing was measured."""
        vals = [int(m[f"max_memory_{metric}_bytes"]) for m in self.measured if f"max_memory_{metric}_bytes" in m]
        return max(vals) if vals else None

    def error(self, metric: str) -> float | None:
        """(predicted − measured) / measured for ``allocated`` or ``reserved``; None when not measured."""
        meas = self.measured_bytes(metric)
        if not meas:
            return None
        return (int(self.predicted[f"peak_{metric}_bytes"]) - meas) / meas


def read_lines(paths: list[str]) -> list[tuple[str, dict[str, Any]]]:
    """(``file:line``, record) of every non-blank line; a line that is not a preflight record is refused with its place."""
    out = []
    for path in paths:
        try:
            with open(path, encoding="utf-8") as fh:
                text = fh.read()
        except OSError as err:
            raise ConfigError(f"{path}: cannot read ({err.strerror or err})") from None
        for n, raw in enumerate(text.splitlines(), 1):
            if not raw.strip():
                continue
            where = f"{path}:{n}"
            try:
                rec = json.loads(raw)
            except json.JSONDecodeError as err:
                raise ConfigError(f"{where}: not JSON ({err.msg})") from None
            missing = [k for k in _KEYS if not isinstance(rec, dict) or k not in rec]
            if missing:
                raise ConfigError(f"{where}: not a trainmem preflight line (no {', '.join(missing)})")
            pred = rec["predicted"]
            if not isinstance(pred, dict) or not all(isinstance(pred.get(f"peak_{m}_bytes"), int)
                                                     for m in ("allocated", "reserved")):
                raise ConfigError(f"{where}: predicted needs integer peak_allocated_bytes and peak_reserved_bytes")
            out.append((where, rec))
    if not out:
        raise ConfigError(f"{', '.join(paths)}: no preflight lines")
    return out


def group_lines(lines: list[tuple[str, dict[str, Any]]]) -> list[Group]:
    """The lines grouped by run (model, GPU, setup), in the order first seen."""
    groups: dict[str, Group] = {}
    for where, rec in lines:
        setup = {k: v for k, v in dict(rec["setup"]).items() if k not in _NOT_FIELDS}
        g = Group(model=str(rec["model"]), gpu=rec.get("gpu"), setup=setup,
                  predicted={k: int(v) for k, v in rec["predicted"].items() if isinstance(v, int)})
        g = groups.setdefault(g.key, g)
        g.where.append(where)
        if rec["measured"]:
            g.measured.append(dict(rec["measured"]))
            g.device, g.versions = rec.get("device"), dict(rec.get("versions") or {})
    return list(groups.values())


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def summary_json(groups: list[Group]) -> dict[str, Any]:
    """Per run: its prediction, measurement and signed errors; over the measured runs: the median signed and
    absolute error per metric."""
    runs = []
    for g in groups:
        runs.append({"id": g.key, "model": g.model, "gpu": g.gpu, "setup": g.setup, "predicted": g.predicted,
                     "measured": {m: g.measured_bytes(m) for m in ("allocated", "reserved")},
                     "error": {m: g.error(m) for m in ("allocated", "reserved")}, "lines": g.where,
                     "device": g.device})
    overall = {}
    for m in ("allocated", "reserved"):
        errs = [e for g in groups if (e := g.error(m)) is not None]
        overall[m] = {"runs": len(errs), "median_error": _median(errs),
                      "median_abs_error": _median([abs(e) for e in errs]),
                      "under_10pct": sum(e < -0.10 for e in errs)}
    return {"runs": runs, "measured_runs": sum(bool(g.measured) for g in groups), "summary": overall}


def to_points(groups: list[Group]) -> list[dict[str, Any]]:
    """The measured runs as published-measurement points (``benchmarks/published_points.json``'s fields)."""
    points = []
    for g in groups:
        for metric in ("allocated", "reserved"):
            meas = g.measured_bytes(metric)
            if meas is None:
                continue
            first = g.where[0].rsplit(":", 1)[0]
            points.append({
                "id": f"user-{g.key}-{metric}",
                "source": {"url": None, "repo": "local", "path": first, "commit": None},
                "quote": f"max_memory_{metric}_bytes {meas} (trainmem preflight, step "
                         f"{g.measured[0].get('step', '?')}, {g.device})",
                "metric": metric,
                "metric_detail": f"torch.cuda.max_memory_{metric}() over the first steady step, recorded by trainmem's "
                                 "preflight; the largest over the group's lines",
                "measured": {"value": meas, "unit": "B"},
                "model": g.model,
                "setup": {k: v for k, v in g.setup.items() if v is not None},
                "needs": [],
                "notes": f"versions {json.dumps(g.versions, sort_keys=True)}; lines {', '.join(g.where)}",
            })
    return points


def write_points(path: str, points: list[dict[str, Any]]) -> None:
    """Write ``{"_about", "points"}`` to ``path`` atomically (a temporary file renamed: never half-written)."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ConfigError(f"{path}: the folder {folder} does not exist")
    about = ("GPU memory measured by trainmem's preflight in users' runs (trainmem validate --points), in the "
             "format of benchmarks/published_points.json; replace each source with a public URL before adding it")
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".trainmem-points-", suffix=".json")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump({"_about": about, "points": points}, fh, indent=1)
            fh.write("\n")
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
