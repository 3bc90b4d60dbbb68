"""The monitor's cost per training step: ``python benchmarks/monitor_overhead.py [--steps N] [--device cpu|cuda]``.

Two numbers, each a median over ``--steps`` steps after a warm-up:

* ``record``: the time spent inside :meth:`MemoryMonitor.step` (read the counters, write and flush one JSONL line,
  the leak and baseline checks) — what the monitor adds to any loop on any device;
* ``loop``: the step time of the same loop with and without the monitor, and the difference. On CUDA the counters
  are the caching allocator's (``memory_allocated`` …), so the difference is the record alone; on a CPU the monitor
  also counts live storages through a ``TorchDispatchMode`` over every op, which costs per op.

The loop is a 4-layer MLP (width 256, batch 64) with AdamW, a stand-in for a training step; a real model's step
is milliseconds to seconds, so the record's share there is smaller than here.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import torch

from trainmem.doctor.monitor import MemoryMonitor


def _setup(device: str) -> tuple:
    torch.manual_seed(0)
    layers: list[torch.nn.Module] = []
    for _ in range(4):
        layers += [torch.nn.Linear(256, 256), torch.nn.ReLU()]
    model = torch.nn.Sequential(*layers, torch.nn.Linear(256, 1)).to(device)
    opt = torch.optim.AdamW(model.parameters(), foreach=True)
    return model, opt


def _step(model, opt, device: str) -> None:  # noqa: ANN001
    x = torch.randn(64, 256, device=device)
    y = torch.randn(64, 1, device=device)
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    if device == "cuda":
        torch.cuda.synchronize()


def _loop_seconds(device: str, steps: int, monitor: MemoryMonitor | None) -> list[float]:
    model, opt = _setup(device)
    for _ in range(10):
        _step(model, opt, device)
    out = []
    for _ in range(steps):
        t = time.perf_counter()
        _step(model, opt, device)
        if monitor is not None:
            monitor.step()
        out.append(time.perf_counter() - t)
    return out


def measure(device: str, steps: int) -> dict[str, float]:
    bare = _loop_seconds(device, steps, None)
    with tempfile.TemporaryDirectory() as d:
        with MemoryMonitor(str(Path(d) / "m.jsonl"), device=device if device == "cuda" else None) as mon:
            watched = _loop_seconds(device, steps, mon)
            record = statistics.median(mon.overhead_seconds[10:])
    b, w = statistics.median(bare), statistics.median(watched)
    return {"bare_step_s": b, "monitored_step_s": w, "loop_overhead_s": w - b, "record_s": record,
            "loop_overhead_pct": (w - b) / b * 100}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (the shared 2-core machine: 1)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    r = measure(a.device, a.steps)
    print(f"device {a.device}, {a.steps} steps, torch {torch.__version__}")
    print(f"median step without the monitor  {r['bare_step_s'] * 1e3:8.3f} ms")
    print(f"median step with the monitor     {r['monitored_step_s'] * 1e3:8.3f} ms")
    print(f"median per-step overhead (loop)  {r['loop_overhead_s'] * 1e6:8.1f} µs ({r['loop_overhead_pct']:.1f} %)")
    print(f"median time in MemoryMonitor.step {r['record_s'] * 1e6:7.1f} µs")


if __name__ == "__main__":
    main()
