"""Accuracy of ``trainmem estimate`` against traced training steps, beside the tools people use today.

Each case is traced on fake tensors (``trainmem.trace``: the real transformers model, CUDA behaviour
emulated) and estimated; the table shows the estimate's and the trace's peak allocated memory, the
relative error, and what ``accelerate estimate-memory`` (``estimate_training_usage``, offline) and
DeepSpeed's ``estimate_zero2/3_model_states_mem_needs`` give for the same run.

Run:  python benchmarks/accuracy.py               # the tuning set + the hold-out set, writes docs/accuracy.md
      python benchmarks/accuracy.py --only 0-9    # a slice, no file written
Needs the trace extra, plus ``accelerate`` and ``deepspeed`` for the comparison columns (skipped if absent).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass, field

os.environ.setdefault("DS_ACCELERATOR", "cpu")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from trainmem.memory.timeline import CATEGORIES  # noqa: E402
from trainmem.model.resolve import resolve_model  # noqa: E402
from trainmem.setup import make_setup  # noqa: E402
from trainmem.units import GiB  # noqa: E402


@dataclass
class Case:
    model: str
    kw: dict = field(default_factory=dict)
    head: str | None = None
    """A task head (``ForSequenceClassification`` / ``ForTokenClassification``): the catalog model's config
    with ``architectures`` naming it, as a config.json that asks for the head does (trainmem/model/heads.py)."""
    num_labels: int = 2

    @property
    def label(self) -> str:
        parts = ([f"head={self.head}", f"num_labels={self.num_labels}"] if self.head else []) + [
            f"{k}={v}" for k, v in self.kw.items()]
        return f"{self.model} " + " ".join(parts)

    def spec(self):  # noqa: ANN201
        if not self.head:
            return resolve_model(self.model)
        from trainmem.model.hf import spec_from_hf_config
        cfg = {**resolve_model(self.model).hf_config, "architectures": ["Any" + self.head], "num_labels": self.num_labels}
        return spec_from_hf_config(cfg, name=self.model)


def C(model: str, head: str | None = None, num_labels: int = 2, **kw) -> Case:
    return Case(model, kw, head, num_labels)


# The set the estimator was developed against. 7 families + MoE; every traced recipe, recompute
# none/full, sdpa/eager, adamw/sgd-momentum/adafactor, seq 128..8192, micro-batch 1..16, grad-accum,
# FSDP2 ZeRO-2/3 at world sizes 2..64.
TUNING: list[Case] = [
    C("tinyllama-1.1b", precision="bf16", seq_len=2048, micro_batch=4),
    C("tinyllama-1.1b", precision="amp-bf16", seq_len=2048, micro_batch=2),
    C("tinyllama-1.1b", precision="fp32", seq_len=1024, micro_batch=4),
    C("tinyllama-1.1b", precision="bf16", seq_len=4096, micro_batch=8, recompute="full"),
    C("tinyllama-1.1b", precision="bf16", seq_len=1024, micro_batch=4, attn="eager"),
    C("tinyllama-1.1b", precision="amp-bf16", seq_len=1024, micro_batch=4, grad_accum=3),
    C("tinyllama-1.1b", precision="amp-bf16", seq_len=512, engine="fsdp2", gpus=8),
    C("tinyllama-1.1b", precision="bf16", seq_len=512, engine="fsdp2", gpus=4, zero=2),
    C("llama-3.2-1b", precision="bf16", seq_len=2048, micro_batch=2),
    C("llama-3.2-1b", precision="amp-bf16", seq_len=1024, recompute="full", micro_batch=4),
    C("llama-3.2-1b", precision="amp-fp16", seq_len=2048, micro_batch=4),
    C("llama-3.2-1b", precision="fp16", seq_len=2048, micro_batch=2, optimizer="sgd-momentum"),
    C("llama-3.2-1b", precision="amp-bf16", seq_len=2048, engine="fsdp2", gpus=16, micro_batch=2),
    C("llama-3.2-1b", precision="bf16", seq_len=1024, engine="fsdp2", gpus=64, grad_accum=2),
    C("qwen2.5-0.5b", precision="bf16", seq_len=1024),
    C("qwen2.5-0.5b", precision="amp-bf16", seq_len=1024, micro_batch=2),
    C("qwen2.5-0.5b", precision="bf16", seq_len=8192, recompute="full"),
    C("qwen2.5-0.5b", precision="bf16", seq_len=2048, micro_batch=2, optimizer="adafactor"),
    C("qwen2.5-0.5b", precision="amp-bf16", seq_len=1024, optimizer="sgd-momentum", grad_accum=2),
    C("qwen2.5-0.5b", precision="amp-bf16", seq_len=2048, engine="fsdp2", gpus=2, zero=2),
    C("qwen2.5-0.5b", precision="fp32", seq_len=512, attn="eager", micro_batch=2),
    C("qwen2.5-1.5b", precision="bf16", seq_len=4096, recompute="full", grad_accum=2),
    C("qwen2.5-1.5b", precision="amp-bf16", seq_len=1024, engine="fsdp2", gpus=8, zero=3),
    C("gpt2", precision="amp-bf16", seq_len=1024, micro_batch=4),
    C("gpt2", precision="bf16", seq_len=512, micro_batch=16),
    C("gpt2", precision="fp32", seq_len=1024, micro_batch=8, attn="eager"),
    C("gpt2", precision="amp-fp16", seq_len=128, micro_batch=16, grad_accum=4),
    C("gpt2", precision="fp32", seq_len=1024, micro_batch=4, engine="fsdp2", gpus=4),
    C("gpt2", precision="bf16", seq_len=1024, micro_batch=8, recompute="full", optimizer="adafactor"),
    C("gemma-3-1b", precision="bf16", seq_len=1024),
    C("gemma-3-1b", precision="amp-bf16", seq_len=2048, recompute="full"),
    C("gemma-3-1b", precision="bf16", seq_len=512, attn="eager", micro_batch=2),
    C("gemma-3-1b", precision="amp-bf16", seq_len=1024, engine="fsdp2", gpus=8),
    C("gemma-2-2b", precision="bf16", seq_len=1024, attn="eager"),
    C("gemma-2-2b", precision="amp-bf16", seq_len=512, attn="eager", recompute="full"),
    C("phi-3-mini-4k", precision="bf16", seq_len=4096, micro_batch=2),
    C("phi-3-mini-4k", precision="amp-bf16", seq_len=1024, recompute="full", micro_batch=2),
    C("phi-3-mini-4k", precision="bf16", seq_len=2048, engine="fsdp2", gpus=32),
    C("mistral-7b", precision="bf16", seq_len=4096, micro_batch=4),
    C("mistral-7b", precision="amp-bf16", seq_len=4096, recompute="full", engine="fsdp2", gpus=8),
    C("qwen1.5-moe-a2.7b", precision="bf16", seq_len=512),
    C("qwen1.5-moe-a2.7b", precision="amp-bf16", seq_len=512, recompute="full"),
    C("qwen1.5-moe-a2.7b", precision="bf16", seq_len=1024, engine="fsdp2", gpus=8),
    C("llama-2-7b", precision="bf16", seq_len=2048),
    C("llama-2-7b", precision="amp-bf16", seq_len=2048, micro_batch=8),
    C("llama-2-7b", precision="bf16", seq_len=4096, micro_batch=2, attn="eager", engine="fsdp2", gpus=8),
    # LoRA (PEFT, traced with get_peft_model; tests/trace/test_lora_trace.py)
    C("tinyllama-1.1b", precision="bf16", seq_len=2048, micro_batch=4, lora_rank=16, lora_targets="q_proj,v_proj"),
    C("llama-3.2-1b", precision="amp-bf16", seq_len=1024, micro_batch=4, lora_rank=16, lora_targets="all-linear",
      recompute="full"),
    C("qwen2.5-0.5b", precision="bf16", seq_len=1024, micro_batch=2, lora_rank=64, lora_targets="all-linear"),
    C("gpt2", precision="amp-bf16", seq_len=1024, micro_batch=4, lora_rank=8, lora_targets="c_attn"),
    C("mistral-7b", precision="bf16", seq_len=1024, micro_batch=2, lora_rank=16, lora_targets="q_proj,k_proj,v_proj,o_proj"),
    # fsdp2 + TP (torchtitan's Llama plan via parallelize_module, trace/tp.py; tests/trace/test_tp_trace.py)
    C("llama-3.2-1b", precision="bf16", seq_len=2048, micro_batch=2, engine="fsdp2", gpus=8, tp=8),
    C("llama-3.2-1b", precision="amp-bf16", seq_len=2048, micro_batch=2, engine="fsdp2", gpus=8, tp=4),
    C("qwen2.5-0.5b", precision="bf16", seq_len=1024, engine="fsdp2", gpus=2, tp=2, no_sp=True),
    C("llama-3.2-1b", precision="bf16", seq_len=512, engine="fsdp2", gpus=8, tp=4),  # peak: tied embedding bwd
    # --loss fused-linear (Liger-Kernel's allocations, trace/losses.py) and chunked (torchtune) on more paths:
    # untied and tied heads, FSDP2, full recompute, grad accumulation, loop "script", other chunk counts
    C("tinyllama-1.1b", precision="amp-bf16", seq_len=1024, micro_batch=2, loss="fused-linear"),
    C("llama-3.2-1b", precision="bf16", seq_len=1024, micro_batch=2, engine="fsdp2", gpus=8, loss="fused-linear"),
    C("llama-3.2-1b", precision="amp-bf16", seq_len=1024, micro_batch=2, recompute="full", loss="fused-linear"),
    C("qwen2.5-0.5b", precision="amp-bf16", seq_len=1024, micro_batch=2, grad_accum=2, loss="fused-linear"),
    C("tinyllama-1.1b", precision="bf16", seq_len=1024, micro_batch=2, loss="chunked", loop="script"),
    C("qwen2.5-0.5b", precision="amp-bf16", seq_len=1024, micro_batch=2, engine="fsdp2", gpus=4, loss="chunked"),
    C("llama-3.2-1b", precision="bf16", seq_len=1024, micro_batch=2, loss="chunked", loss_chunks=16),
    C("llama-3.2-1b", precision="amp-bf16", seq_len=1024, micro_batch=2, lora_rank=16, lora_targets="q_proj,v_proj",
      loss="fused-linear"),
    # --loss fused-ce (flash-attn's cross-entropy on the 16-bit logits, trace/losses.py ``_FlashCE``)
    C("tinyllama-1.1b", precision="amp-bf16", seq_len=1024, micro_batch=2, loss="fused-ce"),
    # task heads (a config whose architectures names *ForSequenceClassification / *ForTokenClassification)
    C("qwen2.5-0.5b", head="ForSequenceClassification", num_labels=5, precision="amp-bf16", seq_len=1024, micro_batch=4),
    C("roberta-base", head="ForTokenClassification", num_labels=9, precision="bf16", seq_len=512, micro_batch=8),
]

# Models, sizes and settings the estimator was not developed against (run after tuning, not tuned on).
HOLDOUT: list[Case] = [
    C("llama-3.2-3b", precision="amp-bf16", seq_len=2048, micro_batch=2),
    C("llama-3.2-3b", precision="bf16", seq_len=4096, recompute="full", engine="fsdp2", gpus=8, grad_accum=2),
    C("qwen3-8b", precision="bf16", seq_len=1024),
    C("qwen2.5-7b", precision="amp-bf16", seq_len=1024, engine="fsdp2", gpus=16),
    C("gemma-2-9b", precision="bf16", seq_len=512, attn="eager"),
    C("pythia-1b", precision="amp-bf16", seq_len=2048, micro_batch=2),
    C("pythia-1b", precision="bf16", seq_len=1024, attn="eager", micro_batch=4),
    C("falcon-7b", precision="bf16", seq_len=1024),
    C("bert-large-uncased", precision="amp-bf16", seq_len=512, micro_batch=8),
    C("roberta-base", precision="bf16", seq_len=512, micro_batch=16),
    C("qwen3-30b-a3b", precision="bf16", seq_len=512, engine="fsdp2", gpus=16),
    C("mixtral-8x7b", precision="bf16", seq_len=1024, engine="fsdp2", gpus=32),
    C("deepseek-v2-lite", precision="bf16", seq_len=1024),
    C("tinyllama-1.1b", precision="amp-fp16", seq_len=3072, micro_batch=3, grad_accum=3),
    C("qwen2.5-1.5b", precision="fp32", seq_len=768, engine="fsdp2", gpus=6, zero=2),
    # LoRA: the published PEFT run's shape (issue 6), and families the LoRA terms were not developed on
    C("llama-3.2-3b", precision="amp-bf16", seq_len=768, micro_batch=4, lora_rank=32, lora_targets="q_proj,v_proj"),
    C("qwen3-8b", precision="bf16", seq_len=1024, lora_rank=8, lora_targets="all-linear", recompute="full"),
    C("pythia-1b", precision="amp-bf16", seq_len=1024, micro_batch=2, lora_rank=16, lora_targets="query_key_value"),
    C("phi-3-mini-4k", precision="bf16", seq_len=1024, micro_batch=2, lora_rank=32,
      lora_targets="qkv_proj,o_proj,gate_up_proj,down_proj"),
    # fsdp2 + TP: full logits per rank, FSDP2 × TP with full recompute, TP alone (fp32 compute, torchtitan)
    C("tinyllama-1.1b", precision="bf16", seq_len=2048, micro_batch=2, engine="fsdp2", gpus=4, tp=4,
      no_loss_parallel=True),
    C("qwen2.5-1.5b", precision="amp-bf16", seq_len=4096, recompute="full", engine="fsdp2", gpus=8, tp=2),
    C("llama-3.2-1b", precision="amp-bf16", seq_len=1024, engine="fsdp2", gpus=2, tp=2),
    # loops, losses and a pipeline stage (added with --loop/--loss and trace/pipeline.py)
    C("qwen2.5-1.5b", precision="bf16", seq_len=2048, micro_batch=2, loop="script"),
    C("llama-3.2-1b", precision="amp-bf16", seq_len=2048, micro_batch=2, grad_accum=2, loop="script"),
    C("llama-3.2-1b", precision="bf16", seq_len=4096, micro_batch=2, loss="chunked"),
    C("qwen2.5-0.5b", precision="amp-bf16", seq_len=2048, micro_batch=4, loss="fused-linear"),
    C("qwen2.5-0.5b", precision="bf16", seq_len=1024, micro_batch=2, engine="fsdp2", gpus=2, pp=2, grad_accum=4),
    C("llama-3.2-1b", precision="amp-bf16", seq_len=1024, micro_batch=2, engine="fsdp2", gpus=8, pp=2, grad_accum=4),
    # losses and task heads on families and settings the fused/chunked/head terms were not developed on
    C("pythia-1b", precision="bf16", seq_len=1024, micro_batch=2, grad_accum=2, loss="fused-linear"),
    C("qwen2.5-1.5b", precision="amp-bf16", seq_len=1024, micro_batch=2, engine="fsdp2", gpus=8, recompute="full",
      loss="fused-linear"),
    C("gemma-3-1b", precision="amp-bf16", seq_len=1024, micro_batch=2, loss="chunked", loss_chunks=4, loop="script"),
    C("qwen2.5-0.5b", precision="amp-bf16", seq_len=2048, micro_batch=4, loss="fused-ce"),
    # gpt-oss (attention sinks, eager attention, 32 experts with biases; added with the gpt_oss family)
    C("gpt-oss-20b", precision="bf16", seq_len=2048, engine="fsdp2", gpus=8, attn="eager"),
    C("llama-3.2-1b", precision="bf16", seq_len=1024, micro_batch=2, engine="fsdp2", gpus=8, loss="fused-ce"),
    C("pythia-1b", precision="bf16", seq_len=1024, micro_batch=2, grad_accum=2, loss="fused-ce", loop="script"),
    C("tinyllama-1.1b", precision="bf16", seq_len=1024, micro_batch=2, lora_rank=16, lora_targets="all-linear",
      loss="chunked"),
    C("bert-large-uncased", head="ForSequenceClassification", num_labels=3, precision="amp-bf16", seq_len=512,
      micro_batch=8),
    C("tinyllama-1.1b", head="ForTokenClassification", num_labels=9, precision="bf16", seq_len=1024, micro_batch=4),
    # context parallelism: torch's ring attention on the fake process group (trace/cp.py)
    C("qwen2.5-1.5b", precision="amp-bf16", seq_len=8192, engine="fsdp2", gpus=8, cp=4),
    C("llama-3.2-3b", precision="bf16", seq_len=4096, micro_batch=2, recompute="full", engine="fsdp2", gpus=4, cp=2),
    # block recompute (--recompute-layers: the first N layers checkpointed; added with it, not tuned on)
    C("llama-3.2-1b", precision="amp-bf16", seq_len=2048, micro_batch=2, recompute="full", recompute_layers=8),
    C("qwen2.5-1.5b", precision="bf16", seq_len=2048, micro_batch=2, recompute="full", recompute_layers=14,
      engine="fsdp2", gpus=8),
]


def accelerate_training_bytes(n_params: int, precision: str) -> int | None:
    """accelerate estimate-memory's "Training using Adam" for the model loaded in fp32
    (accelerate/commands/estimate.py: max of estimate_training_usage's values)."""
    try:
        from accelerate.commands.estimate import estimate_training_usage
    except ImportError:
        return None
    dtype = "float32" if precision == "fp32" else ("bfloat16" if "bf16" in precision else "float16")
    return int(max(estimate_training_usage(4 * n_params, dtype).values()))


def deepspeed_bytes(spec, setup) -> int | None:  # noqa: ANN001
    """DeepSpeed's estimate_zero2/3_model_states_mem_needs (no offload), GPU bytes per rank."""
    try:
        import contextlib
        import io
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            from deepspeed.runtime.zero.stage3 import estimate_zero3_model_states_mem_needs
            from deepspeed.runtime.zero.stage_1_and_2 import estimate_zero2_model_states_mem_needs
    except Exception:  # noqa: BLE001 - optional comparison column
        return None
    n = spec.n_params
    if setup.engine == "fsdp2" and setup.zero == 3:
        _, gpu, _ = estimate_zero3_model_states_mem_needs(n, spec.params.largest_layer, num_gpus_per_node=setup.gpus,
                                                          cpu_offload=False, cpu_offload_params=False, zero_init=False)
        return int(gpu)
    _, gpu = estimate_zero2_model_states_mem_needs(n, num_gpus_per_node=setup.gpus, cpu_offload=False)
    return int(gpu)


def run(cases: list[Case], title: str) -> list[dict]:
    from trainmem.trace.compare import compare

    rows = []
    print(f"\n== {title}: {len(cases)} cases")
    print(f"{'#':>3} {'case':78s} {'trace GiB':>9} {'est GiB':>8} {'err':>7} {'act err':>8} "
          f"{'accel':>7} {'DS':>7} {'s':>5} {'resv GiB':>8} {'est':>7} {'err':>7}")
    for i, c in enumerate(cases):
        spec = c.spec()
        setup = make_setup(**c.kw)
        t = time.perf_counter()
        try:
            cmp = compare(spec, setup)
        except Exception as e:  # noqa: BLE001 - a benchmark row, not a crash
            print(f"{i:3d} {c.label:78s} ERROR {type(e).__name__}: {e}")
            rows.append({"case": c.label, "error": f"{type(e).__name__}: {e}"})
            continue
        dt = time.perf_counter() - t
        tr = cmp.trace.peak_allocated_bytes
        acc = accelerate_training_bytes(spec.n_params, setup.precision)
        ds = deepspeed_bytes(spec, setup)
        # Attribution, on each category's own maximum over the step (robust to where the peak falls):
        # model states must agree, activations within 5 %.
        ecp, tcp = cmp.estimate.category_peak_bytes, cmp.trace.category_peak_bytes
        rel = lambda c: abs(ecp.get(c, 0) - tcp.get(c, 0)) / tcp[c] if tcp.get(c) else 0.0  # noqa: E731
        states_err = max(rel(c) for c in ("parameters", "gradients", "optimizer_states"))
        act_err = rel("activations")
        cat_err = max(states_err, act_err)
        row = {"case": c.label, "trace": tr, "estimate": cmp.estimate_peak_bytes, "error": cmp.peak_error,
               "category_error": cat_err, "states_error": states_err, "activations_error": act_err,
               "accelerate": acc, "accelerate_error": (acc - tr) / tr if acc else None,
               "deepspeed": ds, "deepspeed_error": (ds - tr) / tr if ds else None,
               "trace_phase": cmp.trace.peak_phase, "estimate_phase": cmp.estimate.peak_phase,
               "seconds": dt,
               "reserved": cmp.trace.peak_reserved_bytes, "estimate_reserved": cmp.estimate_reserved_bytes,
               "reserved_error": cmp.reserved_error, "reserved_expandable": cmp.trace.peak_reserved_expandable_bytes,
               "breakdown": {cat: (e, r) for cat, e, r, _ in cmp.rows()}}
        rows.append(row)
        fmt = lambda x: f"{100 * x:+6.1f}%" if x is not None else "   n/a"  # noqa: E731
        print(f"{i:3d} {c.label:78s} {tr / GiB:9.3f} {cmp.estimate_peak_bytes / GiB:8.3f} {fmt(cmp.peak_error)} "
              f"{100 * act_err:7.1f}% {fmt(row['accelerate_error'])} {fmt(row['deepspeed_error'])} {dt:5.1f} "
              f"{row['reserved'] / GiB:8.3f} {row['estimate_reserved'] / GiB:7.3f} {fmt(row['reserved_error'])}",
              flush=True)
    ok = [r for r in rows if "trace" in r]
    if ok:
        errs = [abs(r["error"]) for r in ok]
        print(f"-- {title}: median |error| {100 * statistics.median(errs):.2f} %, max {100 * max(errs):.2f} %, "
              f"{len(ok)} traced, {len(rows) - len(ok)} failed")
        for tool in ("accelerate", "deepspeed"):
            te = [abs(r[f"{tool}_error"]) for r in ok if r[f"{tool}_error"] is not None]
            if te:
                print(f"   {tool}: median |error| {100 * statistics.median(te):.1f} %, max {100 * max(te):.1f} %")
        re_ = [abs(r["reserved_error"]) for r in ok]
        print(f"   reserved (estimate vs allocator replay): median |error| {100 * statistics.median(re_):.2f} %, "
              f"max {100 * max(re_):.2f} %")
    return rows


def _summary(rows: list[dict]) -> str:
    ok = [r for r in rows if "trace" in r]
    if not ok:
        return "no traced case"
    errs = [abs(r["error"]) for r in ok]
    s = (f"peak: median |error| **{100 * statistics.median(errs):.2f} %**, max **{100 * max(errs):.2f} %** over "
         f"{len(ok)} cases; model states: max {100 * max(r['states_error'] for r in ok):.2f} %; activations: "
         f"median {100 * statistics.median(r['activations_error'] for r in ok):.2f} %, "
         f"max {100 * max(r['activations_error'] for r in ok):.2f} %")
    for tool, name in (("accelerate", "accelerate estimate-memory"), ("deepspeed", "DeepSpeed estimate_zero2/3")):
        te = [abs(r[f"{tool}_error"]) for r in ok if r[f"{tool}_error"] is not None]
        if te:
            s += f"; {name}: median {100 * statistics.median(te):.0f} %, max {100 * max(te):.0f} %"
    return s


def _path(case: str) -> str:
    """The engine path a case exercises (engine, parallelism, LoRA, loop, loss), from its label."""
    kw = dict(part.split("=", 1) for part in case.split()[1:] if "=" in part)
    engine, tp, pp, gpus = kw.get("engine", "torch"), int(kw.get("tp", 1)), int(kw.get("pp", 1)), int(kw.get("gpus", 1))
    if tp > 1:
        engine = "fsdp2 × tp" if gpus > tp * pp else "tp (no FSDP)"
    parts = [engine] + (["pipeline stage"] if pp > 1 else []) + (["context parallel"] if int(kw.get("cp", 1)) > 1 else [])
    if "lora_rank" in kw:
        parts.append("LoRA")
    if kw.get("recompute", "none") != "none":
        parts.append(f"recompute {kw['recompute']}")
    parts.append(f"loop {kw.get('loop', 'trainer')}")
    if kw.get("loss", "hf") != "hf":
        parts.append(f"loss {kw['loss']}")
    if "head" in kw:
        parts.append({"ForSequenceClassification": "head seq-cls", "ForTokenClassification": "head tok-cls"}[kw["head"]])
    return ", ".join(parts)


def _by_path(rows: list[dict]) -> list[str]:
    """Median and max |error| of allocated and reserved per engine path, over both sets."""
    groups: dict[str, list[dict]] = {}
    for r in rows:
        if "trace" in r:
            groups.setdefault(_path(r["case"]), []).append(r)
    out = ["| path | cases | allocated: median | max | reserved: median | max |", "|---|---:|---:|---:|---:|---:|"]
    for name in sorted(groups):
        g = groups[name]
        a = [abs(r["error"]) for r in g]
        rv = [abs(r["reserved_error"]) for r in g if r.get("reserved_error") is not None]
        med = lambda xs: f"{100 * statistics.median(xs):.2f} %" if xs else "n/a"  # noqa: E731
        mx = lambda xs: f"{100 * max(xs):.2f} %" if xs else "n/a"  # noqa: E731
        out.append(f"| {name} | {len(g)} | {med(a)} | {mx(a)} | {med(rv)} | {mx(rv)} |")
    return out


def write_doc(path: str, tuning: list[dict], holdout: list[dict]) -> None:
    import torch
    import transformers

    def table(rows: list[dict]) -> list[str]:
        out = ["| # | case | trace GiB | estimate GiB | error | states | activations | accelerate | DeepSpeed | peak (trace / estimate) "
               "| reserved (replay) GiB | expandable GiB | estimate reserved GiB | reserved error |",
               "|---|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|"]
        for i, r in enumerate(rows):
            if "trace" not in r:
                out.append(f"| {i} | `{r['case']}` | error: {r['error']} | | | | | | | | | | | |")
                continue
            pct = lambda x: f"{100 * x:+.1f} %" if x is not None else "n/a"  # noqa: E731
            out.append(f"| {i} | `{r['case']}` | {r['trace'] / GiB:.3f} | {r['estimate'] / GiB:.3f} | {pct(r['error'])} | "
                       f"{100 * r['states_error']:.2f} % | {100 * r['activations_error']:.1f} % | "
                       f"{pct(r['accelerate_error'])} | {pct(r['deepspeed_error'])} | "
                       f"{r['trace_phase']} / {r['estimate_phase']} | {r['reserved'] / GiB:.3f} | "
                       f"{r['reserved_expandable'] / GiB:.3f} | {r['estimate_reserved'] / GiB:.3f} | "
                       f"{pct(r['reserved_error'])} |")
        return out

    lines = [
        "# Accuracy of `trainmem estimate`",
        "",
        f"Generated by `python benchmarks/accuracy.py` on {datetime.date.today()} ({platform.machine()}, "
        f"torch {torch.__version__}, transformers {transformers.__version__}). Do not edit by hand.",
        "",
        "Ground truth is `trainmem trace`: the real `transformers` model run for a warm-up and a steady optimizer",
        "step on fake tensors, every device allocation and free recorded (512-B allocator granule), with CUDA's",
        "behaviour emulated where the CPU differs (fused SDPA kernels, CUDA autocast lists and weight-cast",
        "cache, foreach optimizers, fused dropout). Figures are peak *allocated* bytes of the most loaded rank",
        "(the prediction of `torch.cuda.max_memory_allocated()`), in GiB (1024³ B); the estimate's cuBLAS",
        "workspace (allocated on a GPU, invisible to a CPU trace) is left out of the comparison.",
        "'states' is the largest relative error of the parameters', gradients' and optimizer states' own maxima",
        "over the step; 'activations' the same for activations (each category's maximum, wherever the peak is).",
        "accelerate = `accelerate estimate-memory`'s \"Training using Adam\" (`estimate_training_usage`, model",
        "loaded in fp32); DeepSpeed = `estimate_zero2_model_states_mem_needs` (ZeRO-3's for FSDP2 ZeRO-3), GPU",
        "bytes with the run's GPU count. Both ignore activations and the loss.",
        "'reserved (replay)' is the trace's allocation stream replayed through the CUDA caching allocator's rules",
        "(`trainmem/trace/allocator.py`, default settings; 'expandable' with `expandable_segments:True`), the",
        "prediction of `torch.cuda.max_memory_reserved()`; 'estimate reserved' is the estimator's reserve model",
        "(`trainmem/memory/overhead.py::reserved_bytes`) without the cuBLAS workspace's segment.",
        "",
        "## Per engine path (tuning and hold-out together)",
        "",
        *_by_path(tuning + holdout),
        "",
        "## Tuning set",
        "",
        _summary(tuning),
        "",
        *table(tuning),
        "",
        "## Hold-out set (models, sizes and settings not used while developing the estimator)",
        "",
        _summary(holdout),
        "",
        *table(holdout),
        "",
        "## Real GPUs",
        "",
        "`benchmarks/gpu_validate.py` runs real steps on a CUDA device and records `max_memory_allocated()` /",
        "`max_memory_reserved()` beside the estimate. No GPU machine was available to this project's sessions so",
        "far, so there are no measured CUDA rows yet: reserved memory, the CUDA context and NCCL buffers are",
        "modelled (stated assumptions in `trainmem/memory/overhead.py`), not yet checked.",
        "",
        '## torch.compile (`--compile`)',
        '',
        "What a compiled decoder layer keeps for backward is modelled from the partitioner's rules",
        '(`trainmem/memory/compile.py`, torch 2.13 `torch/_functorch/partitioners.py`',
        '`min_cut_rematerialization_partition`, `activation_memory_budget` 1.0) and checked against torch itself, on the CPU:',
        '',
        '- `tests/memory/test_compile.py`: one layer of tiny llama, llama-GQA, mistral, qwen2, qwen3, gemma, phi3 and gpt2',
        "  (with and without residual dropout) models, compiled with `aot_eager_decomp_partition` (inductor's",
        '  decompositions and min-cut partitioner, no kernel generation), in bf16, fp32 and CPU autocast, and a',
        '  checkpointed compiled block: the saved tensors agree with the estimate to the byte.',
        '- `tests/trace/test_compile_trace.py`: a whole step of a tiny llama with its decoder layer under',
        '  `torch.compile(backend="inductor")`: everything the forward keeps for backward against `estimate --compile`\'s',
        '  activations when the backward starts, within 3 % (0.1 % today); and `trainmem trace --compile` — the layer',
        "  partitioned on fake tensors at the real model's size: `python benchmarks/compile_layers.py` runs 10 catalog",
        '  models (Llama-2/3.2, Mistral, Mistral-Nemo, Qwen2.5, Qwen3, Phi-4, GPT-2) × 5 setups (bf16, amp-bf16, FSDP2,',
        '  full recompute, other shapes): 50 layers, largest |error| 0.00 %.',
        '',
        'What this does not cover: CUDA inductor itself (no GPU here). The partition is made before device lowering, so',
        "it is the same graph cut; the differences are the attention kernel (CPU runs SDPA's flash-for-CPU kernel, CUDA",
        "FlashAttention or memory-efficient SDPA: both keep q, k, v, the output and an fp32 logsumexp), CPU autocast's op",
        "lists stand in for CUDA's in the autocast runs (not checked: where the layers save matmul inputs and outputs,",
        "both make them 16-bit; an op CUDA runs in fp32 but the CPU does not would differ), attention dropout (CUDA's",
        "flash kernel keeps no mask; the CPU falls back to the math kernel, so it is not measured), and the kernels'",
        "transients: inductor fuses the backward's temporaries, which the estimate keeps as eager (an upper bound on the",
        'peak, not on what is saved). The loss is compiled too, as torchtitan, torchtune and HF Trainer do (it keeps the',
        '16-bit logits and two fp32 values per token: a whole step with it is checked in the same test). Not modelled:',
        "HF Trainer's whole-model compile makes transformers build an explicit b·s² mask (which moves CUDA's SDPA to",
        'the memory-efficient kernel); a lower `activation_memory_budget`, compiled MoE/MLA/eager-attention layers, LoRA,',
        'TP/CP and DeepSpeed/Megatron under compile (refused, exit 2). Step time is unchanged under `--compile`: there is',
        'no cited, clean speed-up factor to apply.',
        '',
        '## Where the tracer and the estimator share a rule',
        '',
        'Agreement between `trainmem trace` and the estimate is independent evidence only where the two do not take the',
        'same rule from the same place. They share one in these paths (issue 17 item 4):',
        '',
        "- CUDA autocast's op lists: the tracer applies torch's own, read at run time from the CUDA autocast kernels",
        '  every torch build registers (`trainmem/trace/autocast_policy.py`: each kernel of',
        '  `aten/src/ATen/autocast_mode.cpp` run on fake CUDA tensors, its casts read; 105 ops on torch 2.13), with',
        '  hand copies of `autocast_mode.h` only for Python-level names and the few kernels generic arguments cannot',
        "  run (`tests/trace/test_autocast_policy.py` checks the two agree but where stated). The estimator's",
        '  16-bit/fp32 choices per op are its own, written from the same lists.',
        "- The CUDA emulations themselves (fused SDPA kernels' saved tensors, autocast's weight-cast cache, fused",
        "  dropout's bool mask, foreach optimizer temporaries) are rules read from torch's CUDA sources into both the",
        '  tracer and the estimator: a misreading would be in both; only a GPU run checks them.',
        '- Models without a description (`trainmem/model/derive.py`, `derive_seq2seq.py`, the vision towers of',
        "  `vlm.py`): their per-layer saved bytes are measured with the tracer's emulations, so the estimate of such a",
        '  model agrees with its trace by construction.',
        '- Pipeline stages: both take the layers per stage from `trainmem/memory/states.py` `layers_of_stage`.',
        "- Liger's fused linear cross-entropy: the tracer's chunking uses the estimator's `liger_chunk_rows`",
        '  (`trainmem/memory/loss.py`).',
        "- Reserved memory: the estimator's reserve model rounds the cuBLAS workspace with the tracer's caching-allocator",
        '  rule (`trainmem/trace/allocator.py` `allocation_size`, from `c10/cuda/CUDACachingAllocator.cpp`).',
        '',
    ]
    with open(path, "w") as f:
        f.write("\n".join(lines))
    # the published-measurements section (benchmarks/published.py), estimates of the current code
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import published
    published.update_accuracy_doc(published.evaluate_all(published.load_points()), path=published.Path(path))
    # FSDP2's stream pools (benchmarks/reserved_streams.py): the stored per-stream replays, estimates of the current code
    import reserved_streams
    rows_file = os.path.join(os.path.dirname(os.path.abspath(__file__)), "reserved_streams_rows.jsonl")
    reserved_streams.update_doc(path, reserved_streams.markdown(reserved_streams.rescore(rows_file)))
    import json
    with open(path.replace(".md", ".json"), "w") as f:
        json.dump({"tuning": tuning, "holdout": holdout}, f, indent=1, default=str)


def _select(cases: list[Case], spec: str | None) -> list[Case]:
    if not spec:
        return cases
    lo, _, hi = spec.partition("-")
    return cases[int(lo): int(hi or lo) + 1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="slice of the tuning set, e.g. 0-9 (no file written)")
    ap.add_argument("--holdout-only", action="store_true")
    ap.add_argument("--doc", default="docs/accuracy.md")
    ap.add_argument("--new-only", action="store_true",
                    help="trace only the cases missing from the doc's JSON, keep its stored rows, rewrite the doc")
    args = ap.parse_args()
    if args.only:
        run(_select(TUNING, args.only), "tuning (slice)")
        return 0
    if args.new_only:
        import json
        with open(args.doc.replace(".md", ".json")) as f:
            stored = json.load(f)
        sets = []
        for name, cases in (("tuning", TUNING), ("holdout", HOLDOUT)):
            have = {r["case"]: r for r in stored[name]}
            fresh = {r["case"]: r for r in run([c for c in cases if c.label not in have], f"{name} (new)")}
            sets.append([have.get(c.label) or fresh[c.label] for c in cases])
        write_doc(args.doc, *sets)
        print(f"\nwrote {args.doc}")
        return 0
    tuning = [] if args.holdout_only else run(TUNING, "tuning")
    holdout = run(HOLDOUT, "hold-out")
    if not args.holdout_only:
        write_doc(args.doc, tuning, holdout)
        print(f"\nwrote {args.doc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
