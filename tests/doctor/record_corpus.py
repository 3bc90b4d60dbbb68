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
    for rank in range(4):  # the same four ranks, no rank holding more: healthy
        os.environ["RANK"] = str(rank)
        (HERE / f"multirank_healthy.rank{rank}.jsonl").unlink(missing_ok=True)
        train_loop(str(HERE / "multirank_healthy.jsonl"), seed=20 + rank, steps=60)
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


# --------------------------------------------------------------------------- the corpus of issue 19 (GPU scale)

#: name: (model, setup flags, departure). 120 steps; ``ranks`` ranks; noise of variable batches as above. The
#: departures: ``cache`` — the monitor's old three columns only (``step,allocated_bytes,reserved_bytes``) with
#: the reserve of the step's peak kept by the cache between steps (the healthy case the doctor used to call
#: fragmentation); ``warmup`` — the optimizer states appear after step 0; ``sawtooth`` — ±300 MiB from batch to
#: batch, no trend; ``leak`` — ``leak_mib`` MiB more per step on ``leak_rank``; ``copy`` — ``copy_bytes_per_param``
#: extra bytes per parameter between steps; ``eval`` — an evaluation step every 20 steps (``phase`` column) that
#: keeps the training step's activations (``eval_grad``) or not; ``reserved`` — reserved ``+reserved_gib`` over
#: the step's peak; ``imbalance`` — ``heavy_rank`` holds ``heavy_gib`` more; ``slow`` — step times of the perf model ±2 %.
COMPOSED_19 = {
    "gpu_cache_between_steps.csv": ("llama-3.1-8b", dict(engine="fsdp2", gpus=8, micro_batch=2), dict(cache=True)),
    "gpu_cache_between_steps_8ranks.csv": ("llama-3.1-8b", dict(engine="fsdp2", gpus=8, micro_batch=2),
                                           dict(cache=True, ranks=8)),
    "gpu_cache_qwen.csv": ("qwen2.5-0.5b", dict(micro_batch=2, seq_len=2048), dict(cache=True)),
    "gpu_healthy_8ranks.csv": ("llama-3.1-8b", dict(engine="fsdp2", gpus=8, micro_batch=2), dict(ranks=8)),
    "gpu_healthy_qwen.csv": ("qwen2.5-0.5b", dict(micro_batch=4), {}),
    "gpu_healthy_zero3_4ranks.csv": ("llama-3.2-1b", dict(engine="deepspeed", zero=3, gpus=4, micro_batch=4),
                                     dict(ranks=4)),
    "gpu_warmup_step.csv": ("qwen2.5-0.5b", dict(micro_batch=4), dict(warmup=True)),
    "gpu_sawtooth.csv": ("llama-3.2-1b", dict(micro_batch=4), dict(sawtooth=True)),
    "gpu_leak.csv": ("llama-3.2-1b", dict(micro_batch=4), dict(leak_mib=8)),
    "gpu_leak_rank3.csv": ("llama-3.1-8b", dict(engine="fsdp2", gpus=8, micro_batch=2),
                           dict(ranks=4, leak_mib=16, leak_rank=3)),
    "gpu_leak_slow_cache.csv": ("qwen2.5-0.5b", dict(micro_batch=4), dict(leak_mib=2, cache=True)),
    "gpu_offload_zero3_13b.csv": ("llama-2-13b", dict(engine="deepspeed", zero=3, offload="optimizer+params",
                                                      gpus=8, micro_batch=1), dict(slow=True)),
    "gpu_offload_optimizer_8b.csv": ("llama-3.1-8b", dict(engine="deepspeed", zero=3, offload="optimizer", gpus=4,
                                                         micro_batch=2), dict(slow=True, ranks=4)),
    "gpu_duplicate_bf16.csv": ("qwen2.5-0.5b", dict(micro_batch=4), dict(copy_bytes_per_param=2)),
    "gpu_duplicate_fp32_llama1b.csv": ("llama-3.2-1b", dict(micro_batch=2), dict(copy_bytes_per_param=4)),
    "gpu_extra_1b_per_param.csv": ("qwen2.5-0.5b", dict(micro_batch=4), dict(copy_bytes_per_param=1)),
    "gpu_extra_7b_per_param.csv": ("qwen2.5-0.5b", dict(micro_batch=4), dict(copy_bytes_per_param=7)),
    "gpu_eval_grad.csv": ("llama-3.2-1b", dict(micro_batch=4), dict(eval=True, eval_grad=True)),
    "gpu_eval_no_grad.csv": ("llama-3.2-1b", dict(micro_batch=4), dict(eval=True)),
    "gpu_reserved_over_peak.csv": ("llama-3.2-1b", dict(micro_batch=4), dict(reserved_gib=9)),
    "gpu_reserved_over_peak_8ranks.csv": ("llama-3.1-8b", dict(engine="fsdp2", gpus=8, micro_batch=2),
                                          dict(reserved_gib=14, ranks=8)),
    "gpu_rank0_heavy.csv": ("llama-3.1-8b", dict(engine="fsdp2", gpus=8, micro_batch=2),
                            dict(ranks=8, heavy_rank=0, heavy_gib=6)),
    "gpu_rank_noise.csv": ("llama-3.1-8b", dict(engine="fsdp2", gpus=8, micro_batch=2),
                           dict(ranks=8, heavy_rank=0, heavy_gib=0.5)),
}


