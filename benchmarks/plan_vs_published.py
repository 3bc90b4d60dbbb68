"""trainmem's performance model against published, measured training throughput (issue 8 targets).

Each point of ``benchmarks/published_throughput.json`` quotes a measured throughput with its source and
the configuration that produced it. For every point with a complete configuration this script builds
the ModelSpec (the catalog entry of ``model.hf_id``, else a config from the architecture fields), the
TrainingSetup and the GPU pool, predicts tokens/s/GPU with :func:`trainmem.perf.step_time` and compares.

Nothing in the performance model is fitted to these points (its constants are kernel microbenchmarks
and engine defaults: trainmem/perf/calibration.py); this is the hold-out check.

How a point is mapped (each mapping is printed in the point's ``how`` column with ``--verbose``):

- engine: ``megatron`` and ``nemo`` (Megatron-Core) → megatron; ``fsdp2`` and ``meta-internal`` → fsdp2;
  ``fsdp1`` → fsdp2 (same per-unit all-gather / reduce-scatter pattern); Megatron-DeepSpeed runs with
  tp/pp (``deepspeed`` with tp·pp > 1) → megatron with zero 1 (its BF16_Optimizer / ZeRO-1 ≈ the
  distributed optimizer); ``deepspeed`` without model parallelism → deepspeed.
- precision: bf16 → the engine's mixed recipe (mixed-bf16, amp-bf16), fp16 → mixed-fp16 / amp-fp16,
  fp8 → fp8.
- measured: tokens/s/GPU as published, else derived from the step time, else converted from TFLOP/s/GPU
  with the source's own FLOP count: "hardware"/"achieved" FLOPs (BLOOM, Narayanan et al. 2021) with
  Narayanan's eq. 3 (recompute counted), "model" FLOPs with PaLM's 6N + 12·L·h·s (trainmem.perf.flops).
- GPU: the catalog row; Meta's Grand Teton H100 (96 GB HBM2e, 500 W) is not in the catalog and is built
  here from its file (2.4 TB/s; the SXM 989 TFLOP/s peak, as its own MFU footnote uses) — an
  approximation, flagged ``approx-gpu``.

Run:  python benchmarks/plan_vs_published.py             # complete points
      python benchmarks/plan_vs_published.py --all       # also incomplete points, with stated defaults
      python benchmarks/plan_vs_published.py --markdown  # the table in Markdown
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the points must reproduce offline: catalog or architecture fields

from trainmem.errors import TrainmemError  # noqa: E402
from trainmem.hardware import get_gpu  # noqa: E402
from trainmem.hardware.catalog import GPU  # noqa: E402
from trainmem.hardware.cluster import GPUGroup, Link, parse_cluster  # noqa: E402
from trainmem.model.hf import spec_from_hf_config  # noqa: E402
from trainmem.model.resolve import resolve_model  # noqa: E402
from trainmem.model.spec import ModelSpec  # noqa: E402
from trainmem.perf import step_time  # noqa: E402
from trainmem.perf.flops import model_flops_per_token, narayanan_flops_per_iteration  # noqa: E402
from trainmem.setup import TrainingSetup, make_setup, validate_for_model  # noqa: E402

DATA = Path(__file__).resolve().parent / "published_throughput.json"
TARGET_MEDIAN, TARGET_MAX = 0.10, 0.25

__all__ = ["Row", "evaluate", "load_points", "main"]


@dataclass
class Row:
    id: str
    engine: str
    gpu: str
    precision: str
    measured: float | None = None
    predicted: float | None = None
    complete: bool = True
    flags: list[str] = field(default_factory=list)
    how: list[str] = field(default_factory=list)
    skipped: str = ""
    breakdown: dict[str, float] = field(default_factory=dict)

    @property
    def error(self) -> float | None:
        if self.measured and self.predicted is not None:
            return (self.predicted - self.measured) / self.measured
        return None


def load_points(path: Path = DATA) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["points"]


# -- model -------------------------------------------------------------------------------------------
def _arch_config(m: dict, seq: int) -> dict | None:
    """An HF config from the architecture fields: Llama-style (GQA, SwiGLU) when the name says
    Llama/Mistral or kv_heads < heads, else GPT-2-style (learned positions, 4h GeLU MLP)."""
    h, layers, heads = m.get("hidden"), m.get("layers"), m.get("heads")
    vocab, ffn, kv = m.get("vocab"), m.get("ffn"), m.get("kv_heads") or m.get("heads")
    if not (h and layers and heads and vocab):
        return None
    name = (m.get("name") or "").lower()
    if "llama" in name or "mistral" in name or (kv and kv < heads):
        if not ffn:
            return None
        return {"model_type": "llama", "hidden_size": h, "num_hidden_layers": layers, "num_attention_heads": heads,
                "num_key_value_heads": kv, "intermediate_size": ffn, "vocab_size": vocab,
                "max_position_embeddings": max(seq, 8192), "tie_word_embeddings": False}
    # dropout: Megatron's GPT defaults (--hidden-dropout 0.1, --attention-dropout 0.1); BLOOM trained without
    # (bigscience/bloom config.json: hidden_dropout 0.0, attention_dropout 0.0)
    drop = 0.0 if "bloom" in name else 0.1
    return {"model_type": "gpt2", "n_embd": h, "n_layer": layers, "n_head": heads, "n_inner": ffn or 4 * h,
            "vocab_size": vocab, "n_positions": seq, "attn_pdrop": drop, "resid_pdrop": drop, "embd_pdrop": drop}


def build_spec(p: dict, how: list[str]) -> ModelSpec:
    """The catalog's config for the point's HF id when the catalog has it (the exact architecture), else
    a config built from the published architecture fields."""
    m = p["model"] if isinstance(p["model"], dict) else {"hf_id": p["model"]}
    seq = p["seq_len"] or m.get("seq_len") or 2048
    if m.get("hf_id"):
        try:
            spec = resolve_model(m["hf_id"])
            how.append(f"model: catalog {spec.name} for {m['hf_id']}")
            return spec
        except TrainmemError:
            pass
    cfg = _arch_config(m, seq)
    if cfg is not None:
        how.append(f"model: {cfg['model_type']} config from the published architecture")
        return spec_from_hf_config(cfg, name=m.get("name") or p["id"])
    ref = m.get("hf_id") or m.get("name")
    how.append(f"model: catalog {ref}")
    return resolve_model(ref)


# -- hardware ----------------------------------------------------------------------------------------
_GRAND_TETON = GPU(name="H100-SXM-96G-HBM2e-500W", memory_bytes=96 * 10**9, bf16_tflops=989, fp8_tflops=1979,
                   bf16=True, hbm_gbps=2400,
                   source="torchtitan benchmarks/llama3_h100_202412_torchtitan.md (Grand Teton: 96 GB HBM2e, "
                          "2.4 TB/s, 500 W)",
                   note="peak: the SXM figure torchtitan's own MFU uses (its footnote: the true one is between SXM and NVL)")


def build_gpu(name: str, flags: list[str]) -> GPU:
    base = re.sub(r"\s*\(.*\)\s*$", "", name).strip()
    try:
        return get_gpu(base)
    except TrainmemError:
        if "H100" in name and "96G" in name:
            flags.append("approx-gpu")
            return _GRAND_TETON
        raise


def build_group(p: dict, gpu: GPU, flags: list[str], how: list[str]) -> GPUGroup:
    gpn = p.get("gpus_per_node") or 8
    sibling = "H100-SXM-80G" if gpu is _GRAND_TETON else gpu.name
    cluster = parse_cluster(f"{p['gpus']}x{sibling}[node={gpn}]")
    grp = cluster.groups[0]
    if gpu is _GRAND_TETON:
        grp = replace(grp, gpu=gpu)
    inter = (p.get("interconnect") or "").lower()
    if "omni-path" in inter or "omnipath" in inter:
        # BLOOM (tr11 README): 4 × 100 Gb/s Omni-Path links per 8-GPU node = 6.25 GB/s per GPU
        grp = replace(grp, inter=Link(name="OPA-100-x4-per-8", kind="ib", gbps=4 * 12.5 / 8,
                                      efficiency=grp.inter.efficiency, latency_s=grp.inter.latency_s,
                                      note="efficiency and latency of the catalog's IB row"))
        how.append("inter-node: 4 × 100 Gb/s Omni-Path per node (6.25 GB/s per GPU)")
    how.append(f"links: {grp.intra.name} / {grp.inter.name} / {grp.host.name}")
    return grp


# -- setup -------------------------------------------------------------------------------------------
_RECIPE = {("megatron", "bf16"): "mixed-bf16", ("megatron", "fp16"): "mixed-fp16", ("megatron", "fp8"): "fp8",
           ("fsdp2", "bf16"): "amp-bf16", ("fsdp2", "fp16"): "amp-fp16", ("fsdp2", "fp8"): "fp8",
           ("deepspeed", "bf16"): "mixed-bf16", ("deepspeed", "fp16"): "mixed-fp16"}


def _engine(p: dict, how: list[str]) -> str:
    e = p["engine"]
    tp, pp = p.get("tp") or 1, p.get("pp") or 1
    if e in ("megatron", "nemo"):
        return "megatron"
    if e in ("fsdp2", "meta-internal"):
        return "fsdp2"
    if e == "fsdp1":
        how.append("engine: FSDP1 modelled as FSDP2")
        return "fsdp2"
    if e == "deepspeed" and tp * pp > 1:
        how.append("engine: Megatron-DeepSpeed (tp/pp) modelled as megatron with the distributed optimizer")
        return "megatron"
    if e == "deepspeed":
        return "deepspeed"
    raise ValueError(f"engine {e} is not modelled")


def _recompute(p: dict, flags: list[str]) -> str:
    r = (p.get("recompute") or "").lower()
    if r.startswith("full"):
        return "full"
    if r.startswith("selective"):
        return "selective"
    if r.startswith("none"):
        return "none"
    flags.append("recompute?")
    return "none"


def _attention(p: dict, engine: str, how: list[str]) -> str:
    """Megatron-LM and Megatron-DeepSpeed runs from before 2023 have no flash attention (Megatron-LM's
    ``--use-flash-attn`` arrived in 2023): their core attention is baddbmm + FusedScaleMaskSoftmax on the
    full score matrix, modelled as ``eager`` with Megatron's fused softmax. The run's date is the earliest
    date its ``source_version`` quotes (a later README edit does not change the code that ran)."""
    years = [int(y) for y in re.findall(r"\b(20[12]\d)-\d\d", p.get("source_version") or "")]
    if engine == "megatron" and years and min(years) < 2023:
        how.append("attention: baddbmm + fused softmax (no flash attention before 2023)")
        return "eager"
    return "sdpa"


def build_setup(p: dict, spec: ModelSpec, gpu: GPU, flags: list[str], how: list[str]) -> TrainingSetup:
    engine = _engine(p, how)
    tp, pp, cp, ep = (p.get(k) or 1 for k in ("tp", "pp", "cp", "ep"))
    gpus = p["gpus"]
    dp = gpus // (tp * pp * cp)
    mb = p.get("micro_batch")
    if mb is None:
        flags.append("micro_batch?")
        mb = 1
    gb = p.get("global_batch") or mb * dp
    vpp = p.get("vpp") or 1
    if engine == "fsdp2" and pp > 1 and mb % (pp * vpp) == 0:
        # torchtitan's "local batch" under PP is split into microbatches; at the runs' version the count
        # defaults to the number of pipeline stages (config_manager.py @ 9dec370,
        # --experimental.pipeline_parallel_microbatches)
        how.append(f"torchtitan PP: local batch {mb} split into {pp * vpp} microbatches")
        mb //= pp * vpp
    ga = max(1, gb // (mb * dp))
    if ga * mb * dp != gb:
        flags.append("global_batch≠mb·ga·dp")
    zero = None
    if engine == "megatron":
        zero = 1 if (p.get("distributed_optimizer") or p["engine"] == "deepspeed") else 0
    elif engine == "deepspeed":
        zero = p.get("zero") or 0
    sp = p.get("sp")
    fields = dict(engine=engine, precision=_RECIPE[(engine, p["precision"])], gpus=gpus, tp=tp, pp=pp, cp=cp, ep=ep,
                  vpp=vpp, micro_batch=mb, grad_accum=ga, seq_len=p["seq_len"], zero=zero,
                  recompute=_recompute(p, flags), gpu=gpu.name if gpu is not _GRAND_TETON else "H100-SXM-80G",
                  attn=_attention(p, engine, how))
    if engine == "megatron":
        fields["sp"] = bool(sp) if tp > 1 else None
    if engine == "fsdp2" and tp > 1 and sp is False:
        fields["no_sp"] = True
    s = make_setup(**fields)
    validate_for_model(s, spec)
    return s


# -- measurement -------------------------------------------------------------------------------------
def measured_tokens_per_gpu(p: dict, spec: ModelSpec, s: TrainingSetup, how: list[str]) -> float | None:
    m, d = p.get("measured") or {}, p.get("derived") or {}
    if "tokens_per_second_per_gpu" in m:
        return float(m["tokens_per_second_per_gpu"]["value"])
    if d.get("tokens_per_second_per_gpu"):
        return float(d["tokens_per_second_per_gpu"])
    tokens = s.global_batch * s.seq_len
    if "step_seconds" in m:
        return tokens / float(m["step_seconds"]["value"]) / s.gpus
    if "tflops_per_gpu" in m:
        unit = (m["tflops_per_gpu"].get("unit") or "").lower()
        tf = float(m["tflops_per_gpu"]["value"]) * 1e12
        if "hardware" in unit or "achieved" in unit or "recompute" in unit:
            per_token = narayanan_flops_per_iteration(1, s.seq_len, spec.num_layers, spec.hidden_size,
                                                      spec.vocab_size, s.recompute == "full") / s.seq_len
            how.append("measured: TFLOP/s/GPU converted with Narayanan et al. eq. 3")
        else:
            per_token = model_flops_per_token(spec, s.seq_len)
            how.append("measured: model TFLOP/s/GPU converted with PaLM's 6N + 12·L·h·s")
        return tf / per_token
    return None


def evaluate(p: dict) -> Row:
    row = Row(id=p["id"], engine=p["engine"], gpu=p["gpu"], precision=p["precision"], complete=bool(p.get("complete")))
    try:
        spec = build_spec(p, row.how)
        gpu = build_gpu(p["gpu"], row.flags)
        s = build_setup(p, spec, gpu, row.flags, row.how)
        grp = build_group(p, gpu, row.flags, row.how)
        row.measured = measured_tokens_per_gpu(p, spec, s, row.how)
        t = step_time(spec, s, grp)
    except (TrainmemError, ValueError, KeyError) as err:
        row.skipped = str(err).splitlines()[0][:110]
        return row
    row.predicted = t.tokens_per_second_per_gpu
    row.breakdown = {k: v / t.step_seconds for k, v in t.breakdown.items() if v > 0}
    return row


# -- report ------------------------------------------------------------------------------------------
def _summary(rows: list[Row]) -> list[tuple[str, int, float, float, float]]:
    """(engine, points, median |error|, max |error|, median signed error) per engine and overall."""
    groups: dict[str, list[float]] = {}
    for r in rows:
        if r.error is not None:
            groups.setdefault(r.engine, []).append(r.error)
            groups.setdefault("all", []).append(r.error)
    return [(k, len(v), statistics.median(abs(e) for e in v), max(abs(e) for e in v), statistics.median(v))
            for k, v in sorted(groups.items(), key=lambda x: x[0] == "all")]


def _fmt(x: float | None) -> str:
    return "—" if x is None else f"{x:,.0f}"


def render(rows: list[Row], markdown: bool, verbose: bool) -> str:
    head = ["id", "engine", "GPU", "precision", "measured tok/s/GPU", "predicted", "error %", "flags"]
    lines = []
    table = []
    for r in rows:
        err = "—" if r.error is None else f"{100 * r.error:+.1f}"
        flags = ",".join(r.flags) + (f" skipped: {r.skipped}" if r.skipped else "") + ("" if r.complete else " incomplete")
        table.append([r.id, r.engine, r.gpu.split(" (")[0], r.precision, _fmt(r.measured), _fmt(r.predicted), err,
                      flags.strip(",")])
    if markdown:
        lines.append("| " + " | ".join(head) + " |")
        lines.append("| " + " | ".join("---" for _ in head) + " |")
        lines += ["| " + " | ".join(row) + " |" for row in table]
    else:
        widths = [max(len(str(x)) for x in col) for col in zip(head, *table)]
        lines.append("  ".join(h.ljust(w) for h, w in zip(head, widths)))
        lines += ["  ".join(str(x).ljust(w) for x, w in zip(row, widths)) for row in table]
    if verbose:
        for r in rows:
            lines.append(f"{r.id}: " + "; ".join(r.how)
                         + (" | time: " + ", ".join(f"{k} {100 * v:.0f}%" for k, v in r.breakdown.items()) if r.breakdown else ""))
    lines.append("")
    summ = _summary(rows)
    if markdown:
        lines += ["| engine | points | median abs error | max abs error | median signed error |",
                  "| --- | --- | --- | --- | --- |"]
        lines += [f"| {k} | {n} | {100 * med:.1f} % | {100 * mx:.1f} % | {100 * sg:+.1f} % |" for k, n, med, mx, sg in summ]
    else:
        lines += [f"{k:13s} n={n:3d}  median |error| {100 * med:5.1f} %  max |error| {100 * mx:5.1f} %  "
                  f"median signed {100 * sg:+5.1f} %" for k, n, med, mx, sg in summ]
    lines.append(f"targets: median ≤ {100 * TARGET_MEDIAN:.0f} %, none worse than {100 * TARGET_MAX:.0f} %")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--all", action="store_true", help="also the points whose configuration is incomplete")
    ap.add_argument("--markdown", action="store_true", help="print the table in Markdown")
    ap.add_argument("--verbose", action="store_true", help="how each point was mapped and where its time goes")
    ap.add_argument("--only", default="", help="points whose id contains this string")
    args = ap.parse_args(argv)
    points = [p for p in load_points() if args.only in p["id"] and (args.all or p.get("complete"))]
    rows = [evaluate(p) for p in points]
    print(render(rows, args.markdown, args.verbose))
    return 0


if __name__ == "__main__":
    sys.exit(main())
