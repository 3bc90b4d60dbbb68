"""trainmem's estimate against published GPU memory measurements of training steps.

Every point in ``benchmarks/published_points.json`` quotes a number someone measured and published
(engine docs, READMEs, benchmark files, result JSONs), says what was measured (``max_memory_allocated``,
``max_memory_reserved``, a device-level reading such as nvidia-smi, or unspecified) and gives the
trainmem setup that reproduces the run as keyword fields of ``trainmem.api.build``.

The estimate compared with each metric:

=============  ===========================  ==================================================
metric         estimate field               why
=============  ===========================  ==================================================
allocated      ``peak_allocated_bytes``     prediction of ``torch.cuda.max_memory_allocated``
reserved       ``peak_reserved_bytes``      prediction of ``torch.cuda.max_memory_reserved``; a point whose
                                            setup gives ``sample_lengths`` (the figure is the peak over a run of
                                            variable-length batches): ``peak_reserved_over_run_bytes``
nvidia-smi     ``device_total_bytes``       reserved + CUDA context + NCCL buffers
unspecified    ``peak_reserved_bytes``      the usual reading of "memory used" in a training log
=============  ===========================  ==================================================

A point is *expressible* when trainmem can model everything its run did; points that need a setting
trainmem lacks (``needs`` in the data: torch.compile, float8, activation offloading, a
classification head, …) or a setup field the installed ``TrainingSetup`` does not have yet (reported
as ``needs <field>``) are printed but left out of the median. A measured range counts as 0 % error
when the estimate falls inside it, else the error is taken against the nearer bound.

The data file's ``splits`` assigns every source repository to ``dev`` (modelling may look at it) or ``held_out``
(frozen before anything was modelled from it); the summary is printed for each split and for all points, and
every expressible point under-predicted by more than 10 % is listed with its diagnosis. A held-out point that
made someone add a feature is marked ``dev_since`` ("<date>: <what was added>") and counted as dev from then
on; the summary lists those points.

Run:  python benchmarks/published.py               # the table and the summary
      python benchmarks/published.py --markdown    # also writes docs/published.md and its section of docs/accuracy.md
      python benchmarks/published.py --only torchtitan   # points whose id contains a string
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path

from trainmem.api import build
from trainmem.errors import TrainmemError
from trainmem.memory import estimate
from trainmem.setup import TrainingSetup

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "published_points.json"
DOC = ROOT / "docs" / "published.md"

METRICS = ("allocated", "reserved", "nvidia-smi", "unspecified")
ESTIMATE_FIELD = {"allocated": "peak_allocated_bytes", "reserved": "peak_reserved_bytes",
                  "nvidia-smi": "device_total_bytes", "unspecified": "peak_reserved_bytes"}
UNITS = {"B": 1, "KiB": 1024, "MiB": 1024**2, "GiB": 1024**3, "KB": 10**3, "MB": 10**6, "GB": 10**9}
#: Points over this |relative error| get a paragraph in docs/published.md.
EXPLAIN_ABOVE = 0.15
#: Expressible points below the measurement by more than this are listed per split (an under-prediction costs an OOM).
UNDER_BELOW = -0.10
SPLITS = ("dev", "held_out")

__all__ = ["readme_paragraph", "load_points", "load_splits", "split_of", "turned_dev", "measured_bytes", "relative_error", "median", "split_fields", "evaluate",
           "Row", "main"]


# -- data --------------------------------------------------------------------------------------
def load_points(path: Path = DATA) -> list[dict]:
    """The list of points of the data file."""
    with open(path, encoding="utf-8") as f:
        return json.load(f)["points"]


def load_splits(path: Path = DATA) -> dict[str, list[str]]:
    """The data file's ``splits``: split name -> source repositories (``source.repo``); empty when the file has none."""
    with open(path, encoding="utf-8") as f:
        return json.load(f).get("splits", {})


