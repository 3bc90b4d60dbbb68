"""Small CPU training loops for the monitor's tests and the recorded corpus (tests/doctor/record_corpus.py).

``train_loop`` runs an MLP with AdamW for ``steps`` optimizer steps, batch sizes drawn per step (so the memory
left alive between steps — the last batch — varies: a healthy loop's noise), optionally:

* ``leak``: appends each step's loss tensor to a list without ``.item()`` (the article's leak);
* ``eval_every``/``eval_no_grad``: an evaluation pass every ``eval_every`` steps, with or without ``torch.no_grad``;
* ``rank_cache_bytes``: a per-rank cache kept alive (one rank with a different load);
* ``oom_at``: raise ``torch.OutOfMemoryError`` at that step (CPU runs cannot run out of GPU memory: the message is
  written for the test, in torch 2.2+'s form).
"""

from __future__ import annotations

import random

import torch

from trainmem.doctor.monitor import MemoryMonitor

OOM_MESSAGE = ("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB of which "
               "1.10 GiB is free. Including non-PyTorch memory, this process has 77.98 GiB memory in use. Of the "
               "allocated memory 76.02 GiB is allocated by PyTorch, and 1.21 GiB is reserved by PyTorch but "
               "unallocated.")


def _model(width: int, depth: int) -> torch.nn.Module:
    layers: list[torch.nn.Module] = []
    for _ in range(depth):
        layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers, torch.nn.Linear(width, 1))


def train_loop(path: str, seed: int, steps: int = 120, leak: bool = False, width: int = 32, depth: int = 2,
               batch: tuple[int, int] = (8, 24), eval_every: int = 0, eval_no_grad: bool = True, eval_batch: int = 0,
               rank_cache_bytes: int = 0, oom_at: int | None = None) -> MemoryMonitor:
    torch.manual_seed(seed)
    rng = random.Random(seed)
    model = _model(width, depth)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=True)
    kept: list[torch.Tensor] = []
    mon = MemoryMonitor(path, model=model, leak_check_every=50)
    with mon:
        cache = torch.empty(rank_cache_bytes // 4) if rank_cache_bytes else None  # noqa: F841 - held on purpose
        for step in range(steps):
            if oom_at is not None and step == oom_at:
                raise torch.OutOfMemoryError(OOM_MESSAGE)
            n = rng.randint(*batch)
            x, y = torch.randn(n, width), torch.randn(n, 1)
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            if leak:
                kept.append(loss)
            mon.step(step)
            if eval_every and (step + 1) % eval_every == 0:
                _evaluate(model, mon, step, eval_batch or batch[1], width, eval_no_grad)
    return mon


def _evaluate(model: torch.nn.Module, mon: MemoryMonitor, step: int, n: int, width: int, no_grad: bool) -> None:
    with mon.phase("eval"):
        for _ in range(3):
            x = torch.randn(n, width)
            if no_grad:
                with torch.no_grad():
                    out = model(x)
            else:
                out = model(x)
            _ = out.mean().item()
            del out
            mon.step(step)
