"""Plan search time (issue 8 target: ≤ 1 s on one CPU core for Llama-3.1-405B on 16,384 H100s and for a
three-type mixed pool). Prints the median of ``--repeat`` searches per case (wall-clock, and the
process's own CPU time, which other work on a shared machine does not inflate), with how many
configurations were timed and how many memory estimates were made.

    python benchmarks/plan_speed.py [--repeat 5]

One core: run it under ``taskset -c 0`` (the search itself is single-threaded either way).
"""

from __future__ import annotations

import argparse
import statistics
import time

from trainmem.api import build
from trainmem.hardware import parse_cluster
from trainmem.plan.search import PlanRequest, plan

CASES = [
    ("llama-3.1-405b", "16384xH100-SXM-80G", 2048, 8192),
    ("llama-3.1-70b", "512xH100-SXM-80G", 1024, 8192),
    ("llama-3.1-8b", "8xA100-SXM-80G,4xRTX-3090-24G", 64, 4096),
    ("qwen2.5-7b", "16xA100-SXM-80G,8xL40S-48G,8xRTX-4090-24G", 128, 4096),
    ("mixtral-8x7b", "64xH100-SXM-80G", 512, 4096),
    ("llama-3.1-8b", "16xA100-SXM-80G,8xL40S-48G", 64, 4096),  # one pipeline over both types wins
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    print(f"{'model':16s} {'pool':44s} {'median s':>9s} {'max s':>7s} {'cpu s':>6s} {'timed':>7s} {'estimated':>9s}  best")
    for model, pool, gb, seq in CASES:
        spec, _ = build(model, seq_len=seq)
        req = PlanRequest(spec=spec, cluster=parse_cluster(pool), global_batch=gb, seq_len=seq, top=5)
        times, cpu, r = [], [], None
        for _ in range(args.repeat):
            t0, c0 = time.perf_counter(), time.process_time()
            r = plan(req)
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
        from trainmem.plan.explain import label
        print(f"{model:16s} {pool:44s} {statistics.median(times):9.3f} {max(times):7.3f} {statistics.median(cpu):6.3f} "
              f"{r.evaluated:7d} "
              f"{r.estimated:9d}  {label(r.plans[0])}")


if __name__ == "__main__":
    main()