def split_of(point: dict, splits: dict[str, list[str]]) -> str:
    """The split whose sources hold the point's ``source.repo``; ``unassigned`` when none does. A held-out point
    that has ``dev_since`` (a feature was added because it missed: it has been looked at) counts as ``dev``."""
    repo = point.get("source", {}).get("repo")
    if point.get("dev_since"):
        return "dev"
    for name, repos in splits.items():
        if repo in repos:
            return name
    return "unassigned"


def measured_bytes(measured: dict) -> tuple[int, int]:
    """(low, high) bytes of a measurement: ``{value, unit}`` gives low == high; ``{low, high, unit}`` a range."""
    scale = UNITS[measured["unit"]]
    if "value" in measured:
        b = round(measured["value"] * scale)
        return b, b
    return round(measured["low"] * scale), round(measured["high"] * scale)


def fmt_measured(measured: dict) -> str:
    u = measured["unit"]
    if "value" in measured:
        v = measured["value"]
        if u == "B":
            return f"{v / 2**30:.2f} GiB"
        return f"{v:g} {u}"
    return f"{measured['low']:g}–{measured['high']:g} {u}"


def relative_error(estimate_bytes: int, low: int, high: int) -> float:
    """(estimate − measured) / measured; inside a measured range [low, high] the error is 0."""
    if low <= estimate_bytes <= high:
        return 0.0
    ref = low if estimate_bytes < low else high
    return (estimate_bytes - ref) / ref


def median(values: list[float]) -> float:
    """The median (mean of the two middle values for an even count); NaN for an empty list."""
    xs = sorted(values)
    n = len(xs)
    if n == 0:
        return float("nan")
    mid = n // 2
    return xs[mid] if n % 2 else (xs[mid - 1] + xs[mid]) / 2


def split_fields(setup: dict, known: set[str] | None = None) -> tuple[dict, list[str]]:
    """The setup fields the installed ``TrainingSetup`` has, and the names of those it lacks."""
    known = set(TrainingSetup.model_fields) if known is None else known
    kept = {k: v for k, v in setup.items() if k in known and v is not None}
    missing = sorted(k for k, v in setup.items() if k not in known and v is not None)
    return kept, missing


def summary(setup: dict) -> str:
    """A short, stable description of a setup for the table."""
    s = dict(setup)
    parts = [s.pop("engine", "torch")]
    if s.pop("fsdp_version", 2) == 1:
        parts[0] = "fsdp1"
    g = s.pop("gpus", 1)
    par = [f"{k}{s.pop(k)}" for k in ("tp", "pp", "cp", "ep") if s.get(k, 1) != 1]
    if s.pop("device_map", None):
        par.append("device-map")  # (--device-map auto: one process, the layers split over the GPUs)
    if g != 1 or par:
        parts.append(f"{g}gpu" + ("(" + ",".join(par) + ")" if par else ""))
    if "zero" in s:
        parts.append(f"z{s.pop('zero')}")
    parts.append(s.pop("precision", "default"))
    parts.append(f"s{s.pop('seq_len', 2048)}xb{s.pop('micro_batch', 1)}")
    if s.get("grad_accum", 1) != 1:
        parts.append(f"ga{s.pop('grad_accum')}")
    rc = s.pop("recompute", "none")
    if rc != "none":
        parts.append(f"ac-{rc}")
    opt = s.pop("optimizer", "adamw")
    if opt != "adamw":
        parts.append(opt)
    if s.get("lora_rank"):
        parts.append(("qlora" if s.pop("qlora", False) else "int8-lora" if s.pop("load_in_8bit", False) else "lora")
                     + f"-r{s.pop('lora_rank')}[{s.pop('lora_targets', 'default')}]")
    if s.get("offload", "none") != "none":
        parts.append(f"offload-{s.pop('offload')}")
    if s.get("loss", "hf") != "hf":
        parts.append(f"loss-{s['loss']}" + (f"/{s['loss_chunks']}" if s.get("loss_chunks") else ""))
    if s.get("loop", "trainer") != "trainer":
        parts.append(f"loop-{s['loop']}")
    parts.append(s.get("gpu", "H100-SXM-80G"))
    return " ".join(parts)


