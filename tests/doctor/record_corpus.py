"""Re-record the monitor's logs of tests/doctor/corpus/logs (run: ``python -m tests.doctor.record_corpus``).

Each log is the JSONL that :class:`trainmem.doctor.monitor.MemoryMonitor` writes for a CPU loop of
:mod:`tests.doctor.loops` (the monitor counting live tensor storages, as on a CPU it must). The composed CSV logs
of the same folder are written by :func:`composed_logs` from the estimates they name.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from tests.doctor.loops import train_loop

HERE = Path(__file__).parent / "corpus" / "logs"

RECORDED = {
    "healthy.jsonl": dict(seed=1, steps=200),
    "leaking.jsonl": dict(seed=1, steps=200, leak=True),
    "eval_no_grad.jsonl": dict(seed=2, steps=80, width=64, depth=8, batch=(48, 64), eval_every=20, eval_no_grad=True),
    "eval_grad.jsonl": dict(seed=2, steps=80, width=64, depth=8, batch=(48, 64), eval_every=20, eval_no_grad=False),
}


def record() -> None:
    torch.set_num_threads(1)
    HERE.mkdir(parents=True, exist_ok=True)
    for name, kw in RECORDED.items():
        (HERE / name).unlink(missing_ok=True)
        train_loop(str(HERE / name), **kw)
    (HERE / "leak_then_oom.jsonl").unlink(missing_ok=True)
    try:
        train_loop(str(HERE / "leak_then_oom.jsonl"), seed=3, steps=200, leak=True, oom_at=150)
    except torch.OutOfMemoryError:
        pass
    os.environ["WORLD_SIZE"] = "4"
    for rank in range(4):
        os.environ["RANK"] = str(rank)
        path = HERE / f"multirank.rank{rank}.jsonl"
        path.unlink(missing_ok=True)
        train_loop(str(HERE / "multirank.jsonl"), seed=10 + rank, steps=60, rank_cache_bytes=(2 << 20) if rank == 3 else 0)
    os.environ.pop("RANK")
    os.environ.pop("WORLD_SIZE")




# --------------------------------------------------------------------------- composed logs (GPU scale)

#: name: (model, setup flags, how the log departs from the estimate). Each log has the estimate's between-step
#: allocated (static) and per-step peak, with the noise of variable batches (±2 MiB), except for the departure.
COMPOSED = {
    "gpu_healthy.csv": ("llama-3.1-8b", dict(engine="fsdp2", gpus=8, micro_batch=2), "none"),
    "gpu_duplicate_fp32.csv": ("qwen2.5-0.5b", dict(micro_batch=4), "fp32 copy"),
    "gpu_fragmentation.csv": ("llama-3.1-8b", dict(engine="fsdp2", gpus=8, micro_batch=2), "reserved +12 GiB"),
    "gpu_offload.csv": ("llama-2-7b", dict(engine="deepspeed", zero=3, offload="optimizer+params", gpus=8,
                                           micro_batch=2), "slow"),
    "gpu_multirank.csv": ("llama-3.1-8b", dict(engine="fsdp2", gpus=8, micro_batch=2), "rank 5 +3 GiB"),
}


def _rows(est, extra_static: int, extra_reserved: int, ranks: int, seconds: float | None, rank_extra: dict) -> list:
    import random
    rng = random.Random(0)
    rows = []
    for step in range(200):
        for rank in range(ranks):
            noise = rng.randint(-4096, 4096) * 512
            add = extra_static + rank_extra.get(rank, 0)
            alloc = est.static_bytes + add + abs(noise) // 8
            peak = est.peak_allocated_bytes + add + noise
            reserved = est.peak_reserved_bytes + add + extra_reserved
            row = [step, alloc, reserved, peak, reserved, rank]
            if seconds is not None:
                row.append(round(seconds * (1 + rng.uniform(-0.02, 0.02)), 4))
            rows.append(row)
    return rows


def composed_logs() -> None:
    from trainmem.api import build
    from trainmem.doctor.case import Expected
    from trainmem.memory import estimate

    for name, (model, flags, how) in COMPOSED.items():
        spec, setup = build(model, **flags)
        est = estimate(spec, setup)
        extra_static = 4 * spec.n_params if how == "fp32 copy" else 0
        extra_reserved = 12 * 2**30 if how.startswith("reserved") else 0
        seconds = Expected(spec, setup, est).step_time().step_seconds if how == "slow" else None
        ranks = 8 if how.startswith("rank") else 1
        rows = _rows(est, extra_static, extra_reserved, ranks, seconds, {5: 3 * 2**30} if ranks == 8 else {})
        head = "step,allocated_bytes,reserved_bytes,peak_allocated_bytes,peak_reserved_bytes,rank"
        head += ",step_seconds" if seconds is not None else ""
        text = head + "\n" + "\n".join(",".join(str(v) for v in r) for r in rows) + "\n"
        (HERE / name).write_text(text)


if __name__ == "__main__":
    record()
    composed_logs()
