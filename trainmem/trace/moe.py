"""Mixture-of-experts on fake tensors: transformers' ``grouped_mm`` experts path.

transformers 5.x runs routed experts (Mixtral, Qwen2/3-MoE, DeepSeek-V2/V3, ...) through
``integrations/moe.py: grouped_mm_experts_forward`` by default: tokens are sorted by expert and
all ``S = tokens · top_k`` (token, expert) rows go through one grouped GEMM per projection, with
per-expert offsets. Every shape there depends on ``S`` only, never on the routing, so the memory
of a step is the same for any routing: no stand-in assignment is needed and the trace is exact
for the kernel's allocations (uniform vs skewed routing only changes the offsets' *values*).
The data-dependent ``eager`` experts loop (``nonzero``/``torch.where``/``.tolist()``) is never
used: the model is built with ``experts_implementation="grouped_mm"``.

CUDA behaviour mirrored: on CUDA (sm80+), bf16 expert weights run ``torch.nn.functional.grouped_mm``
(CUTLASS grouped GEMM, saves its two inputs); other dtypes (fp32 weights under AMP, fp16) run
PyTorch's per-group fallback that writes into one preallocated ``[S, N]`` output and saves the
same two inputs. The fake (meta) kernel of ``grouped_mm`` accepts bf16 only, so for other dtypes
we route to transformers' own fallback custom op ``transformers::grouped_mm_fallback`` (same
output, same saved tensors, a fake kernel that needs no offsets).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

__all__ = ["EXPERTS_IMPLEMENTATION", "cuda_grouped_mm"]

EXPERTS_IMPLEMENTATION = "grouped_mm"


@contextlib.contextmanager
def cuda_grouped_mm() -> Iterator[None]:
    """Patch ``transformers.integrations.moe._can_use_grouped_mm`` for the trace; restored on exit."""
    try:
        from transformers.integrations import moe as hf_moe
    except ImportError:  # pragma: no cover - older transformers without the experts interface
        yield
        return
    orig = getattr(hf_moe, "_can_use_grouped_mm", None)
    if orig is None:  # pragma: no cover
        yield
        return

    def _can_use_grouped_mm(input: torch.Tensor, weight: torch.Tensor, offs: torch.Tensor) -> bool:  # noqa: A002
        return weight.dtype == torch.bfloat16 and input.dtype == torch.bfloat16

    hf_moe._can_use_grouped_mm = _can_use_grouped_mm
    try:
        yield
    finally:
        hf_moe._can_use_grouped_mm = orig