# -- evaluation --------------------------------------------------------------------------------
@dataclass
class Row:
    point: dict
    low: int
    high: int
    estimate: int | None = None
    error: float | None = None
    needs: list[str] = field(default_factory=list)
    failure: str | None = None
    breakdown: dict[str, int] = field(default_factory=dict)
    peak_phase: str = ""

    @property
    def id(self) -> str:
        return self.point["id"]

    @property
    def expressible(self) -> bool:
        return not self.needs and self.failure is None and self.error is not None


def model_ref(model: str) -> str:
    """A catalog name as it is; a ``.json`` config (a task head the catalog lacks) relative to this folder."""
    return str(Path(__file__).parent / model) if model.endswith(".json") else model


def evaluate(point: dict, known: set[str] | None = None) -> Row:
    """Estimate one point; a bad setup (TrainmemError) is recorded on the row, never raised."""
    low, high = measured_bytes(point["measured"])
    kept, missing = split_fields(point["setup"], known)
    row = Row(point=point, low=low, high=high,
              needs=list(point.get("needs", [])) + [f"needs {m}" for m in missing])
    try:
        spec, setup = build(model_ref(point["model"]), **kept)
        est = estimate(spec, setup)
    except TrainmemError as err:
        if not any(n.startswith("model not in catalog") for n in row.needs):  # declared: not a failure
            row.failure = f"{type(err).__name__}: {err}"
        return row
    row.estimate = getattr(est, ESTIMATE_FIELD[point["metric"]])
    if point["metric"] == "reserved" and est.peak_reserved_over_run_bytes is not None:
        row.estimate = est.peak_reserved_over_run_bytes  # (max_memory_reserved over a run of sample_lengths)
    row.error = relative_error(row.estimate, low, high)
    row.breakdown = dict(est.breakdown_at_peak_bytes)
    row.peak_phase = est.peak_phase
    return row


def evaluate_all(points: list[dict]) -> list[Row]:
    known = set(TrainingSetup.model_fields)
    return [evaluate(p, known) for p in points]


def stats(rows: list[Row]) -> dict:
    expr = [r for r in rows if r.expressible]
    errs = [r.error for r in expr]
    return {"points": len(rows), "expressible": len(expr), "not_expressible": len(rows) - len(expr),
            "failed": sum(r.failure is not None for r in rows),
            "median_abs_error": median([abs(e) for e in errs]), "median_error": median(errs),
            "max_abs_error": max((abs(e) for e in errs), default=float("nan")),
            "within_15pct": sum(abs(e) <= EXPLAIN_ABOVE for e in errs),
            "under_10pct": [r for r in expr if r.error < UNDER_BELOW]}


def split_rows(rows: list[Row], splits: dict[str, list[str]]) -> dict[str, list[Row]]:
    """Rows by split (``dev``, ``held_out``, then any ``unassigned``), in table order."""
    out: dict[str, list[Row]] = {name: [] for name in SPLITS}
    for r in rows:
        out.setdefault(split_of(r.point, splits), []).append(r)
    return out


def _pct(x: float) -> str:
    return "—" if x != x else f"{x * 100:.1f} %"


def _spct(x: float) -> str:
    return "—" if x != x else f"{x * 100:+.1f} %"


# -- output ------------------------------------------------------------------------------------
def _gib(b: int | None) -> str:
    return "—" if b is None else f"{b / 2**30:.2f}"


def _err(e: float | None) -> str:
    return "—" if e is None else f"{e * 100:+.1f} %"


