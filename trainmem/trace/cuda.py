"""A real training step on a CUDA device: random weights, random tokens, the same loop as the tracer.

Reports ``torch.cuda.max_memory_allocated()`` / ``max_memory_reserved()`` over the steady step and what
the allocator snapshot holds at its end. Single GPU, torch engine (FSDP2 needs a launcher: torchrun).
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from trainmem.errors import UnsupportedError

if TYPE_CHECKING:
    from trainmem.model.spec import ModelSpec
    from trainmem.setup import TrainingSetup

__all__ = ["CudaStepResult", "cuda_step"]


@dataclass(frozen=True, kw_only=True, slots=True)
class CudaStepResult:
    max_memory_allocated_bytes: int
    max_memory_reserved_bytes: int
    static_allocated_bytes: int
    """Allocated at the start of the steady step."""
    snapshot_segments: int
    snapshot_reserved_bytes: int
    snapshot_allocated_bytes: int
    device_name: str
    wall_seconds: float
    torch_version: str

    def to_dict(self) -> dict:
        return asdict(self)


def cuda_step(spec: "ModelSpec", setup: "TrainingSetup") -> CudaStepResult:
    """Run a warm-up and a steady step on ``cuda:0`` and measure the steady one."""
    try:
        import torch
    except ImportError:
        raise UnsupportedError("--device cuda needs torch: pip install 'trainmem[trace]'") from None
    if not torch.cuda.is_available():
        raise UnsupportedError("--device cuda: no CUDA device here; the default fake-tensor trace needs none")
    if setup.engine != "torch" or setup.gpus != 1:
        raise UnsupportedError("--device cuda measures one GPU with the torch engine; run multi-GPU jobs under "
                               "torchrun and compare with `trainmem estimate`")
    from trainmem.trace.optim import build_optimizer
    from trainmem.trace.step import _build_model  # the same model construction as the tracer

    t0 = time.perf_counter()
    dtype_amp = {"amp-bf16": torch.bfloat16, "amp-fp16": torch.float16}.get(setup.precision)
    with torch.device("cuda"):
        model = _build_model(spec, setup)
    params = [p for p in model.parameters() if p.requires_grad]
    opt = build_optimizer(setup.optimizer, params, setup.optimizer_impl)
    scaler = torch.amp.GradScaler("cuda") if setup.precision == "amp-fp16" else None
    vocab = int(spec.hf_config.get("vocab_size", spec.vocab_size))

    from trainmem.trace.losses import run_loss
    from trainmem.trace.step import _labels

    def one_step() -> None:
        for _ in range(setup.grad_accum):
            ids = torch.randint(0, vocab, (setup.micro_batch, setup.seq_len), device="cuda")
            labels = _labels(spec, ids).to("cuda")
            ctx = torch.autocast("cuda", dtype=dtype_amp) if dtype_amp else contextlib.nullcontext()
            with ctx:
                if setup.loss == "hf":
                    out = model(input_ids=ids, labels=labels, use_cache=False)
                    loss = out.loss
                else:
                    out, loss = run_loss(model, setup, ids, labels)
            if setup.loop == "trainer":
                out = None  # HF Trainer's compute_loss returns the loss only
            loss = loss / setup.grad_accum
            (scaler.scale(loss) if scaler else loss).backward()
            del out, loss, ids, labels
        if scaler:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
        opt.zero_grad(set_to_none=True)

    one_step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    static = torch.cuda.memory_allocated()
    one_step()
    torch.cuda.synchronize()
    snap = torch.cuda.memory._snapshot()
    segs = snap.get("segments", [])
    return CudaStepResult(
        max_memory_allocated_bytes=torch.cuda.max_memory_allocated(),
        max_memory_reserved_bytes=torch.cuda.max_memory_reserved(),
        static_allocated_bytes=static,
        snapshot_segments=len(segs),
        snapshot_reserved_bytes=sum(s["total_size"] for s in segs),
        snapshot_allocated_bytes=sum(s["allocated_size"] for s in segs),
        device_name=torch.cuda.get_device_name(0),
        wall_seconds=round(time.perf_counter() - t0, 3),
        torch_version=torch.__version__,
    )
