"""Emulation of CUDA's fused dropout on fake CPU tensors.

CUDA (aten/src/ATen/native/Dropout.cpp ``is_fused_kernel_acceptable``: a CUDA input, 0 < p < 1) runs
``native_dropout``, whose backward keeps only a **bool** mask (1 B per element). The CPU path instead
multiplies by a mask in the input's dtype (2–4 B per element), so without this emulation a CPU trace
overstates every dropout site. Here ``F.dropout(x, p, training=True)`` becomes ``torch.native_dropout``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

__all__ = ["CudaDropoutMode", "cuda_dropout"]


class CudaDropoutMode(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        kwargs = kwargs or {}
        if func is F.dropout:
            x = args[0]
            p = args[1] if len(args) > 1 else kwargs.get("p", 0.5)
            training = args[2] if len(args) > 2 else kwargs.get("training", True)
            inplace = args[3] if len(args) > 3 else kwargs.get("inplace", False)
            if training and 0.0 < p < 1.0 and not inplace and x.is_floating_point():
                self.calls += 1
                return torch.native_dropout(x, p, True)[0]
        return func(*args, **kwargs)


@contextlib.contextmanager
def cuda_dropout() -> Iterator[CudaDropoutMode]:
    mode = CudaDropoutMode()
    with mode:
        yield mode