def print_table(rows: list[Row], out=sys.stdout, splits: dict[str, list[str]] | None = None) -> None:
    w = max(len(r.id) for r in rows)
    print(f"{'id':<{w}}  {'model':<15} {'metric':<11} {'measured':>13} {'GiB':>7} {'estimate':>8} {'error':>9}  setup / needs", file=out)
    for r in rows:
        p = r.point
        meas = fmt_measured(p["measured"])
        mg = f"{r.low / 2**30:.2f}" if r.low == r.high else f"{r.low / 2**30:.1f}-{r.high / 2**30:.1f}"
        tail = summary(p["setup"])
        if r.needs:
            tail += "  | NOT EXPRESSIBLE: " + "; ".join(r.needs)
        if r.failure:
            tail += "  | ERROR: " + r.failure
        print(f"{r.id:<{w}}  {p['model']:<15} {p['metric']:<11} {meas:>13} {mg:>7} {_gib(r.estimate):>8} {_err(r.error):>9}  {tail}", file=out)
    s = stats(rows)
    print(f"\n{s['points']} points: {s['expressible']} expressible, {s['not_expressible']} not expressible"
          f" ({s['failed']} failed to build)", file=out)
    print(f"expressible points: median |error| {s['median_abs_error'] * 100:.1f} %, median error {s['median_error'] * 100:+.1f} %, "
          f"max |error| {s['max_abs_error'] * 100:.1f} %, {s['within_15pct']} of {s['expressible']} within ±15 %", file=out)
    if splits:
        for name, part in split_rows(rows, splits).items():
            if not part:
                continue
            t = stats(part)
            print(f"\n{name}: {t['points']} points, {t['expressible']} expressible: median |error| {_pct(t['median_abs_error'])}, "
                  f"signed median {_spct(t['median_error'])}, max |error| {_pct(t['max_abs_error'])}; "
                  f"{len(t['under_10pct'])} under-predicted by more than 10 %", file=out)
            for r in sorted(t["under_10pct"], key=lambda r: r.error):
                print(f"  {r.id:<44} {_err(r.error):>9}", file=out)
        moved = turned_dev(rows)
        print(f"\nheld-out points turned into development data (dev_since): {len(moved)}", file=out)
        for r in moved:
            print(f"  {r.id:<44} {r.point['dev_since']}", file=out)


def turned_dev(rows: list[Row]) -> list[Row]:
    """Points whose ``dev_since`` moved them out of the held-out split (the rule in the data file's ``_about``)."""
    return [r for r in rows if r.point.get("dev_since")]


def _link(src: dict) -> str:
    label = src.get("repo", "source")
    if src.get("path"):
        label += "/" + src["path"]
    return f"[{label}]({src['url']})"


def _md_cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def split_section(rows: list[Row], splits: dict[str, list[str]]) -> list[str]:
    """Markdown lines: the dev / held-out summary and every expressible point under-predicted by more than 10 %."""
    if not splits:
        return []
    lines = ["| split | sources | points | expressible | median \\|error\\| | signed median | max \\|error\\| | under −10 % |",
             "|---|---|---:|---:|---:|---:|---:|---:|"]
    parts = split_rows(rows, splits)
    for name, part in parts.items():
        if not part:
            continue
        t = stats(part)
        srcs = ", ".join(splits.get(name, [])) or "—"
        lines.append(f"| {name} | {srcs} | {t['points']} | {t['expressible']} | {_pct(t['median_abs_error'])} | "
                     f"{_spct(t['median_error'])} | {_pct(t['max_abs_error'])} | {len(t['under_10pct'])} |")
    moved = turned_dev(rows)
    lines += ["", f"Held-out points turned into development data (`dev_since`: a feature was added because the point "
                  f"missed, so it no longer tests anything unseen): {len(moved)}."]
    lines += [f"- **{r.id}**: {_md_cell(r.point['dev_since'])}" for r in moved]
    lines += ["", "Expressible points under-predicted by more than 10 % (an under-prediction is the error that costs an OOM):", ""]
    any_under = False
    for name, part in parts.items():
        for r in sorted(stats(part)["under_10pct"], key=lambda r: r.error):
            any_under = True
            cause = r.point.get("diagnosis") or "No diagnosis recorded yet."
            lines.append(f"- **{r.id}** ({name}): {_err(r.error)}. {_md_cell(cause)}")
    if not any_under:
        lines.append("- none")
    return ["## Dev and held-out", "",
            "The data file's `splits` assigns each source repository, whole, to `dev` or `held_out`; the held-out sources were",
            "frozen before any of their points was estimated (see `_about` in the data file for the rule and date).", ""] + lines + [""]