def _rows_19(est, spec, d: dict, seconds: float | None = None) -> tuple[str, list]:
    import random
    rng = random.Random(19)
    ranks, cache = d.get("ranks", 1), d.get("cache", False)
    extra = int(d.get("copy_bytes_per_param", 0) * spec.n_params)
    rows = []
    for step in range(120):
        for rank in range(ranks):
            noise = rng.randint(-4096, 4096) * 512
            if d.get("sawtooth"):
                noise = rng.randint(-600, 600) * 512 * 1024
            add = extra + int(d.get("heavy_gib", 0) * 2**30 if rank == d.get("heavy_rank") else 0)
            if d.get("leak_mib") and rank == d.get("leak_rank", 0):
                add += step * d["leak_mib"] * 2**20
            static = est.static_bytes
            if d.get("warmup") and step == 0:
                static = est.static_bytes - est.category_peak_bytes.get("optimizer_states", 0)
            phase = "eval" if d.get("eval") and step % 20 == 19 else "train"
            alloc = static + add + abs(noise) // 8
            peak = est.peak_allocated_bytes + add + noise
            if phase == "eval" and not d.get("eval_grad"):
                peak = static + add + (est.peak_allocated_bytes - static) // 12  # no activations kept
            reserved = est.peak_reserved_bytes + add + int(d.get("reserved_gib", 0) * 2**30)
            if cache:
                rows.append([step, alloc, reserved] + ([rank] if ranks > 1 else []))
            else:
                rows.append([step, alloc, reserved, peak, reserved, rank, phase]
                            + ([round(seconds * (1 + rng.uniform(-0.02, 0.02)), 4)] if seconds else []))
    if cache:
        return "step,allocated_bytes,reserved_bytes" + (",rank" if ranks > 1 else ""), rows
    return ("step,allocated_bytes,reserved_bytes,peak_allocated_bytes,peak_reserved_bytes,rank,phase"
            + (",step_seconds" if seconds else "")), rows


def composed_logs_19() -> None:
    from trainmem.api import build
    from trainmem.doctor.case import Expected
    from trainmem.memory import estimate

    for name, (model, flags, d) in COMPOSED_19.items():
        spec, setup = build(model, **flags)
        est = estimate(spec, setup)
        seconds = Expected(spec, setup, est).step_time().step_seconds if d.get("slow") else None
        head, rows = _rows_19(est, spec, d, seconds)
        (HERE / name).write_text(head + "\n" + "\n".join(",".join(str(v) for v in r) for r in rows) + "\n")


if __name__ == "__main__":
    record()
    composed_logs()
    composed_logs_19()
