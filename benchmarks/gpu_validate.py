"""Real CUDA steps beside the estimate: max_memory_allocated / max_memory_reserved vs trainmem.

Prepared for a GPU machine (one H100/H200/A100 class device). Runs 5 real steps of bundled models with
random weights and tokens (nothing is downloaded), prints one row per case, and writes
``$OUT/gpu_validate.json`` (or ./gpu_validate.json) for docs/accuracy.md. Without CUDA it exits 0 after
saying so.

    python benchmarks/gpu_validate.py
"""

from __future__ import annotations

import json
import os
import sys

from trainmem.memory import estimate
from trainmem.model.resolve import resolve_model
from trainmem.setup import make_setup
from trainmem.units import GiB

CASES = [
    ("qwen2.5-0.5b", dict(precision="bf16", seq_len=2048, micro_batch=4)),
    ("qwen2.5-0.5b", dict(precision="bf16", seq_len=2048, micro_batch=4, loop="script")),
    ("qwen2.5-0.5b", dict(precision="amp-bf16", seq_len=1024, micro_batch=8, recompute="full")),
    ("qwen2.5-0.5b", dict(precision="bf16", seq_len=2048, micro_batch=4, loss="chunked")),
    ("llama-3.2-1b", dict(precision="amp-bf16", seq_len=2048, micro_batch=2)),
    ("llama-3.2-1b", dict(precision="bf16", seq_len=2048, micro_batch=4, lora_rank=16, lora_targets="q_proj,v_proj")),
    ("llama-3.2-1b", dict(precision="amp-bf16", seq_len=2048, micro_batch=4, lora_rank=32,
                          lora_targets="all-linear", recompute="full")),
    ("tinyllama-1.1b", dict(precision="bf16", seq_len=4096, micro_batch=2, attn="eager")),
    ("gpt2", dict(precision="amp-fp16", seq_len=1024, micro_batch=16, grad_accum=2)),
]


def main() -> int:
    try:
        import torch
    except ImportError:
        print("torch is not installed: pip install 'trainmem[trace]'")
        return 0
    if not torch.cuda.is_available():
        print("no CUDA device: nothing to validate here (docs/accuracy.md says so)")
        return 0
    from trainmem.trace.cuda import cuda_step

    gpu_name = torch.cuda.get_device_name(0)
    from trainmem.errors import TrainmemError
    try:  # the catalog takes the names torch.cuda prints
        catalog_gpu = make_setup(gpu=gpu_name).gpu
    except TrainmemError:
        catalog_gpu = "H100-SXM-80G"
    rows = []
    print(f"{'case':70s} {'alloc GiB':>9} {'est':>7} {'err':>7} {'reserved':>9} {'est':>7} {'err':>7}")
    for model, kw in CASES:
        spec = resolve_model(model)
        setup = make_setup(gpu=catalog_gpu, **kw)
        est = estimate(spec, setup)
        res = cuda_step(spec, setup)
        torch.cuda.empty_cache()
        ea, er = est.peak_allocated_bytes, est.peak_reserved_bytes
        ma, mr = res.max_memory_allocated_bytes, res.max_memory_reserved_bytes
        row = {"case": f"{model} {kw}", "gpu": gpu_name, "allocated": ma, "estimate_allocated": ea,
               "reserved": mr, "estimate_reserved": er, "allocated_error": (ea - ma) / ma,
               "reserved_error": (er - mr) / mr, **res.to_dict()}
        rows.append(row)
        print(f"{row['case']:70s} {ma / GiB:9.3f} {ea / GiB:7.3f} {100 * row['allocated_error']:+6.1f}% "
              f"{mr / GiB:9.3f} {er / GiB:7.3f} {100 * row['reserved_error']:+6.1f}%", flush=True)
    out = os.path.join(os.environ.get("OUT", "."), "gpu_validate.json")
    with open(out, "w") as f:
        json.dump(rows, f, indent=1)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
