"""What a GPU needs beyond the tensors of the step: allocator reserve, cuBLAS workspace, CUDA context, NCCL.

These figures are assumptions until checked on hardware (benchmarks/gpu_validate.py):
- cuBLAS workspace: allocated through the caching allocator, so it counts as *allocated*. PyTorch
  (aten/src/ATen/cuda/CublasHandlePool.cpp ``getChosenWorkspaceSize``) uses 32 MiB on Hopper (sm90+) and
  4096 KiB·2 + 16 KiB·8 = 8.125 MiB on older GPUs, per handle/stream; one stream is assumed.
- Reserve: the caching allocator rounds large blocks up to 2 MiB and keeps freed blocks cached; we add
  3 % of the peak plus one 20 MiB large-pool segment (assumption, not yet fitted to measurements).
- CUDA context: about 500 MiB (CUDA 12 with lazy module loading), outside the allocator.
- NCCL: about 300 MiB of buffers per communicator with more than one rank (NCCL_BUFFSIZE 4 MiB × channels).
"""

from __future__ import annotations

from trainmem.hardware import GPU
from trainmem.setup import TrainingSetup
from trainmem.units import MiB

__all__ = ["cuda_only_allocated_bytes", "reserved_bytes", "device_total_bytes",
           "CUDA_CONTEXT_BYTES", "NCCL_PER_GROUP_BYTES"]

CUDA_CONTEXT_BYTES = 500 * MiB
NCCL_PER_GROUP_BYTES = 300 * MiB
_HOPPER_OR_NEWER = ("H100", "H200", "H800", "B200")


def cuda_only_allocated_bytes(gpu: GPU) -> int:
    """cuBLAS workspace bytes (allocated through the caching allocator, invisible to a CPU trace)."""
    if gpu.name.startswith(_HOPPER_OR_NEWER):
        return 32 * MiB
    return 4096 * 1024 * 2 + 16 * 1024 * 8


def reserved_bytes(peak_allocated: int) -> int:
    """Prediction of ``torch.cuda.max_memory_reserved()``: peak allocated + 3 % + 20 MiB, rounded to 2 MiB."""
    raw = peak_allocated + peak_allocated * 3 // 100 + 20 * MiB
    return -(-raw // (2 * MiB)) * (2 * MiB)


def device_total_bytes(reserved: int, setup: TrainingSetup) -> int:
    """What nvidia-smi shows for the process: reserved + CUDA context + NCCL buffers per process group."""
    groups = sum(1 for d in (setup.dp, setup.tp, setup.pp, setup.cp, setup.ep) if d > 1)
    return reserved + CUDA_CONTEXT_BYTES + groups * NCCL_PER_GROUP_BYTES
