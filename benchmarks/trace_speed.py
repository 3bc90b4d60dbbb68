"""How long tracing takes on this machine (issue 3 targets: Llama-7B ≤ 60 s on 2 CPU cores; 70B in
minutes). Prints wall seconds per traced step; run: python benchmarks/trace_speed.py [--big]"""

from __future__ import annotations

import sys
import time

from trainmem.model.resolve import resolve_model
from trainmem.setup import make_setup
from trainmem.trace import trace_step
from trainmem.units import GiB

CASES = [
    ("llama-2-7b", dict(precision="bf16", seq_len=2048, micro_batch=1)),
    ("llama-2-7b", dict(precision="amp-bf16", seq_len=2048, micro_batch=1)),
    ("llama-2-7b", dict(precision="bf16", seq_len=2048, engine="fsdp2", gpus=8)),
]
BIG = [
    ("llama-2-70b", dict(precision="bf16", seq_len=2048, engine="fsdp2", gpus=64)),
    ("llama-3.1-405b", dict(precision="bf16", seq_len=2048, engine="fsdp2", gpus=512)),
]


def main() -> None:
    cases = CASES + (BIG if "--big" in sys.argv else [])
    for model, kw in cases:
        t = time.perf_counter()
        r = trace_step(resolve_model(model), make_setup(**kw))
        print(f"{model:16s} {str(kw):70s} {time.perf_counter() - t:7.1f} s  peak {r.peak_allocated_bytes / GiB:8.2f} GiB",
              flush=True)


if __name__ == "__main__":
    main()