def readme_paragraph(rows: list[Row], splits: dict[str, list[str]]) -> str:
    """The README's accuracy headline, printed by ``--readme`` (tests/test_published.py checks that README.md
    carries it verbatim): dev and held-out, signed and absolute, over the expressible points."""
    t = stats(rows)
    n_src = len({r.point["source"].get("repo", r.point["source"]["url"]) for r in rows})
    parts = split_rows(rows, splits)
    out = [f"Against **published GPU measurements** — the headline (`python benchmarks/published.py`, table in "
           f"[docs/published.md](docs/published.md)): {t['points']} cited points from {n_src} sources, each with the "
           f"figure quoted, what it measured (allocated / reserved / nvidia-smi) and what trainmem cannot express; "
           f"{t['expressible']} are expressible ({t['expressible'] * 100 // max(t['points'], 1)} %)."]
    for name, label in (("dev", "Development split"), ("held_out", "Held-out split (whole sources, frozen 2026-12-01)")):
        part = parts.get(name) or []
        if not part:
            continue
        u = stats(part)
        out.append(f"{label}: {u['expressible']} of {u['points']} points expressible, median |error| "
                   f"{_pct(u['median_abs_error'])}, signed median {_spct(u['median_error'])}, max "
                   f"{_pct(u['max_abs_error'])}, {len(u['under_10pct'])} under-predicted by more than 10 %.")
    out.append(f"Held-out points turned into development data because a feature was added for them (`dev_since`): "
               f"{len(turned_dev(rows))}.")
    return " ".join(out)


