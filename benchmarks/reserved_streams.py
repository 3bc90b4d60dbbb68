"""Reserved memory of the FSDP2 accuracy cases: one-stream vs per-stream allocator replay, and the estimate.

FSDP2 (torch 2.13) allocates its all-gather buffers on the all-gather copy-in stream and the reduce-scatter
outputs (the sharded gradients) on the reduce-scatter stream; the caching allocator keeps free blocks per
stream, so those blocks cannot serve the compute stream. This script traces every FSDP2 case of
``benchmarks/accuracy.py`` (tuning and hold-out) and prints, per case, the trace's peak allocated, the replay
with everything on one stream (``peak_reserved_one_stream_bytes``, the replay before per-stream pools), the
per-stream replay (``peak_reserved_bytes``) and the estimator's ``reserved_bytes``, with
(estimate − replay) / replay against each replay.

    python benchmarks/reserved_streams.py [--out FILE.jsonl] [--only 0-9]   # trace (slow: ~25 min on 2 cores)
    python benchmarks/reserved_streams.py --rescore benchmarks/reserved_streams_rows.jsonl  # re-estimate only
    python benchmarks/reserved_streams.py --published   # the dev-split FSDP2 reserved points

Rows are appended to ``--out`` as they finish (one JSON object a line), so a long run can be read midway;
``benchmarks/reserved_streams_rows.jsonl`` is the stored run (torch 2.13) the docs quote.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from accuracy import HOLDOUT, TUNING, Case  # noqa: E402

from trainmem.setup import make_setup  # noqa: E402
from trainmem.units import GiB  # noqa: E402


def fsdp2_cases() -> list[tuple[str, Case]]:
    """The FSDP2 cases of the accuracy sets, labelled with their set."""
    return [(name, c) for name, cases in (("tuning", TUNING), ("holdout", HOLDOUT))
            for c in cases if c.kw.get("engine") == "fsdp2"]


def relative_error(model: int, reference: int) -> float:
    """(model − reference) / reference."""
    return (model - reference) / reference


def row_for(split: str, c: Case) -> dict:
    """Trace and estimate one case; the reserved figures in bytes and the two errors."""
    from trainmem.trace.compare import compare

    t = time.perf_counter()
    cmp = compare(c.spec(), make_setup(**c.kw))
    tr = cmp.trace
    est = cmp.estimate_reserved_bytes
    term = stream_term_bytes(cmp.estimate)
    return {"stream_term": term, "error_without_term": relative_error(est - term, tr.peak_reserved_bytes),
            "split": split, "case": c.label, "peak_allocated": tr.peak_allocated_bytes,
            "estimate_peak": cmp.estimate_peak_bytes,
            "replay_one_stream": tr.peak_reserved_one_stream_bytes, "replay_streams": tr.peak_reserved_bytes,
            "replay_expandable": tr.peak_reserved_expandable_bytes, "estimate_reserved": est,
            "static": tr.static_bytes,
            "error_vs_one_stream": relative_error(est, tr.peak_reserved_one_stream_bytes),
            "error_vs_streams": relative_error(est, tr.peak_reserved_bytes),
            "streams_vs_one_stream": relative_error(tr.peak_reserved_bytes, tr.peak_reserved_one_stream_bytes),
            "seconds": round(time.perf_counter() - t, 1)}


def stream_term_bytes(est) -> int:  # noqa: ANN001
    """The estimate's FSDP2 stream-pool term (``trainmem.memory.overhead.fsdp2_stream_pools_bytes``), recovered
    exactly as its peak reserved minus ``reserved_bytes`` without the term (the term is added after rounding)."""
    from trainmem.memory.overhead import reserved_bytes

    ws = est.cuda_only_bytes
    return est.peak_reserved_bytes - reserved_bytes(est.peak_allocated_bytes, est.static_bytes, ws)


def published_dev_fsdp2() -> list[tuple[str, float, float]]:
    """(id, error without the stream term, error with it) on the expressible FSDP2 (``fully_shard``) reserved
    points of the dev split of ``benchmarks/published_points.json`` — the only split the term is judged on."""
    import published as P
    from trainmem.api import build
    from trainmem.memory import estimate

    splits = P.load_splits()
    out = []
    for r in P.evaluate_all(P.load_points()):
        s = r.point["setup"]
        if (not r.expressible or r.point["metric"] != "reserved" or s.get("engine") != "fsdp2"
                or s.get("fsdp_version", 2) != 2 or P.split_of(r.point, splits) != "dev"):
            continue
        kept, _ = P.split_fields(s, None)
        term = stream_term_bytes(estimate(*build(P.model_ref(r.point["model"]), **kept)))
        out.append((r.id, P.relative_error(r.estimate - term, r.low, r.high), r.error))
    return out


def rescore(path: str) -> list[dict]:
    """Rows of an earlier run (``--out`` file) with the estimate of today's code: the replays are kept (tracing
    is slow), the estimate and its stream term are recomputed (fast)."""
    from trainmem.memory import estimate
    from trainmem.trace.allocator import allocation_size

    by_label = {c.label: (split, c) for split, c in fsdp2_cases()}
    out = []
    for line in open(path, encoding="utf-8"):
        r = json.loads(line)
        if "error" in r or r["case"] not in by_label:
            continue
        split, c = by_label[r["case"]]
        e = estimate(c.spec(), make_setup(**c.kw))
        est = e.peak_reserved_bytes - (allocation_size(e.cuda_only_bytes) if e.cuda_only_bytes else 0)
        term = stream_term_bytes(e)
        out.append({**r, "split": split, "estimate_reserved": est, "stream_term": term,
                    "error_without_term": relative_error(est - term, r["replay_streams"]),
                    "error_vs_one_stream": relative_error(est, r["replay_one_stream"]),
                    "error_vs_streams": relative_error(est, r["replay_streams"])})
    return out


def print_row(r: dict) -> None:
    print(f"{r['split']:8s} {r['case']:80s} {r['peak_allocated'] / GiB:7.2f} {r['replay_one_stream'] / GiB:7.2f} "
          f"{r['replay_streams'] / GiB:7.2f} {r['estimate_reserved'] / GiB:7.2f} {r['stream_term'] / GiB:6.2f} "
          f"{100 * r['error_without_term']:+6.1f}% {100 * r['error_vs_streams']:+6.1f}%", flush=True)


HEADER = (f"{'split':8s} {'case':80s} {'alloc':>7} {'1-str':>7} {'streams':>7} {'est':>7} {'term':>6} "
          f"{'no-term':>7} {'est/st':>7}")


BEGIN, END = "<!-- reserved-streams:begin -->", "<!-- reserved-streams:end -->"


def _stats(values: list[float]) -> str:
    return (f"{100 * statistics.median(values):+.1f} % (abs {100 * statistics.median(map(abs, values)):.1f} %, "
            f"max abs {100 * max(map(abs, values)):.1f} %)")


def markdown(rows: list[dict]) -> str:
    """docs/accuracy.md's section on FSDP2's streams, from rescored rows (``--rescore ROWS --doc``)."""
    out = [BEGIN, "", "## Reserved memory with FSDP2's streams", "",
           "Printed by `python benchmarks/reserved_streams.py --rescore benchmarks/reserved_streams_rows.jsonl "
           "--doc docs/accuracy.md` (the replays of a stored trace run, torch 2.13; the estimate of today's code). "
           "The replay keeps a pool per stream (`trainmem/trace/allocator.py`); the FSDP2 trace tags each storage "
           "with the stream FSDP2 allocates it on (all-gather copy-in, reduce-scatter; `trainmem/trace/fsdp.py`). "
           "'one stream' is the replay with every allocation on the compute stream (the replay before). "
           "'term' is the estimator's FSDP2 reserve beyond the fitted one: the stream pools "
           "(`trainmem/memory/overhead.py::stream_pool_reserve_bytes`) plus the segments cudaMalloc'ed after the "
           "allocated peak (`post_peak_segment_bytes`: a compute-stream request ≥ 10 MiB larger than every earlier "
           "one, e.g. the root unit's fp32 reduce-scatter input at the end of backward); errors are (estimate − "
           "per-stream replay) / per-stream replay, without and with it. Both the replay and the term model the "
           "allocator by the same hand from the same sources (CUDACachingAllocator.cpp, torch 2.13): this is "
           "consistency, not GPU evidence; the published torchtitan points are the check (docs/published.md). "
           "Signed medians first, then the median and the largest absolute error. The remaining misses are the "
           "dynamic reserve (1/8 of the step's dynamic memory, fitted to one-stream replays): under where few "
           "large transient blocks of different sizes fragment the compute pool (Llama-3.2-1B TP 4 at seq 512, "
           "Mistral-7B full recompute), over where the dynamic memory is a few huge blocks reused in place "
           "(Llama-2-7B eager attention scores). "
           "The per-case tables above come from the last full `benchmarks/accuracy.py` run; where it predates "
           "the per-stream replay their FSDP2 'reserved' columns are the one-stream replay and the estimate "
           "without the term — this section is the current figure for those cases.", "",
           "| split | cases | per-stream / one-stream replay | estimate without the term | with the term |",
           "|---|---:|---:|---:|---:|"]
    for split in ("tuning", "holdout"):
        rs = [r for r in rows if r["split"] == split]
        if rs:
            out.append(f"| {split} | {len(rs)} | {_stats([r['streams_vs_one_stream'] for r in rs])} | "
                       f"{_stats([r['error_without_term'] for r in rs])} | {_stats([r['error_vs_streams'] for r in rs])} |")
    out += ["", "| split | case | allocated GiB | one stream GiB | per stream GiB | estimate GiB | term GiB | "
            "without | with |", "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        out.append(f"| {r['split']} | {r['case']} | {r['peak_allocated'] / GiB:.2f} | {r['replay_one_stream'] / GiB:.2f} | "
                   f"{r['replay_streams'] / GiB:.2f} | {r['estimate_reserved'] / GiB:.2f} | {r['stream_term'] / GiB:.2f} | "
                   f"{100 * r['error_without_term']:+.1f} % | {100 * r['error_vs_streams']:+.1f} % |")
    out += ["", END]
    return "\n".join(out)


def update_doc(path: str, section: str) -> None:
    """Replace the marked section of ``path`` (appended when absent)."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if BEGIN in text and END in text:
        text = text[:text.index(BEGIN)] + section + text[text.index(END) + len(END):]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def summary(rows: list[dict]) -> list[str]:
    """Median / max of each error over the rows, per split."""
    out = []
    for split in ("tuning", "holdout"):
        rs = [r for r in rows if r["split"] == split and "error_vs_streams" in r]
        if not rs:
            continue
        line = [f"{split} ({len(rs)} cases)"]
        for key in ("streams_vs_one_stream", "error_vs_one_stream", "error_without_term", "error_vs_streams"):
            v = [r[key] for r in rs]
            line.append(f"{key} median {100 * statistics.median(v):+.1f} % "
                        f"(|·| {100 * statistics.median(map(abs, v)):.1f} %, max |·| {100 * max(map(abs, v)):.1f} %)")
        out.append("; ".join(line))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None, help="append each row as a JSON line to this file")
    ap.add_argument("--only", default=None, help="slice of the case list, e.g. 0-9")
    ap.add_argument("--rescore", default=None, metavar="ROWS.jsonl",
                    help="re-estimate the rows of an earlier --out run (keeps its replays) and print the summary")
    ap.add_argument("--doc", default=None, help="with --rescore: write the section of this file (docs/accuracy.md)")
    ap.add_argument("--published", action="store_true",
                    help="only the published dev-split FSDP2 reserved points, without and with the stream term")
    args = ap.parse_args()
    if args.published:
        for pid, b4, af in published_dev_fsdp2():
            print(f"dev {pid:40s} without the term {100 * b4:+6.1f} %   with it {100 * af:+6.1f} %")
        return 0
    if args.rescore:
        rows = rescore(args.rescore)
        print(HEADER)
        for r in rows:
            print_row(r)
        for line in summary(rows):
            print(line)
        if args.doc:
            update_doc(args.doc, markdown(rows))
            print(f"wrote its section of {args.doc}")
        return 0
    cases = fsdp2_cases()
    if args.only:
        lo, hi = (int(x) for x in args.only.split("-"))
        cases = cases[lo:hi + 1]
    rows = []
    print(HEADER)
    for split, c in cases:
        try:
            r = row_for(split, c)
        except Exception as e:  # noqa: BLE001 - a benchmark row, not a crash
            r = {"split": split, "case": c.label, "error": f"{type(e).__name__}: {e}"}
            print(f"{split:8s} {c.label:80s} ERROR {r['error']}", flush=True)
        else:
            print_row(r)
        rows.append(r)
        if args.out:
            with open(args.out, "a", encoding="utf-8") as f:
                f.write(json.dumps(r) + "\n")
    for line in summary(rows):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