def markdown(rows: list[Row], splits: dict[str, list[str]] | None = None) -> str:
    s = stats(rows)
    lines = [
        "# trainmem against published measurements",
        "",
        "Generated by `python benchmarks/published.py --markdown` from `benchmarks/published_points.json`.",
        "Each point is a GPU memory figure someone measured and published for a training step, with a quote, what was",
        "measured, and the trainmem setup that reproduces the run. The estimate compared is `peak_allocated_bytes` for",
        "`allocated`, `peak_reserved_bytes` for `reserved` and for `unspecified` figures, `device_total_bytes` for",
        "device-level readings (`nvidia-smi`). Error = (estimate − measured) / measured; a measured range counts as",
        "0 % when the estimate falls inside it. Points whose run used something trainmem cannot express (column",
        "*needs*) are shown but left out of the summary.",
        "",
        f"**Summary:** {s['points']} points, {s['expressible']} expressible. Over the expressible points: median |error| "
        f"**{s['median_abs_error'] * 100:.1f} %** (signed median {s['median_error'] * 100:+.1f} %), max |error| "
        f"**{s['max_abs_error'] * 100:.1f} %**, {s['within_15pct']} of {s['expressible']} within ±15 %.",
        "",
        *split_section(rows, splits or {}),
        *(["## All points", ""] if splits else []),
        "| id | model | setup | metric | measured | estimate (GiB) | error | needs | source |",
        "|---|---|---|---|---|---:|---:|---|---|",
    ]
    for r in rows:
        p = r.point
        meas = fmt_measured(p["measured"])
        if p["measured"]["unit"] not in ("GiB", "B"):
            meas += f" ({r.low / 2**30:.2f} GiB)" if r.low == r.high else f" ({r.low / 2**30:.1f}–{r.high / 2**30:.1f} GiB)"
        needs = "; ".join(r.needs) + (("; " if r.needs else "") + "error: " + r.failure if r.failure else "")
        lines.append(f"| {r.id} | {p['model']} | `{_md_cell(summary(p['setup']))}` | {p['metric']} | {_md_cell(meas)} | "
                     f"{_gib(r.estimate)} | {_err(r.error)} | {_md_cell(needs)} | {_link(p['source'])} |")
    lines += ["", "## Points over 15 % error", "",
              "Expressible points first; for points that are not expressible the missing setting usually explains the gap.",
              ""]
    big = [r for r in rows if r.error is not None and abs(r.error) > EXPLAIN_ABOVE]
    big.sort(key=lambda r: (not r.expressible, -abs(r.error)))
    for r in big:
        p = r.point
        bd = ", ".join(f"{k} {v / 2**30:.2f}" for k, v in r.breakdown.items() if v)
        diag = p.get("diagnosis") or "No diagnosis recorded yet."
        tag = "" if r.expressible else " (not expressible)"
        lines += [f"**{r.id}**{tag}: estimate {_gib(r.estimate)} GiB vs measured {fmt_measured(p['measured'])} "
                  f"({_err(r.error)}). {diag} Estimate at its peak ({r.peak_phase}), GiB: {bd}.", ""]
    lines += ["## Quotes and setups", ""]
    for r in rows:
        p = r.point
        lines.append(f"- **{r.id}** — {_link(p['source'])}"
                     + (f" @ `{p['source']['commit']}`" if p["source"].get("commit") else "")
                     + f": “{_md_cell(p['quote'])}”" + (f" ({_md_cell(p['context'])})" if p.get("context") else "")
                     + f" Metric: {_md_cell(p.get('metric_detail', p['metric']))}. "
                     + (_md_cell(p.get("notes", "")) + " " if p.get("notes") else "")
                     + ("Minor differences: " + _md_cell("; ".join(p["minor_differences"])) + "." if p.get("minor_differences") else ""))
    return "\n".join(lines) + "\n"


ACCURACY_DOC = ROOT / "docs" / "accuracy.md"
SECTION_START, SECTION_END = "<!-- published:start -->", "<!-- published:end -->"


def accuracy_section(rows: list[Row], splits: dict[str, list[str]] | None = None) -> str:
    """The published-measurements table as a section of docs/accuracy.md (between markers, so that
    ``benchmarks/accuracy.py`` and ``--markdown`` can each rewrite it)."""
    body = markdown(rows, splits).split("\n## Points over 15 % error", 1)[0].splitlines()
    body = [ln for ln in body if not ln.startswith("# trainmem against")]
    return "\n".join([SECTION_START, "## Published GPU measurements", *body,
                      "", "Per-point diagnoses of every point over 15 % and the quotes: [published.md](published.md).",
                      SECTION_END])


def update_accuracy_doc(rows: list[Row], path: Path = ACCURACY_DOC, splits: dict[str, list[str]] | None = None) -> None:
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    section = accuracy_section(rows, splits)
    if SECTION_START in text and SECTION_END in text:
        head, rest = text.split(SECTION_START, 1)
        text = head + section + rest.split(SECTION_END, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    path.write_text(text, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--markdown", action="store_true", help=f"also write {DOC.relative_to(ROOT)}")
    ap.add_argument("--only", default=None, help="only points whose id contains this string")
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--readme", action="store_true", help="print the README's accuracy headline paragraph only")
    args = ap.parse_args(argv)
    points = load_points(args.data)
    splits = load_splits(args.data)
    if args.only:
        points = [p for p in points if args.only in p["id"]]
    rows = evaluate_all(points)
    if args.readme:
        print(readme_paragraph(rows, splits))
        return 0
    print_table(rows, splits=splits)
    if args.markdown:
        DOC.write_text(markdown(rows, splits), encoding="utf-8")
        update_accuracy_doc(rows, splits=splits)
        print(f"wrote {DOC.relative_to(ROOT)} and its section of {ACCURACY_DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
